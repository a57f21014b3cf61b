//! The planner: which functions get a probe, how each patch is made, and what the
//! trampolines contain. Its output, [`PatchPlan`], is all an installer needs; the static
//! rewriter and the live installer consume the same plan.
//!
//! Tactics, tried in order for each function (after `endbr64`, which stays in place):
//! 1. `jmp rel32` over whole instructions that no branch targets (the common case);
//! 2. `jmp rel32` that runs into the alignment padding after a function that ends within
//!    five bytes (`xor eax,eax; ret`);
//! 3. `jmp rel8` to a 5-byte bounce placed in nearby padding (GILK's local bounce
//!    allocation), when a branch target or the next function leaves only 2–4 bytes;
//! 4. otherwise the function is skipped, with the reason.
#![forbid(unsafe_code)]

mod block_graph;
pub mod blocks;
pub use points::PointError;
mod implied;
mod exits;
mod fragments;
mod gaps;
mod layout;
mod lend;
mod points;
mod locks;
mod progress;
mod stored;
mod syscalls;
mod targets;

pub use exits::UntimedReason;
use progress::PROGRESS_EVERY;
pub use progress::{Progress, Stage};
pub use stored::StoredError;
pub use syscalls::{SyscallOutcome, SyscallSite, SyscallSkip};
use exits::{CodeMap, Region};
use gaps::Gaps;
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{ExitKind, Flow, Insn, JMP32_LEN, JMP8_LEN};
use std::collections::{BTreeSet, HashMap, HashSet};
use targets::Targets;

/// How a probed function's entry is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tactic {
    Jmp32,
    Jmp32IntoPadding,
    Jmp8ViaBounce,
    /// The whole function moves to the trampoline (its own loops reach its entry).
    WholeFunction,
}

impl Tactic {
    pub fn name(self) -> &'static str {
        match self {
            Tactic::Jmp32 => "jmp32",
            Tactic::Jmp32IntoPadding => "jmp32+padding",
            Tactic::Jmp8ViaBounce => "jmp8+bounce",
            Tactic::WholeFunction => "whole-function",
        }
    }
}

/// Why a function has no probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[serde(rename_all = "kebab-case")]
pub enum SkipReason {
    #[error("entry instructions cover fewer than 2 bytes before a branch target or the next function")]
    TooShort,
    #[error("fewer than 5 bytes before a branch target or the next function, and no padding within 127 bytes for a bounce")]
    NoBounceSpace,
    #[error("the entry has a call through the stack pointer, which cannot be moved")]
    CallAtEntry,
    #[error("entry bytes do not decode as x86-64")]
    Undecodable,
    #[error("entry bytes are not in the file")]
    NotInFile,
    #[error("a branch targets the middle of an entry instruction")]
    OverlappingCode,
    #[error("displaced instructions cannot be re-encoded in the trampoline area")]
    RelocationFailed,
    #[error("trampoline area is out of jmp rel32 range")]
    OutOfRange,
    #[error("the function's own loop jumps to its entry and the function cannot be moved whole (too large, calls, or indirect jumps)")]
    LoopAtEntry,
    #[error("a thread of the running process was stopped inside the entry bytes and could not be moved out")]
    ThreadInside,
    #[error("a lock function tail-jumps into it: its returns end lock calls (--probe locks)")]
    PartOfLockFunction,
    #[error("a block whose running the probed blocks it dominates tell needs no probe of its own (--probe coverage)")]
    Implied,
}

impl SkipReason {
    pub fn key(self) -> &'static str {
        match self {
            SkipReason::TooShort => "too-short",
            SkipReason::NoBounceSpace => "no-bounce-space",
            SkipReason::CallAtEntry => "call-at-entry",
            SkipReason::Undecodable => "undecodable",
            SkipReason::NotInFile => "not-in-file",
            SkipReason::OverlappingCode => "overlapping-code",
            SkipReason::RelocationFailed => "relocation-failed",
            SkipReason::OutOfRange => "out-of-range",
            SkipReason::LoopAtEntry => "loop-at-entry",
            SkipReason::ThreadInside => "thread-inside",
            SkipReason::PartOfLockFunction => "part-of-lock-function",
            SkipReason::Implied => "implied",
        }
    }
}

/// What happens to one discovered function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    Probed(Tactic),
    Skipped(SkipReason),
    /// Left out by `--functions` / `--exclude`.
    NotSelected,
}

/// Which functions to probe, by glob over symbol names (and aliases).
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub include: Vec<glob::Pattern>,
    pub exclude: Vec<glob::Pattern>,
}

impl Filter {
    /// Selects no function (a module probed only at instructions, or for its system calls).
    pub fn nothing() -> Filter {
        Filter { include: Vec::new(), exclude: vec![glob::Pattern::new("*").expect("a valid glob")] }
    }

    pub fn selects(&self, names: &[&str]) -> bool {
        let any = |pats: &[glob::Pattern]| names.iter().any(|n| pats.iter().any(|p| p.matches(n)));
        (self.include.is_empty() || any(&self.include)) && !any(&self.exclude)
    }
}

/// Whether a probed function's calls are timed (entry and exit probes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TimingOutcome {
    /// Timing was not asked for, or the function has no probe.
    Off,
    Timed,
    /// Counted only.
    Untimed(UntimedReason),
}

/// What the runtime does at a probed function's entry and exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Action {
    /// Counts its calls per CPU.
    Count,
    /// Times its calls in the thread's calling-context tree.
    Time,
    /// A lock operation (`lopi_rt_abi::lock_name::Op`): the call is timed as a lock node
    /// named by the operation and the lock, under its call site.
    Lock(u8),
    /// Marks that the point ran: one byte stored into its counter (`--probe coverage`).
    Mark,
    /// Runs the probe script's (or C handler's) probes hooked to its counter, with every
    /// register saved: an instruction's probe (`addr:`, `func:NAME+OFF`).
    Probe,
}

impl Action {
    /// Entry and exit probes run (a lock operation is timed too).
    pub fn timed(self) -> bool {
        matches!(self, Action::Time | Action::Lock(_))
    }
}

/// Where a site's probe goes. A probe is a point the planner can patch safely plus the
/// action the runtime runs there; the point's kind decides the action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Point {
    /// A function's entry, patched with this tactic: counts the calls (times them, with the
    /// entry probe, when the site is `timed`).
    Entry(Tactic),
    /// A `ret` or tail jump of the timed functions in `owners`: ends their timed calls.
    Exit,
    /// A `syscall` instruction, patched with this tactic: times each system call.
    Syscall(Tactic),
    /// A basic block's start, patched with this tactic: counts its executions.
    Block(Tactic),
}

/// A chosen patch, before addresses in the trampoline area are known.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Site {
    function: usize,
    point: Point,
    /// Functions whose timing needs this site (an exit in a `.cold` part may serve several
    /// functions of a stripped file).
    owners: Vec<usize>,
    /// What the runtime does: at an entry site for its function; at an exit site, what its
    /// owners' entries do (their calls end there).
    action: Action,
    patch_at: Svma,
    /// Bytes of original code the patch covers (jump plus int3 filler).
    covered: usize,
    /// The original code `relocated` is made of; a stored selection keeps only this and
    /// decodes it again from the file.
    moved_from: Svma,
    moved_len: usize,
    #[serde(skip)]
    relocated: Vec<Insn>,
    /// Where the trampoline continues; `None` when the relocated code ends in ret/jmp.
    resume: Option<Svma>,
    bounce: Option<Svma>,
    /// Moved instructions that leave the function, to get exit probes (when timed).
    exits: Vec<(u64, ExitKind)>,
    /// One-byte `ret`s right before this exit site that become `nop`s and fall into it.
    nops: Vec<Svma>,
    /// Timed entry sites of small leaf functions: the whole function, which the trampoline
    /// runs as a clean copy (no exit probes) once the budget switches it to counting; stored
    /// as its range, decoded again as `relocated` is.
    copy_from: Option<(Svma, usize)>,
    #[serde(skip)]
    copy: Option<Vec<Insn>>,
    /// Original IPs of the moved `syscall` instructions that get system-call probes.
    syscalls: Vec<u64>,
}

/// Where the installer puts the probe's code and data, in the module's address space.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    pub trampolines: Svma,
    /// Shared counters (one u64 per probed function), incremented with `lock`.
    pub counters: Svma,
    /// Runtime variables, see [`RuntimeVars`].
    pub vars: Svma,
    /// One 32-byte `struct rseq_cs` per probed function.
    pub rseq_table: Svma,
    /// One `u32` mode word per probed function: non-zero once a timed function is switched
    /// to counting (the perturbation budget).
    pub modes: Svma,
    /// Bytes between per-CPU counter blocks.
    pub stride: u32,
    /// The runtime's entry and exit probe stubs; needed when any function is timed.
    pub stubs: Option<Stubs>,
    /// A perturbation budget is set: switched small leaf functions get a clean copy to run,
    /// and every timed function its [`SwitchPatches`].
    pub budget: bool,
    /// The runtime's stub that puts a fired coverage probe's site back (`None`: coverage
    /// probes stay).
    pub retire_stub: Option<Svma>,
}

impl Layout {
    /// Address of counter `index`'s mode word.
    pub fn mode_of(&self, index: u32) -> u64 {
        self.modes.0 + 4 * u64::from(index)
    }
}

/// Addresses of the runtime's probe stubs.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Stubs {
    pub enter: Svma,
    pub exit: Svma,
    pub syscall_enter: Svma,
    pub syscall_exit: Svma,
    pub lock_enter: Svma,
    pub lock_exit: Svma,
    /// Of an instruction's probe (`Action::Probe`).
    pub point: Svma,
}

impl Stubs {
    /// The entry and exit stubs of a timed or lock action.
    pub fn of(&self, action: Action) -> (u64, u64) {
        match action {
            Action::Lock(_) => (self.lock_enter.0, self.lock_exit.0),
            _ => (self.enter.0, self.exit.0),
        }
    }
}

/// Which probes the planner places.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    /// Entries of the functions the filter selects: calls counted.
    pub entries: bool,
    /// Their exits too: calls timed (with `entries`).
    pub exits: bool,
    /// Every `syscall` instruction: system calls counted and timed.
    pub syscalls: bool,
    /// The lock functions (`locks.rs`), each call timed as a lock operation; with them the
    /// `futex` system calls, which tell time blocked from time spinning.
    pub locks: bool,
    /// Every basic block of the functions the filter selects: executions counted.
    pub blocks: bool,
    /// Whether each basic block ran, with a probe per set of blocks that run together.
    pub coverage: bool,
}

impl Probes {
    pub const COUNT: Probes = Probes { entries: true, exits: false, syscalls: false, locks: false, blocks: false, coverage: false };
    pub const TIME: Probes = Probes { entries: true, exits: true, syscalls: false, locks: false, blocks: false, coverage: false };

    /// As `--probe` spells it: `entry,exit,syscall,locks`.
    pub fn name(self) -> String {
        let parts = [(self.entries, "entry"), (self.exits, "exit"), (self.syscalls, "syscall"), (self.locks, "locks"), (self.blocks, "block"), (self.coverage, "coverage")];
        parts.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect::<Vec<_>>().join(",")
    }
}

/// Size of one `struct rseq_cs` slot.
pub const RSEQ_CS_SIZE: u64 = 32;

/// Sites chosen for a module, waiting for a [`Layout`]. Address independent: the plan cache
/// keeps it ([`Selection::to_bytes`]).
#[derive(Clone)]
pub struct Selection {
    sites: Vec<Site>,
    pub outcomes: Vec<Outcome>,
    pub timing: Vec<TimingOutcome>,
    /// Every `syscall` instruction, in address order, when system calls are probed.
    pub syscalls: Vec<SyscallSite>,
    /// Every selected function's basic blocks and their probes, when blocks are probed.
    pub blocks: Vec<blocks::FunctionBlocks>,
    /// Functions whose entry, if it is counted and not timed, runs the probes hooked to its
    /// counter first ([`Selection::probe_entries`]); not stored with the selection.
    entry_probes: BTreeSet<usize>,
}

/// One probe: a point the planner patched, the action the runtime runs there, and its counter,
/// which is its index in [`PatchPlan::probes`] (functions' entries first, then system-call
/// sites, then blocks and instructions: the order the runtime's tables and the metadata keep).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    pub point: ProbePoint,
    /// At an entry: what the function's calls get (`Count`, `Time`, `Lock`, `Probe`: its
    /// exits, when timed, are exit sites naming this counter); at a system-call site `Time`;
    /// at a block `Count`, `Mark` (coverage) or `Probe` (an instruction's script probes).
    pub action: Action,
    pub counter: u32,
}

/// Where a probe is.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum ProbePoint {
    /// A function's entry, patched at `patch_at` with `tactic` to jump to `trampoline`.
    Entry { function: usize, tactic: Tactic, patch_at: Svma, trampoline: Svma },
    /// A `syscall` instruction at `at` (index `site` into [`PatchPlan::syscalls`]), moved into
    /// a trampoline; a thread in the system call returns to `returns_to` there.
    Syscall { at: Svma, site: usize, returns_to: Svma },
    /// A basic block of `function`, `start..end`, whose jump is written at `patch_at` (past an
    /// `endbr64`); or, with `Action::Probe`, an instruction's point at `patch_at`.
    Block { function: usize, start: Svma, end: Svma, patch_at: Svma, tactic: Tactic },
}

impl Probe {
    /// The function whose entry this probe is.
    pub fn entry_of(&self) -> Option<usize> {
        match self.point {
            ProbePoint::Entry { function, .. } => Some(function),
            _ => None,
        }
    }
}

/// Bytes to write over the original code.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CodePatch {
    pub at: Svma,
    pub bytes: Vec<u8>,
    /// The bytes being replaced, for restoring and checking.
    pub original: Vec<u8>,
}

/// What a timed function's code no longer needs once the budget switched it to counting, for
/// its runtime to put in place (see the runtime's `retire.rs`): its entry's jump retargeted to
/// its trampoline's counting code, the original code of its own exit sites back. Only swaps
/// one atomic store makes: the jump within a cache line, in a read-only executable segment.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SwitchPatches {
    pub counter: u32,
    /// The entry's jump (or its bounce's), retargeted; made first.
    pub entry: Option<CodeSwap>,
    /// The exit sites' original code, in the order it must be put back.
    pub exits: Vec<CodeSwap>,
}

impl SwitchPatches {
    /// Every swap, in the order they must be made.
    pub fn swaps(&self) -> impl Iterator<Item = &CodeSwap> {
        self.entry.iter().chain(&self.exits)
    }
}

/// New code at `at`: the bytes after the first `jump_len` are written first (filler no
/// thread runs), then the first `jump_len` with one atomic store.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CodeSwap {
    pub at: Svma,
    pub jump_len: u8,
    pub bytes: Vec<u8>,
}

/// Everything an installer needs.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct PatchPlan {
    pub layout: Layout,
    /// Every probe, in counter order.
    pub probes: Vec<Probe>,
    pub syscalls: Vec<SyscallSite>,
    pub blocks: Vec<blocks::FunctionBlocks>,
    /// Critical section of each probed function's trampoline, in counter order (a timed
    /// function's counts its calls once the budget switched it to counting).
    pub rseq_sections: Vec<lopi_x86::RseqSection>,
    pub code_patches: Vec<CodePatch>,
    /// Code to place at `layout.trampolines`.
    pub trampoline_code: Vec<u8>,
    pub outcomes: Vec<Outcome>,
    pub timing: Vec<TimingOutcome>,
    /// Exit sites patched.
    pub exit_sites: usize,
    /// With a budget, each timed function's swaps, in counter order.
    pub switch_patches: Vec<SwitchPatches>,
}

impl PatchPlan {
    /// Whether some probe keeps per-thread state (a chunk of the data file, found through the
    /// thread's `fs:0x38`): a timed call, a system call, or a script's probe.
    pub fn keeps_thread_state(&self) -> bool {
        self.probes.iter().any(|p| p.action.timed() || p.action == Action::Probe)
    }
}

/// What the planner learns from a module's code before it chooses sites.
pub struct Analysis {
    targets: Targets,
    /// FDE-only functions found to be fragments of another function: their addresses, which
    /// [`apply_fragments`] moves again in a module parsed anew (a plan from the cache).
    pub fragments: Vec<u64>,
}

/// Sweeps `module`'s code once for branch targets, and moves the cold fragments that
/// `.eh_frame` alone took for functions from `module.functions` to `module.fragments`
/// (see `fragments.rs`). Run it before anything reads the function list: [`select`] needs its
/// result, and outcomes, metadata and reports index that list.
pub fn analyse(module: &mut ElfModule<'_>) -> Analysis {
    analyse_with(module, &())
}

/// [`analyse`], telling `progress` how it goes.
pub fn analyse_with(module: &mut ElfModule<'_>, progress: &dyn Progress) -> Analysis {
    let mut targets = targets::collect(module, progress);
    let fragments = fragments::recognise(module, &targets);
    if !fragments.is_empty() {
        targets.reread_tables(module);
    }
    Analysis { targets, fragments }
}

/// Moves the functions at `starts` (an earlier [`Analysis::fragments`] of the same file) to
/// the fragments, as [`analyse`] did.
pub fn apply_fragments(module: &mut ElfModule<'_>, starts: &[u64]) {
    fragments::move_to_fragments(module, starts);
}

/// Chooses a tactic for every selected function's entry, and as `probes` asks its exit sites
/// and a site for every `syscall` instruction. `analysis` comes from [`analyse`] on this module.
pub fn select(module: &ElfModule<'_>, analysis: &Analysis, filter: &Filter, probes: Probes) -> Selection {
    select_with(module, analysis, filter, probes, &())
}

/// [`select`], telling `progress` how it goes.
pub fn select_with(module: &ElfModule<'_>, analysis: &Analysis, filter: &Filter, probes: Probes, progress: &dyn Progress) -> Selection {
    let targets = &analysis.targets;
    let mut gaps = Gaps::find(module, targets);
    let mut outcomes = vec![Outcome::NotSelected; module.functions.len()];
    let ends = function_ends(module);
    let lock_ops: Vec<_> = module.functions.iter().map(|f| if probes.locks { locks::op_of(&names_of(f)) } else { None }).collect();
    let lock_parts = if probes.locks { locks::tail_parts(module, &ends, &lock_ops, targets) } else { HashSet::new() };
    let mut sites = Vec::new();
    let mut need_bounce = Vec::new();
    let functions = module.functions.len() as u64;
    for (index, function) in module.functions.iter().enumerate().filter(|_| probes.entries || probes.locks) {
        if index % PROGRESS_EVERY == 0 {
            progress.update(Stage::Entries, index as u64, functions);
        }
        if lock_ops[index].is_none() && !(probes.entries && filter.selects(&names_of(function))) {
            continue;
        }
        if lock_parts.contains(&function.addr.0) && lock_ops[index].is_none() {
            outcomes[index] = Outcome::Skipped(SkipReason::PartOfLockFunction);
            continue;
        }
        let end = ends[index];
        match entry_site(module, index, end, targets, &mut gaps) {
            Ok(Choice::Direct(site)) => {
                if let Point::Entry(tactic) = site.point {
                    outcomes[index] = Outcome::Probed(tactic);
                }
                sites.push(site);
            }
            Ok(Choice::NeedsBounce(entry)) => need_bounce.push((index, entry)),
            Err(reason) => outcomes[index] = Outcome::Skipped(reason),
        }
    }
    // Bounces go last, into whatever padding the direct tactics left free, or into room a
    // neighbouring entry site lends (once).
    let mut lent = HashSet::new();
    for (index, entry) in need_bounce {
        // The rel8 displacement counts from the end of the 2-byte jump.
        let from = entry.patch_at.0 + JMP8_LEN as u64;
        let (lo, hi) = (from.saturating_sub(128), from + 127 - JMP32_LEN as u64);
        let bounce = gaps.take_near(lo, hi, JMP32_LEN).or_else(|| {
            lend::lend_room(module, &mut sites, &mut lent, &ends, targets, &mut gaps, lo, hi).then(|| gaps.take_near(lo, hi, JMP32_LEN)).flatten()
        });
        match bounce {
            Some(bounce) => {
                outcomes[index] = Outcome::Probed(Tactic::Jmp8ViaBounce);
                let covered = entry.len;
                sites.push(entry.into_site(index, Tactic::Jmp8ViaBounce, covered, Some(Svma(bounce))));
            }
            None => outcomes[index] = Outcome::Skipped(SkipReason::NoBounceSpace),
        }
    }
    let mut timing_outcomes = vec![TimingOutcome::Off; module.functions.len()];
    if (probes.entries && probes.exits) || probes.locks {
        let timing = Timing { ends: &ends, lock_ops: &lock_ops, time_others: probes.entries && probes.exits, syscalls: probes.syscalls || probes.locks };
        plan_timing(module, &timing, targets, &mut gaps, &mut sites, &mut timing_outcomes, progress);
    }
    let syscalls = match (probes.syscalls, probes.locks) {
        (true, _) => syscalls::plan(module, targets, &mut gaps, &mut sites, |_| true),
        // Locks alone: the `futex` calls (blocking), the calls that end a thread (its end),
        // and those whose number is set out of sight.
        (false, true) => syscalls::plan(module, targets, &mut gaps, &mut sites, |nr| nr.is_none_or(|n| LOCK_SYSCALLS.contains(&n))),
        (false, false) => Vec::new(),
    };
    let blocks = if probes.blocks || probes.coverage {
        let action = if probes.coverage { Action::Mark } else { Action::Count };
        let (block_sites, blocks) = blocks::select(module, targets, filter, &mut gaps, action);
        sites.extend(block_sites);
        blocks
    } else {
        Vec::new()
    };
    sites.sort_by_key(|s| s.patch_at);
    Selection { sites, outcomes, timing: timing_outcomes, syscalls, blocks, entry_probes: BTreeSet::new() }
}

/// Where each function ends: at its size, or at the next known start of code.
fn function_ends(module: &ElfModule<'_>) -> Vec<u64> {
    let starts = code_starts(module, std::iter::empty());
    module
        .functions
        .iter()
        .map(|function| {
            let next_start = starts.get(starts.partition_point(|&s| s <= function.addr.0)).copied().unwrap_or(u64::MAX);
            match function.size {
                0 => next_start,
                n => (function.addr.0 + n).min(next_start),
            }
        })
        .collect()
}

/// A function's name and aliases, as the filter and the lock table match them.
fn names_of(f: &lopi_elf::Function) -> Vec<&str> {
    std::iter::once(f.name.as_str()).chain(f.aliases.iter().map(String::as_str)).collect()
}

/// Known starts of code: every function and fragment, and `more`; sorted, each once.
fn code_starts(module: &ElfModule<'_>, more: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut s: Vec<u64> = module.functions.iter().map(|f| f.addr.0).chain(module.fragments.iter().map(|f| f.0 .0)).chain(more).collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// What `--probe locks` probes of the system calls on x86-64: `futex`, `exit`, `exit_group`.
const LOCK_SYSCALLS: [u32; 3] = [202, 60, 231];

/// What [`plan_timing`] times.
struct Timing<'a> {
    /// Where each function ends.
    ends: &'a [u64],
    /// Each function's lock operation (`--probe locks`).
    lock_ops: &'a [Option<lopi_rt_abi::lock_name::Op>],
    /// Functions other than lock functions are timed (`--probe entry,exit`).
    time_others: bool,
    /// Exit sites may move a `syscall` (whose probes then go in their trampoline).
    syscalls: bool,
}

/// Adds exit sites for every timed or lock function whose exits can all be probed, and sets
/// its entry site's action; others stay counted only, with the reason.
fn plan_timing(
    module: &ElfModule<'_>,
    timing: &Timing<'_>,
    targets: &Targets,
    gaps: &mut Gaps,
    sites: &mut Vec<Site>,
    outcomes: &mut [TimingOutcome],
    progress: &dyn Progress,
) {
    let lock_entries = timing.lock_ops.iter().zip(&module.functions).filter(|(op, _)| op.is_some()).map(|(_, f)| f.addr.0);
    let map = CodeMap::new(module).with_locks(lock_entries);
    // Exit sites of fragments already planned (a stripped file's fragment may be reached
    // from several functions): fragment start -> indices in `sites`, or why not.
    let mut fragments: HashMap<u64, Result<Vec<usize>, UntimedReason>> = HashMap::new();
    let entries = sites.len();
    for entry_index in 0..entries {
        if entry_index % PROGRESS_EVERY == 0 {
            progress.update(Stage::Exits, entry_index as u64, entries as u64);
        }
        let f = sites[entry_index].function;
        let action = match timing.lock_ops[f] {
            Some(op) => Action::Lock(op as u8),
            None if timing.time_others => Action::Time,
            None => continue,
        };
        let follow = matches!(action, Action::Lock(_));
        let ends = timing.ends;
        let result = timed_exits(module, f, ends[f], &sites[entry_index], &map, targets, gaps, &mut fragments, sites.len(), timing.syscalls, follow);
        match result {
            Ok(mut plan) => {
                let site = &mut sites[entry_index];
                site.action = action;
                site.exits = plan.entry_exits;
                // A lock call is never switched to counting by the budget.
                let copy = plan.copy.take().filter(|_| !follow);
                site.copy_from = copy.as_ref().map(|_| (module.functions[f].addr, (ends[f] - module.functions[f].addr.0) as usize));
                site.copy = copy;
                for new in &mut plan.sites {
                    new.action = action;
                }
                for &i in &plan.shared {
                    sites[i].owners.push(f);
                }
                // Fragment indices recorded for later functions were counted from
                // `sites.len()` on, in this order.
                sites.extend(plan.sites);
                outcomes[f] = TimingOutcome::Timed;
            }
            Err(reason) => outcomes[f] = TimingOutcome::Untimed(reason),
        }
    }
}

/// What timing a function takes, from [`timed_exits`].
struct TimedPlan {
    /// Exits among the entry site's moved instructions.
    entry_exits: Vec<(u64, ExitKind)>,
    /// New exit sites (the function's own, and of fragments planned for it first).
    sites: Vec<Site>,
    /// Indices of existing fragment exit sites it also needs.
    shared: Vec<usize>,
    /// The whole function, when a clean copy of it can run once it is switched to counting.
    copy: Option<Vec<Insn>>,
}

/// Plans a function's exits; newly planned fragments are recorded in `fragments`.
#[allow(clippy::too_many_arguments)]
fn timed_exits(
    module: &ElfModule<'_>,
    f: usize,
    end: u64,
    entry: &Site,
    map: &CodeMap,
    targets: &Targets,
    gaps: &mut Gaps,
    fragments: &mut HashMap<u64, Result<Vec<usize>, UntimedReason>>,
    next_index: usize,
    syscalls: bool,
    follow: bool,
) -> Result<TimedPlan, UntimedReason> {
    let function = &module.functions[f];
    if function.addr.0 > i32::MAX as u64 {
        return Err(UntimedReason::AddressTooHigh);
    }
    if function.size == 0 {
        return Err(UntimedReason::UnknownSize);
    }
    let own = Region { start: function.addr.0, end };
    let found = exits::find(module, own, map, targets, follow)?;
    let entry_exits = exits::kinds_among(&entry.relocated, &found);
    let whole = entry.point == Point::Entry(Tactic::WholeFunction);
    let entry_end = entry.patch_at.0 + entry.covered as u64;
    let mut new_sites: Vec<Site> = Vec::new();
    let mut shared = Vec::new();
    let mut planned_fragments = Vec::new();
    for (&start, (region, insns)) in &found.code {
        let in_own = start == own.start;
        if !in_own {
            if let Some(done) = fragments.get(&start) {
                shared.extend(done.clone()?);
                continue;
            }
        }
        let mut floor = region.start;
        let mut region_sites = Vec::new();
        let mut failure = None;
        // `ret`s too short to patch that fall through into the next exit (`ret; ret`, GCC's
        // tail duplication): they become `nop`s and share that exit's site.
        let mut into_next: Vec<Svma> = Vec::new();
        for exit in found.exits.iter().filter(|e| e.region.start == start) {
            let ip = insns[exit.index].ip();
            if in_own && (whole || (ip >= entry.patch_at.0 && ip < entry_end)) {
                if !into_next.is_empty() {
                    failure = Some(UntimedReason::ExitTooShort);
                    break;
                }
                continue; // the entry trampoline probes it
            }
            if in_own && ip >= entry.patch_at.0 {
                floor = floor.max(entry_end);
            }
            match exits::site(module, f, exit, insns, floor, targets, gaps, syscalls) {
                Ok(mut site) => {
                    floor = site.patch_at.0 + site.covered as u64;
                    site.nops = std::mem::take(&mut into_next);
                    region_sites.push(site);
                }
                Err(UntimedReason::ExitTooShort) if exits::falls_into_next_exit(exit, insns, &found) => {
                    into_next.push(Svma(ip));
                }
                Err(reason) => {
                    failure = Some(reason);
                    break;
                }
            }
        }
        if failure.is_none() && !into_next.is_empty() {
            failure = Some(UntimedReason::ExitTooShort);
        }
        if !in_own {
            let indices = (0..region_sites.len()).map(|k| next_index + new_sites.len() + k).collect();
            planned_fragments.push((start, failure.map_or(Ok(indices), Err)));
        }
        if let Some(reason) = failure {
            for (start, result) in planned_fragments {
                fragments.insert(start, result.and(Err(reason)));
            }
            return Err(reason);
        }
        new_sites.extend(region_sites);
    }
    for (start, result) in planned_fragments {
        fragments.insert(start, result);
    }
    let copy = clean_copy(&found, own);
    Ok(TimedPlan { entry_exits, sites: new_sites, shared, copy })
}

/// Largest function copied for the perturbation budget: the functions it switches are short.
const MAX_CLEAN_COPY: u64 = 512;

/// The function's instructions, when a copy of them can run in place of the probed original
/// once the budget switches it to counting: a small leaf (no calls, so no unwinder ever needs
/// to find the copy; no indirect jumps, whose tables point into the original) that never
/// leaves its own bytes except by returning or by a jump elsewhere.
fn clean_copy(found: &exits::FunctionExits, own: Region) -> Option<Vec<Insn>> {
    if found.code.len() != 1 || own.end - own.start > MAX_CLEAN_COPY {
        return None;
    }
    let (_, insns) = found.code.get(&own.start)?;
    // A `syscall` in the copy would run without its probe.
    let leaf = insns.iter().all(|i| !matches!(lopi_x86::flow(i), Flow::Call | Flow::IndirectCall | Flow::IndirectJump | Flow::Interrupt));
    let ends_terminal = insns.last().is_some_and(|i| lopi_x86::flow(i).is_terminal());
    (leaf && ends_terminal).then(|| insns.clone())
}

/// The instructions at a patch point that may be moved: stops before a branch target, after
/// a call (moved as an emulated call), at the function's end, or once `want` bytes are covered.
struct Entry {
    patch_at: Svma,
    insns: Vec<Insn>,
    len: usize,
    /// The last moved instruction never falls through.
    ends_terminal: bool,
    /// Why collection stopped early, if it did before `want` bytes.
    stopped_at_target: bool,
}

impl Entry {
    /// A site that moves these instructions and continues after them unless they end in
    /// ret/jmp (or an emulated call).
    fn into_site(self, function: usize, tactic: Tactic, covered: usize, bounce: Option<Svma>) -> Site {
        Site {
            function,
            point: Point::Entry(tactic),
            owners: vec![function],
            action: Action::Count,
            patch_at: self.patch_at,
            covered,
            moved_from: self.patch_at,
            moved_len: self.len,
            resume: (!self.ends_terminal).then(|| self.patch_at + self.len as u64),
            relocated: self.insns,
            bounce,
            exits: Vec::new(),
            nops: Vec::new(),
            copy_from: None,
            copy: None,
            syscalls: Vec::new(),
        }
    }
}

impl Site {
    fn is_entry(&self) -> bool {
        matches!(self.point, Point::Entry(_))
    }

    fn is_block(&self) -> bool {
        matches!(self.point, Point::Block(_))
    }

    /// An exit site is needed only while some timed function owns it.
    fn needed(&self) -> bool {
        self.point != Point::Exit || !self.owners.is_empty()
    }
}

/// What tactics 1 and 2 decided.
enum Choice {
    Direct(Site),
    /// Only a short jump fits: tactic 3, once direct sites have claimed their padding.
    NeedsBounce(Entry),
}

fn entry_instructions(
    module: &ElfModule<'_>,
    function: &lopi_elf::Function,
    end: u64,
    targets: &Targets,
    want: usize,
) -> Result<Entry, SkipReason> {
    patch_instructions(module, function.addr, end, targets, &|ip| targets.contains(&ip), want)
}

/// The instructions a patch at `at` may move (after an `endbr64`, which indirect branches
/// must still find there): up to `end`, the first address `stop` names after the first, or
/// `want` bytes.
fn patch_instructions(
    module: &ElfModule<'_>,
    at: Svma,
    end: u64,
    targets: &Targets,
    stop: &dyn Fn(u64) -> bool,
    want: usize,
) -> Result<Entry, SkipReason> {
    let bytes = module.bytes_from(at).ok_or(SkipReason::NotInFile)?;
    let skip = if lopi_x86::is_endbr64(bytes) { 4 } else { 0 };
    let patch_at = at + skip as u64;
    let limit = end.saturating_sub(patch_at.0).min(bytes.len().saturating_sub(skip) as u64) as usize;
    let code = &bytes[skip..skip + limit.min(64)];
    let mut entry = Entry { patch_at, insns: Vec::new(), len: 0, ends_terminal: false, stopped_at_target: false };
    let mut ip = patch_at.0;
    while entry.len < want {
        if entry.len > 0 && stop(ip) {
            entry.stopped_at_target = true;
            break;
        }
        let Some(insn) = lopi_x86::decode_one(&code[entry.len..], ip) else {
            if entry.len == 0 {
                return Err(if code.is_empty() { SkipReason::TooShort } else { SkipReason::Undecodable });
            }
            break;
        };
        let next = ip + insn.len() as u64;
        if targets.range(ip + 1..next).next().is_some() {
            return Err(SkipReason::OverlappingCode);
        }
        if matches!(lopi_x86::flow(&insn), Flow::Call | Flow::IndirectCall) {
            // A moved call becomes push-return-address + jmp; the callee returns to the
            // original code right after it, so those bytes stay live: nothing past it moves.
            let Some(emulation) = lopi_x86::emulate_call(&insn) else {
                return Err(if entry.len == 0 { SkipReason::CallAtEntry } else { SkipReason::TooShort });
            };
            entry.len += insn.len();
            entry.insns.extend(emulation);
            entry.ends_terminal = true;
            entry.stopped_at_target = true;
            break;
        }
        entry.len += insn.len();
        entry.ends_terminal = lopi_x86::flow(&insn).is_terminal();
        entry.insns.push(insn);
        ip = next;
        if entry.ends_terminal {
            // Past a ret/jmp only padding (checked by the caller) may be overwritten.
            entry.stopped_at_target = stop(ip);
            break;
        }
    }
    Ok(entry)
}

/// Tactics 1 and 2 (and whole-function relocation for loops at the entry).
fn entry_site(
    module: &ElfModule<'_>,
    index: usize,
    end: u64,
    targets: &Targets,
    gaps: &mut Gaps,
) -> Result<Choice, SkipReason> {
    let function = &module.functions[index];
    let entry = entry_instructions(module, function, end, targets, JMP32_LEN)?;
    if targets.loops.contains(&entry.patch_at.0) || targets.loops.contains(&function.addr.0) {
        // A jump to the entry from the function itself is a loop iteration, not a call:
        // move the whole function so that the loop runs in the copy, past the counter.
        return whole_function(module, index, entry.patch_at, end, targets).map(Choice::Direct);
    }
    if entry.len >= JMP32_LEN {
        let covered = entry.len;
        return Ok(Choice::Direct(entry.into_site(index, Tactic::Jmp32, covered, None)));
    }
    let after = entry.patch_at.0 + entry.len as u64;
    let rest = JMP32_LEN - entry.len;
    if entry.ends_terminal
        && !entry.stopped_at_target
        && gaps.take_at(after, rest)
    {
        return Ok(Choice::Direct(entry.into_site(index, Tactic::Jmp32IntoPadding, JMP32_LEN, None)));
    }
    if entry.len < JMP8_LEN {
        return Err(SkipReason::TooShort);
    }
    Ok(Choice::NeedsBounce(entry))
}

/// Largest function moved whole; bigger loops at entries are skipped.
const MAX_WHOLE_FUNCTION: u64 = 4096;

/// GILK's whole-function relocation, for functions without calls or indirect jumps (so
/// that every path stays inside the moved copy until it returns or leaves by a jump).
///
/// The copy starts at the function's first byte (an `endbr64` included) so that a loop
/// reaching either the entry or the patch point is redirected into the copy.
fn whole_function(module: &ElfModule<'_>, index: usize, patch_at: Svma, end: u64, targets: &Targets) -> Result<Site, SkipReason> {
    let start = module.functions[index].addr;
    let len = end.saturating_sub(start.0);
    if module.functions[index].size == 0 || end < patch_at.0 + JMP32_LEN as u64 || len > MAX_WHOLE_FUNCTION {
        return Err(SkipReason::LoopAtEntry);
    }
    // Targets under the jump must be the function's own (they follow the copy).
    let covered = patch_at.0 + 1..patch_at.0 + JMP32_LEN as u64;
    if targets.range(covered).any(|t| !targets.loops.contains(t)) {
        return Err(SkipReason::LoopAtEntry);
    }
    let bytes = module.bytes_from(start).and_then(|b| b.get(..len as usize)).ok_or(SkipReason::NotInFile)?;
    let insns: Vec<Insn> = lopi_x86::decode(bytes, start.0).collect();
    let decoded: usize = insns.iter().map(|i| i.len()).sum();
    let movable = insns.iter().all(|i| !matches!(lopi_x86::flow(i), Flow::Call | Flow::IndirectCall | Flow::IndirectJump));
    let ends_terminal = insns.last().is_some_and(|i| lopi_x86::flow(i).is_terminal());
    if decoded != bytes.len() || !movable || !ends_terminal {
        return Err(SkipReason::LoopAtEntry);
    }
    Ok(Site {
        function: index,
        point: Point::Entry(Tactic::WholeFunction),
        owners: vec![index],
        action: Action::Count,
        patch_at,
        covered: JMP32_LEN,
        moved_from: start,
        moved_len: bytes.len(),
        relocated: insns,
        resume: None,
        bounce: None,
        exits: Vec::new(),
        nops: Vec::new(),
        copy_from: None,
        copy: None,
        syscalls: Vec::new(),
    })
}

