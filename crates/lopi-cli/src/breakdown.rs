//! `lopi report --breakdown`: per thread and in total, wall time in user, kernel, blocked in
//! system calls, lock wait (spinning, blocked) and the rest; the parallelism it shows, the
//! serial fraction that implies, Amdahl's bound, the bound the most-held lock sets, and the
//! parallelism profile `lopi run` sampled.
use crate::locks::lock_name;
use crate::names::Namer;
use crate::output::print_json;
use crate::report::{Shown, Source};
use crate::threads::display_names;
use lopi_trace::{amdahl, Breakdown, DataFile, Locks, Missing, Parallelism, Parts, Threads};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

const AMDAHL_CPUS: [u32; 6] = [2, 4, 8, 16, 32, 64];
/// A lock whose bound is beyond this many times the work is not worth a line of text.
const LOCK_BOUND_SHOWN: f64 = 100.0;
/// A thread runnable for more of its wall time than this has its user/kernel split estimated.
const RUNNABLE_NOTED: f64 = 0.1;

/// The lock held longest in all, as (name, hold ns), and the speedup bound it sets: work
/// under one lock runs one thread at a time, so no run is shorter than its hold time.
fn lock_bound(data: &DataFile, namer: &mut Namer, cpu_ns: f64) -> Option<(String, f64, f64)> {
    let locks = Locks::from_data(data);
    let top = locks.locks.iter().max_by(|a, b| a.counts.hold_ns.total_cmp(&b.counts.hold_ns))?;
    (top.counts.hold_ns > 0.0 && cpu_ns > 0.0).then(|| (lock_name(namer, top), top.counts.hold_ns, cpu_ns / top.counts.hold_ns))
}

pub(crate) fn parts_json(p: &Parts) -> Map<String, Value> {
    let ns = |x: f64| Value::from(x.round() as u64);
    let mut m = Map::new();
    for (k, v) in [
        ("wall_ns", p.wall_ns),
        ("user_ns", p.user_ns),
        ("kernel_ns", p.kernel_ns),
        ("syscall_blocked_ns", p.syscall_blocked_ns),
        ("lock_wait_ns", p.lock_wait_ns),
        ("lock_spin_ns", p.lock_spin_ns),
        ("lock_blocked_ns", p.lock_blocked_ns),
        ("kernel_lock_spin_ns", p.kernel_lock_spin_ns),
        ("other_ns", p.other_ns),
        ("runnable_ns", p.runnable_ns),
    ] {
        m.insert(k.into(), ns(v));
    }
    m
}

pub fn report_json(data: &DataFile, threads: &Threads) -> Value {
    let b = Breakdown::from_threads(threads);
    let mut namer = Namer::new(&data.maps);
    let names = display_names(threads, &mut namer);
    let list: Vec<Value> = b
        .threads
        .iter()
        .map(|t| {
            let mut m = t.parts.as_ref().map(parts_json).unwrap_or_default();
            m.insert("pid".into(), t.pid.into());
            m.insert("tid".into(), t.tid.into());
            m.insert("name".into(), names.get(&(t.pid, t.tid)).cloned().unwrap_or_default().into());
            m.insert("cpu_known".into(), t.parts.is_some().into());
            Value::Object(m)
        })
        .collect();
    let serial = b.serial(data.parallelism.as_ref());
    let amdahl_bound: Map<String, Value> =
        serial.map(|(s, _)| AMDAHL_CPUS.iter().map(|&n| (n.to_string(), Value::from(amdahl(s, f64::from(n))))).collect()).unwrap_or_default();
    let bound = lock_bound(data, &mut namer, b.total.cpu_ns());
    json!({
        "threads": list,
        "total": parts_json(&b.total),
        "process_wall_ns": b.process_wall_ns.round() as u64,
        "cpus": b.cpus,
        "average_parallelism": b.average_parallelism,
        "serial_fraction": serial.map(|(s, _)| s),
        "serial_fraction_from": serial.map(|(_, from)| from),
        "karp_flatt": b.serial_fraction,
        "amdahl_bound": if serial.is_some() { Value::Object(amdahl_bound) } else { Value::Null },
        "lock_bound": bound.map(|(lock, hold, bound)| json!({"lock": lock, "hold_ns": hold.round() as u64, "bound": bound})),
        "threads_without_cpu_times": b.unknown_cpu,
        "parallelism": data.parallelism.as_ref().map(parallelism_json),
    })
}

/// The parallelism profile: the share of samples (of wall time) with 0, 1, 2, ... threads
/// ready to run.
fn shares(p: &Parallelism) -> Vec<f64> {
    let n = p.samples().max(1) as f64;
    p.counts.iter().map(|&c| c as f64 / n).collect()
}

fn parallelism_json(p: &Parallelism) -> Value {
    let shares: Map<String, Value> = shares(p).into_iter().enumerate().map(|(k, s)| (k.to_string(), Value::from(s))).collect();
    json!({"interval_ns": p.interval_ns, "samples": p.samples(), "shares": shares})
}

fn parallelism_text(p: &Parallelism) -> String {
    let shares: Vec<String> = shares(p).into_iter().enumerate().map(|(k, s)| format!("{k}: {:.1}%", 100.0 * s)).collect();
    format!(
        "parallelism profile (share of wall time with N threads ready to run, {} samples {:.0} ms apart by lopi run): {}\n",
        p.samples(),
        p.interval_ns as f64 / 1e6,
        shares.join(", ")
    )
}

fn pct(part: f64, wall: f64) -> String {
    if wall > 0.0 {
        format!("{:.1}", 100.0 * part / wall)
    } else {
        "-".into()
    }
}

/// One row; `emulated` adds the spin for an emulated kernel's lock (`lopi whatif`).
fn row(out: &mut String, pid: &str, tid: &str, name: &str, p: &Parts, emulated: bool) {
    let w = p.wall_ns;
    let _ = write!(
        out,
        "{pid:>7} {tid:>7}  {name:<20} {:>10.3}  {:>6} {:>7} {:>8} {:>6} {:>8} {:>6}",
        w / 1e6,
        pct(p.user_ns, w),
        pct(p.kernel_ns, w),
        pct(p.syscall_blocked_ns, w),
        pct(p.lock_spin_ns, w),
        pct(p.lock_blocked_ns, w),
        pct(p.other_ns, w),
    );
    if emulated {
        let _ = write!(out, " {:>6}", pct(p.kernel_lock_spin_ns, w));
    }
    out.push('\n');
}

pub fn report_text(data: &DataFile, threads: &Threads) -> String {
    let b = Breakdown::from_threads(threads);
    let mut namer = Namer::new(&data.maps);
    let names = display_names(threads, &mut namer);
    let emulated = b.total.kernel_lock_spin_ns > 0.0;
    let mut out = String::from("    PID     TID  THREAD                  WALL ms  USER% KERNEL% BLOCKED%  SPIN% LOCKWAIT% OTHER%");
    out.push_str(if emulated { " KSPIN%\n" } else { "\n" });
    for t in &b.threads {
        let name: String = names.get(&(t.pid, t.tid)).cloned().unwrap_or_default().chars().take(20).collect();
        match &t.parts {
            Some(p) => row(&mut out, &t.pid.to_string(), &t.tid.to_string(), &name, p, emulated),
            None => {
                let _ = writeln!(out, "{:>7} {:>7}  {name:<20} (CPU times unknown: ended by another thread's exit_group)", t.pid, t.tid);
            }
        }
    }
    row(&mut out, "", "", "all threads", &b.total, emulated);
    if emulated {
        let _ = writeln!(out, "note: KSPIN is spinning for the emulated kernel's lock (lopi whatif), taken before the system calls that hold it");
    }
    let _ = writeln!(
        out,
        "note: BLOCKED is time in system calls off the CPU (outside lock acquisitions), SPIN and LOCKWAIT the lock acquisitions' wait spinning in user space and blocked in futex, OTHER the rest of the wall time (runnable but not running: {:.3} ms in all, page faults)",
        b.total.runnable_ns / 1e6
    );
    let _ = write!(out, "processes: {:.3} ms of wall time; {:.2} CPUs busy on average", b.process_wall_ns / 1e6, b.average_parallelism);
    match b.serial(data.parallelism.as_ref()) {
        Some((s, from)) => {
            let _ = writeln!(out, " of {} allowed: serial fraction {s:.3} ({from})", b.cpus);
            let bounds: Vec<String> = AMDAHL_CPUS.iter().map(|&n| format!("{n}: {:.2}", amdahl(s, f64::from(n)))).collect();
            let _ = writeln!(out, "Amdahl bound on speedup by CPUs: {}", bounds.join(", "));
        }
        None if b.cpus <= 1 => {
            let _ = writeln!(out, " on {} CPU: no serial fraction can be told from one CPU", b.cpus);
        }
        None => {
            let _ = writeln!(out, " on {} CPUs: too little CPU time measured for a serial fraction", b.cpus);
        }
    }
    match &data.parallelism {
        Some(p) => out.push_str(&parallelism_text(p)),
        None => out.push_str("parallelism profile: not recorded (lopi run --probe syscall or locks samples it; a rewritten program has no lopi beside it)\n"),
    }
    match lock_bound(data, &mut namer, b.total.cpu_ns()) {
        Some((lock, hold, bound)) if bound < LOCK_BOUND_SHOWN => {
            let _ = writeln!(out, "most-held lock: {lock}, held {:.3} ms in all: speedup at most {bound:.2} however many CPUs", hold / 1e6);
        }
        Some((lock, hold, _)) => {
            let _ = writeln!(out, "most-held lock: {lock}, held {:.3} ms in all: no lock limits speedup below {LOCK_BOUND_SHOWN:.0}x", hold / 1e6);
        }
        None => {}
    }
    let waited: Vec<String> = b
        .threads
        .iter()
        .filter_map(|t| t.parts.filter(|p| p.runnable_ns > RUNNABLE_NOTED * p.wall_ns).map(|p| format!("{} {:.0}%", t.tid, 100.0 * p.runnable_ns / p.wall_ns)))
        .collect();
    if !waited.is_empty() {
        let _ = writeln!(
            out,
            "note: threads that waited for a CPU (runnable) much of their time: {}; their user/kernel split is an estimate (a thread preempted at a system call's return waits inside it)",
            waited.join(", ")
        );
    }
    let gave_up: Vec<String> = threads.threads.iter().filter(|t| t.kernel_lock_gave_up).map(|t| t.tid.to_string()).collect();
    if !gave_up.is_empty() {
        let _ = writeln!(
            out,
            "warning: threads {} went on without the emulated kernel lock after spinning 2 s for it (its holder slept in a call taken for one that cannot): the emulation is incomplete there",
            gave_up.join(", ")
        );
    }
    if b.unknown_cpu > 0 {
        let _ = writeln!(out, "note: {} thread(s) without CPU times are left out of the sums", b.unknown_cpu);
    }
    out
}

/// `lopi report --breakdown`: the threads, with the CPU times their ends recorded.
pub(crate) struct ThreadTimes(Threads);

impl lopi_trace::View for ThreadTimes {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        let threads = Threads::from_data(data);
        if !threads.threads.iter().any(|t| t.cpu.is_some()) {
            return Err(Missing { what: "thread CPU times", record: "--probe syscall,locks (its threads' exit and exit_group calls record them)" });
        }
        Ok(ThreadTimes(threads))
    }
}

impl Shown for ThreadTimes {
    fn text(&self, from: &Source<'_>) -> String {
        report_text(from.file, &self.0)
    }

    fn json(&self, from: &Source<'_>) -> anyhow::Result<()> {
        print_json(&report_json(from.file, &self.0))
    }
}
