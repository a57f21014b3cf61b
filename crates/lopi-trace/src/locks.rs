//! The lock view of a data file (`lopi report --locks`): per lock, per call site and per
//! thread, from the lock nodes of the threads' calling-context trees (`lopi_rt_abi::lock_name`:
//! a site node, the call's return address, over a node per operation and outcome; holds are
//! nodes of their own). Time blocked in the kernel is the `futex` calls under a lock call;
//! the rest of its wait was spent in user space (spinning, or the call's own work).
use crate::DataFile;
use lopi_rt_abi::lock_name::{self, Kind, Op, Outcome, Role};
use lopi_rt_abi::syscall_name;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

const FUTEX: u64 = 202;

/// What happened to one lock (or to it at one site, or in one thread).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LockCounts {
    /// Successful acquisitions: lock calls (a robust mutex's `EOWNERDEAD` included),
    /// semaphore waits, woken condition waits, barrier waits; plus the relocks of condition
    /// waits for a mutex.
    pub acquisitions: u64,
    /// Of those, the ones that found the lock taken on arrival.
    pub contended: u64,
    /// Call to return of the acquiring calls (failed ones included), and the longest.
    pub wait_ns: f64,
    pub max_wait_ns: f64,
    /// Of `wait_ns`, time blocked in `futex`.
    pub blocked_ns: f64,
    /// Acquisition to release.
    pub hold_ns: f64,
    pub max_hold_ns: f64,
    /// Rwlocks: acquisitions and holds by mode.
    pub read: u64,
    pub write: u64,
    pub read_hold_ns: f64,
    pub write_hold_ns: f64,
    /// Recursive relocks by the owner (in `acquisitions`).
    pub nested: u64,
    pub trylock_failed: u64,
    pub timeouts: u64,
    /// `EDEADLK`, `EPERM` (also of unlocks), `EOWNERDEAD`, others.
    pub errors: u64,
    pub releases: u64,
    pub posts: u64,
    /// Condition variables: all wait calls; `pthread_cond_signal`/`_broadcast` calls.
    pub waits: u64,
    pub signals: u64,
    pub broadcasts: u64,
    /// Barriers: `PTHREAD_BARRIER_SERIAL_THREAD` returns.
    pub serial: u64,
    /// Calls (acquisitions, waits) still waiting, and locks still held, when their thread's
    /// recording ended: their time up to then is in `wait_ns` and `hold_ns`; they count in
    /// `waits` but not in `acquisitions`.
    pub open_waits: u64,
    pub open_holds: u64,
}

/// One lock: its address in the process that used it, and what it went through.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LockStats {
    pub addr: u64,
    pub kind: &'static str,
    /// Processes that used it (a forked child shares its parent's addresses).
    pub pids: Vec<u32>,
    #[serde(flatten)]
    pub counts: LockCounts,
    /// By the return address of the calls (the acquiring calls' for holds).
    pub sites: Vec<LockSite>,
    pub threads: Vec<LockThread>,
    /// Return address of a `pthread_*_init` call that initialised it, if one was seen.
    pub init_site: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LockSite {
    pub pid: u32,
    /// Return address of the calls.
    pub ret: u64,
    /// `read`/`write` for a rwlock site whose calls all took one mode.
    pub mode: Option<&'static str>,
    #[serde(flatten)]
    pub counts: LockCounts,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LockThread {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    #[serde(flatten)]
    pub counts: LockCounts,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Locks {
    /// Most waited for first.
    pub locks: Vec<LockStats>,
    /// Releases of locks with no acquisition seen in the releasing thread.
    pub orphan_releases: u64,
    /// Holds not timed: a thread held more locks at once than its table keeps.
    pub holds_dropped: u64,
}

impl LockCounts {
    /// Adds a node of `op` that ended with `outcome`: `calls` (`open` of them still open at
    /// the end), `ticks` in all, `max` the longest; `blocked` of them in `futex`.
    #[allow(clippy::too_many_arguments)]
    fn add(&mut self, op: Op, outcome: Outcome, all: u64, open: u64, ticks: f64, max: f64, blocked: f64) {
        // What happened is known of the calls that ended.
        let calls = all.saturating_sub(open);
        if outcome == Outcome::Hold {
            self.open_holds += open;
            self.hold_ns += ticks;
            self.max_hold_ns = self.max_hold_ns.max(max);
            if op.kind() == Kind::RwLock {
                match op.role() {
                    Role::Acquire { read: true, .. } => self.read_hold_ns += ticks,
                    _ => self.write_hold_ns += ticks,
                }
            }
            return;
        }
        if op == Op::CondRelock {
            self.acquisitions += calls;
            return;
        }
        match outcome {
            Outcome::Busy => self.trylock_failed += calls,
            Outcome::TimedOut => self.timeouts += calls,
            Outcome::Deadlock | Outcome::NotOwner | Outcome::OwnerDead | Outcome::OtherError => self.errors += calls,
            _ => {}
        }
        let waited = |s: &mut Self| {
            s.wait_ns += ticks;
            s.max_wait_ns = s.max_wait_ns.max(max);
            s.blocked_ns += blocked;
            s.open_waits += open;
        };
        match (op.kind(), op.role()) {
            (_, Role::Acquire { read, .. }) => {
                waited(self);
                if outcome.acquired() {
                    self.acquisitions += calls;
                    if op.kind() == Kind::RwLock {
                        *if read { &mut self.read } else { &mut self.write } += calls;
                    }
                }
                self.contended += if outcome == Outcome::Contended { calls } else { 0 };
                self.nested += if outcome == Outcome::Nested { calls } else { 0 };
            }
            (Kind::Cond, Role::Wait { .. }) => {
                waited(self);
                self.waits += all;
                if outcome.acquired() {
                    self.acquisitions += calls;
                }
            }
            (_, Role::Wait { .. }) => {
                waited(self);
                if outcome.acquired() || outcome == Outcome::Serial {
                    self.acquisitions += calls;
                }
                self.contended += if outcome == Outcome::Contended { calls } else { 0 };
                self.serial += if outcome == Outcome::Serial { calls } else { 0 };
            }
            (_, Role::Release) => self.releases += calls,
            (Kind::Semaphore, Role::Wake) => self.posts += calls,
            (_, Role::Wake) if op == Op::CondBroadcast => self.broadcasts += calls,
            (_, Role::Wake) => self.signals += calls,
            (_, Role::Init | Role::Life) => {}
        }
    }
}

impl Locks {
    pub fn from_data(data: &DataFile) -> Locks {
        let mut out = Locks::default();
        let mut by_lock: BTreeMap<(u64, Kind), LockStats> = BTreeMap::new();
        for t in &data.threads {
            let h = &t.header;
            out.orphan_releases += h.orphan_releases;
            out.holds_dropped += h.holds_dropped;
            let ns = |ticks: u64| if h.tsc_hz == 0 { 0.0 } else { ticks as f64 * 1e9 / h.tsc_hz as f64 };
            let blocked = futex_ticks_under(&t.nodes);
            let open = t.open_by_node();
            let name = crate::timing::thread_name(h);
            for (i, n) in t.nodes.iter().enumerate() {
                let Some(lock) = lock_name::decode(n.func).filter(|l| l.op.kind() != Kind::Thread) else { continue };
                let ret = t.nodes.get(n.parent as usize).and_then(|p| lock_name::decode_site(p.func)).unwrap_or(0);
                let kind = lock.op.kind();
                let stats = by_lock.entry((lock.addr, kind)).or_insert_with(|| LockStats {
                    addr: lock.addr,
                    kind: kind.name(),
                    pids: Vec::new(),
                    counts: LockCounts::default(),
                    sites: Vec::new(),
                    threads: Vec::new(),
                    init_site: None,
                });
                if !stats.pids.contains(&h.pid) {
                    stats.pids.push(h.pid);
                }
                if lock.op.role() == Role::Init {
                    stats.init_site.get_or_insert(ret);
                }
                let open = open.get(&(i as u32)).copied().unwrap_or(0);
                let args = (lock.op, lock.outcome, n.calls, open, ns(n.ticks), ns(n.max_ticks), ns(blocked.get(&i).copied().unwrap_or(0)));
                let add = |c: &mut LockCounts| c.add(args.0, args.1, args.2, args.3, args.4, args.5, args.6);
                add(&mut stats.counts);
                let site = find_or_add(&mut stats.sites, |s| s.pid == h.pid && s.ret == ret, || LockSite { pid: h.pid, ret, mode: None, counts: LockCounts::default() });
                add(&mut site.counts);
                let thread = find_or_add(&mut stats.threads, |x| x.pid == h.pid && x.tid == h.tid, || LockThread { pid: h.pid, tid: h.tid, name: name.clone(), counts: LockCounts::default() });
                add(&mut thread.counts);
            }
        }
        out.locks = by_lock.into_values().collect();
        for lock in &mut out.locks {
            for site in &mut lock.sites {
                site.mode = match (site.counts.read, site.counts.write) {
                    (0, 0) => None,
                    (_, 0) => Some("read"),
                    (0, _) => Some("write"),
                    _ => None,
                };
            }
            lock.sites.retain(|s| s.counts != LockCounts::default());
            lock.sites.sort_by(|a, b| b.counts.wait_ns.total_cmp(&a.counts.wait_ns).then(b.counts.acquisitions.cmp(&a.counts.acquisitions)));
            lock.threads.sort_by_key(|t| (t.pid, t.tid));
        }
        out.locks.sort_by(|a, b| b.counts.wait_ns.total_cmp(&a.counts.wait_ns).then(a.addr.cmp(&b.addr)));
        out
    }
}

/// Ticks in `futex` calls under each node (a lock call's time blocked in the kernel).
pub(crate) fn futex_ticks_under(nodes: &[lopi_rt_abi::ContextNode]) -> HashMap<usize, u64> {
    let mut under: HashMap<usize, u64> = HashMap::new();
    for n in nodes {
        if syscall_name::decode(n.func).is_some_and(|s| s.nr == FUTEX) {
            *under.entry(n.parent as usize).or_default() += n.ticks;
        }
    }
    under
}

/// The entry of `list` that `is` picks, added by `make` when there is none.
fn find_or_add<T>(list: &mut Vec<T>, is: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> &mut T {
    let k = match list.iter().position(is) {
        Some(k) => k,
        None => {
            list.push(make());
            list.len() - 1
        }
    };
    &mut list[k]
}
