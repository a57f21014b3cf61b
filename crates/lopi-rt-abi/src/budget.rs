//! The perturbation budget's state in a thread chunk's header page: what the thread's checks
//! remember, per module whose probes checked, and the table of the functions switched.
use super::fields::Fields;
use super::PROXY_STATE;

/// Offset in the header page of the perturbation budget's state ([`BudgetState`]): the
/// thread's, then ([`BUDGET_MODULES`]) one [`BudgetModule`] per module whose probes checked.
/// Each module has its own runtime, which switches only that module's functions (another
/// module's variables may be gone: it may have been unloaded), so what a module's checks
/// decide from is kept apart from the other modules'.
pub const BUDGET_STATE: u64 = 2176;

/// What a thread's budget checks remember between them, whichever module's probe made them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetState {
    /// Checks made; the thread's CPU clock (its CPU time, in TSC ticks) at the latest (at its
    /// chunk's start before the first); the header's `timed_calls` at the latest.
    pub checks: u64,
    pub last_check_cpu: u64,
    pub calls_seen: u64,
    /// Scans made, and the ticks they took.
    pub scans: u64,
    pub scan_ticks: u64,
    /// The budget, in parts per million of the thread's CPU time.
    pub budget_ppm: u64,
    /// Module states in use (written after the state it counts).
    pub modules: u32,
    /// Checks made in modules that found every module state taken: those modules' functions
    /// stay timed.
    pub unkept_checks: u32,
}

pub const BUDGET_STATE_LEN: usize = 56;
const _: () = assert!(core::mem::size_of::<BudgetState>() == BUDGET_STATE_LEN);

/// Offset in the header page of the thread's [`BudgetModule`]s.
pub const BUDGET_MODULES: u64 = BUDGET_STATE + 64;
/// Modules whose functions a thread's budget can switch; a further module's stay timed.
pub const BUDGET_MODULE_SLOTS: u32 = 16;
const _: () = assert!(BUDGET_STATE + BUDGET_STATE_LEN as u64 <= BUDGET_MODULES);
const _: () = assert!(BUDGET_MODULES + BUDGET_MODULE_SLOTS as u64 * BUDGET_MODULE_LEN as u64 <= PROXY_STATE);

impl BudgetState {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..BUDGET_STATE_LEN)?);
        Some(Self {
            checks: f.u64(0),
            last_check_cpu: f.u64(8),
            calls_seen: f.u64(16),
            scans: f.u64(24),
            scan_ticks: f.u64(32),
            budget_ppm: f.u64(40),
            modules: f.u32(48),
            unkept_checks: f.u32(52),
        })
    }
}

/// One module's part of a thread's budget: its functions' table, and what its checks saw.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetModule {
    /// The address of the module's counter 0 (a function's name in the tree is its counter's
    /// address) and its counter count: which module this is.
    pub counters: u64,
    pub entries: u64,
    /// The table ([`BudgetEntry`] per counter of the module, then two `u32` per counter of
    /// scratch), an extension: its address less the chunk's, its file offset (0: none, the
    /// data file could not grow; the module's functions stay timed).
    pub table_offset: u64,
    pub table_file: u64,
    /// The thread's CPU clock at the module's latest scan (0: none yet).
    pub last_scan_cpu: u64,
    /// At that scan: timed calls of the functions of the thread's other modules with a table,
    /// and of functions no module can switch (lock holds, modules without a table).
    pub others_seen: u64,
    pub fixed_seen: u64,
    /// The thread's module states in use then (the split above changes with them).
    pub modules_seen: u64,
    /// Until `floor_until` (the thread's CPU clock), checks allow this much more timing cost (ppm of their
    /// window): what the module's functions that must stay timed cost beyond its share of
    /// the budget at its latest scan.
    pub floor_ppm: u64,
    pub floor_until: u64,
}

pub const BUDGET_MODULE_LEN: usize = 80;

/// Offset in the header page of the thread's [`BudgetClock`], after its module states.
pub const BUDGET_CLOCK: u64 = BUDGET_MODULES + BUDGET_MODULE_SLOTS as u64 * BUDGET_MODULE_LEN as u64;

/// The thread's CPU clock as the budget's checks read it: from the kernel at most every
/// millisecond, in between extrapolated from the latest reading at the rate the latest two
/// showed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetClock {
    /// TSC of the latest reading (0: none yet), and the CPU clock then, in TSC ticks.
    pub read_tsc: u64,
    pub read_cpu: u64,
    /// CPU ticks per TSC tick between the latest two readings, in 1/2^20ths.
    pub rate_q20: u64,
}

pub const BUDGET_CLOCK_LEN: usize = 24;
const _: () = assert!(core::mem::size_of::<BudgetClock>() == BUDGET_CLOCK_LEN);
const _: () = assert!(BUDGET_CLOCK + BUDGET_CLOCK_LEN as u64 <= PROXY_STATE);
const _: () = assert!(core::mem::size_of::<BudgetModule>() == BUDGET_MODULE_LEN);

impl BudgetModule {
    /// The index of the module's function named `func` (its counter's address), if it is one.
    pub fn index(&self, func: u64) -> Option<u64> {
        let i = func.wrapping_sub(self.counters) / 8;
        (func >= self.counters && func % 8 == self.counters % 8 && i < self.entries).then_some(i)
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..BUDGET_MODULE_LEN)?);
        Some(Self {
            counters: f.u64(0),
            entries: f.u64(8),
            table_offset: f.u64(16),
            table_file: f.u64(24),
            last_scan_cpu: f.u64(32),
            others_seen: f.u64(40),
            fixed_seen: f.u64(48),
            modules_seen: f.u64(56),
            floor_ppm: f.u64(64),
            floor_until: f.u64(72),
        })
    }
}

/// One function of a module in a thread's budget table: what the thread's checks saw of it,
/// and whether this thread switched it from timing to counting.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetEntry {
    /// Its timed calls in this thread at the latest scan, and their ticks.
    pub seen_calls: u64,
    pub seen_ticks: u64,
    /// During a scan: its timed calls now and their ticks (set when `epoch` is the scan's),
    /// and those of its busiest call path (the last of equally busy ones: a recursion's
    /// innermost).
    pub calls: u64,
    pub ticks: u64,
    pub path_calls: u64,
    pub path_ticks: u64,
    pub epoch: u64,
    /// TSC when this thread switched it to counting; 0: it did not.
    pub switched_tsc: u64,
    /// Its counter's address (its name in the tree), set at the switch.
    pub func: u64,
    /// Its timed calls in the scan window that switched it (at least one), and the window's
    /// ticks (at least [`BUDGET_MIN_WINDOW_NS`]).
    pub window_calls: u64,
    pub window_ticks: u64,
}

pub const BUDGET_ENTRY_LEN: usize = 88;
/// The shortest window a scan decides on: one shorter (a TSC step between CPUs, checks
/// brought forward by new call paths) would make a few calls look like a high call rate.
pub const BUDGET_MIN_WINDOW_NS: u64 = 10_000;
const _: () = assert!(core::mem::size_of::<BudgetEntry>() == BUDGET_ENTRY_LEN);

/// Bytes of a budget table of `entries` entries (and their scratch).
pub const fn budget_table_bytes(entries: u64) -> u64 {
    super::page_align(entries * (BUDGET_ENTRY_LEN as u64 + 8))
}

impl BudgetEntry {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..BUDGET_ENTRY_LEN)?);
        Some(Self {
            seen_calls: f.u64(0),
            seen_ticks: f.u64(8),
            calls: f.u64(16),
            ticks: f.u64(24),
            path_calls: f.u64(32),
            path_ticks: f.u64(40),
            epoch: f.u64(48),
            switched_tsc: f.u64(56),
            func: f.u64(64),
            window_calls: f.u64(72),
            window_ticks: f.u64(80),
        })
    }
}
