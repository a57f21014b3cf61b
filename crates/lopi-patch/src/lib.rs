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
mod entry;
pub mod blocks;
pub use points::{point_fits, PointError};
mod implied;
mod exits;
mod fragments;
mod functions;
mod gaps;
mod layout;
mod lend;
mod points;
mod probe_set;
mod refusal;
mod locks;
mod progress;
mod select;
mod stored;
mod syscalls;
mod targets;
mod timed;

pub use probe_set::{Measure, Place, Probes};
pub use refusal::{PointKind, Refusal};
pub use progress::{Progress, Stage};
pub use select::{select, select_with};
pub use stored::StoredError;
pub use syscalls::SyscallSite;
use lopi_elf::{ElfModule, Svma};
use lopi_x86::{ExitKind, Insn};
use std::collections::BTreeSet;
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

/// What happens to one probe point: a function's entry, a `syscall` instruction, a basic
/// block's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// A site of its own, patched with this tactic.
    Probed(Tactic),
    /// A `syscall` moved by the site of its function's entry or of an exit, whose trampoline
    /// probes it.
    Moved,
    Skipped(Refusal),
    /// A function left out by `--functions` / `--exclude`.
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
    Untimed(Refusal),
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
    /// System calls from code no probe covers are caught too (`lopi_rt_abi::dispatch`): the
    /// system-call trampolines let their own calls through, and the plan gets a
    /// [`ProbePoint::Dispatch`] probe.
    pub dispatch: bool,
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
/// sites, then blocks and instructions, then the dispatch point: the order the runtime's
/// tables and the metadata keep).
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
    /// Every system call made from code no probe covers, caught by the runtime's `SIGSYS`
    /// handler (Syscall User Dispatch): no patch, always the plan's last probe.
    Dispatch,
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
