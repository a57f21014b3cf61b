//! Timing probes: per-thread shadow stacks and calling-context trees in the data file.
//!
//! A timed trampoline calls `lopi_enter_stub` with the function's counter index pushed, and
//! every exit site calls `lopi_exit_stub` the same way right before its `ret` or tail jump.
//! The stubs (`probes/entry_exit_stubs.rs`) save the registers they use (the runtime is built
//! without vector registers, see the blob's build script) and call the Rust slow paths
//! (`probes/entry_exit.rs`) for what their fast paths do not handle. `thread/` holds a thread's
//! state and its growth, `budget.rs` the perturbation budget.
//!
//! A frame is keyed by the stack pointer at its entry, which is also the stack pointer at
//! its `ret`. Any probe that runs at or above a frame's stack pointer proves that frame is
//! gone (longjmp, an exception, a tail call through an unprobed path): it is closed then,
//! so the shadow stack always matches the real one.
//!
//! Per-thread state is found through `fs:0x38` (`base/tcb.rs`), glibc's `tcbhead_t.unused_vgetcpu_cache`,
//! a word of the thread control block that nothing else uses on x86-64. It points at the
//! thread's chunk, a `MAP_SHARED` mapping of the data file: results survive crashes and
//! `_exit`, and threads never share a cache line on the hot path. A forked child inherits
//! the pointer; the chunk's pid, compared with a wipe-on-fork page, tells it to start its
//! own.
//!
//! Its layers, each importing only those before it (and, below `timing/`, `base/`,
//! `loader.rs` and `retire.rs`): `records/` (what a process records besides its threads'
//! chunks), `thread/` (a thread's state and what every probe does with it), `script/` and
//! `whatif/` (what probes run: a script's probes, an emulated kernel), `budget.rs` (the
//! budget's checks, run by exit probes), `probes/` (each kind's stubs and slow paths),
//! `calibrate.rs` (the probes' cost, measured at start-up), `init.rs` (`enable`, at the
//! module's init). This file only declares them.
mod budget;
mod calibrate;
mod init;
mod probes;
mod records;
mod script;
mod thread;
mod whatif;

pub(crate) use init::enable;
