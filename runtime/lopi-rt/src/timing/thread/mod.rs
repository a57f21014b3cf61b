//! One thread's timing state and what every probe does with it. Each file imports only those
//! before it (and `base/`, `records/`), and adds to `Thread`: `chunk.rs` (the type: the
//! thread's chunk of the data file in place), `budget_state.rs` (the budget's state in the
//! chunk), `sampling.rs` (sampled time: the thread's CPU-time timer and its handler, which
//! advance the thread's clock), `tree.rs` (finding and adding calling-context nodes; growing
//! the tree and the shadow stack), `start.rs` (`Thread::current`: a new thread's chunk, a forked child's inherited
//! calls), `calls.rs` (claiming the thread, opening and closing calls' frames), `fork.rs`
//! (the fork handlers' snapshot of the open calls, which `start.rs` reads from the TCB),
//! `dispatch.rs` (Syscall User Dispatch turned on for a thread with its first chunk).
pub(crate) mod budget_state;
pub(crate) mod calls;
pub(crate) mod chunk;
pub(crate) mod dispatch;
pub(crate) mod fork;
pub(crate) mod sampling;
pub(crate) mod start;
pub(crate) mod tree;
