//! The multiprocessor breakdown (`lopi report --breakdown`), the thesis's Table 3.1 view: where
//! each thread's wall time went (user CPU, kernel CPU, blocked in system calls, waiting for a
//! lock, spinning or blocked, and the rest), summed over threads, and the speedup it allows.
//!
//! The parts come from the thread view ([`Threads`]): what the kernel counted for the thread
//! when it ended (CPU time, time runnable on a run queue) and the probes' wall times in system
//! calls and lock calls. The kernel's split of CPU time into user and system comes from timer
//! ticks, a few points off over a second; their sum, the run-queue time and the probes' times
//! are exact, so the parts are built from those and made disjoint, adding up to the wall time:
//!
//! ```text
//! cpu             = user + system CPU          runnable = time on a run queue
//! asleep          = wall - cpu - runnable      (off the CPU and not runnable)
//! in_calls_asleep = min(asleep, system-call time)
//! lock_blocked    = min(futex time inside acquisitions, in_calls_asleep)
//! syscall_blocked = in_calls_asleep - lock_blocked
//! lock_spin       = acquisition wait - futex time inside it   (CPU, spinning)
//! kernel_lock_spin = spinning for an emulated kernel's lock (`lopi whatif`; CPU, outside
//!                   the system calls' probed time)
//! yielded         = an emulated kernel's lock waits off the CPU (runnable, before the calls)
//! kernel          = (system-call time - in_calls_asleep) * cpu / (cpu + runnable - yielded),
//!                   within cpu - lock_spin (the kernel's system CPU when no system call was probed)
//! user            = cpu - lock_spin - kernel_lock_spin - kernel
//! other           = wall - all of the above    (runnable, asleep outside system calls)
//! ```
//!
//! A thread that shares its CPU is preempted where the scheduler's tick finds it, in user
//! space or in a system call (at its return), so its run-queue time falls inside system calls
//! in proportion to the CPU time spent there: the probes' system-call time on the CPU is
//! scaled by `cpu / (cpu + runnable)`. Kernel work outside system calls (page faults,
//! interrupts) then counts as user time.
//!
//! Condition, semaphore, barrier and join waits are blocking, not lock contention: their
//! `futex` time is in `syscall_blocked`.
use crate::threads::{ThreadLife, Threads};
use serde::Serialize;

/// One thread's (or the sum's) wall time in parts, in ns.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Parts {
    pub wall_ns: f64,
    pub user_ns: f64,
    pub kernel_ns: f64,
    pub syscall_blocked_ns: f64,
    /// Acquisition wait: `lock_spin_ns + lock_blocked_ns`.
    pub lock_wait_ns: f64,
    pub lock_spin_ns: f64,
    pub lock_blocked_ns: f64,
    /// Spinning for an emulated kernel's lock (`lopi whatif`).
    pub kernel_lock_spin_ns: f64,
    pub other_ns: f64,
    /// Runnable, waiting for a CPU, anywhere (informational: inside the other parts).
    pub runnable_ns: f64,
}

impl Parts {
    fn add(&mut self, o: &Parts) {
        self.wall_ns += o.wall_ns;
        self.user_ns += o.user_ns;
        self.kernel_ns += o.kernel_ns;
        self.syscall_blocked_ns += o.syscall_blocked_ns;
        self.lock_wait_ns += o.lock_wait_ns;
        self.lock_spin_ns += o.lock_spin_ns;
        self.lock_blocked_ns += o.lock_blocked_ns;
        self.kernel_lock_spin_ns += o.kernel_lock_spin_ns;
        self.other_ns += o.other_ns;
        self.runnable_ns += o.runnable_ns;
    }

    /// CPU time: user, kernel and spinning.
    pub fn cpu_ns(&self) -> f64 {
        self.user_ns + self.kernel_ns + self.lock_spin_ns + self.kernel_lock_spin_ns
    }

    /// The measured parts other than `other`.
    fn measured_ns(&self) -> f64 {
        self.user_ns + self.kernel_ns + self.syscall_blocked_ns + self.lock_wait_ns + self.kernel_lock_spin_ns
    }

    /// What the measured parts exceed the wall time by (clock and accounting granularity; 0
    /// when they fit, as they should).
    fn excess_ns(&self) -> f64 {
        (self.measured_ns() - self.wall_ns).max(0.0)
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadBreakdown {
    pub pid: u32,
    pub tid: u32,
    /// None when its CPU times are unknown: it did not end by a probed `exit`/`exit_group`
    /// of its own (another thread's `exit_group` ended it).
    pub parts: Option<Parts>,
    /// Parts beyond the wall time, in ns (taken out of `other`, which cannot go below 0).
    pub excess_ns: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Breakdown {
    pub threads: Vec<ThreadBreakdown>,
    /// Sums over the threads whose CPU times are known.
    pub total: Parts,
    /// Wall time of the processes: first thread start to last thread end.
    pub process_wall_ns: f64,
    /// CPUs the threads could run on (their affinity at their end; the most seen).
    pub cpus: u32,
    /// CPU time over process wall time: how many CPUs the program kept busy on average (less
    /// than it could use when other work took CPUs: see `runnable_ns`).
    pub average_parallelism: f64,
    /// The serial fraction that parallelism implies on `cpus` CPUs (Karp-Flatt); None on one
    /// CPU, where no run can tell serial from parallel work.
    pub serial_fraction: Option<f64>,
    /// Threads whose CPU times are unknown.
    pub unknown_cpu: usize,
}

/// The parts of one thread's life, if its CPU times are known, and by how much the measured
/// parts exceeded its wall time.
pub fn thread_parts(t: &ThreadLife) -> Option<(Parts, f64)> {
    let c = t.cpu?;
    let wall = (t.end_ns - t.start_ns).max(0.0);
    let cpu = c.user_ns + c.system_ns;
    let asleep = (wall - cpu - c.runq_wait_ns).max(0.0);
    let in_calls_asleep = asleep.min(t.syscall_ns);
    let lock_blocked = t.acquire_blocked_ns.min(t.acquire_wait_ns).min(in_calls_asleep);
    let lock_spin = (t.acquire_wait_ns - t.acquire_blocked_ns).max(0.0).min(cpu);
    let in_calls_awake = t.syscall_ns - in_calls_asleep;
    let kernel_lock_spin = t.kernel_lock_spin_ns.min(cpu - lock_spin);
    // The CPU time in system calls: their awake time at the thread's share of the CPU while
    // runnable. An emulated kernel lock's waits yield to its holder before the call's probed
    // time starts: that time on a run queue is not spread over user code and calls as
    // preemption is, so it does not dilute the share.
    let yielded = t.kernel_lock_yield_ns.min(c.runq_wait_ns);
    let kernel = if in_calls_awake > 0.0 { in_calls_awake * cpu / (cpu + c.runq_wait_ns - yielded) } else { c.system_ns }.min(cpu - lock_spin - kernel_lock_spin);
    let mut p = Parts {
        wall_ns: wall,
        user_ns: cpu - lock_spin - kernel_lock_spin - kernel,
        kernel_ns: kernel,
        syscall_blocked_ns: in_calls_asleep - lock_blocked,
        lock_wait_ns: lock_spin + lock_blocked,
        lock_spin_ns: lock_spin,
        lock_blocked_ns: lock_blocked,
        kernel_lock_spin_ns: kernel_lock_spin,
        other_ns: 0.0,
        runnable_ns: c.runq_wait_ns,
    };
    let excess = p.excess_ns();
    p.other_ns = (wall - p.measured_ns()).max(0.0);
    Some((p, excess))
}

impl Breakdown {
    pub fn from_threads(threads: &Threads) -> Breakdown {
        let mut total = Parts::default();
        let mut cpus = 0;
        let mut unknown_cpu = 0;
        let list: Vec<ThreadBreakdown> = threads
            .threads
            .iter()
            .map(|t| {
                let measured = thread_parts(t);
                match (&measured, t.cpu) {
                    (Some((p, _)), Some(c)) => {
                        total.add(p);
                        cpus = cpus.max(c.allowed_cpus);
                    }
                    _ => unknown_cpu += 1,
                }
                ThreadBreakdown { pid: t.pid, tid: t.tid, excess_ns: measured.map_or(0.0, |m| m.1), parts: measured.map(|m| m.0) }
            })
            .collect();
        let start = threads.threads.iter().map(|t| t.start_ns).fold(f64::MAX, f64::min);
        let end = threads.threads.iter().map(|t| t.end_ns).fold(0.0, f64::max);
        let process_wall_ns = if end > start { end - start } else { 0.0 };
        let average_parallelism = if process_wall_ns > 0.0 { total.cpu_ns() / process_wall_ns } else { 0.0 };
        let serial_fraction = (cpus > 1 && average_parallelism > 0.0).then(|| {
            let p = f64::from(cpus);
            ((1.0 / average_parallelism - 1.0 / p) / (1.0 - 1.0 / p)).clamp(0.0, 1.0)
        });
        Breakdown { threads: list, total, process_wall_ns, cpus, average_parallelism, serial_fraction, unknown_cpu }
    }

    /// The serial fraction and where it comes from: the parallelism profile, when one was
    /// sampled (what the threads offered), else Karp-Flatt from their CPU time over the wall
    /// time (what they got, which one CPU or other work on the machine holds down).
    pub fn serial(&self, profile: Option<&crate::Parallelism>) -> Option<(f64, &'static str)> {
        let profiled = profile.and_then(|p| profile_serial_fraction(p, self.cpus.max(1)));
        profiled.map(|s| (s, "parallelism profile")).or(self.serial_fraction.map(|s| (s, "Karp-Flatt")))
    }
}

/// Fewest samples with a thread ready for a serial fraction from a parallelism profile.
const PROFILE_MIN_SAMPLES: u64 = 20;

/// The serial fraction of the work a parallelism profile shows, on `cpus` CPUs: the time only
/// one thread was ready, over all the work done while any was (an interval with `k` threads
/// ready did `min(k, cpus)` CPUs' worth). Unlike Karp-Flatt from the CPU time, it counts the
/// parallelism the program offered, which a machine busy with other work (or one CPU) did not
/// let it use. None with too few samples.
pub fn profile_serial_fraction(p: &crate::Parallelism, cpus: u32) -> Option<f64> {
    let busy: u64 = p.counts.iter().skip(1).sum();
    if busy < PROFILE_MIN_SAMPLES || cpus == 0 {
        return None;
    }
    let work: f64 = p.counts.iter().enumerate().skip(1).map(|(k, &c)| c as f64 * k.min(cpus as usize) as f64).sum();
    Some(p.counts[1] as f64 / work)
}

/// Amdahl's bound on speedup with `serial` of the work serial, on `cpus` CPUs.
pub fn amdahl(serial: f64, cpus: f64) -> f64 {
    1.0 / (serial + (1.0 - serial) / cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::ThreadCpu;

    fn life(wall: f64, user: f64, system: f64, syscall: f64, acquire: f64, acquire_blocked: f64) -> ThreadLife {
        let mut t = ThreadLife::new(1, 1, String::new(), 0.0, true);
        t.end_ns = wall;
        t.syscall_ns = syscall;
        t.acquire_wait_ns = acquire;
        t.acquire_blocked_ns = acquire_blocked;
        t.cpu = Some(ThreadCpu { user_ns: user, system_ns: system, runq_wait_ns: 0.0, allowed_cpus: 2 });
        t
    }

    #[test]
    fn parts_add_up_to_the_wall_time() {
        // 100 ms: 50 user by the kernel's ticks (10 of it spinning for a lock), 20 system, 5
        // runnable; 40 in system calls, 5 of it asleep in a lock's futex; 15 waiting for locks.
        let mut t = life(100.0, 50.0, 20.0, 40.0, 15.0, 5.0);
        t.cpu.as_mut().unwrap().runq_wait_ns = 5.0;
        let (p, excess) = thread_parts(&t).unwrap();
        // Asleep: 100 - 70 - 5 = 25, all in system calls; 5 of it in the lock's futex.
        assert_eq!((p.lock_spin_ns, p.lock_blocked_ns, p.lock_wait_ns), (10.0, 5.0, 15.0));
        assert_eq!(p.syscall_blocked_ns, 20.0);
        // System-call time awake (40 - 25 = 15), of which runnable in proportion: 15 * 70 / 75.
        assert_eq!((p.kernel_ns, p.user_ns), (14.0, 46.0));
        assert_eq!(p.other_ns, 5.0);
        assert_eq!(excess, 0.0);
        let sum = p.user_ns + p.kernel_ns + p.syscall_blocked_ns + p.lock_wait_ns + p.other_ns;
        assert!((sum - p.wall_ns).abs() < 1e-9);
    }

    #[test]
    fn a_cpu_bound_system_call_is_kernel_time_whatever_the_ticks_said() {
        // 1 s on the CPU, 350 ms of it in system calls that never sleep; the ticks said 300.
        let (p, _) = thread_parts(&life(1000.0, 700.0, 300.0, 350.0, 0.0, 0.0)).unwrap();
        assert_eq!((p.user_ns, p.kernel_ns, p.syscall_blocked_ns, p.other_ns), (650.0, 350.0, 0.0, 0.0));
    }

    #[test]
    fn a_preempted_thread_waits_inside_system_calls_in_proportion() {
        // 1000 ms on the CPU, 360 of it in system calls; 500 runnable, 180 of which at the
        // end of a system call: the probes saw 540 in system calls.
        let mut t = life(1500.0, 700.0, 300.0, 540.0, 0.0, 0.0);
        t.cpu.as_mut().unwrap().runq_wait_ns = 500.0;
        let (p, _) = thread_parts(&t).unwrap();
        assert!((p.kernel_ns - 360.0).abs() < 1e-9 && (p.user_ns - 640.0).abs() < 1e-9, "{p:?}");
        assert_eq!(p.other_ns, 500.0);
    }

    #[test]
    fn serial_fraction_from_a_parallelism_profile() {
        // 60 samples with one thread ready, 30 with two, 10 with none: on 2 CPUs the work is
        // 60 + 2 x 30 = 120, of which 60 serial; on one CPU 60 + 30 = 90.
        let p = crate::Parallelism { interval_ns: 1_000_000, counts: vec![10, 60, 30] };
        assert_eq!(profile_serial_fraction(&p, 2), Some(0.5));
        assert_eq!(profile_serial_fraction(&p, 1), Some(60.0 / 90.0));
        let few = crate::Parallelism { interval_ns: 1_000_000, counts: vec![100, 10, 5] };
        assert_eq!(profile_serial_fraction(&few, 2), None, "15 samples with a thread ready are too few");
    }

    #[test]
    fn serial_fraction_from_average_parallelism() {
        let threads = Threads { threads: vec![life(100.0, 60.0, 40.0, 40.0, 0.0, 0.0), life(100.0, 60.0, 40.0, 40.0, 0.0, 0.0)], ..Threads::default() };
        let b = Breakdown::from_threads(&threads);
        assert_eq!(b.cpus, 2);
        assert!((b.average_parallelism - 2.0).abs() < 1e-9);
        assert_eq!(b.serial_fraction, Some(0.0));
        assert!((amdahl(0.36, 2.0) - 1.4706).abs() < 1e-4);
    }
}
