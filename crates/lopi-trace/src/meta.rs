//! Module metadata: what a rewritten module says about itself, written as JSON by the image
//! builder (`lopi-image`) and copied by the runtime into each record. Its probes are one list
//! in counter order, each a point and an action, as the planner's `lopi_patch::Probe`s are.
mod legacy;

use serde::{Deserialize, Serialize};

/// Version of [`ModuleMeta`]'s JSON layout. Version 2 (three lists, `functions`, `syscalls`
/// and `blocks`, whose counter ranges followed each other) still reads: see [`ModuleMeta::from_json`].
pub const META_VERSION: u32 = 3;

/// Written by the rewriter into the module, copied by the runtime into each record.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModuleMeta {
    pub version: u32,
    /// Path of the rewritten file as given to `lopi rewrite -o`.
    pub module: String,
    /// Path of the original input.
    pub source: String,
    /// File address of the counter array (8 bytes per probe): timed calls and system calls
    /// name their probe by its counter's runtime address.
    #[serde(default)]
    pub counters: u64,
    /// Every probe, in counter order: probe `i` counts in counter `i`.
    #[serde(default)]
    pub probes: Vec<MetaProbe>,
    /// Blocks of the probed functions that have no probe, and why.
    #[serde(default)]
    pub unprobed_blocks: Vec<MetaUnprobedBlock>,
    /// The probe script compiled into the module (`lopi trace`, `lopi rewrite --script`), by
    /// which a reader finds and decodes the threads' script areas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<MetaScript>,
}

/// A probe: where it is and what it does there.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaProbe {
    #[serde(flatten)]
    pub point: MetaPoint,
    pub action: MetaAction,
}

/// Where a probe is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "point", rename_all = "snake_case")]
pub enum MetaPoint {
    /// A function's entry.
    Entry(MetaFunction),
    /// A `syscall` instruction.
    Syscall(MetaSyscall),
    /// A basic block's start; with [`MetaAction::Probe`], an instruction's point.
    Block(MetaBlock),
}

/// What a probe does, as `lopi_patch::Action`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetaAction {
    /// Counts executions.
    Count,
    /// Times the function's calls (its exits are probed too).
    Time,
    /// Times a lock operation.
    Lock,
    /// Marks that the point ran (`--probe coverage`).
    Mark,
    /// Runs the probe script's (or C handler's) probes: a script's `addr:` point at a block.
    Probe,
}

impl MetaAction {
    /// The function's calls are timed (entry and exit probed).
    pub fn timed(self) -> bool {
        matches!(self, MetaAction::Time | MetaAction::Lock)
    }
}

/// A probe script compiled into a module: its text and the options that shape its areas.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaScript {
    pub source: String,
    /// `--max-entries`, when given.
    pub max_entries: Option<u32>,
    pub ring_len: u64,
}

/// A probed function.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaFunction {
    pub name: String,
    pub addr: u64,
    pub size: u64,
}

/// A probed `syscall` instruction.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaSyscall {
    /// File address of the instruction (0 for the dispatch point).
    pub addr: u64,
    /// The function it is in ("" when none is known); [`UNPROBED_CODE`] for the dispatch
    /// point, which stands for every call made from code no probe covers.
    pub function: String,
    /// The system call number, when the code sets it right before.
    pub nr: Option<u32>,
}

/// The function name of the dispatch point's site (`lopi_patch::ProbePoint::Dispatch`).
pub const UNPROBED_CODE: &str = "[unprobed code]";

/// A probed basic block (or an instruction's point).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaBlock {
    /// File addresses of its first instruction and of the end of its last.
    pub addr: u64,
    pub end: u64,
    pub function: String,
}

/// A block of a probed function without a probe.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaUnprobedBlock {
    pub addr: u64,
    pub end: u64,
    pub function: String,
    pub reason: String,
    /// Probed blocks of which any one that ran implies this block ran.
    #[serde(default)]
    pub implied_by: Vec<u64>,
    /// Probed blocks each of which ran if this block did.
    #[serde(default)]
    pub needs: Vec<u64>,
    /// It ran exactly when one of `implied_by` did.
    #[serde(default)]
    pub exactly: bool,
}

impl ModuleMeta {
    /// Reads the JSON a module carries: this version's, or an earlier one converted to it.
    pub fn from_json(bytes: &[u8]) -> Result<ModuleMeta, String> {
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let unreadable = |e: serde_json::Error| format!("unreadable metadata: {e}");
        match serde_json::from_slice::<Version>(bytes).map_err(unreadable)?.version {
            META_VERSION => serde_json::from_slice(bytes).map_err(unreadable),
            v if v < META_VERSION => serde_json::from_slice::<legacy::ModuleMetaV2>(bytes).map(ModuleMeta::from).map_err(unreadable),
            v => Err(format!("metadata of version {v}, written by a newer lopi; this lopi reads versions up to {META_VERSION}")),
        }
    }

    /// The probed functions' entries: (counter, function, action).
    pub fn functions(&self) -> impl Iterator<Item = (usize, &MetaFunction, MetaAction)> {
        self.probes.iter().enumerate().filter_map(|(c, p)| match &p.point {
            MetaPoint::Entry(f) => Some((c, f, p.action)),
            _ => None,
        })
    }

    /// The probed `syscall` instructions: (counter, site).
    pub fn syscalls(&self) -> impl Iterator<Item = (usize, &MetaSyscall)> {
        self.probes.iter().enumerate().filter_map(|(c, p)| match &p.point {
            MetaPoint::Syscall(s) => Some((c, s)),
            _ => None,
        })
    }

    /// The probed blocks and instruction points: (counter, block, action).
    pub fn blocks(&self) -> impl Iterator<Item = (usize, &MetaBlock, MetaAction)> {
        self.probes.iter().enumerate().filter_map(|(c, p)| match &p.point {
            MetaPoint::Block(b) => Some((c, b, p.action)),
            _ => None,
        })
    }

    /// The runtime address of `counter` in a process that loaded the module at `load_bias`.
    pub fn counter_addr(&self, counter: usize, load_bias: u64) -> u64 {
        self.counters.wrapping_add((counter as u64).wrapping_mul(8)).wrapping_add(load_bias)
    }
}
