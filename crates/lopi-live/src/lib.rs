//! The live installer: puts the planner's probes into a running process and takes them out.
//!
//! This is GILK's runtime code splicing applied to a user process. With every thread held
//! (ptrace), lopi maps each module's probe image (`lopi-image`: counters, runtime, trampolines)
//! within `jmp rel32` reach of the module, writes it through `/proc/PID/mem`, runs the
//! runtime's init in one thread, then writes the jumps and lets the threads go. From then on
//! the probes run in-process exactly as in a rewritten file; ptrace is not involved again
//! until removal, which writes the original bytes back, waits until no thread is inside a
//! trampoline or the runtime, and unmaps everything lopi mapped.
//!
//! Safety with running threads: nothing is written while a thread runs, and no thread is left
//! with its instruction pointer strictly inside bytes being replaced. A thread found there is
//! stepped out (a few instructions: a site's bytes hold no branch target); one that cannot be
//! (waiting in a system call that would restart there) costs that site: the planner drops it
//! and lays out again.
#![deny(unsafe_code)]

mod clock;
mod dispatch;
mod error;
mod glibc;
mod install;
mod loads;
mod placement;
mod plan;
mod sampling;
pub mod procfs;
mod spec;
mod startup_log;
mod target;
mod tracee;
mod tree;

pub use clock::{millis, tsc, tsc_hz};
pub use error::{start_failure, LiveError};
pub use install::{InstalledModule, Installation, Removal};
pub use plan::{plan, ModulePlan, Plan};
pub use spec::{library_named, ModuleRequest, Spec};
pub use target::{launch, preflight, LogStartup, Target};
pub use tree::{Detached, Ended, Process, Tree, TreeEvent};
