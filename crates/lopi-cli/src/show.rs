//! Text and JSON views of plans and profiles.
use crate::output::print_json;
use crate::report::{Shown, Source};
use lopi_elf::ElfModule;
use lopi_patch::{Outcome, PointKind, Selection, TimingOutcome};
use lopi_trace::Profile;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::Path;

/// Counts behind the summary line of `info` and `rewrite`.
pub struct Summary {
    pub found: usize,
    pub selected: usize,
    pub probed: usize,
    pub skipped_by_reason: BTreeMap<&'static str, usize>,
    /// With exit probes: functions timed, and probed functions only counted, by reason.
    pub timed: Option<usize>,
    pub untimed_by_reason: BTreeMap<&'static str, usize>,
}

impl Summary {
    pub fn new(module: &ElfModule<'_>, outcomes: &[Outcome], timing: &[TimingOutcome]) -> Summary {
        Self::from_outcomes(module.functions.len(), outcomes, timing)
    }

    pub fn from_outcomes(found: usize, outcomes: &[Outcome], timing: &[TimingOutcome]) -> Summary {
        let mut s = Summary {
            found,
            selected: 0,
            probed: 0,
            skipped_by_reason: BTreeMap::new(),
            timed: None,
            untimed_by_reason: BTreeMap::new(),
        };
        for t in timing {
            match t {
                TimingOutcome::Timed => *s.timed.get_or_insert(0) += 1,
                TimingOutcome::Untimed(r) => {
                    s.timed.get_or_insert(0);
                    *s.untimed_by_reason.entry(r.key()).or_default() += 1;
                }
                TimingOutcome::Off => {}
            }
        }
        for outcome in outcomes {
            match outcome {
                Outcome::Probed(_) | Outcome::Moved => s.probed += 1,
                Outcome::Skipped(r) => *s.skipped_by_reason.entry(r.key()).or_default() += 1,
                Outcome::NotSelected => continue,
            }
            s.selected += 1;
        }
        s
    }

    pub fn skipped(&self) -> usize {
        self.skipped_by_reason.values().sum()
    }

    /// Probed share of the selected functions, in percent.
    pub fn coverage(&self) -> f64 {
        if self.selected == 0 {
            return 100.0;
        }
        100.0 * self.probed as f64 / self.selected as f64
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} functions found", self.found)?;
        if self.selected != self.found {
            write!(f, ", {} selected", self.selected)?;
        }
        write!(f, ", {} probed ({:.2}%), {} skipped", self.probed, self.coverage(), self.skipped())?;
        let reasons = |by: &BTreeMap<&str, usize>| by.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", ");
        if !self.skipped_by_reason.is_empty() {
            write!(f, " ({})", reasons(&self.skipped_by_reason))?;
        }
        if let Some(timed) = self.timed {
            let untimed: usize = self.untimed_by_reason.values().sum();
            write!(f, "; {timed} timed, {untimed} counted only")?;
            if untimed > 0 {
                write!(f, " ({})", reasons(&self.untimed_by_reason))?;
            }
        }
        Ok(())
    }
}

fn outcome_fields(outcome: &Outcome) -> (&'static str, Option<&'static str>, Option<String>) {
    match outcome {
        Outcome::Probed(t) => ("probed", Some(t.name()), None),
        Outcome::Moved => ("moved", None, None),
        Outcome::Skipped(r) => ("skipped", None, Some(format!("{}: {}", r.key(), r.describe(PointKind::Entry)))),
        Outcome::NotSelected => ("not-selected", None, None),
    }
}

fn timing_field(t: &TimingOutcome) -> Option<String> {
    match t {
        TimingOutcome::Off => None,
        TimingOutcome::Timed => Some("timed".into()),
        TimingOutcome::Untimed(r) => Some(format!("counted only, {}: {}", r.key(), r.describe(PointKind::Exit))),
    }
}

pub fn info_json(path: &Path, module: &ElfModule<'_>, selection: &Selection, summary: &Summary) -> Value {
    let functions: Vec<Value> = module
        .functions
        .iter()
        .zip(&selection.outcomes)
        .zip(&selection.timing)
        .map(|((f, o), t)| {
            let (status, tactic, reason) = outcome_fields(o);
            let mut v = json!({
                "name": f.name, "addr": format!("{:#x}", f.addr.0), "size": f.size,
                "source": f.source, "status": status,
            });
            if !f.aliases.is_empty() {
                v["aliases"] = json!(f.aliases);
            }
            if let Some(t) = tactic {
                v["tactic"] = json!(t);
            }
            if let Some(r) = reason {
                v["reason"] = json!(r);
            }
            if let Some(t) = timing_field(t) {
                v["timing"] = json!(t);
            }
            v
        })
        .collect();
    json!({
        "path": path.display().to_string(),
        "kind": module.kind,
        "symbols": module.has_symtab,
        "debug_file": module.debug_file.as_ref().map(|p| p.display().to_string()),
        "mini_debuginfo": module.mini_debuginfo,
        "functions": functions,
        "summary": {
            "found": summary.found,
            "selected": summary.selected,
            "probed": summary.probed,
            "skipped": summary.skipped(),
            "coverage_percent": (summary.coverage() * 100.0).round() / 100.0,
            "skipped_by_reason": summary.skipped_by_reason,
            "timed": summary.timed,
            "untimed_by_reason": summary.untimed_by_reason,
        },
    })
}

pub fn info_text(module: &ElfModule<'_>, selection: &Selection, summary: &Summary) -> String {
    let mut out = String::new();
    let _ = match (&module.debug_file, module.has_symtab) {
        (Some(path), _) => writeln!(out, "symbols: {}", path.display()),
        (None, true) if module.mini_debuginfo => writeln!(out, "symbols: .gnu_debugdata (MiniDebugInfo)"),
        (None, true) => writeln!(out, "symbols: .symtab"),
        (None, false) => writeln!(out, "symbols: none (stripped, no debug file found): functions from .dynsym and .eh_frame"),
    };
    let _ = writeln!(out, "{:<18} {:>7}  {:<14} NAME", "ADDRESS", "SIZE", "PROBE");
    for ((f, o), t) in module.functions.iter().zip(&selection.outcomes).zip(&selection.timing) {
        let (status, tactic, reason) = outcome_fields(o);
        let how = tactic.unwrap_or(status);
        let notes: Vec<String> = reason.into_iter().chain(timing_field(t).filter(|t| t != "timed")).collect();
        let _ = if notes.is_empty() {
            writeln!(out, "{:#018x} {:>7}  {:<14} {}", f.addr.0, f.size, how, f.name)
        } else {
            writeln!(out, "{:#018x} {:>7}  {:<14} {}  ({})", f.addr.0, f.size, how, f.name, notes.join("; "))
        };
    }
    let _ = writeln!(out, "{summary}");
    out
}

/// A duration with a unit that keeps three significant digits.
fn duration(ns: f64) -> String {
    let (value, unit) = match ns {
        n if n >= 1e9 => (n / 1e9, "s"),
        n if n >= 1e6 => (n / 1e6, "ms"),
        n if n >= 1e3 => (n / 1e3, "us"),
        n => (n, "ns"),
    };
    let digits = if value >= 100.0 { 0 } else if value >= 10.0 { 1 } else { 2 };
    format!("{value:.digits$} {unit}")
}

fn module_suffix(profile: &Profile, module: &str) -> String {
    if profile.modules.len() > 1 {
        format!("  [{}]", Path::new(module).file_name().map_or(module.to_string(), |n| n.to_string_lossy().into_owned()))
    } else {
        String::new()
    }
}

pub fn report_text(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "program: {}", profile.program);
    const PIDS_SHOWN: usize = 10;
    let mut pids: Vec<String> = profile.pids.iter().take(PIDS_SHOWN).map(u32::to_string).collect();
    if profile.pids.len() > PIDS_SHOWN {
        pids.push("...".into());
    }
    let _ = writeln!(out, "processes: {} (pid {})", profile.pids.len(), pids.join(", "));
    if profile.programs.len() > 1 {
        let programs: Vec<String> = profile.programs.iter().map(|(name, n)| format!("{name} x{n}")).collect();
        let _ = writeln!(out, "programs: {} (--comm NAME shows one; --processes the tree)", programs.join(", "));
    }
    if profile.incomplete {
        let _ = writeln!(out, "warning: a process died while registering a module; that module's counts are missing");
    }
    let called: Vec<_> = profile.functions.iter().filter(|f| f.calls > 0).collect();
    let _ = writeln!(out, "functions called: {} of {} probed, {} calls in total", called.len(), profile.functions.len(), profile.total_calls);
    if let Some(timing) = &profile.timing {
        timing_notes(&mut out, profile, timing);
        open_note(&mut out, profile);
    }
    if let Some(line) = runtime_note(&profile.runtime_syscalls) {
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    let rows = if top == 0 { called.len() } else { top.min(called.len()) };
    let width = called.first().map_or(5, |f| f.calls.to_string().len().max(5));
    if profile.timing.is_some() {
        let _ = writeln!(out, "{:>width$}  {:>10}  {:>10}  {:>10}  {:>10}  FUNCTION", "CALLS", "TOTAL", "SELF", "AVG", "MAX");
        let time = |t: Option<f64>| t.map_or_else(|| "-".to_string(), duration);
        for f in &called[..rows] {
            let _ = writeln!(
                out,
                "{:>width$}  {:>10}  {:>10}  {:>10}  {:>10}  {}{}",
                f.calls,
                time(f.total_ns),
                time(f.self_ns),
                time(f.avg_ns),
                time(f.max_ns),
                f.name,
                module_suffix(profile, &f.module)
            );
        }
    } else {
        let _ = writeln!(out, "{:>width$}  {:>6}  FUNCTION", "CALLS", "%");
        for f in &called[..rows] {
            let share = 100.0 * f.calls as f64 / profile.total_calls.max(1) as f64;
            let _ = writeln!(out, "{:>width$}  {:>5.1}%  {}{}", f.calls, share, f.name, module_suffix(profile, &f.module));
        }
    }
    if rows < called.len() {
        let _ = writeln!(out, "... {} more (use --top 0 for all)", called.len() - rows);
    }
    out
}

/// What lopi's runtime did in the program's processes: its own system calls, which are not
/// the program's (`None` when it made none).
pub fn runtime_note(own: &lopi_trace::OwnCalls) -> Option<String> {
    if own.calls == 0 {
        return None;
    }
    let time = own.ns.map_or_else(|| "time unknown: the record has no TSC rate".to_string(), duration);
    let calls: Vec<String> = own.by_call.iter().take(6).map(|c| format!("{} {}", c.name, c.calls)).collect();
    let more = if own.by_call.len() > 6 { ", ..." } else { "" };
    Some(format!(
        "note: lopi's runtime made {} in the program's processes ({time}), not counted above: {}{more}",
        plural(own.calls as usize, "system call"),
        calls.join(", ")
    ))
}

/// The calls still open when their threads' recordings ended, by function.
fn open_note(out: &mut String, profile: &Profile) {
    let mut open: Vec<&lopi_trace::FunctionCount> = profile.functions.iter().filter(|f| f.open > 0).collect();
    if open.is_empty() {
        return;
    }
    open.sort_by(|a, b| b.open.cmp(&a.open).then_with(|| a.name.cmp(&b.name)));
    let total: u64 = open.iter().map(|f| f.open).sum();
    let named: Vec<String> = open.iter().take(8).map(|f| format!("{} ({})", f.name, f.open)).collect();
    let more = if open.len() > 8 { format!(", {} more functions", open.len() - 8) } else { String::new() };
    let _ = writeln!(
        out,
        "note: {total} calls had not returned when their thread's recording ended (its process's end, or lopi's detach) and are counted with their time up to then: {}{more}",
        named.join(", ")
    );
}

/// With sampled time: how much was sampled, how exact that makes a time, and threads that
/// could not sample.
fn sampling_notes(out: &mut String, threads: &[lopi_trace::ThreadSummary]) {
    let sampled: Vec<&lopi_trace::Sampling> = threads.iter().filter_map(|t| t.sampling.as_ref()).collect();
    let Some(first) = sampled.first() else { return };
    let samples: u64 = sampled.iter().map(|s| s.samples).sum();
    let _ = writeln!(
        out,
        "time: sampled, {samples} samples of {} of each thread's CPU time (a time of n samples is within about 2 sqrt(n) samples, 95%); calls and calling contexts are exact",
        duration(first.period_ns)
    );
    let failed: Vec<String> = threads.iter().filter_map(|t| Some(format!("{} (errno {})", t.tid, t.sampling.as_ref()?.timer_error?))).collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "note: {} threads could not make their sampling timer and show no time, only calls: {}", failed.len(), failed.join(", "));
    }
}

fn timing_notes(out: &mut String, profile: &Profile, timing: &lopi_trace::TimingSummary) {
    let threads = &timing.threads;
    let pc = &timing.probe_cost;
    let _ = writeln!(
        out,
        "timed threads: {}; probe cost removed from times: {} per call inside the call, {} per call from its caller ({} in all)",
        threads.len(),
        duration(pc.inner_ns),
        duration(pc.pair_ns),
        duration(pc.removed_ns)
    );
    sampling_notes(out, threads);
    let sum = |f: fn(&lopi_trace::ThreadSummary) -> u64| threads.iter().map(f).sum::<u64>();
    let unmatched = sum(|t| t.unmatched_exits);
    if unmatched > 0 {
        let mut by_function: BTreeMap<String, u64> = BTreeMap::new();
        for t in threads {
            for (name, n) in &t.unmatched_by_function {
                *by_function.entry(name.clone().unwrap_or_else(|| "(an exit site shared by several functions)".into())).or_default() += n;
            }
        }
        let mut list: Vec<_> = by_function.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let named: Vec<String> = list.iter().take(8).map(|(f, n)| format!("{f} ({n})")).collect();
        let more = if list.len() > 8 { format!(", {} more functions", list.len() - 8) } else { String::new() };
        let _ = writeln!(out, "note: {unmatched} exits matched no timed entry: {}{more}; `lopi info PROG --probe entry,exit` says why", named.join(", "));
    }
    let merged = sum(|t| t.merged_calls);
    if merged > 0 {
        let after: Vec<String> =
            threads.iter().filter_map(|t| t.merged_after_paths.map(|p| format!("thread {} after {p} paths", t.tid))).collect();
        let _ = writeln!(
            out,
            "note: {merged} calls on call paths beyond the tree's limit ({}) were timed per function under [merged call paths]: their calls, self and total time are exact, their callers unknown (raise LOPI_NODES)",
            after.join(", ")
        );
    }
    let notes = [
        (sum(|t| t.early_exits), "exits of calls begun before timing started (an attach, or before the module's init): not timed"),
        (sum(|t| t.too_deep), "calls not timed: shadow stack at its limit (raise LOPI_DEPTH)"),
        (sum(|t| t.nested_skipped), "calls not timed: they began while a probe of the same thread was running (a signal handler interrupted it)"),
        (sum(|t| t.untimed_calls), "calls not timed: even the merged call paths were full (raise LOPI_NODES)"),
        (sum(|t| t.clock_backwards), "calls ended before they began by the clock (a TSC step between CPUs) and count 0 ns"),
        (sum(|t| t.switched_open), "calls of functions the budget switched to counting while the calls ran are counted, not timed (their ends were no longer probed)"),
    ];
    for (n, what) in notes {
        if n > 0 {
            let _ = writeln!(out, "note: {n} {what}");
        }
    }
    // Each process switches its own code: a function may be switched in several.
    let mut switches: Vec<(u32, &lopi_trace::SwitchSummary)> = threads.iter().flat_map(|t| t.switches.iter().map(move |s| (t.pid, s))).collect();
    switches.sort_by(|a, b| a.1.at_ms.total_cmp(&b.1.at_ms));
    if !switches.is_empty() {
        let processes: BTreeSet<u32> = switches.iter().map(|(pid, _)| *pid).collect();
        let functions: BTreeSet<&str> = switches.iter().map(|(_, s)| s.function.as_str()).collect();
        let list: Vec<String> = switches
            .iter()
            .take(12)
            .map(|(pid, s)| {
                let within = if processes.len() > 1 { format!(" in pid {pid}") } else { String::new() };
                format!("{}{} at {}{within} ({} calls/s)", s.function, module_suffix(profile, &s.module), duration(s.at_ms * 1e6), rate(s.calls_per_s))
            })
            .collect();
        let more = switches.len() - list.len();
        let more = if more > 0 { format!(", {more} more") } else { String::new() };
        let _ = writeln!(
            out,
            "note: the budget switched {} from timing to counting: {}{more}; their calls since are counted, and their time is in their callers' self time (`lopi report --budget` lists every one)",
            plural(functions.len(), "function"),
            list.join(", ")
        );
    }
    for t in threads.iter().filter(|t| t.trace_dropped > 0) {
        let when = t.first_drop_ns.map_or_else(String::new, |ns| format!(", from {} into the run", duration(ns)));
        let _ = writeln!(
            out,
            "warning: thread {} of pid {}: {} trace events dropped after {} kept{when} (raise LOPI_TRACE_EVENTS); the profile still counts them",
            t.tid, t.pid, t.trace_dropped, t.trace_events
        );
    }
}

/// `--budget`: each thread's perturbation budget, what timing cost it, and every function the
/// budget switched to counting, when and at what call rate.
pub fn budget_text(profile: &Profile) -> Option<String> {
    let threads = &profile.timing.as_ref()?.threads;
    let mut out = String::new();
    for t in threads {
        let Some(b) = &t.budget else { continue };
        let percent = |ns: f64| 100.0 * ns / b.cpu_ns.max(1.0);
        let _ = writeln!(
            out,
            "thread {} of pid {}: budget {}%, timing cost {:.1}% of its {} CPU time in a {} run ({} checks, {} scans of its calls taking {}); {} switched to counting",
            t.tid,
            t.pid,
            b.ppm as f64 / 1e4,
            percent(b.timing_ns),
            duration(b.cpu_ns),
            duration(b.run_ns),
            b.checks,
            b.scans,
            duration(b.scan_ns),
            plural(t.switches.len(), "function")
        );
        if b.timing_ns > b.cpu_ns * b.ppm as f64 / 1e6 {
            let _ = writeln!(
                out,
                "  over budget: functions whose calls are long enough that their probes cost under the budget's share of each stay timed, and a phase of the program with new short functions is timed until a check switches them"
            );
        }
        if !b.modules_without_table.is_empty() {
            let _ = writeln!(
                out,
                "  the data file could not grow for the budget's table of {}: their functions stayed timed",
                b.modules_without_table.join(", ")
            );
        }
        if b.unkept_checks > 0 {
            let _ = writeln!(
                out,
                "  {} checks ran in modules beyond the {} whose functions a thread's budget switches ({}): the others' functions stayed timed",
                b.unkept_checks,
                b.modules.len(),
                b.modules.join(", ")
            );
        }
        if !t.switches.is_empty() {
            let _ = writeln!(out, "{:>12}  {:>12}  FUNCTION", "AT", "CALLS/S");
        }
        for s in &t.switches {
            let _ = writeln!(out, "{:>12}  {:>12}  {}{}", duration(s.at_ms * 1e6), rate(s.calls_per_s), s.function, module_suffix(profile, &s.module));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A switch's call rate, in millions a second.
fn rate(calls_per_s: Option<f64>) -> String {
    calls_per_s.map_or_else(|| "?".into(), |r| format!("{:.3} M", r / 1e6))
}

/// `--budget --format json`: per thread, its budget use and its switches.
pub fn budget_json(profile: &Profile) -> Value {
    let threads = profile.timing.as_ref().map(|t| t.threads.as_slice()).unwrap_or_default();
    Value::Array(
        threads
            .iter()
            .filter(|t| t.budget.is_some())
            .map(|t| serde_json::json!({ "pid": t.pid, "tid": t.tid, "budget": t.budget, "switches": t.switches }))
            .collect(),
    )
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// `--callers F` / `--callees F`: the edges into or out of the functions named `name`.
pub fn edges_text(profile: &Profile, name: &str, callers: bool) -> String {
    let mut out = String::new();
    let edges: Vec<_> = profile
        .edges
        .iter()
        .filter(|e| if callers { e.callee == name } else { e.caller.as_deref() == Some(name) })
        .collect();
    let total: u64 = edges.iter().map(|e| e.calls).sum();
    let _ = writeln!(out, "{} {name}: {} calls", if callers { "callers of" } else { "callees of" }, total);
    let _ = writeln!(out, "{:>12}  {:>6}  {:>10}  FUNCTION", "CALLS", "%", "TIME");
    for e in edges {
        let other = if callers { e.caller.as_deref().unwrap_or("(no timed caller)") } else { e.callee.as_str() };
        let share = 100.0 * e.calls as f64 / total.max(1) as f64;
        let _ = writeln!(out, "{:>12}  {:>5.1}%  {:>10}  {other}", e.calls, share, duration(e.total_ns));
    }
    out
}

impl Shown for Profile {
    fn text(&self, from: &Source<'_>) -> String {
        let mut text = report_text(self, from.top);
        if !lopi_trace::Locks::from_data(from.file).locks.is_empty() {
            let _ = writeln!(text, "note: lock calls were recorded: see `lopi report {0} --locks` and `--threads`", from.path.display());
        }
        text
    }

    fn json(&self, _: &Source<'_>) -> anyhow::Result<()> {
        print_json(self)
    }
}

/// `lopi report --budget`: the profile of a record made with a budget, and its text.
pub(crate) struct Budget(Profile, String);

impl lopi_trace::View for Budget {
    fn read(data: &lopi_trace::DataFile) -> Result<Self, lopi_trace::Missing> {
        let profile = Profile::from_data(data);
        let text = budget_text(&profile).ok_or(lopi_trace::Missing { what: "budget data", record: "--probe entry,exit --budget 5% (lopi run, rewrite or attach)" })?;
        Ok(Budget(profile, text))
    }
}

impl Shown for Budget {
    fn text(&self, _: &Source<'_>) -> String {
        self.1.clone()
    }

    fn json(&self, _: &Source<'_>) -> anyhow::Result<()> {
        print_json(&budget_json(&self.0))
    }
}
