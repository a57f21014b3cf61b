//! Recorded data: what a rewritten module says about itself ([`ModuleMeta`]), how processes
//! store counts ([`DataFile`]), and the per-function view reports are made of ([`Profile`]).
//!
//! Readers never panic on malformed files: a record or chunk that does not fit is skipped
//! and said so ([`Damage`]), the rest is read; a record a dying process left unfinished is
//! noted ([`DataFile::truncated`]).
#![forbid(unsafe_code)]

mod blocks;
mod breakdown;
mod data;
mod export;
mod locks;
mod open;
mod own_calls;
mod pprof;
mod report;
pub mod script_areas;
mod syscalls;
mod threads;
mod timing;

pub use blocks::{BlockCount, ModuleBlocks};
pub use breakdown::{amdahl, profile_serial_fraction, Breakdown, Parts, ThreadBreakdown};
pub use data::{Damage, DataError, DataFile, EndedCpu, Parallelism, ProcessEnd, ProcessMaps, Record, ThreadChunk, ThreadName};
pub use open::{EndSeen, Ended, OpenCall};
pub use own_calls::{OwnCall, OwnCalls};
pub use locks::{LockCounts, LockSite, LockStats, LockThread, Locks};
pub use export::{chrome_trace, flamegraph_svg, folded, ChromeEvent, ChromeTrace, ExportError, Weight};
pub use pprof::{lock_pprof, pprof, LockProfile, SiteFrame};
pub use report::{Edge, FunctionCount, Profile, SwitchSummary, ThreadSummary, TimingSummary};
pub use timing::BudgetUse;
pub use syscalls::{SiteStats, SyscallStats, Syscalls, ThreadSyscalls};
pub use threads::{ThreadCalls, ThreadCpu, ThreadLife, Threads};
pub use timing::{lock_function_name, ContextNode, EventKind, LockCall, ProbeCost, Switched, ThreadProfile, TimedFunction, TraceEvent, Timing};

use serde::{Deserialize, Serialize};

/// The name of x86-64 system call `nr` (`read`), or `syscall_N` for a number this build does
/// not know.
pub fn syscall_name(nr: u64) -> String {
    match u32::try_from(nr).ok().and_then(|n| ::syscalls::Sysno::new(n as usize)) {
        Some(s) => s.name().to_string(),
        None if nr == lopi_rt_abi::syscall_name::NR_OTHER => "syscall_other".to_string(),
        None => format!("syscall_{nr}"),
    }
}

/// Version of [`ModuleMeta`]'s JSON layout.
pub const META_VERSION: u32 = 2;

/// Written by the rewriter into the module, copied by the runtime into each record.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModuleMeta {
    pub version: u32,
    /// Path of the rewritten file as given to `lopi rewrite -o`.
    pub module: String,
    /// Path of the original input.
    pub source: String,
    /// Probed functions; index = counter index.
    pub functions: Vec<MetaFunction>,
    /// File address of the counter array (8 bytes per function): timed calls name their
    /// function by its counter's runtime address.
    #[serde(default)]
    pub counters: u64,
    /// Probed `syscall` instructions; index + `functions.len()` = counter index.
    #[serde(default)]
    pub syscalls: Vec<MetaSyscall>,
    /// Probed basic blocks; index + `functions.len() + syscalls.len()` = counter index.
    #[serde(default)]
    pub blocks: Vec<MetaBlock>,
    /// Blocks of the probed functions that have no probe, and why.
    #[serde(default)]
    pub unprobed_blocks: Vec<MetaUnprobedBlock>,
    /// The block counters are marks, 1 once the block ran (`--probe coverage`).
    #[serde(default)]
    pub block_marks: bool,
    /// The probe script compiled into the module (`lopi trace`, `lopi rewrite --script`), by
    /// which a reader finds and decodes the threads' script areas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<MetaScript>,
}

/// A module's probe script: its text and the options that shape its areas.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaScript {
    pub source: String,
    /// `--max-entries`, when given.
    pub max_entries: Option<u32>,
    pub ring_len: u64,
}

/// A probed basic block.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaBlock {
    /// File addresses of its first instruction and of the end of its last.
    pub addr: u64,
    pub end: u64,
    pub function: String,
    /// Not a block's counter but an instruction's probe (a script's `addr:` point): block
    /// reports and coverage leave it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub point: bool,
}

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

/// A probed `syscall` instruction.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaSyscall {
    /// File address of the instruction.
    pub addr: u64,
    /// The function it is in ("" when none is known).
    pub function: String,
    /// The system call number, when the code sets it right before.
    pub nr: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaFunction {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    /// Entry and exit probed: its calls are timed.
    #[serde(default)]
    pub timed: bool,
}
