//! Per-thread timing state in a data file: thread chunks, and the extensions they grow into.
//!
//! A thread's first timed probe appends a chunk (header page, calling-context tree, hash
//! table, shadow stack, trace). When the tree or the stack is full, the thread appends an
//! extension twice as large, copies the region there and points its header at it; readers
//! follow the header's file offsets. Only the thread itself writes its chunk and extensions.
use super::fields::Fields;
use super::BUDGET_STATE;
use super::PAGE_SIZE;

/// First bytes of a thread chunk.
pub const THREAD_MAGIC: [u8; 8] = *b"LOPITHR3";

/// First bytes of an extension (a grown tree or stack of some thread chunk). Readers skip it:
/// the owning chunk's header says where its regions are.
pub const EXTENSION_MAGIC: [u8; 8] = *b"LOPIEXT1";

/// Header of a thread chunk (first page of the chunk). Up to `hot`, fields are written when
/// the chunk is created or when a region moves; from `busy` on, the thread's hot state.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadHeader {
    pub magic: [u8; 8],
    /// Whole chunk length, a multiple of `PAGE_SIZE`.
    pub chunk_len: u64,
    pub pid: u32,
    pub tid: u32,
    /// Pid whose module records describe the addresses in this chunk (the parent, after fork).
    pub space_pid: u32,
    /// Call paths stop at this many nodes (the memory bound); merged nodes, one per function,
    /// may go beyond it.
    pub node_limit: u32,
    pub tsc_hz: u64,
    pub probe_inner_ticks: u64,
    pub probe_pair_ticks: u64,
    /// Most frames the shadow stack may grow to.
    pub stack_limit: u32,
    /// `--log`: where in the trace (slot + 1) the logged call a `vfork` child is making begins,
    /// for its result; 0: none.
    pub vfork_log: u32,
    pub trace_cap: u64,
    /// Offset of the trace from the chunk start (the trace never moves).
    pub trace_offset: u64,
    /// TSC when the chunk was created.
    pub start_tsc: u64,
    /// Where the probes find the node array, hash table and shadow stack: offsets from the
    /// chunk's address in memory (wrapping: an extension may be mapped below the chunk).
    pub nodes_offset: u64,
    pub hash_offset: u64,
    pub stack_offset: u64,
    /// Where readers find the node array and the shadow stack: offsets in the data file.
    /// Written before the capacities when a region moves, so that a reader never pairs a
    /// region with a capacity larger than its own.
    pub nodes_file: u64,
    pub stack_file: u64,
    pub node_cap: u32,
    pub stack_cap: u32,
    /// The thread's name (`comm`, NUL-padded) when its chunk was made, and again after each
    /// `prctl` it makes (`pthread_setname_np` of itself).
    pub comm: [u8; 16],
    /// Probe ticks inside a system call's interval, and what its probes add to its caller.
    pub syscall_inner_ticks: u64,
    pub syscall_pair_ticks: u64,
    /// Entries of the held-lock table (`--probe locks`).
    pub held_len: u32,
    /// Calls of functions the budget switched to counting while the calls ran: their exits
    /// are no longer probed, so their ends are unknown. Counted, not timed.
    pub switched_open: u32,
    /// Releases of locks with no acquisition in the table (taken before timing began, by
    /// another thread, or not recorded: the table was full).
    pub orphan_releases: u64,
    /// Acquisitions whose hold was not timed: the held-lock table was full.
    pub holds_dropped: u64,
    // --- the thread's hot state (offset 192) ---
    /// Non-zero while a probe of this thread runs (a signal handler's probes then skip).
    pub busy: u32,
    /// Frames on the shadow stack.
    pub depth: u32,
    /// Nodes in use (node 0 is the root, node 1 the parent of merged call paths).
    pub node_count: u32,
    /// Nodes in use when the first call path was merged (0: none was).
    pub merged_from: u32,
    pub trace_len: u64,
    /// Exits whose call has no frame although frames of calls begun earlier are open.
    pub unmatched_exits: u64,
    /// Exits of calls begun before this thread's timing started (before an attach, or
    /// before the module's init): no frame of theirs can exist.
    pub early_exits: u64,
    /// Calls not timed because the shadow stack was at its limit.
    pub too_deep: u64,
    pub nested_skipped: u64,
    pub trace_dropped: u64,
    pub first_drop_tsc: u64,
    /// TSC of the thread's latest probe: where frames still open at the end are closed.
    pub last_tsc: u64,
    /// Calls counted but not timed because even merged nodes did not fit.
    pub untimed_calls: u64,
    /// Ticks the probes spent beyond their usual cost (growing regions, slow paths, budget
    /// checks), taken out of every call open meanwhile: the thread's clock, in which frame
    /// starts, `last_tsc` and trace events are, is the TSC minus this.
    pub paused_ticks: u64,
    /// Exits whose clock read was before their entry's (a TSC step between CPUs): taken as 0.
    pub clock_backwards: u64,
    /// TSC at which the exit probe next runs the budget check (`u64::MAX`: never).
    pub next_check_tsc: u64,
    /// Entries in the unmatched-exit table.
    pub unmatched_len: u32,
    /// Functions this thread's budget checks switched to counting.
    pub switched: u32,
    /// Timed calls of functions that ended (system calls not counted), for the budget's
    /// checks (the tree's nodes hold them by path).
    pub timed_calls: u64,
    /// With sampled time (`--time sampled`), the thread's clock: the probes read it instead of
    /// the TSC, and each expiry of the thread's CPU-time timer advances it by `sample_ticks`,
    /// so that a call's time is the samples taken while it ran. 0 while the clock is the TSC.
    pub sample_clock: u64,
    /// TSC ticks a sample stands for (the timer's period); 0 with exact time.
    pub sample_ticks: u64,
    /// Samples taken: the timer's expiries (a signal brings several when the period is shorter
    /// than the kernel's tick, at which it checks CPU-time timers).
    pub samples: u64,
    /// The thread's timer (`timer_create`'s id), or -1; and the errno of its creation when it
    /// failed (the thread then has no samples), else 0.
    pub sample_timer: i32,
    pub sample_error: i32,
}

pub const THREAD_HEADER_LEN: usize = 352;
const _: () = assert!(core::mem::size_of::<ThreadHeader>() == THREAD_HEADER_LEN);
const _: () = assert!(core::mem::offset_of!(ThreadHeader, busy) == 192);

/// Offset in the header page of the table of locks the thread holds (`--probe locks`).
pub const HELD_TABLE: u64 = THREAD_HEADER_LEN as u64;
/// Entries of that table; a thread holding more locks at once does not time those holds.
pub const HELD_SLOTS: u32 = 26;

/// A lock the thread holds, or (with [`HELD_PENDING`]) the mutex of a condition wait in
/// progress, which the wait takes back before it returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldLock {
    pub addr: u64,
    /// Thread clock at the acquisition; for a pending entry, the wait's frame key.
    pub start: u64,
    /// The hold node its release adds to (a sibling of the acquiring call's node); 0 for a
    /// nested relock, whose release ends no hold, and for a pending entry.
    pub node: u32,
    /// The acquiring operation (`lock_name::Op`) in bits 0..8, `HELD_*` flags above.
    pub flags: u32,
}

pub const HELD_LOCK_LEN: usize = 24;
/// A recursive relock: its release ends no hold.
pub const HELD_NESTED: u32 = 1 << 8;
/// A condition wait's mutex, released while the wait is in progress.
pub const HELD_PENDING: u32 = 1 << 9;
const _: () = assert!(core::mem::size_of::<HeldLock>() == HELD_LOCK_LEN);

/// Offset in the header page of how the thread ended, when it made the system call that ends
/// it (`exit`, or `exit_group` for its whole process) under a probe.
pub const THREAD_END: u64 = HELD_TABLE + HELD_SLOTS as u64 * HELD_LOCK_LEN as u64;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadEnd {
    /// TSC of the call; 0: not seen.
    pub tsc: u64,
    /// The system call's number.
    pub nr: u32,
    /// `THREAD_END_CPU` when the CPU times below were read (`getrusage(RUSAGE_THREAD)`,
    /// `/proc/thread-self/schedstat`); above `THREAD_END_CPUS_SHIFT`, the number of CPUs the
    /// thread was allowed to run on (its affinity) then.
    pub flags: u32,
    /// CPU time of the thread in user space and in the kernel, in ns (the kernel keeps µs).
    pub user_ns: u64,
    pub system_ns: u64,
    /// Time it spent runnable, waiting for a CPU.
    pub runq_wait_ns: u64,
    /// Its CPU time (user and system) and run-queue time when its chunk was made (its first
    /// probe: a program's main thread has loaded libraries and started lopi's runtime by
    /// then), to be taken off the above.
    pub start_cpu_ns: u64,
    pub start_runq_ns: u64,
}

/// Offset in the header page of the thread's state in an emulated kernel (`lopi whatif`).
pub const KERNEL_LOCK_STATE: u64 = THREAD_END + THREAD_END_LEN as u64;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelLockState {
    /// The frame key of the system call `state` is about.
    pub key: u64,
    /// 0; 1 + lock while the call at `key` holds that lock; 1 + `LOCK_COUNT` + lock when that
    /// call (one that may sleep) takes and drops it on its return.
    pub state: u32,
    /// Acquisitions that found the lock taken; bit 31 ([`KERNEL_LOCK_GAVE_UP`]) once a call
    /// went on without the lock after spinning too long.
    pub waits: u32,
    /// Ticks spent spinning for the lock.
    pub spin_ticks: u64,
    /// Ticks the thread was off its CPU while it waited (its waits yield to the holder): it
    /// was runnable, before its system call's probed time, neither spinning nor running.
    pub yield_ticks: u64,
}

pub const KERNEL_LOCK_STATE_LEN: usize = 32;
pub const KERNEL_LOCK_GAVE_UP: u32 = 1 << 31;
const _: () = assert!(core::mem::size_of::<KernelLockState>() == KERNEL_LOCK_STATE_LEN);
const _: () = assert!(KERNEL_LOCK_STATE + KERNEL_LOCK_STATE_LEN as u64 <= UNMATCHED_TABLE);

impl KernelLockState {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..KERNEL_LOCK_STATE_LEN)?);
        Some(Self { key: f.u64(0), state: f.u32(8), waits: f.u32(12), spin_ticks: f.u64(16), yield_ticks: f.u64(24) })
    }
}

pub const THREAD_END_CPU: u32 = 1;
pub const THREAD_END_CPUS_SHIFT: u32 = 16;
pub const THREAD_END_LEN: usize = 56;
const _: () = assert!(core::mem::size_of::<ThreadEnd>() == THREAD_END_LEN);
const _: () = assert!(THREAD_END + THREAD_END_LEN as u64 <= UNMATCHED_TABLE);

/// Offset in the header page of the table of unmatched exits by function.
pub const UNMATCHED_TABLE: u64 = 1088;
/// Entries of that table; exits of further functions are only counted.
pub const UNMATCHED_SLOTS: u32 = 64;

/// Exits of one function that matched no frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnmatchedExit {
    /// The function's counter address (its name in the tree); 0 when the exit site is shared
    /// by several functions and the probe cannot tell which one exited.
    pub func: u64,
    pub count: u64,
}

pub const UNMATCHED_EXIT_LEN: usize = 16;

/// Offset in the header page of the thread's proxy in the emulated application kernel
/// (`lopi whatif --kernel app-kernel`), the thread that makes its system calls.
pub const PROXY_STATE: u64 = 4032;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyState {
    /// The mailbox the thread posts its calls to (in the proxy's own mapping); 0 before the
    /// thread's first forwarded call, or when its proxy could not be made.
    pub mailbox: u64,
    /// System calls the proxy made for the thread.
    pub forwarded: u64,
    /// System calls the thread made itself: calls about the calling thread (`exit`, `clone`,
    /// its signal mask, ...), a signal handler's calls while a call of its is forwarded, and
    /// all calls after its proxy could not be made.
    pub in_place: u64,
    /// TSC ticks from posting the forwarded calls to taking their results, and of those the
    /// ticks the proxy spent making them.
    pub round_trip_ticks: u64,
    pub proxy_ticks: u64,
    pub proxy_tid: u32,
    /// Non-zero when the thread could not get a proxy.
    pub failed: u32,
}

pub const PROXY_STATE_LEN: usize = 48;
const _: () = assert!(core::mem::size_of::<ProxyState>() == PROXY_STATE_LEN);
const _: () = assert!(PROXY_STATE + PROXY_STATE_LEN as u64 <= SCRIPT_AREA);

/// Offset in the header page of the address (`u64`) of the thread's probe-script area
/// (`script::ScriptArea`), 0 before its first script probe.
pub const SCRIPT_AREA: u64 = 4080;
const _: () = assert!(SCRIPT_AREA + 8 <= PAGE_SIZE);

impl ProxyState {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..PROXY_STATE_LEN)?);
        Some(Self {
            mailbox: f.u64(0),
            forwarded: f.u64(8),
            in_place: f.u64(16),
            round_trip_ticks: f.u64(24),
            proxy_ticks: f.u64(32),
            proxy_tid: f.u32(40),
            failed: f.u32(44),
        })
    }
}
const _: () = assert!(UNMATCHED_TABLE + UNMATCHED_SLOTS as u64 * UNMATCHED_EXIT_LEN as u64 <= BUDGET_STATE);

impl ThreadHeader {
    /// Decodes a header; `None` when `bytes` is too short.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..THREAD_HEADER_LEN)?);
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&f.0[0..8]);
        Some(Self {
            magic,
            chunk_len: f.u64(8),
            pid: f.u32(16),
            tid: f.u32(20),
            space_pid: f.u32(24),
            node_limit: f.u32(28),
            tsc_hz: f.u64(32),
            probe_inner_ticks: f.u64(40),
            probe_pair_ticks: f.u64(48),
            stack_limit: f.u32(56),
            vfork_log: f.u32(60),
            trace_cap: f.u64(64),
            trace_offset: f.u64(72),
            start_tsc: f.u64(80),
            nodes_offset: f.u64(88),
            hash_offset: f.u64(96),
            stack_offset: f.u64(104),
            nodes_file: f.u64(112),
            stack_file: f.u64(120),
            node_cap: f.u32(128),
            stack_cap: f.u32(132),
            comm: f.0[136..152].try_into().unwrap_or([0; 16]),
            syscall_inner_ticks: f.u64(152),
            syscall_pair_ticks: f.u64(160),
            held_len: f.u32(168),
            switched_open: f.u32(172),
            orphan_releases: f.u64(176),
            holds_dropped: f.u64(184),
            busy: f.u32(192),
            depth: f.u32(196),
            node_count: f.u32(200),
            merged_from: f.u32(204),
            trace_len: f.u64(208),
            unmatched_exits: f.u64(216),
            early_exits: f.u64(224),
            too_deep: f.u64(232),
            nested_skipped: f.u64(240),
            trace_dropped: f.u64(248),
            first_drop_tsc: f.u64(256),
            last_tsc: f.u64(264),
            untimed_calls: f.u64(272),
            paused_ticks: f.u64(280),
            clock_backwards: f.u64(288),
            next_check_tsc: f.u64(296),
            unmatched_len: f.u32(304),
            switched: f.u32(308),
            timed_calls: f.u64(312),
            sample_clock: f.u64(320),
            sample_ticks: f.u64(328),
            samples: f.u64(336),
            sample_timer: f.u32(344) as i32,
            sample_error: f.u32(348) as i32,
        })
    }
}

impl UnmatchedExit {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..UNMATCHED_EXIT_LEN)?);
        Some(Self { func: f.u64(0), count: f.u64(8) })
    }
}

impl HeldLock {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..HELD_LOCK_LEN)?);
        Some(Self { addr: f.u64(0), start: f.u64(8), node: f.u32(16), flags: f.u32(20) })
    }
}

impl ThreadEnd {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..THREAD_END_LEN)?);
        Some(Self {
            tsc: f.u64(0),
            nr: f.u32(8),
            flags: f.u32(12),
            user_ns: f.u64(16),
            system_ns: f.u64(24),
            runq_wait_ns: f.u64(32),
            start_cpu_ns: f.u64(40),
            start_runq_ns: f.u64(48),
        })
    }
}

