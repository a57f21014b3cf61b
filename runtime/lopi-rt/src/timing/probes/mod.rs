//! The probes, one kind per file, each importing only the layers below (`thread/`, `script/`,
//! `whatif/`, `records/`, `budget.rs`, `base/`), never another kind: the entry and exit
//! probes (`entry_exit_stubs.rs`, their assembly fast paths; `entry_exit.rs`, their slow paths),
//! system-call probes (`syscalls.rs`; `dispatch.rs`, the `SIGSYS` handler that records
//! the calls of code no probe covers as theirs, and `dispatch_masks.rs`, the program's signal
//! calls made so that it never blocks that signal), lock-operation probes (`lock_stubs.rs`, `locks.rs`) and
//! an instruction's probes (`points.rs`). A stub names its slow path's symbol; every stub
//! begins as `claim.rs` writes once (`claim_thread!`, `stub_asm!`).
#[macro_use]
mod claim;
pub(crate) mod dispatch;
mod dispatch_masks;
pub(crate) mod entry_exit;
pub(crate) mod entry_exit_stubs;
pub(crate) mod lock_stubs;
pub(crate) mod locks;
pub(crate) mod points;
mod syscall_log;
pub(crate) mod syscalls;
