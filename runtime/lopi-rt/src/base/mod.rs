//! What the rest of the runtime builds on, importing nothing above it: system calls (`sys.rs`),
//! each counted as the runtime's own (`own_calls.rs`); the TSC (`tsc.rs`) and its rate against
//! `CLOCK_MONOTONIC` (`clock.rs`); this module's variables and counters (`vars.rs`); the words
//! lopi owns in glibc's thread control block (`tcb.rs`); appending to the data file
//! (`data_file.rs`); copying memory (`mem.rs`); the environment (`env.rs`); a byte string on
//! the stack (`buf.rs`).
pub(crate) mod buf;
pub(crate) mod clock;
pub(crate) mod data_file;
pub(crate) mod env;
pub(crate) mod mem;
pub(crate) mod own_calls;
pub(crate) mod sys;
pub(crate) mod tcb;
pub(crate) mod tsc;
pub(crate) mod vars;
