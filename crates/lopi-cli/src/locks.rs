//! `lopi report --locks`: per lock, then per call site and per thread, with names from the
//! processes' memory maps (a static lock by its symbol, a heap lock by the function that
//! initialised it, a call site by its function).
use crate::names::Namer;
use crate::output::print_json;
use crate::report::{Shown, Source};
use lopi_trace::{DataFile, LockCounts, LockStats, Locks};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The report's JSON: `{"locks": [...], ...}` as docs/locks.md documents.
pub fn report_json(data: &DataFile, locks: &Locks) -> Value {
    let mut namer = Namer::new(&data.maps);
    let thread_names = crate::threads::display_names(&lopi_trace::Threads::from_data(data), &mut namer);
    let locks_json: Vec<Value> = locks
        .locks
        .iter()
        .map(|l| {
            let pid = first_pid(l);
            let name = lock_name(&mut namer, l);
            let mut v = counts_json(&l.counts, l.kind);
            v["name"] = json!(name);
            if let Some(named) = namer.name(pid, l.addr).filter(|n| !n.function && n.symbol != n.name) {
                v["symbol"] = json!(named.symbol);
            }
            v["addr"] = json!(format!("{:#x}", l.addr));
            v["kind"] = json!(l.kind);
            v["pids"] = json!(l.pids);
            v["sites"] = l
                .sites
                .iter()
                .map(|s| {
                    let mut site = counts_json(&s.counts, l.kind);
                    site["function"] = json!(namer.site(s.pid, s.ret));
                    site["ret"] = json!(format!("{:#x}", s.ret));
                    site["pid"] = json!(s.pid);
                    if let Some(mode) = s.mode {
                        site["mode"] = json!(mode);
                    }
                    site
                })
                .collect();
            v["threads"] = l
                .threads
                .iter()
                .map(|t| {
                    let mut thread = counts_json(&t.counts, l.kind);
                    thread["tid"] = json!(t.tid);
                    thread["pid"] = json!(t.pid);
                    thread["name"] = json!(thread_names.get(&(t.pid, t.tid)).unwrap_or(&t.name));
                    thread
                })
                .collect();
            v
        })
        .collect();
    json!({"locks": locks_json, "orphan_releases": locks.orphan_releases, "holds_dropped": locks.holds_dropped})
}

/// Every recorded lock's name, by process and address.
pub fn lock_names(data: &DataFile, namer: &mut Namer) -> HashMap<(u32, u64), String> {
    let mut out = HashMap::new();
    for l in &Locks::from_data(data).locks {
        let name = lock_name(namer, l);
        for &pid in &l.pids {
            out.insert((pid, l.addr), name.clone());
        }
    }
    out
}

/// The process a lock is named in (a forked child shares its parent's addresses).
fn first_pid(l: &LockStats) -> u32 {
    l.pids.first().copied().unwrap_or(0)
}

/// A lock's name: its symbol, else its place in a file (`libX.so+0x4040`: static data of a
/// stripped library), else `heap@` the site that initialised it, else its address `@` the
/// first site that locked it (sites as [`Namer::site`] names them).
pub fn lock_name(namer: &mut Namer, l: &LockStats) -> String {
    let (pid, addr) = (first_pid(l), l.addr);
    if let Some(named) = namer.name(pid, addr).filter(|n| !n.function) {
        return named.name;
    }
    if let Some(place) = namer.place(pid, addr) {
        return place.text();
    }
    match (l.init_site.map(|r| namer.site(pid, r)), l.sites.first().map(|s| namer.site(pid, s.ret))) {
        (Some(f), _) => format!("heap@{f}"),
        (None, Some(f)) => format!("{addr:#x}@{f}"),
        _ => format!("{addr:#x}"),
    }
}

/// Integer fields as integers (ns rounded); fields that do not apply to `kind` left out.
fn counts_json(c: &LockCounts, kind: &str) -> Value {
    let ns = |x: f64| x.round() as u64;
    let mut v = json!({
        "acquisitions": c.acquisitions,
        "contended": c.contended,
        "wait_ns": ns(c.wait_ns),
        "max_wait_ns": ns(c.max_wait_ns),
        "blocked_ns": ns(c.blocked_ns),
        "spin_ns": ns((c.wait_ns - c.blocked_ns).max(0.0)),
        "trylock_failed": c.trylock_failed,
        "timeouts": c.timeouts,
        "errors": c.errors,
        "open_waits": c.open_waits,
    });
    if matches!(kind, "mutex" | "rwlock" | "spinlock") {
        v["hold_ns"] = json!(ns(c.hold_ns));
        v["max_hold_ns"] = json!(ns(c.max_hold_ns));
        v["releases"] = json!(c.releases);
        v["open_holds"] = json!(c.open_holds);
    }
    match kind {
        "mutex" => v["nested"] = json!(c.nested),
        "rwlock" => {
            v["read"] = json!(c.read);
            v["write"] = json!(c.write);
            v["read_hold_ns"] = json!(ns(c.read_hold_ns));
            v["write_hold_ns"] = json!(ns(c.write_hold_ns));
        }
        "sem" => v["posts"] = json!(c.posts),
        "cond" => {
            v["waits"] = json!(c.waits);
            v["signals"] = json!(c.signals);
            v["broadcasts"] = json!(c.broadcasts);
        }
        "barrier" => v["serial"] = json!(c.serial),
        _ => {}
    }
    v
}

fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

/// The mark of waits and holds still going on at the end.
fn open(c: &LockCounts) -> String {
    let parts: Vec<String> = [(c.open_waits, "waiting"), (c.open_holds, "held")].iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" [{} at the end]", parts.join(", "))
    }
}

/// The text report: one line per lock, most waited for first, then its busiest sites.
pub fn report_text(data: &DataFile, locks: &Locks, top: usize) -> String {
    let mut namer = Namer::new(&data.maps);
    let mut out = String::new();
    if locks.locks.is_empty() {
        out.push_str("no lock calls: the program took no lock while lock probes were in place\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>7}  LOCK",
        "KIND", "ACQUIRED", "CONTENDED", "WAIT ms", "BLOCKED ms", "MAX WAIT", "HOLD ms", "FAILED"
    );
    let shown = if top == 0 { locks.locks.len() } else { top.min(locks.locks.len()) };
    for l in &locks.locks[..shown] {
        let name = lock_name(&mut namer, l);
        let c = &l.counts;
        let failed = c.trylock_failed + c.timeouts + c.errors;
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>7}  {name} ({:#x}){}",
            l.kind,
            c.acquisitions,
            c.contended,
            ms(c.wait_ns),
            ms(c.blocked_ns),
            ms(c.max_wait_ns),
            ms(c.hold_ns),
            failed,
            l.addr,
            open(c)
        );
        let busy = |s: &&lopi_trace::LockSite| {
            let c = &s.counts;
            c.acquisitions + c.waits + c.trylock_failed + c.timeouts + c.errors + c.open_waits + c.open_holds > 0
        };
        for s in l.sites.iter().filter(busy).take(3) {
            let function = namer.site(s.pid, s.ret);
            let mode = s.mode.map(|m| format!(" [{m}]")).unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>7}    from {function}{mode}{}",
                "",
                s.counts.acquisitions,
                s.counts.contended,
                ms(s.counts.wait_ns),
                ms(s.counts.blocked_ns),
                ms(s.counts.max_wait_ns),
                ms(s.counts.hold_ns),
                s.counts.trylock_failed + s.counts.timeouts + s.counts.errors,
                open(&s.counts)
            );
        }
    }
    if shown < locks.locks.len() {
        let _ = writeln!(out, "... {} more (use --top 0 for all)", locks.locks.len() - shown);
    }
    if locks.holds_dropped > 0 {
        let _ = writeln!(out, "note: {} holds were not timed: a thread held more locks at once than lopi's table keeps", locks.holds_dropped);
    }
    if locks.orphan_releases > 0 {
        let _ = writeln!(out, "note: {} releases had no acquisition in their thread (taken before lopi started, or by another thread)", locks.orphan_releases);
    }
    let _ = writeln!(out, "note: WAIT is call to return of the acquiring calls; BLOCKED the part of it in futex; FAILED counts failed trylocks, timeouts and errors");
    if locks.locks.iter().any(|l| l.counts.open_waits + l.counts.open_holds > 0) {
        let _ = writeln!(out, "note: `at the end`: waits and holds still going on when their thread's recording ended (its process's end, or lopi's detach); WAIT and HOLD count their time up to then");
    }
    out
}

impl Shown for Locks {
    fn text(&self, from: &Source<'_>) -> String {
        report_text(from.file, self, from.top)
    }

    fn json(&self, from: &Source<'_>) -> anyhow::Result<()> {
        print_json(&report_json(from.file, self))
    }
}
