//! The thread view of a data file (`lopi report --threads`): each thread's life (who created
//! it with which start routine, when it began and ended), what it waited for (locks, joins,
//! system calls) and the thread calls it made, from its chunk and from the create calls'
//! records in its creator's tree (`lopi_rt_abi::lock_name`, [`Outcome::Started`]).
use crate::{DataFile, EndSeen};
use lopi_rt_abi::lock_name::{self, Kind, Op, Outcome, Role};
use lopi_rt_abi::syscall_name;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Calls of the thread functions a thread made.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ThreadCalls {
    pub create: u64,
    pub join: u64,
    pub detach: u64,
    pub exit: u64,
    pub setname: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadLife {
    pub pid: u32,
    pub tid: u32,
    /// Its name at its end (`pthread_setname_np`, or the name it inherited).
    pub name: String,
    /// The runtime address of its start routine, if its creation was recorded.
    pub start_routine: Option<u64>,
    pub created_by: Option<u32>,
    /// Return address of the `pthread_create` call.
    pub create_site: Option<u64>,
    /// From the earliest time in the record: its creation (the create call's return), else its
    /// first probe; its end.
    pub start_ns: f64,
    pub end_ns: f64,
    pub end_seen: EndSeen,
    /// Its waits, holds, system calls and timed calls still open at its end (their time up
    /// to it is in the figures below).
    pub open_calls: u64,
    /// Waiting in lock calls (acquisitions, semaphore, condition and barrier waits), of which
    /// blocked in `futex`.
    pub lock_wait_ns: f64,
    pub lock_blocked_ns: f64,
    /// The part of those waits in acquisitions of mutexes, rwlocks and spinlocks (not
    /// semaphore, condition or barrier waits), of which blocked in `futex`.
    pub acquire_wait_ns: f64,
    pub acquire_blocked_ns: f64,
    /// Waiting in `pthread_join` calls.
    pub join_wait_ns: f64,
    /// In probed system calls (with `--probe locks` alone: `futex` only).
    pub syscall_ns: f64,
    /// Spinning for an emulated kernel's lock (`lopi whatif`), and the waits that spun.
    pub kernel_lock_spin_ns: f64,
    pub kernel_lock_waits: u64,
    /// Off its CPU while it waited for an emulated kernel's lock (its waits yield): runnable,
    /// before the call's probed time, running nothing.
    pub kernel_lock_yield_ns: f64,
    /// A call went on without the emulated lock after spinning for it too long.
    pub kernel_lock_gave_up: bool,
    /// Under the emulated application kernel: calls its proxy made, calls it made itself, and
    /// whether it could not get a proxy.
    pub forwarded: u64,
    pub in_place: u64,
    /// The forwarded calls' round trips, and the proxy's time making them.
    pub round_trip_ns: f64,
    pub proxy_ns: f64,
    pub proxy_failed: bool,
    pub calls: ThreadCalls,
    /// The CPU time it used, read when it made the system call that ended it.
    pub cpu: Option<ThreadCpu>,
    /// Its chunk was found (a thread with no probe of its own is known only from its creation).
    pub recorded: bool,
}

impl ThreadLife {
    pub(crate) fn new(pid: u32, tid: u32, name: String, start_ns: f64, recorded: bool) -> ThreadLife {
        ThreadLife {
            pid,
            tid,
            name,
            start_routine: None,
            created_by: None,
            create_site: None,
            start_ns,
            end_ns: if recorded { 0.0 } else { start_ns },
            end_seen: EndSeen::LastProbe,
            open_calls: 0,
            lock_wait_ns: 0.0,
            lock_blocked_ns: 0.0,
            acquire_wait_ns: 0.0,
            acquire_blocked_ns: 0.0,
            join_wait_ns: 0.0,
            syscall_ns: 0.0,
            kernel_lock_spin_ns: 0.0,
            kernel_lock_yield_ns: 0.0,
            kernel_lock_waits: 0,
            kernel_lock_gave_up: false,
            forwarded: 0,
            in_place: 0,
            round_trip_ns: 0.0,
            proxy_ns: 0.0,
            proxy_failed: false,
            calls: ThreadCalls::default(),
            cpu: None,
            recorded,
        }
    }
}

/// A thread's CPU use over its life, as the kernel counted it.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct ThreadCpu {
    pub user_ns: f64,
    pub system_ns: f64,
    /// Runnable, waiting for a CPU.
    pub runq_wait_ns: f64,
    /// CPUs it was allowed to run on (0: unknown).
    pub allowed_cpus: u32,
}

impl ThreadCpu {
    /// The times in `end`, less those at the thread's first probe (`start`: its chunk's; the
    /// CPU time before it, mostly loading libraries, comes off user time first).
    fn of(end: &lopi_rt_abi::ThreadEnd, start: &lopi_rt_abi::ThreadEnd) -> Option<ThreadCpu> {
        let before = start.start_cpu_ns;
        let user = end.user_ns.saturating_sub(before);
        let system = end.system_ns.saturating_sub(before - (end.user_ns - user));
        (end.flags & lopi_rt_abi::THREAD_END_CPU != 0).then_some(ThreadCpu {
            user_ns: user as f64,
            system_ns: system as f64,
            runq_wait_ns: end.runq_wait_ns.saturating_sub(start.start_runq_ns) as f64,
            allowed_cpus: end.flags >> lopi_rt_abi::THREAD_END_CPUS_SHIFT,
        })
    }
}

/// A create call's record of the thread it started.
struct Creation {
    /// When the create returned.
    tsc: u64,
    by: u32,
    routine: Option<u64>,
    site: Option<u64>,
    tsc_hz: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Threads {
    /// By process, then by start.
    pub threads: Vec<ThreadLife>,
    pub calls: ThreadCalls,
}

impl Threads {
    pub fn from_data(data: &DataFile) -> Threads {
        let origin_tsc = data.threads.iter().map(|t| t.header.start_tsc).filter(|&t| t != 0).min().unwrap_or(0);
        let mut lives: BTreeMap<(u32, u32), ThreadLife> = BTreeMap::new();
        let mut created: HashMap<(u32, u32), Creation> = HashMap::new();
        let mut starts: HashMap<(u32, u32), lopi_rt_abi::ThreadEnd> = HashMap::new();
        for t in &data.threads {
            let h = &t.header;
            if h.tsc_hz == 0 {
                continue;
            }
            let ns = |ticks: u64| ticks as f64 * 1e9 / h.tsc_hz as f64;
            let life = lives.entry((h.pid, h.tid)).or_insert_with(|| ThreadLife::new(h.pid, h.tid, crate::timing::thread_name(h), f64::MAX, true));
            life.start_ns = life.start_ns.min(ns(h.start_tsc.saturating_sub(origin_tsc)));
            let end = ns(t.ended.tsc.saturating_sub(origin_tsc));
            if end >= life.end_ns {
                life.end_ns = end;
                life.end_seen = t.ended.seen;
            }
            life.open_calls += t.open.len() as u64;
            starts.insert((h.pid, h.tid), t.end);
            if let Some(cpu) = ThreadCpu::of(&t.end, &t.end) {
                life.cpu = Some(cpu);
            }
            life.kernel_lock_spin_ns += ns(t.kernel_lock.spin_ticks);
            life.kernel_lock_yield_ns += ns(t.kernel_lock.yield_ticks);
            life.kernel_lock_waits += u64::from(t.kernel_lock.waits & !lopi_rt_abi::KERNEL_LOCK_GAVE_UP);
            life.kernel_lock_gave_up |= t.kernel_lock.waits & lopi_rt_abi::KERNEL_LOCK_GAVE_UP != 0;
            life.forwarded += t.proxy.forwarded;
            life.in_place += t.proxy.in_place;
            life.round_trip_ns += ns(t.proxy.round_trip_ticks);
            life.proxy_ns += ns(t.proxy.proxy_ticks);
            life.proxy_failed |= t.proxy.failed != 0;
            life.syscall_ns += t.nodes.iter().filter(|n| syscall_name::decode(n.func).is_some()).map(|n| ns(n.ticks)).sum::<f64>();
            let futex_under = crate::locks::futex_ticks_under(&t.nodes);
            for (i, n) in t.nodes.iter().enumerate() {
                let Some(name) = lock_name::decode(n.func) else { continue };
                let parent = t.nodes.get(n.parent as usize);
                match (name.op, name.outcome) {
                    (_, Outcome::Hold) => {}
                    (Op::ThreadCreate, Outcome::Started) => {
                        // Under the create call's node (its address: the start routine), under its site.
                        let routine = parent.and_then(|p| lock_name::decode(p.func)).map(|p| p.addr);
                        let site = parent.and_then(|p| t.nodes.get(p.parent as usize)).and_then(|s| lock_name::decode_site(s.func));
                        created.insert((h.pid, name.addr as u32), Creation { tsc: n.max_ticks, by: h.tid, routine, site, tsc_hz: h.tsc_hz });
                    }
                    (op, _) if op.kind() == Kind::Thread => {
                        let c = &mut life.calls;
                        *match op {
                            Op::ThreadCreate => &mut c.create,
                            Op::ThreadJoin => &mut c.join,
                            Op::ThreadDetach => &mut c.detach,
                            Op::ThreadExit => &mut c.exit,
                            _ => &mut c.setname,
                        } += n.calls;
                        if op == Op::ThreadJoin {
                            life.join_wait_ns += ns(n.ticks);
                        }
                    }
                    (op, _) if matches!(op.role(), Role::Acquire { .. } | Role::Wait { .. }) => {
                        let blocked = ns(futex_under.get(&i).copied().unwrap_or(0));
                        life.lock_wait_ns += ns(n.ticks);
                        life.lock_blocked_ns += blocked;
                        if matches!(op.role(), Role::Acquire { .. }) {
                            life.acquire_wait_ns += ns(n.ticks);
                            life.acquire_blocked_ns += blocked;
                        }
                    }
                    _ => {}
                }
            }
        }
        // A thread with no chunk of its own is known by the name its process's end recorded.
        let names: HashMap<(u32, u32), &str> = data.names.iter().map(|n| ((n.pid, n.tid), n.name.as_str())).collect();
        for ((pid, tid), c) in created {
            let start = (c.tsc.saturating_sub(origin_tsc)) as f64 * 1e9 / c.tsc_hz as f64;
            let name = names.get(&(pid, tid)).map_or_else(String::new, |n| n.to_string());
            let life = lives.entry((pid, tid)).or_insert_with(|| ThreadLife::new(pid, tid, name, start, false));
            life.start_routine = c.routine;
            life.created_by = Some(c.by);
            life.create_site = c.site;
            life.start_ns = life.start_ns.min(start);
        }
        // Threads an exit_group ended: their times, recorded by that call.
        for e in &data.ended_cpus {
            let start = starts.get(&(e.pid, e.tid)).copied().unwrap_or_default();
            if let (Some(life), Some(cpu)) = (lives.get_mut(&(e.pid, e.tid)), ThreadCpu::of(&e.end, &start)) {
                life.cpu.get_or_insert(cpu);
            }
        }
        let mut out = Threads::default();
        for life in lives.into_values() {
            let c = &mut out.calls;
            c.create += life.calls.create;
            c.join += life.calls.join;
            c.detach += life.calls.detach;
            c.exit += life.calls.exit;
            c.setname += life.calls.setname;
            out.threads.push(life);
        }
        out.threads.sort_by(|a, b| a.pid.cmp(&b.pid).then(a.start_ns.total_cmp(&b.start_ns)).then(a.tid.cmp(&b.tid)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::ThreadCpu;
    use lopi_rt_abi::{ThreadEnd, THREAD_END_CPU};

    #[test]
    fn cpu_time_before_the_first_probe_comes_off_user_time_first() {
        let end = ThreadEnd { flags: THREAD_END_CPU | 2 << 16, user_ns: 100, system_ns: 50, runq_wait_ns: 9, ..ThreadEnd::default() };
        let at = |cpu, runq| ThreadEnd { start_cpu_ns: cpu, start_runq_ns: runq, ..ThreadEnd::default() };
        let cpu = ThreadCpu::of(&end, &at(30, 4)).unwrap();
        assert_eq!((cpu.user_ns, cpu.system_ns, cpu.runq_wait_ns, cpu.allowed_cpus), (70.0, 50.0, 5.0, 2));
        let cpu = ThreadCpu::of(&end, &at(120, 0)).unwrap();
        assert_eq!((cpu.user_ns, cpu.system_ns), (0.0, 30.0));
        assert!(ThreadCpu::of(&ThreadEnd::default(), &at(0, 0)).is_none());
    }
}
