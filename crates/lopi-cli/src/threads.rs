//! `lopi report --threads`: per thread, its life (start routine, creator, start and end), what
//! it waited for, and the thread calls it made.
use crate::names::Namer;
use crate::output::print_json;
use crate::report::{Shown, Source};
use lopi_trace::{DataFile, EndSeen, ThreadCalls, ThreadLife, Threads};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

/// How people know each thread: its `pthread_setname_np` name, else (a created thread whose
/// name is still its creator's) its start routine, else its name.
pub fn display_names(threads: &Threads, namer: &mut Namer) -> HashMap<(u32, u32), String> {
    let names: HashMap<(u32, u32), &str> = threads.threads.iter().map(|t| ((t.pid, t.tid), t.name.as_str())).collect();
    threads
        .threads
        .iter()
        .map(|t| {
            let inherited = t.created_by.is_some_and(|by| names.get(&(t.pid, by)).is_some_and(|n| *n == t.name)) || t.name.is_empty();
            let routine = t.start_routine.map(|r| namer.describe(t.pid, r));
            let name = match routine {
                Some(r) if inherited => r,
                _ => t.name.clone(),
            };
            ((t.pid, t.tid), name)
        })
        .collect()
}

fn calls_json(c: &ThreadCalls) -> Value {
    json!({"create": c.create, "join": c.join, "detach": c.detach, "exit": c.exit, "setname": c.setname})
}

fn end_seen(e: EndSeen) -> &'static str {
    match e {
        EndSeen::Exit => "exit",
        EndSeen::ExitGroup => "exit_group",
        EndSeen::Exec => "exec",
        EndSeen::ProcessEnd => "process_end",
        EndSeen::Detach => "detach",
        EndSeen::LastProbe => "last_probe",
    }
}

/// The report's JSON: `{"threads": [...], "calls": {...}}` as docs/locks.md documents.
pub fn report_json(data: &DataFile, threads: &Threads) -> Value {
    let mut namer = Namer::new(&data.maps);
    let display = display_names(threads, &mut namer);
    let ns = |x: f64| x.round() as u64;
    let list: Vec<Value> = threads
        .threads
        .iter()
        .map(|t| {
            json!({
                "pid": t.pid,
                "tid": t.tid,
                "name": display.get(&(t.pid, t.tid)).cloned().unwrap_or_default(),
                "comm": t.name,
                "start_routine": routine(&mut namer, t),
                "created_by": t.created_by,
                "create_site": t.create_site.map(|r| namer.site(t.pid, r)),
                "start_ns": ns(t.start_ns),
                "end_ns": ns(t.end_ns),
                "end_seen": end_seen(t.end_seen),
                "open_calls": t.open_calls,
                "lock_wait_ns": ns(t.lock_wait_ns),
                "lock_blocked_ns": ns(t.lock_blocked_ns),
                "join_wait_ns": ns(t.join_wait_ns),
                "syscall_ns": ns(t.syscall_ns),
                "calls": calls_json(&t.calls),
                "recorded": t.recorded,
            })
        })
        .collect();
    json!({"threads": list, "calls": calls_json(&threads.calls)})
}

fn routine(namer: &mut Namer, t: &ThreadLife) -> Option<String> {
    t.start_routine.map(|r| namer.describe(t.pid, r))
}

fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

/// The text report: one line per thread, by process and start.
pub fn report_text(data: &DataFile, threads: &Threads) -> String {
    let mut namer = Namer::new(&data.maps);
    let display = display_names(threads, &mut namer);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7} {:>7} {:<16} {:<28} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  CALLS",
        "PID", "TID", "NAME", "START ROUTINE", "BY", "START ms", "LIFE ms", "LOCK ms", "JOIN ms", "SYSCALL ms"
    );
    for t in &threads.threads {
        let routine = routine(&mut namer, t).unwrap_or_else(|| "-".into());
        let by = t.created_by.map_or_else(|| "-".to_string(), |b| b.to_string());
        let c = &t.calls;
        let calls: Vec<String> = [("create", c.create), ("join", c.join), ("detach", c.detach), ("exit", c.exit), ("setname", c.setname)]
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .chain((t.open_calls > 0).then(|| format!("{} open at its end", t.open_calls)))
            .collect();
        let end = if t.end_seen == EndSeen::LastProbe { "+" } else { "" };
        let _ = writeln!(
            out,
            "{:>7} {:>7} {:<16} {:<28} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
            t.pid,
            t.tid,
            display.get(&(t.pid, t.tid)).map_or("", String::as_str),
            routine,
            by,
            ms(t.start_ns),
            format!("{}{end}", ms(t.end_ns - t.start_ns)),
            ms(t.lock_wait_ns),
            ms(t.join_wait_ns),
            ms(t.syscall_ns),
            calls.join(", ")
        );
    }
    let c = &threads.calls;
    let _ = writeln!(
        out,
        "{} threads; calls: create {}, join {}, detach {}, exit {}, setname {}",
        threads.threads.len(),
        c.create,
        c.join,
        c.detach,
        c.exit,
        c.setname
    );
    let _ = writeln!(out, "note: LIFE ends at the thread's exit (or its process's, or lopi's detach); `+`: its end was not seen, LIFE ends at its last probe");
    if threads.threads.iter().any(|t| t.open_calls > 0) {
        let _ = writeln!(out, "note: `open at its end`: waits, holds and calls that had not returned when the thread's recording ended; LOCK, JOIN and SYSCALL count their time up to then");
    }
    out
}

impl Shown for Threads {
    fn text(&self, from: &Source<'_>) -> String {
        report_text(from.file, self)
    }

    fn json(&self, from: &Source<'_>) -> anyhow::Result<()> {
        print_json(&report_json(from.file, self))
    }
}
