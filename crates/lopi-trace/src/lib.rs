//! Recorded data: what a rewritten module says about itself ([`ModuleMeta`]), how processes
//! store counts ([`DataFile`]), and the per-function view reports are made of ([`Profile`]).
//!
//! Readers never panic on malformed files: anything that does not fit is an error, or, for
//! a record cut short by a dying process, the end of the data.
#![forbid(unsafe_code)]

mod data;
mod export;
mod report;
mod timing;

pub use data::{DataError, DataFile, Record, ThreadChunk};
pub use export::{chrome_trace, flamegraph_svg, folded, pprof, ChromeEvent, ChromeTrace, ExportError, Weight};
pub use report::{Edge, FunctionCount, Profile, SwitchSummary, ThreadSummary, TimingSummary};
pub use timing::{ContextNode, EventKind, ProbeCost, Switched, ThreadProfile, TimedFunction, TraceEvent, Timing};

use serde::{Deserialize, Serialize};

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
