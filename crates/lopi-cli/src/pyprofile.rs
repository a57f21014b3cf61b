//! `lopi pyprofile -- python3.11 SCRIPT`: a profile of a Python program by its Python
//! functions. It is a `lopi trace` script lopi writes itself: `profile:hz:N` samples each
//! thread in proportion to its CPU time and keys a map by the sample's `pystack` (and with
//! `--native` by the C function running, `ustack(1)`); with `--calls`, python3.11's
//! `function__return` marker counts each function's returns, keyed by the returning frame
//! (`pystack(1)`). The table gives per function its calls, and the samples it was running in
//! (self) or on the stack of (inclusive); flame graphs and folded stacks come from the same
//! samples.
use crate::trace;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

pub struct Request {
    pub hz: u32,
    pub calls: bool,
    pub native: bool,
    pub json: bool,
    pub top: usize,
    pub output: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub folded: Option<PathBuf>,
    pub max_entries: Option<u32>,
    /// A running process to profile instead of a command, for `duration` (else until Ctrl-C).
    pub pid: Option<i32>,
    pub duration: Option<std::time::Duration>,
    pub command: Vec<OsString>,
    pub cache: Option<lopi_cache::PlanCache>,
}

/// Frame of a sample taken outside Python code (before the interpreter runs, or in a thread
/// with no Python state).
const NO_PYTHON: &str = "[no Python frame]";

/// One Python function's line of the profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// `qualname (file:line)`, as `pystack` names the code object.
    pub function: String,
    pub self_samples: u64,
    pub inclusive_samples: u64,
    /// `None` without `--calls`.
    pub calls: Option<u64>,
}

/// The samples, by function and as folded stacks (root first).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Profile {
    pub samples: u64,
    pub outside_python: u64,
    pub rows: Vec<Row>,
    pub folded: BTreeMap<String, u64>,
}

pub fn run(r: Request) -> Result<()> {
    if r.hz == 0 || r.hz > 10_000 {
        bail!("--hz must be from 1 to 10000");
    }
    let program = match (r.pid, r.command.first()) {
        (Some(pid), _) => std::fs::read_link(format!("/proc/{pid}/exe")).with_context(|| format!("finding the program of process {pid}"))?,
        (None, Some(program)) => trace::find_program(program)?,
        (None, None) => bail!("lopi pyprofile needs a program or a process: lopi pyprofile -- /usr/bin/python3.11 SCRIPT ARGS, or lopi pyprofile -p PID"),
    };
    let program = std::fs::canonicalize(&program).unwrap_or(program);
    let stack = if r.native { "pystack, ustack(1)" } else { "pystack" };
    let mut script = format!("profile:hz:{} {{ @stacks[{stack}] = count(); }}\n", r.hz);
    if r.calls {
        script += &format!("usdt:{}:python:function__return {{ @calls[pystack(1)] = count(); }}\n", program.display());
    }
    let maps_file = TempFile(std::env::temp_dir().join(format!("lopi-pyprofile-{}.json", std::process::id())));
    let mut command = r.command.clone();
    if let Some(first) = command.first_mut() {
        *first = program.clone().into_os_string();
    }
    let ended = trace::trace(trace::Request {
        source: script,
        source_name: "lopi pyprofile".to_string(),
        json: true,
        output: Some(maps_file.0.clone()),
        max_entries: r.max_entries,
        pid: r.pid,
        duration: r.duration,
        record: None,
        command,
        cache: r.cache,
    })?;
    let text = std::fs::read_to_string(&maps_file.0).context("reading the trace's maps")?;
    let maps: Json = serde_json::from_str(text.trim_end().lines().last().unwrap_or_default()).map_err(|e| anyhow!("the trace's maps: {e}"))?;
    let profile = profile(&maps["maps"], r.native, r.calls);
    if let Some(path) = &r.folded {
        std::fs::write(path, folded_text(&profile)).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &r.flamegraph {
        let title = match r.pid {
            Some(pid) => format!("process {pid} at {} Hz", r.hz),
            None => format!("{} at {} Hz", command_line(&r.command), r.hz),
        };
        let svg = lopi_trace::folded_svg(&folded_text(&profile), &title, "samples")?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    let text = if r.json { json(&profile, r.hz).to_string() + "\n" } else { table(&profile, r.hz, r.top) };
    let mut out: Box<dyn Write> = match &r.output {
        Some(path) => Box::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?),
        // The program's own output goes to stdout: lopi's goes to stderr unless stdout is a
        // terminal, as `lopi trace` does.
        None if !std::io::stdout().is_terminal() => Box::new(std::io::stderr()),
        None => Box::new(std::io::stdout()),
    };
    out.write_all(text.as_bytes())?;
    drop(out);
    drop(maps_file);
    match ended {
        Some(ended) => crate::live::exit_like(ended.status, &ended.blocked),
        None => Ok(()),
    }
}

/// The trace's maps, removed whatever happens.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

fn command_line(command: &[OsString]) -> String {
    command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// The profile of the trace's `@stacks` (keys: frames innermost first, joined by `;`; with
/// `native`, then `,` and the running C function) and `@calls` (a frame each).
pub fn profile(maps: &Json, native: bool, calls: bool) -> Profile {
    let mut p = Profile::default();
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for (key, n) in maps["@stacks"].as_object().into_iter().flatten() {
        let n = n.as_u64().unwrap_or(0);
        let (python, leaf) = match native {
            true => key.rsplit_once(',').map_or((key.as_str(), None), |(p, c)| (p, Some(c))),
            false => (key.as_str(), None),
        };
        let frames: Vec<&str> = python.split(';').filter(|f| !f.is_empty()).collect();
        p.samples += n;
        if frames.is_empty() {
            p.outside_python += n;
        }
        if let Some(first) = frames.first() {
            rows.entry(first.to_string()).or_default().self_samples += n;
        }
        let mut seen = frames.clone();
        seen.sort_unstable();
        seen.dedup();
        for f in seen {
            rows.entry(f.to_string()).or_default().inclusive_samples += n;
        }
        let mut path: Vec<String> = frames.iter().rev().map(|f| f.to_string()).collect();
        if path.is_empty() {
            path.push(NO_PYTHON.to_string());
        }
        // The C function running, without its offset: one frame per function.
        if let Some(leaf) = leaf.filter(|l| !l.is_empty()) {
            let function = leaf.rsplit_once('+').map_or(leaf, |(f, _)| f);
            path.push(format!("[C] {function}"));
        }
        *p.folded.entry(path.join(";")).or_default() += n;
    }
    if calls {
        for (key, n) in maps["@calls"].as_object().into_iter().flatten() {
            let Some(frame) = key.split(';').next().filter(|f| !f.is_empty()) else { continue };
            rows.entry(frame.to_string()).or_default().calls = Some(n.as_u64().unwrap_or(0));
        }
    }
    // A function sampled but never seen returning made no call while it was probed.
    p.rows = rows.into_iter().map(|(function, row)| Row { function, calls: row.calls.or(calls.then_some(0)), ..row }).collect();
    // Of two functions on the stack as often, the caller (less time of its own) first.
    p.rows.sort_by(|a, b| b.inclusive_samples.cmp(&a.inclusive_samples).then(a.self_samples.cmp(&b.self_samples)).then(a.function.cmp(&b.function)));
    p
}

fn folded_text(p: &Profile) -> String {
    p.folded.iter().map(|(stack, n)| format!("{stack} {n}\n")).collect()
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

/// The table: functions by inclusive samples, the top `top` (0: all).
pub fn table(p: &Profile, hz: u32, top: usize) -> String {
    let mut out = format!(
        "{} samples at {hz} Hz of CPU time ({:.2} s); {} outside Python code\n",
        p.samples,
        p.samples as f64 / f64::from(hz),
        p.outside_python
    );
    let with_calls = p.rows.iter().any(|r| r.calls.is_some());
    out += &format!("{:>7} {:>7} {:>10}  FUNCTION\n", "INCL%", "SELF%", if with_calls { "CALLS" } else { "SAMPLES" });
    let shown = if top == 0 { p.rows.len() } else { top.min(p.rows.len()) };
    for row in &p.rows[..shown] {
        let third = match row.calls {
            Some(calls) => calls.to_string(),
            None => row.inclusive_samples.to_string(),
        };
        out += &format!("{:>7.1} {:>7.1} {:>10}  {}\n", percent(row.inclusive_samples, p.samples), percent(row.self_samples, p.samples), third, row.function);
    }
    if shown < p.rows.len() {
        out += &format!("({} more functions: --top 0 shows all)\n", p.rows.len() - shown);
    }
    out
}

pub fn json(p: &Profile, hz: u32) -> Json {
    let rows: Vec<Json> = p
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "function": r.function,
                "self_samples": r.self_samples,
                "inclusive_samples": r.inclusive_samples,
                "self_percent": percent(r.self_samples, p.samples),
                "inclusive_percent": percent(r.inclusive_samples, p.samples),
                "calls": r.calls,
            })
        })
        .collect();
    serde_json::json!({ "hz": hz, "samples": p.samples, "outside_python": p.outside_python, "functions": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_count_once_per_function_and_stack() {
        let maps = serde_json::json!({
            "@stacks": { "leaf (w.py:1);mid (w.py:5);leaf (w.py:1);main (w.py:9)": 3, "mid (w.py:5);main (w.py:9)": 2, "": 1 },
            "@calls": { "leaf (w.py:1)": 40, "mid (w.py:5)": 7 },
        });
        let p = profile(&maps, false, true);
        assert_eq!((p.samples, p.outside_python), (6, 1));
        let row = |name: &str| p.rows.iter().find(|r| r.function.starts_with(name)).cloned().unwrap();
        assert_eq!((row("leaf").self_samples, row("leaf").inclusive_samples, row("leaf").calls), (3, 3, Some(40)));
        assert_eq!((row("mid").self_samples, row("mid").inclusive_samples, row("mid").calls), (2, 5, Some(7)));
        assert_eq!((row("main").self_samples, row("main").inclusive_samples, row("main").calls), (0, 5, Some(0)));
        assert_eq!(p.rows[0].function, "main (w.py:9)");
        assert_eq!(p.folded.get("main (w.py:9);leaf (w.py:1);mid (w.py:5);leaf (w.py:1)"), Some(&3));
        assert_eq!(p.folded.get(NO_PYTHON), Some(&1));
    }

    #[test]
    fn a_native_leaf_is_the_last_frame_without_its_offset() {
        let maps = serde_json::json!({ "@stacks": { "f (w.py:1);<module> (w.py:1),PyObject_Malloc+87": 4, ",_start+4": 1 } });
        let p = profile(&maps, true, false);
        assert_eq!(p.folded.get("<module> (w.py:1);f (w.py:1);[C] PyObject_Malloc"), Some(&4));
        assert_eq!(p.folded.get(&format!("{NO_PYTHON};[C] _start")), Some(&1));
        assert_eq!(p.rows.iter().find(|r| r.function.starts_with("f ")).map(|r| r.self_samples), Some(4));
        assert!(table(&p, 199, 0).contains("SAMPLES"));
    }
}
