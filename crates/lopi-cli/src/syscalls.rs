//! Views of system-call probes: the sites `lopi info --probe syscall` lists, the summary line
//! of `rewrite`, and `lopi report --syscalls`.
use crate::output::print_json;
use crate::report::{Shown, Source};
use lopi_elf::ElfModule;
use lopi_patch::{Outcome, PointKind, SyscallSite};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// How many `syscall` instructions were found and probed, and why the others were not.
pub struct Summary {
    pub found: usize,
    pub probed: usize,
    pub skipped_by_reason: BTreeMap<&'static str, usize>,
}

impl Summary {
    pub fn new(sites: &[SyscallSite]) -> Summary {
        let mut s = Summary { found: sites.len(), probed: 0, skipped_by_reason: BTreeMap::new() };
        for site in sites {
            match site.outcome {
                Outcome::Probed(_) | Outcome::Moved => s.probed += 1,
                Outcome::Skipped(r) => *s.skipped_by_reason.entry(r.key()).or_default() += 1,
                Outcome::NotSelected => {}
            }
        }
        s
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = if self.found == 0 { 100.0 } else { 100.0 * self.probed as f64 / self.found as f64 };
        write!(f, "{} syscall sites found, {} probed ({share:.2}%)", self.found, self.probed)?;
        if !self.skipped_by_reason.is_empty() {
            let reasons: Vec<String> = self.skipped_by_reason.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            write!(f, ", {} skipped ({})", self.found - self.probed, reasons.join(", "))?;
        }
        Ok(())
    }
}

fn function_name<'m>(module: &'m ElfModule<'_>, site: &SyscallSite) -> &'m str {
    site.function.map_or("", |f| module.functions[f].name.as_str())
}

fn how(site: &SyscallSite) -> (String, Option<String>) {
    match site.outcome {
        Outcome::Probed(t) => (t.name().to_string(), None),
        Outcome::Moved => ("moved".to_string(), None),
        Outcome::Skipped(r) => ("skipped".to_string(), Some(format!("{}: {}", r.key(), r.describe(PointKind::Syscall)))),
        Outcome::NotSelected => ("not-selected".to_string(), None),
    }
}

fn call_name(site: &SyscallSite) -> String {
    site.nr.map_or_else(|| "(number set elsewhere)".to_string(), |nr| lopi_trace::syscall_name(u64::from(nr)))
}

pub fn info_text(module: &ElfModule<'_>, sites: &[SyscallSite]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<18} {:<14} {:<22} FUNCTION", "SYSCALL SITE", "PROBE", "CALL");
    for site in sites {
        let (probe, reason) = how(site);
        let function = match function_name(module, site) {
            "" => "(no known function)",
            name => name,
        };
        let _ = write!(out, "{:#018x} {probe:<14} {:<22} {function}", site.at.0, call_name(site));
        let _ = match reason {
            Some(r) => writeln!(out, "  ({r})"),
            None => writeln!(out),
        };
    }
    let _ = writeln!(out, "{}", Summary::new(sites));
    out
}

pub fn info_json(module: &ElfModule<'_>, sites: &[SyscallSite]) -> Value {
    let summary = Summary::new(sites);
    let list: Vec<Value> = sites
        .iter()
        .map(|site| {
            let (probe, reason) = how(site);
            let mut v = json!({
                "addr": format!("{:#x}", site.at.0),
                "function": function_name(module, site),
                "status": probe,
            });
            if let Some(nr) = site.nr {
                v["nr"] = json!(nr);
                v["name"] = json!(lopi_trace::syscall_name(u64::from(nr)));
            }
            if let Some(r) = reason {
                v["reason"] = json!(r);
            }
            v
        })
        .collect();
    json!({
        "sites": list,
        "found": summary.found,
        "probed": summary.probed,
        "skipped_by_reason": summary.skipped_by_reason,
    })
}

/// A time in seconds with microseconds, as `strace -c` shows it.
fn seconds(ns: f64) -> String {
    format!("{:.6}", ns.max(0.0) / 1e9)
}

fn table(out: &mut String, calls: &[lopi_trace::SyscallStats]) {
    let total_ns: f64 = calls.iter().map(|c| c.total_ns).sum();
    let _ = writeln!(out, "{:>6} {:>11} {:>11} {:>11} {:>9} {:>9} syscall", "% time", "seconds", "usecs/call", "max usecs", "calls", "errors");
    let _ = writeln!(out, "{:->6} {:->11} {:->11} {:->11} {:->9} {:->9} {:->16}", "", "", "", "", "", "", "");
    for c in calls {
        let share = if total_ns > 0.0 { 100.0 * c.total_ns / total_ns } else { 0.0 };
        let timed = c.calls - c.untimed;
        let avg = if timed > 0 { c.total_ns / timed as f64 / 1e3 } else { 0.0 };
        let errors = if c.errors > 0 { c.errors.to_string() } else { String::new() };
        let _ = writeln!(out, "{share:>6.2} {:>11} {avg:>11.3} {:>11.3} {:>9} {errors:>9} {}{}", seconds(c.total_ns), c.max_ns / 1e3, c.calls, c.name, open(c.open));
    }
    let calls_sum: u64 = calls.iter().map(|c| c.calls).sum();
    let errors_sum: u64 = calls.iter().map(|c| c.errors).sum();
    let _ = writeln!(out, "{:->6} {:->11} {:->11} {:->11} {:->9} {:->9} {:->16}", "", "", "", "", "", "", "");
    let _ = writeln!(out, "{:>6.2} {:>11} {:>11} {:>11} {calls_sum:>9} {errors_sum:>9} total", 100.0, seconds(total_ns), "", "");
}

/// The mark of calls still in progress at the end.
fn open(n: u64) -> String {
    if n > 0 {
        format!(" ({n} open at the end)")
    } else {
        String::new()
    }
}

/// `lopi report --syscalls`: the whole record, then each thread, then the busiest sites.
pub fn report_text(report: &lopi_trace::Syscalls, top: usize) -> String {
    let mut out = String::new();
    table(&mut out, &report.syscalls);
    for t in report.threads.iter().filter(|t| !t.syscalls.is_empty()) {
        let _ = writeln!(out, "\nthread {} ({}, pid {}):", t.tid, if t.name.is_empty() { "?" } else { &t.name }, t.pid);
        table(&mut out, &t.syscalls);
    }
    let shown = if top == 0 { report.sites.len() } else { top.min(report.sites.len()) };
    if shown > 0 {
        let _ = writeln!(out, "\nbusiest call sites:\n{:>11} {:>9} {:>9}  {:<16} SITE", "seconds", "calls", "errors", "syscall");
        for s in &report.sites[..shown] {
            let module = std::path::Path::new(&s.module).file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            // Named as everywhere: the function, and the module and address in its file.
            let place = format!("{module}+{}", s.addr);
            // The dispatch point is no place in a file.
            let site = match s.function.as_str() {
                "" => place,
                lopi_trace::UNPROBED_CODE => s.function.clone(),
                function => format!("{function} ({place})"),
            };
            let _ = write!(out, "{:>11} {:>9} {:>9}  {:<16} {site}{}", seconds(s.total_ns), s.calls, s.errors, s.name, open(s.open));
            // The innermost callers; JSON has the whole path.
            const SHOWN: usize = 4;
            if !s.context.is_empty() {
                let inner: Vec<&str> = s.context.iter().rev().take(SHOWN).map(String::as_str).collect();
                let _ = write!(out, " <- {}", inner.join(" <- "));
                if s.context.len() > SHOWN {
                    let _ = write!(out, " <- ... ({} more)", s.context.len() - SHOWN);
                }
            }
            let _ = writeln!(out);
        }
        if shown < report.sites.len() {
            let _ = writeln!(out, "... {} more (use --top 0 for all)", report.sites.len() - shown);
        }
    }
    if report.syscalls.iter().any(|c| c.open > 0) {
        let _ = writeln!(out, "\nnote: `open at the end`: calls still in progress when their thread's recording ended (its process's end, or lopi's detach), counted with their time up to then");
    }
    let startup: u64 = report.syscalls.iter().map(|c| c.startup).sum();
    let untimed = report.syscalls.iter().map(|c| c.untimed).sum::<u64>() - startup;
    if startup > 0 {
        let _ = writeln!(out, "\nnote: {startup} calls were made before the probes went live (each program's dynamic loader and library constructors, and execve calls no probe saw); lopi counted them through ptrace, without a time");
    }
    if untimed > 0 {
        let _ = writeln!(out, "\nnote: {untimed} calls were counted without a time (made before lopi's runtime was ready, inside a probe, or by a vfork child); they are named by the number their site sets");
    }
    let _ = writeln!(out, "note: clock_gettime, gettimeofday, time and getcpu usually run in the vDSO without entering the kernel: those calls are not system calls and are not counted (when the vDSO does enter the kernel, for CPU-time clocks, lopi run and attach count it)");
    runtime_table(&mut out, &report.runtime_syscalls);
    out
}

/// lopi's own calls in the program's processes, apart from the program's.
fn runtime_table(out: &mut String, own: &lopi_trace::OwnCalls) {
    if own.calls == 0 {
        return;
    }
    let _ = writeln!(out, "\nlopi's runtime: its own system calls in the program's processes (not the program's, in none of the tables above):");
    let _ = writeln!(out, "{:>11} {:>11} {:>9} syscall", "seconds", "usecs/call", "calls");
    let time = |ns: Option<f64>, calls: u64| match ns {
        Some(ns) => (seconds(ns), format!("{:.3}", ns / calls.max(1) as f64 / 1e3)),
        None => ("?".to_string(), "?".to_string()),
    };
    for c in &own.by_call {
        let (total, each) = time(c.ns, c.calls);
        let _ = writeln!(out, "{total:>11} {each:>11} {:>9} {}", c.calls, c.name);
    }
    let (total, each) = time(own.ns, own.calls);
    let _ = writeln!(out, "{total:>11} {each:>11} {:>9} total", own.calls);
}

impl Shown for lopi_trace::Syscalls {
    fn text(&self, from: &Source<'_>) -> String {
        report_text(self, from.top)
    }

    fn json(&self, _: &Source<'_>) -> anyhow::Result<()> {
        print_json(self)
    }
}
