//! A [`Timing`] in other tools' formats: folded stacks and the flame graphs drawn from them,
//! pprof profiles (`pprof.rs`), and Chrome trace-event JSON (Perfetto, `chrome://tracing`).
use crate::timing::{ContextNode, EventKind, ThreadProfile, Timing};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Frame name of the node under which calls on paths that did not fit in a thread's tree were
/// timed per function.
pub(crate) const MERGED_PATHS: &str = "[merged call paths]";
/// Frame name for a function index outside [`Timing::functions`].
pub(crate) const UNKNOWN_FUNCTION: &str = "[unknown function]";

/// What a stack counts in folded stacks and flame graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Self time, in whole nanoseconds.
    SelfTime,
    /// Calls.
    Calls,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("no trace events: record the program with --trace")]
    NoTraceEvents,
    #[error("nothing to draw: every call path weighs zero")]
    NoStacks,
    #[error("drawing the flame graph: {0}")]
    Flamegraph(std::io::Error),
}

/// Folded stacks (Brendan Gregg's format, as read by inferno, flamegraph.pl and speedscope):
/// one line `main;parse;lex 12345` per call path with a non-zero weight, frames root first,
/// the same path in several threads merged into one line. Calls made once a thread's tree was
/// full are under `[merged call paths]`, one frame per function. Lines are sorted.
pub fn folded(t: &Timing, weight: Weight) -> String {
    // Self time is summed before rounding so that merging threads does not add rounding errors.
    let mut stacks: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for thread in &t.threads {
        // Node 0 is the root: it has no frame.
        for (index, node) in thread.nodes.iter().enumerate().skip(1) {
            let frames: Vec<String> = path(thread, index)
                .iter()
                .rev()
                .map(|&i| folded_frame(frame_name(t, &thread.nodes[i])))
                .collect();
            let entry = stacks.entry(frames.join(";")).or_default();
            entry.0 = entry.0.saturating_add(node.calls);
            // A negative self time must not cancel another thread's time on the same path.
            entry.1 += node.self_ns.max(0.0);
        }
    }
    let mut out = String::new();
    for (stack, (calls, self_ns)) in stacks {
        let value = match weight {
            Weight::SelfTime => whole_ns(self_ns) as u64,
            Weight::Calls => calls,
        };
        if value > 0 {
            out += &format!("{stack} {value}\n");
        }
    }
    out
}

/// A flame graph of [`folded`] stacks as an SVG document.
pub fn flamegraph_svg(t: &Timing, weight: Weight, title: &str) -> Result<Vec<u8>, ExportError> {
    let count_name = match weight {
        Weight::SelfTime => "ns",
        Weight::Calls => "calls",
    };
    folded_svg(&folded(t, weight), title, count_name)
}

/// A flame graph of folded stacks (`root;child;leaf weight` lines) as an SVG document, widths
/// in `count_name`.
pub fn folded_svg(stacks: &str, title: &str, count_name: &str) -> Result<Vec<u8>, ExportError> {
    if stacks.is_empty() {
        // inferno would draw an error message into the SVG; the caller should hear it instead.
        return Err(ExportError::NoStacks);
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = count_name.to_string();
    // Colours from a hash of the name instead of at random: the same profile gives the same SVG.
    options.hash = true;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, stacks.lines(), &mut svg).map_err(ExportError::Flamegraph)?;
    Ok(svg)
}

/// One Chrome trace event. Typed (not `serde_json::Value`) so that a million-event trace
/// costs about its JSON size in memory, not gigabytes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChromeEvent<'t> {
    pub name: std::borrow::Cow<'t, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    pub ph: &'static str,
    /// Microseconds.
    pub ts: f64,
    pub pid: u32,
    pub tid: u32,
    /// Scope of an instant event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// A Chrome Trace Event Format document (JSON object form).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChromeTrace<'t> {
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<ChromeEvent<'t>>,
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
}

/// Every thread's entry/exit events as a Chrome trace (Perfetto, chrome://tracing): `B`/`E`
/// pairs per call, metadata naming processes and threads, and an instant event where a
/// thread started dropping events.
pub fn chrome_trace(t: &Timing) -> Result<ChromeTrace<'_>, ExportError> {
    if t.threads.iter().all(|thread| thread.events.is_empty()) {
        return Err(ExportError::NoTraceEvents);
    }
    let mut events = Vec::new();
    let mut named_pids = BTreeSet::new();
    for thread in &t.threads {
        let (pid, tid) = (thread.pid, thread.tid);
        // `ts` is not needed on metadata events, but keeps every event the same shape.
        let metadata = |name: &'static str, value: String| ChromeEvent {
            name: name.into(),
            cat: None,
            ph: "M",
            ts: 0.0,
            pid,
            tid,
            s: None,
            args: Some(json!({ "name": value })),
        };
        if named_pids.insert(pid) {
            events.push(metadata("process_name", format!("pid {pid}")));
        }
        let thread_name = if thread.name.is_empty() { format!("tid {tid}") } else { format!("{} ({tid})", thread.name) };
        events.push(metadata("thread_name", thread_name));
        thread_trace(t, thread, &mut events);
    }
    Ok(ChromeTrace { trace_events: events, display_time_unit: "ns" })
}

/// One thread's events. Chrome pairs an `E` with the innermost open `B` of its thread, so a
/// frame left without its own exit event (unwound past) is closed when an outer frame exits,
/// and frames still open when the trace ends are closed at its last event.
fn thread_trace<'t>(t: &'t Timing, thread: &'t ThreadProfile, out: &mut Vec<ChromeEvent<'t>>) {
    let (pid, tid) = (thread.pid, thread.tid);
    let name = |node: u32| thread.nodes.get(node as usize).map_or(UNKNOWN_FUNCTION, |n| frame_name(t, n));
    // Lock waits and system calls are categories of their own, to filter or colour by.
    let category = |node: u32| {
        let function = thread.nodes.get(node as usize).and_then(|n| n.function).and_then(|f| t.functions.get(f as usize));
        match function {
            Some(f) if f.lock.is_some() => "lock",
            Some(f) if f.syscall.is_some() => "syscall",
            _ => "function",
        }
    };
    let event = |node: u32, ph: &'static str, ns: f64| ChromeEvent {
        name: name(node).into(),
        cat: Some(category(node)),
        ph,
        ts: ns / 1000.0,
        pid,
        tid,
        s: None,
        args: None,
    };
    let end = |node: u32, ns: f64, why: Option<&str>| ChromeEvent { args: why.map(|why| json!({ why: true })), ..event(node, "E", ns) };
    let last_ns = thread.events.last().map_or(0.0, |e| e.ns);
    // Without a time for the first drop, the mark goes after everything that was recorded.
    let mut drop_mark = (thread.trace_dropped > 0).then(|| thread.first_drop_ns.unwrap_or(last_ns));
    let dropped = |ns: f64| ChromeEvent {
        name: format!("lopi: {} events dropped", thread.trace_dropped).into(),
        cat: None,
        ph: "i",
        ts: ns / 1000.0,
        pid,
        tid,
        s: Some("t"),
        args: None,
    };
    // Entered frames not yet left, innermost last.
    let mut open: Vec<u32> = Vec::new();
    for e in &thread.events {
        if let Some(at) = drop_mark.filter(|&at| at < e.ns) {
            out.push(dropped(at));
            drop_mark = None;
        }
        match e.kind {
            EventKind::Enter => {
                open.push(e.node);
                out.push(event(e.node, "B", e.ns));
            }
            EventKind::Exit | EventKind::Unwind => {
                // An exit whose entry is not in the trace (it came before the thread's record,
                // or was dropped) has nothing to close.
                let Some(depth) = open.iter().rposition(|&n| n == e.node) else { continue };
                for inner in open.drain(depth + 1..).rev() {
                    out.push(end(inner, e.ns, Some("unwound")));
                }
                open.pop();
                out.push(end(e.node, e.ns, (e.kind == EventKind::Unwind).then_some("unwound")));
            }
        }
    }
    for node in open.into_iter().rev() {
        out.push(end(node, last_ns, Some("unfinished")));
    }
    if let Some(at) = drop_mark {
        out.push(dropped(at));
    }
}

/// The nodes from `node` up to the root's child, leaf first. A parent outside the tree ends
/// the path, and so does a path as long as the tree, so that a cycle cannot hang an export.
pub(crate) fn path(thread: &ThreadProfile, node: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = node;
    while at != 0 && out.len() < thread.nodes.len() {
        let Some(n) = thread.nodes.get(at) else { break };
        out.push(at);
        at = n.parent as usize;
    }
    out
}

fn frame_name<'t>(t: &'t Timing, node: &ContextNode) -> &'t str {
    match node.function {
        None => MERGED_PATHS,
        Some(f) => t.functions.get(f as usize).map_or(UNKNOWN_FUNCTION, |f| f.name.as_str()),
    }
}

/// A name as one folded frame: `;` separates frames and a line break ends the stack. Spaces
/// may stay: readers take the count after the line's last space.
fn folded_frame(name: &str) -> String {
    name.chars().map(|c| if c == ';' { ':' } else if c.is_control() { ' ' } else { c }).collect()
}

/// Nanoseconds rounded to a whole number; a negative self time (the probe-cost correction
/// overshooting on a very short call) counts as zero.
pub(crate) fn whole_ns(ns: f64) -> i64 {
    ns.round().max(0.0) as i64
}

#[cfg(test)]
#[path = "../../lopi-cli/tests/common/tools.rs"]
mod tools;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pprof::{pprof, proto};
    use std::collections::HashMap;
    use crate::timing::{TimedFunction, TraceEvent};
    use prost::Message;

    fn node(parent: u32, function: Option<u32>, calls: u64, total_ns: f64, self_ns: f64) -> ContextNode {
        ContextNode { parent, function, calls, total_ns, self_ns, max_ns: total_ns, merged: false, syscall: None, open: 0 }
    }

    fn thread(tid: u32, nodes: Vec<ContextNode>, events: &[(f64, u32, EventKind)]) -> ThreadProfile {
        ThreadProfile {
            pid: 100,
            tid,
            nodes,
            events: events.iter().map(|&(ns, node, kind)| TraceEvent { ns, node, kind }).collect(),
            ..Default::default()
        }
    }

    /// Two threads of one process. Thread 100 recurses (main;parse;lex;parse), has a
    /// merged node (lex under the merged-paths node 5), an exit without an entry, and an unwind past an open frame; thread 101
    /// shares main and main;emit with it, has a node that weighs nothing, and overflowed its
    /// trace buffer with frames still open.
    fn sample() -> Timing {
        let function = |name: &str, module: &str, addr| TimedFunction { name: name.into(), module: module.into(), addr, syscall: None, lock: None };
        let functions = vec![
            function("main", "/usr/bin/prog", 0x1100),
            function("parse", "/usr/bin/prog", 0x1200),
            function("lex", "/usr/bin/prog", 0x1300),
            function("emit", "/usr/lib/libemit.so", 0x2400),
        ];
        use EventKind::{Enter, Exit, Unwind};
        let mut first = thread(
            100,
            vec![
                node(0, None, 0, 0.0, 0.0),
                node(0, Some(0), 1, 1000.0, 100.0),
                node(1, Some(1), 2, 700.0, 300.0),
                node(2, Some(2), 3, 400.0, 250.0),
                node(3, Some(1), 1, 150.0, 150.0),
                node(0, None, 0, 0.0, 0.0),
                node(1, Some(3), 4, 200.0, 199.6),
                ContextNode { merged: true, ..node(5, Some(2), 5, 200.0, 200.0) },
            ],
            &[
                (0.0, 1, Enter),
                (5.0, 6, Exit),
                (10.0, 2, Enter),
                (20.0, 3, Enter),
                (30.0, 4, Enter),
                (40.0, 3, Unwind),
                (50.0, 2, Exit),
                (60.0, 6, Enter),
                (70.0, 6, Exit),
                (100.0, 1, Exit),
            ],
        );
        first.merged_calls = 5;
        let mut second = thread(
            101,
            vec![
                node(0, None, 0, 0.0, 0.0),
                node(0, Some(0), 1, 60.0, 10.0),
                node(1, Some(3), 1, 50.0, 50.4),
                node(1, Some(2), 0, 0.0, 0.0),
            ],
            &[(0.0, 1, Enter), (15.0, 2, Enter)],
        );
        second.trace_dropped = 3;
        second.first_drop_ns = Some(25.0);
        Timing { functions, threads: vec![first, second], probe_cost: Default::default(), syscall_sites: Vec::new() }
    }

    #[test]
    fn folded_merges_threads_and_sorts() {
        let t = sample();
        assert_eq!(
            folded(&t, Weight::SelfTime),
            "[merged call paths];lex 200\nmain 110\nmain;emit 250\nmain;parse 300\nmain;parse;lex 250\nmain;parse;lex;parse 150\n"
        );
        assert_eq!(
            folded(&t, Weight::Calls),
            "[merged call paths];lex 5\nmain 2\nmain;emit 5\nmain;parse 2\nmain;parse;lex 3\nmain;parse;lex;parse 1\n"
        );
    }

    #[test]
    fn folded_frames_keep_the_format() {
        let mut t = sample();
        t.functions[3].name = "emit;v2 (fast)\n".into();
        t.threads[0].nodes[4].function = Some(99);
        let text = folded(&t, Weight::Calls);
        assert!(text.contains("\nmain;emit:v2 (fast)  5\n"), "{text}");
        assert!(text.contains("\nmain;parse;lex;[unknown function] 1\n"), "{text}");
    }

    #[test]
    fn flamegraph_is_svg_with_every_function() {
        let svg = flamegraph_svg(&sample(), Weight::SelfTime, "prog: self time").expect("svg");
        let text = String::from_utf8(svg.clone()).expect("utf-8");
        assert!(text.contains("<svg"));
        assert!(text.contains("prog: self time"));
        for name in ["main", "parse", "lex", "emit", "[merged call paths]"] {
            assert!(text.contains(&format!("<title>{name} (")), "{name} missing");
        }
        assert!(text.contains(" ns, "), "count name");
        let mut reader = quick_xml::Reader::from_reader(svg.as_slice());
        let mut buf = Vec::new();
        let mut depth = 0i32;
        loop {
            match reader.read_event_into(&mut buf).expect("well-formed XML") {
                quick_xml::events::Event::Start(_) => depth += 1,
                quick_xml::events::Event::End(_) => depth -= 1,
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
            buf.clear();
        }
        assert_eq!(depth, 0, "unbalanced elements");
        // Colours come from names, not chance.
        assert_eq!(svg, flamegraph_svg(&sample(), Weight::SelfTime, "prog: self time").expect("svg"));
    }

    #[test]
    fn flamegraph_of_nothing_is_an_error() {
        let err = flamegraph_svg(&Timing::default(), Weight::Calls, "t").expect_err("no stacks");
        assert!(matches!(err, ExportError::NoStacks));
    }

    fn decode(bytes: &[u8]) -> proto::Profile {
        proto::Profile::decode(bytes).expect("valid profile.proto")
    }

    #[test]
    fn pprof_round_trips() {
        let p = decode(&pprof(&sample()));
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|v| (s(v.r#type), s(v.unit))).collect();
        assert_eq!(types, [("calls", "count"), ("time", "nanoseconds")]);
        assert_eq!(s(p.default_sample_type), "time");
        assert_eq!(p.period_type.map(|v| (s(v.r#type), s(v.unit))), Some(("time", "nanoseconds")));
        assert_eq!(p.period, 1);

        // Functions and locations 1..=4 are Timing::functions; 5 is the merged-paths frame.
        let functions: Vec<(u64, &str, &str, &str)> =
            p.function.iter().map(|f| (f.id, s(f.name), s(f.system_name), s(f.filename))).collect();
        assert_eq!(
            functions,
            [
                (1, "main", "main", "/usr/bin/prog"),
                (2, "parse", "parse", "/usr/bin/prog"),
                (3, "lex", "lex", "/usr/bin/prog"),
                (4, "emit", "emit", "/usr/lib/libemit.so"),
                (5, "[merged call paths]", "[merged call paths]", ""),
            ]
        );
        let locations: Vec<(u64, u64, u64, Vec<u64>)> = p
            .location
            .iter()
            .map(|l| (l.id, l.mapping_id, l.address, l.line.iter().map(|l| l.function_id).collect()))
            .collect();
        assert_eq!(
            locations,
            [
                (1, 1, 0x1100, vec![1]),
                (2, 1, 0x1200, vec![2]),
                (3, 1, 0x1300, vec![3]),
                (4, 2, 0x2400, vec![4]),
                (5, 0, 0, vec![5]),
            ]
        );
        let mappings: Vec<(u64, u64, u64, &str, bool)> =
            p.mapping.iter().map(|m| (m.id, m.memory_start, m.memory_limit, s(m.filename), m.has_functions)).collect();
        assert_eq!(
            mappings,
            [(1, 0x1100, 0x1301, "/usr/bin/prog", true), (2, 0x2400, 0x2401, "/usr/lib/libemit.so", true)]
        );

        // One sample per weighed node, leaf first; thread 101's node 3 weighs nothing.
        let samples: Vec<_> = p
            .sample
            .iter()
            .map(|x| {
                let labels: Vec<_> = x.label.iter().map(|l| (s(l.key), l.num)).collect();
                (x.location_id.clone(), x.value.clone(), labels)
            })
            .collect();
        let labels = |tid| vec![("pid", 100), ("tid", tid)];
        assert_eq!(
            samples,
            [
                (vec![1], vec![1, 100], labels(100)),
                (vec![2, 1], vec![2, 300], labels(100)),
                (vec![3, 2, 1], vec![3, 250], labels(100)),
                (vec![2, 3, 2, 1], vec![1, 150], labels(100)),
                (vec![4, 1], vec![4, 200], labels(100)),
                (vec![3, 5], vec![5, 200], labels(100)),
                (vec![1], vec![1, 10], labels(101)),
                (vec![4, 1], vec![1, 50], labels(101)),
            ]
        );
    }

    /// `go tool pprof` reads the profile and shows each function's flat values.
    #[test]
    fn pprof_is_read_by_go_tool_pprof() {
        use std::process::Command;
        let go = crate::export::tools::require("go", "golang-go");
        let file = std::env::temp_dir().join(format!("lopi-export-test-{}.pb", std::process::id()));
        std::fs::write(&file, pprof(&sample())).expect("write profile");
        let top = |options: &[&str]| {
            let out = Command::new(&go)
                .args(["tool", "pprof", "-top"])
                .args(options)
                .arg(&file)
                .output()
                .expect("run go tool pprof");
            assert!(out.status.success(), "pprof failed: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        // The default sample type is time, in units pprof picks; `-unit=ns` pins them.
        let (time, calls) = (top(&["-unit=ns"]), top(&["-sample_index=calls"]));
        let _ = std::fs::remove_file(&file);
        // Flat value of each function, summed over its paths and threads.
        let flat = |text: &str, name: &str| -> Option<String> {
            let line = text.lines().find(|l| l.split_whitespace().last() == Some(name))?;
            line.split_whitespace().next().map(str::to_string)
        };
        for (name, ns, n) in
            [("main", "110ns", "2"), ("parse", "450ns", "3"), ("lex", "450ns", "8"), ("emit", "250ns", "5")]
        {
            assert_eq!(flat(&time, name).as_deref(), Some(ns), "time of {name} in\n{time}");
            assert_eq!(flat(&calls, name).as_deref(), Some(n), "calls of {name} in\n{calls}");
        }
    }

    /// Checks the Trace Event Format rules Chrome and Perfetto rely on.
    fn validate_chrome(trace: &Value) {
        assert_eq!(trace["displayTimeUnit"], "ns");
        let events = trace["traceEvents"].as_array().expect("traceEvents array");
        let mut open: HashMap<(u64, u64), Vec<String>> = HashMap::new();
        let mut last_ts: HashMap<(u64, u64), f64> = HashMap::new();
        for e in events {
            let name = e["name"].as_str().expect("name is a string");
            let ph = e["ph"].as_str().expect("ph is a string");
            let ts = e["ts"].as_f64().expect("ts is a number");
            let pid = e["pid"].as_u64().expect("pid is an integer");
            let tid = e["tid"].as_u64().expect("tid is an integer");
            assert!(["B", "E", "i", "M"].contains(&ph), "ph {ph}");
            if let Some(args) = e.get("args") {
                assert!(args.is_object(), "args is an object");
            }
            if ph == "M" {
                assert!(e["args"]["name"].is_string(), "metadata names something");
                continue;
            }
            let key = (pid, tid);
            let previous = last_ts.insert(key, ts).unwrap_or(f64::NEG_INFINITY);
            assert!(ts >= previous, "ts goes back on {key:?}: {previous} then {ts}");
            match ph {
                "B" => {
                    assert_eq!(e["cat"], "function");
                    open.entry(key).or_default().push(name.to_string());
                }
                "E" => {
                    let innermost = open.entry(key).or_default().pop().expect("E without B");
                    assert_eq!(innermost, name, "E closes the innermost B");
                }
                _ => assert_eq!(e["s"], "t", "instant events are thread-scoped"),
            }
        }
        assert!(open.values().all(Vec::is_empty), "unclosed B: {open:?}");
    }

    #[test]
    fn chrome_trace_is_valid_and_nested() {
        let trace = serde_json::to_value(chrome_trace(&sample()).expect("events")).expect("serialises");
        validate_chrome(&trace);
        let events: Vec<String> = trace["traceEvents"]
            .as_array()
            .expect("array")
            .iter()
            .map(|e| {
                let args = e.get("args").map_or(String::new(), |a| format!(" {a}"));
                let text = |key: &str| e[key].as_str().expect("a string").to_string();
                format!("{} {} {} {}{args}", e["tid"], text("ph"), text("name"), e["ts"])
            })
            .collect();
        let expected = [
            r#"100 M process_name 0.0 {"name":"pid 100"}"#,
            r#"100 M thread_name 0.0 {"name":"tid 100"}"#,
            "100 B main 0.0",
            "100 B parse 0.01",
            "100 B lex 0.02",
            "100 B parse 0.03",
            r#"100 E parse 0.04 {"unwound":true}"#,
            r#"100 E lex 0.04 {"unwound":true}"#,
            "100 E parse 0.05",
            "100 B emit 0.06",
            "100 E emit 0.07",
            "100 E main 0.1",
            r#"101 M thread_name 0.0 {"name":"tid 101"}"#,
            "101 B main 0.0",
            "101 B emit 0.015",
            r#"101 E emit 0.015 {"unfinished":true}"#,
            r#"101 E main 0.015 {"unfinished":true}"#,
            "101 i lopi: 3 events dropped 0.025",
        ];
        assert_eq!(events, expected);
    }

    #[test]
    fn chrome_trace_places_the_drop_mark_in_time() {
        let mut t = sample();
        t.threads[0].trace_dropped = 7;
        t.threads[0].first_drop_ns = Some(55.0);
        let trace = serde_json::to_value(chrome_trace(&t).expect("events")).expect("serialises");
        validate_chrome(&trace);
        let names: Vec<&str> =
            trace["traceEvents"].as_array().expect("array").iter().filter_map(|e| e["name"].as_str()).collect();
        let mark = names.iter().position(|&n| n == "lopi: 7 events dropped").expect("drop mark");
        assert_eq!(names[mark - 1..=mark + 1], ["parse", "lopi: 7 events dropped", "emit"]);
    }

    #[test]
    fn chrome_trace_needs_events() {
        let mut t = sample();
        for thread in &mut t.threads {
            thread.events.clear();
        }
        let err = chrome_trace(&t).expect_err("no events");
        assert_eq!(err.to_string(), "no trace events: record the program with --trace");
    }
}
