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
mod functions_ran;
mod locks;
mod meta;
mod open;
mod own_calls;
pub mod otlp;
mod pprof;
mod processes;
mod report;
pub mod script_areas;
mod syscall_log;
mod syscalls;
mod threads;
mod timing;
mod view;

pub use blocks::{BlockCount, ModuleBlocks};
pub use functions_ran::{FunctionRan, FunctionsRan, ModuleFunctions};
pub use breakdown::{amdahl, profile_serial_fraction, Breakdown, Parts, ThreadBreakdown};
pub use data::{Damage, DataError, DataFile, EndedCpu, Parallelism, ProcessEnd, ProcessMaps, Record, ThreadChunk, ThreadName};
pub use open::{EndSeen, Ended, OpenCall};
pub use own_calls::{OwnCall, OwnCalls};
pub use otlp::OtlpContext;
pub use processes::{ProcessRow, ProcessRun, Processes};
pub use meta::{MetaAction, MetaBlock, MetaFunction, MetaPoint, MetaProbe, MetaScript, MetaSyscall, MetaUnprobedBlock, ModuleMeta, META_VERSION, UNPROBED_CODE};
pub use locks::{LockCounts, LockSite, LockStats, LockThread, Locks};
pub use export::{chrome_trace, flamegraph_svg, folded, folded_svg, ChromeEvent, ChromeTrace, ExportError, Weight};
pub use pprof::{lock_pprof, pprof, LockProfile, SiteFrame};
pub use report::{Edge, FunctionCount, Profile, SwitchSummary, ThreadSummary, TimingSummary};
pub use timing::{BudgetUse, Sampling};
pub use view::{Missing, View};
pub use syscall_log::LoggedCall;
pub use syscalls::{SiteStats, SyscallStats, Syscalls, ThreadSyscalls};
pub use threads::{ThreadCalls, ThreadCpu, ThreadLife, Threads};
pub use timing::{lock_function_name, ContextNode, EventKind, LockCall, ProbeCost, Switched, ThreadProfile, TimedFunction, TraceEvent, Timing};


/// The name of x86-64 system call `nr` (`read`), or `syscall_N` for a number this build does
/// not know.
pub fn syscall_name(nr: u64) -> String {
    match u32::try_from(nr).ok().and_then(|n| ::syscalls::Sysno::new(n as usize)) {
        Some(s) => s.name().to_string(),
        None if nr == lopi_rt_abi::syscall_name::NR_OTHER => "syscall_other".to_string(),
        None => format!("syscall_{nr}"),
    }
}
