//! `lopi whatif`: the program natively and under an emulated kernel (`LOPI_WHATIF`, see the
//! runtime's `timing/whatif/kernel_locks.rs` and `timing/whatif/appkernel.rs`), each recorded with `--probe syscall,locks` on one CPU and on
//! N, side by side in the thesis's layout (user / kernel / spinning for the kernel lock, as
//! shares of the CPU time), each run's speedup against native on one CPU (the thesis's
//! baseline for every kernel: a kernel that is slower on one CPU starts below 1), Amdahl's bound
//! with the kernel serial, and the null system call's latency under each.
use crate::scale::{allowed_cpus, recorded_run, restore_affinity};
use anyhow::{bail, Context, Result};
use lopi_trace::{Breakdown, Parts, Threads};
use serde_json::{json, Map, Value};
use std::ffi::OsString;
use std::fmt::Write as _;

const NULLSYS: &str = include_str!("nullsys.c");

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kernel {
    /// One lock around every system call.
    GiantLock,
    /// One lock per subsystem (file system, network, memory, processes, time, IPC).
    SubsystemLocks,
    /// Every system call made by a proxy thread on one CPU, the program's threads on the others.
    #[value(name = "app-kernel")]
    Application,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::GiantLock => "giant-lock",
            Kernel::SubsystemLocks => "subsystem-locks",
            Kernel::Application => "app-kernel",
        }
    }

    /// `LOPI_WHATIF` for the runtime.
    fn env(self, wait: ProxyWait) -> &'static str {
        match (self, wait) {
            (Kernel::Application, ProxyWait::Spin) => "app-kernel-spin",
            _ => self.name(),
        }
    }
}

/// How the application kernel's proxies and the threads they serve wait for each other.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyWait {
    /// Spin, giving the CPU away every few microseconds: the lower latency.
    Spin,
    /// Sleep in futex until woken: no CPU used while idle.
    Futex,
}

impl ProxyWait {
    fn name(self) -> &'static str {
        match self {
            ProxyWait::Spin => "spin",
            ProxyWait::Futex => "futex",
        }
    }
}

pub struct Request {
    pub kernel: Kernel,
    pub proxy_wait: ProxyWait,
    pub cpus: Option<u32>,
    pub runs: u32,
    pub json: bool,
    pub command: Vec<OsString>,
}

/// One kernel on one CPU count: the median run's wall time and the breakdown summed over
/// threads.
struct Point {
    wall_ns: u64,
    parts: Parts,
    /// A call went on without the emulated lock (see the runtime's `whatif::take`).
    gave_up: bool,
    /// Calls the application kernel's proxies made, and calls made in place.
    forwarded: u64,
    in_place: u64,
    round_trip_ns: f64,
    proxy_ns: f64,
    proxy_failed: bool,
}

/// The null system call's round trip: TSC cycles and ns, and how the proxies waited.
struct NullCall {
    cycles: f64,
    ns: f64,
    wait: Option<ProxyWait>,
}

struct Measured {
    name: &'static str,
    one: Point,
    many: Point,
    /// The null call's latency; the application kernel's under both wait policies, the
    /// policy the program ran with first.
    null: Vec<NullCall>,
    /// The program's output on one CPU and on N.
    stdout: [Vec<u8>; 2],
}

pub fn run(req: Request) -> Result<()> {
    let allowed = allowed_cpus()?;
    let n = req.cpus.unwrap_or(allowed.len() as u32);
    if n == 0 || n as usize > allowed.len() {
        bail!("--cpus {n}: lopi may use {} CPU{} here (its affinity, as `taskset -p` shows)", allowed.len(), if allowed.len() == 1 { "" } else { "s" });
    }
    if req.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let nullsys = build_nullsys()?;
    let kernels = [None, Some(req.kernel.env(req.proxy_wait))];
    if !req.json {
        eprintln!(
            "lopi whatif: {} on 1 and {n} CPU{}, {} recorded run{} each (lopi run --probe syscall,locks), natively and under an emulated {} kernel",
            req.command[0].to_string_lossy(),
            if n == 1 { "" } else { "s" },
            req.runs,
            if req.runs == 1 { "" } else { "s" },
            req.kernel.name()
        );
        if req.kernel == Kernel::Application {
            eprintln!("lopi whatif: the proxies run on CPU {}, the program on the other{}; they {} while they wait", allowed[0], if n > 2 { "s" } else { "" }, req.proxy_wait.name());
        }
    }
    let mut measured = Vec::new();
    for kernel in kernels {
        let one = point(&req.command, 1, &allowed, kernel, req.runs)?;
        let many = if n == 1 { point(&req.command, 1, &allowed, kernel, 1)? } else { point(&req.command, n, &allowed, kernel, req.runs)? };
        let null = match kernel {
            Some(_) if req.kernel == Kernel::Application => {
                // On two CPUs where there are: the proxy on one, its caller on the other.
                let cpus = n.min(2);
                let other = if req.proxy_wait == ProxyWait::Spin { ProxyWait::Futex } else { ProxyWait::Spin };
                let mut null = Vec::new();
                for wait in [req.proxy_wait, other] {
                    null.push(null_syscall(&nullsys, cpus, &allowed, Some(req.kernel.env(wait)), Some(wait))?);
                }
                null
            }
            _ => vec![null_syscall(&nullsys, 1, &allowed, kernel, None)?],
        };
        let stdout = [one.1, many.1];
        measured.push(Measured { name: if kernel.is_some() { req.kernel.name() } else { "native" }, one: one.0, many: many.0, null, stdout });
    }
    restore_affinity(&allowed)?;
    let _ = std::fs::remove_dir_all(nullsys.parent().unwrap_or(&nullsys));
    // Per CPU count: `{cpus}` in the arguments may change the output (xz -T1, -T2).
    let identical = (0..2).all(|i| measured.iter().all(|m| m.stdout[i] == measured[0].stdout[i]));
    let native_kernel_share = share(&measured[0].one.parts, |p| p.kernel_ns);
    let amdahl = lopi_trace::amdahl(native_kernel_share, f64::from(n));
    if req.json {
        crate::output::print_json(&report_json(&measured, n, amdahl, native_kernel_share, identical))
    } else {
        crate::output::print(&report_text(&measured, n, amdahl, native_kernel_share, identical))
    }
}

/// The median of `runs` recorded runs on `cpus` CPUs, and the program's output.
fn point(command: &[OsString], cpus: u32, allowed: &[usize], kernel: Option<&str>, runs: u32) -> Result<(Point, Vec<u8>)> {
    let mut points = Vec::new();
    let mut stdout = Vec::new();
    for _ in 0..runs {
        let run = recorded_run(command, cpus, allowed, kernel, true)?;
        let threads = Threads::from_data(&run.data);
        let b = Breakdown::from_threads(&threads);
        let gave_up = threads.threads.iter().any(|t| t.kernel_lock_gave_up);
        let forwarded = threads.threads.iter().map(|t| t.forwarded).sum();
        let in_place = threads.threads.iter().map(|t| t.in_place).sum();
        let proxy_failed = threads.threads.iter().any(|t| t.proxy_failed);
        let round_trip_ns = threads.threads.iter().map(|t| t.round_trip_ns).sum();
        let proxy_ns = threads.threads.iter().map(|t| t.proxy_ns).sum();
        // The program's own wall time (its first probe to its last thread's end), without
        // lopi's start-up.
        points.push(Point { wall_ns: b.process_wall_ns.round() as u64, parts: b.total, gave_up, forwarded, in_place, round_trip_ns, proxy_ns, proxy_failed });
        stdout = run.stdout;
    }
    points.sort_by_key(|p| p.wall_ns);
    // The median; of an even number, the faster of the middle two.
    Ok((points.swap_remove((points.len() - 1) / 2), stdout))
}

/// Builds the null-system-call program into a temporary directory.
fn build_nullsys() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("lopi-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    crate::demo::compile_c(&dir, "nullsys", NULLSYS, &[])
}

/// getppid's round trip under `kernel` (recorded like the program), on `cpus` CPUs.
fn null_syscall(prog: &std::path::Path, cpus: u32, allowed: &[usize], kernel: Option<&str>, wait: Option<ProxyWait>) -> Result<NullCall> {
    let run = recorded_run(&[prog.into(), "2000".into()], cpus, allowed, kernel, true)?;
    let text = String::from_utf8_lossy(&run.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    match fields[..] {
        ["cycles", c, "ns", ns] => Ok(NullCall { cycles: c.parse().unwrap_or(0.0), ns: ns.parse().unwrap_or(0.0), wait }),
        _ => bail!("the null-system-call program printed {text:?}"),
    }
}

fn null_text(null: &[NullCall]) -> String {
    let one = |c: &NullCall| match c.wait {
        Some(w) => format!("{:.0} cycles, {:.0} ns ({})", c.cycles, c.ns, w.name()),
        None => format!("{:.0} cycles, {:.0} ns", c.cycles, c.ns),
    };
    null.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// A part's share of the CPU time (user, kernel, spinning).
fn share(p: &Parts, part: impl Fn(&Parts) -> f64) -> f64 {
    let cpu = p.cpu_ns();
    if cpu > 0.0 {
        part(p) / cpu
    } else {
        0.0
    }
}

/// The most one kernel lock allows: the kernel's share of the work runs one thread at a time.
fn lock_ceiling(kernel_share: f64, n: u32) -> f64 {
    if kernel_share > 0.0 {
        f64::from(n).min(1.0 / kernel_share)
    } else {
        f64::from(n)
    }
}

fn spin(p: &Parts) -> f64 {
    p.lock_spin_ns + p.kernel_lock_spin_ns
}

/// `p`'s speedup against `baseline`: native on one CPU.
fn speedup(baseline: &Point, p: &Point) -> f64 {
    if p.wall_ns > 0 {
        baseline.wall_ns as f64 / p.wall_ns as f64
    } else {
        0.0
    }
}

fn report_text(measured: &[Measured], n: u32, amdahl: f64, kernel_share: f64, identical: bool) -> String {
    let mut out = String::from("KERNEL             CPUS     WALL ms  SPEEDUP   USER%  KERNEL%  SPIN%   NULL SYSCALL\n");
    let baseline = &measured[0].one;
    for m in measured {
        for (cpus, p) in [(1, &m.one), (n, &m.many)] {
            let sp = format!("{:.2}", speedup(baseline, p));
            let null = if cpus == 1 { null_text(&m.null) } else { String::new() };
            let _ = writeln!(
                out,
                "{:<18} {cpus:>4} {:>11.1} {sp:>8} {:>7.1} {:>8.1} {:>6.1}   {null}",
                m.name,
                p.wall_ns as f64 / 1e6,
                100.0 * share(&p.parts, |p| p.user_ns),
                100.0 * share(&p.parts, |p| p.kernel_ns),
                100.0 * share(&p.parts, spin),
            );
            if n == 1 {
                break;
            }
        }
    }
    let _ = writeln!(
        out,
        "note: SPEEDUP is against native on 1 CPU, for every kernel (the thesis's baseline); USER, KERNEL and SPIN are shares of the threads' CPU time (SPIN: waiting for a lock in user space, the emulated kernel's lock included); each run recorded, so the probes' cost is in both kernels' times"
    );
    if n > 1 {
        let ceiling = lock_ceiling(kernel_share, n);
        let _ = writeln!(
            out,
            "Amdahl on {n} CPUs with the kernel serial against everything (its native 1-CPU share {:.1}%; the thesis's model): {amdahl:.2}; one kernel lock caps the speedup at min({n}, 1/share) = {ceiling:.2}",
            100.0 * kernel_share,
        );
        for m in measured.iter().filter(|m| m.name == Kernel::GiantLock.name()) {
            let got = speedup(baseline, &m.many);
            if got > ceiling * 1.1 {
                let _ = writeln!(
                    out,
                    "warning: {}'s speedup {got:.2} on {n} CPUs is above the {ceiling:.2} one kernel lock allows: the emulation holds its lock over the system calls that do not sleep, and the kernel time the ceiling counts beyond them (page faults, calls that sleep, which drop the lock) ran in parallel",
                    m.name
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "output: {} (the whole standard output of each run against native's on as many CPUs; a program that prints its own timings differs by them)",
        if identical { "identical under both kernels" } else { "DIFFERS" }
    );
    for m in measured.iter().filter(|m| m.many.forwarded > 0 || m.many.proxy_failed) {
        let _ = writeln!(
            out,
            "{}: on {n} CPU{} {} system calls made by the proxies (a round trip of {:.0} ns on average, {:.0} ns of it in the call), {} by the threads themselves (calls about the calling thread: exit, clone, its signal mask, ...; a signal handler's call during a forwarded one){}",
            m.name,
            if n == 1 { "" } else { "s" },
            m.many.forwarded,
            m.many.round_trip_ns / m.many.forwarded.max(1) as f64,
            m.many.proxy_ns / m.many.forwarded.max(1) as f64,
            m.many.in_place,
            if m.many.proxy_failed { "; WARNING: a thread could not get a proxy and made its calls itself" } else { "" }
        );
    }
    if measured.iter().any(|m| m.null.len() > 1) {
        let _ = writeln!(out, "note: app-kernel's KERNEL is its threads' wait for their proxies' results (spinning; asleep under futex it is blocked time, in no column); its null system call is measured on {} CPU{} (proxy and caller apart where there are two), under both ways of waiting", n.min(2), if n == 1 { "" } else { "s" });
    }
    if measured.iter().any(|m| m.one.gave_up || m.many.gave_up) {
        let _ = writeln!(out, "warning: a thread went on without the emulated lock after spinning 2 s for it (its holder slept in a call taken for one that cannot): the emulation is incomplete");
    }
    out
}

fn report_json(measured: &[Measured], n: u32, amdahl: f64, kernel_share: f64, identical: bool) -> Value {
    let mut out = Map::new();
    let baseline = &measured[0].one;
    for m in measured {
        let entry = |p: &Point| {
            let mut v = crate::breakdown::parts_json(&p.parts);
            v.insert("wall_ns".into(), p.wall_ns.into());
            v.insert("speedup".into(), speedup(baseline, p).into());
            v
        };
        let mut k = entry(&m.many);
        k.insert("cpus".into(), n.into());
        k.insert("speedup_self".into(), speedup(&m.one, &m.many).into());
        k.insert("null_syscall_ns".into(), m.null[0].ns.into());
        k.insert("null_syscall_cycles".into(), m.null[0].cycles.into());
        for c in &m.null {
            if let Some(w) = c.wait {
                k.insert(format!("null_syscall_ns_{}", w.name()), c.ns.into());
            }
        }
        if let Some(w) = m.null[0].wait {
            k.insert("proxy_wait".into(), w.name().into());
            k.insert("forwarded".into(), m.many.forwarded.into());
            k.insert("in_place".into(), m.many.in_place.into());
            k.insert("round_trip_ns".into(), m.many.round_trip_ns.into());
            k.insert("proxy_ns".into(), m.many.proxy_ns.into());
            k.insert("proxy_failed".into(), m.many.proxy_failed.into());
        }
        k.insert("one_cpu".into(), Value::Object(entry(&m.one)));
        k.insert("lock_given_up".into(), (m.one.gave_up || m.many.gave_up).into());
        out.insert(m.name.into(), Value::Object(k));
    }
    out.insert("amdahl_bound".into(), json!(if n > 1 { Some(amdahl) } else { None }));
    out.insert("lock_ceiling".into(), lock_ceiling(kernel_share, n).into());
    out.insert("kernel_share_one_cpu".into(), kernel_share.into());
    out.insert("output_identical".into(), identical.into());
    Value::Object(out)
}
