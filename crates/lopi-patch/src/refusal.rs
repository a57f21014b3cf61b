//! Why a point has no probe, for every kind of point: one [`Refusal`], whatever was refused (a
//! function's entry, a `syscall` instruction, a basic block, a function's timing). A
//! condition met at several kinds is one variant; its key, the word JSON output and
//! summaries show, is the same at every kind, and only the message names what it met
//! ([`Refusal::describe`]). Conditions whose keys differ stay apart (an exit's
//! `exit-too-short` and `exit-no-bounce-space` are not an entry's).

/// Why a point has no probe, or a probed function's calls are counted but not timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    // At an entry or a block (the entry tactics); several at a `syscall` or an exit too.
    TooShort,
    NoBounceSpace,
    CallAtEntry,
    Undecodable,
    NotInFile,
    OverlappingCode,
    RelocationFailed,
    OutOfRange,
    LoopAtEntry,
    ThreadInside,
    PartOfLockFunction,
    Implied,
    // At a `syscall` instruction.
    Misaligned,
    Covered,
    // At a timed function's exits, or of the function as a whole.
    ExitTooShort,
    ExitNoBounceSpace,
    JumpsIntoOtherCode,
    UnknownSize,
    AddressTooHigh,
    EntryPoint,
    ScriptCounts,
    ContinuesInLock,
}

/// The kind of point a refusal is told for: the same condition reads differently at each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    /// A function's entry.
    Entry,
    /// A timed function's exits: the refusal of its timing, which reads all its code (its block
    /// graph is read the same way, and is refused in the same words).
    Exit,
    /// A `syscall` instruction.
    Syscall,
    /// A basic block's start, or an instruction's point (the entry tactics, in their words).
    Block,
}

impl Refusal {
    /// The condition's name in JSON output and summaries.
    pub fn key(self) -> &'static str {
        match self {
            Refusal::TooShort => "too-short",
            Refusal::NoBounceSpace => "no-bounce-space",
            Refusal::CallAtEntry => "call-at-entry",
            Refusal::Undecodable => "undecodable",
            Refusal::NotInFile => "not-in-file",
            Refusal::OverlappingCode => "overlapping-code",
            Refusal::RelocationFailed => "relocation-failed",
            Refusal::OutOfRange => "out-of-range",
            Refusal::LoopAtEntry => "loop-at-entry",
            Refusal::ThreadInside => "thread-inside",
            Refusal::PartOfLockFunction => "part-of-lock-function",
            Refusal::Implied => "implied",
            Refusal::Misaligned => "misaligned",
            Refusal::Covered => "covered",
            Refusal::ExitTooShort => "exit-too-short",
            Refusal::ExitNoBounceSpace => "exit-no-bounce-space",
            Refusal::JumpsIntoOtherCode => "jumps-into-other-code",
            Refusal::UnknownSize => "unknown-size",
            Refusal::AddressTooHigh => "address-too-high",
            Refusal::EntryPoint => "entry-point",
            Refusal::ScriptCounts => "script-counts",
            Refusal::ContinuesInLock => "continues-in-lock",
        }
    }

    /// The condition said for a point of kind `at`.
    pub fn describe(self, at: PointKind) -> &'static str {
        use PointKind::{Block, Entry, Exit, Syscall};
        match (self, at) {
            (Refusal::TooShort, _) => "entry instructions cover fewer than 2 bytes before a branch target or the next function",
            (Refusal::NoBounceSpace, Syscall) => "fewer than 5 movable bytes in its basic block, no padding after it and no padding within 127 bytes for a bounce",
            (Refusal::NoBounceSpace, _) => "fewer than 5 bytes before a branch target or the next function, and no padding within 127 bytes for a bounce",
            (Refusal::CallAtEntry, _) => "the entry has a call through the stack pointer, which cannot be moved",
            (Refusal::Undecodable, Exit) => "the function's code does not decode to its end",
            (Refusal::Undecodable, _) => "entry bytes do not decode as x86-64",
            (Refusal::NotInFile, _) => "entry bytes are not in the file",
            (Refusal::OverlappingCode, _) => "a branch targets the middle of an entry instruction",
            (Refusal::RelocationFailed, Entry | Block) => "displaced instructions cannot be re-encoded in the trampoline area",
            (Refusal::RelocationFailed, Exit) => "an exit's instructions cannot be re-encoded in the trampoline area",
            (Refusal::RelocationFailed, Syscall) => "its instructions cannot be re-encoded in the trampoline area",
            (Refusal::OutOfRange, Syscall) => "the trampoline area is out of jmp rel32 range",
            (Refusal::OutOfRange, _) => "trampoline area is out of jmp rel32 range",
            (Refusal::LoopAtEntry, _) => "the function's own loop jumps to its entry and the function cannot be moved whole (too large, calls, or indirect jumps)",
            (Refusal::ThreadInside, Entry | Block) => "a thread of the running process was stopped inside the entry bytes and could not be moved out",
            (Refusal::ThreadInside, Exit) => "a thread of the running process was stopped inside an exit site and could not be moved out",
            (Refusal::ThreadInside, Syscall) => "a thread of the running process was stopped inside the site's bytes and could not be moved out",
            (Refusal::PartOfLockFunction, _) => "a lock function tail-jumps into it: its returns end lock calls (--probe locks)",
            (Refusal::Implied, _) => "a block whose running the probed blocks it dominates tell needs no probe of its own (--probe coverage)",
            (Refusal::Misaligned, _) => "decoding its function from the start does not reach it (it lies inside another instruction)",
            (Refusal::Covered, _) => "its bytes are already covered by another probe's patch that does not move it",
            (Refusal::ExitTooShort, _) => "an exit (ret or tail jump) has fewer than 2 movable bytes before it and no padding after it",
            (Refusal::ExitNoBounceSpace, _) => "an exit needs a bounce and there is no free padding within 127 bytes",
            (Refusal::JumpsIntoOtherCode, _) => "the function jumps into code outside any known function or fragment, so its exits are unknown",
            (Refusal::UnknownSize, _) => "the function's size is unknown",
            (Refusal::AddressTooHigh, _) => "the function's address does not fit the entry probe's 31-bit immediate",
            (Refusal::EntryPoint, _) => "the program's entry point never returns and runs before any timing in a rewritten file, so it is counted only",
            (Refusal::ScriptCounts, _) => "the probe script only counts its calls, which its plain counting probe does",
            (Refusal::ContinuesInLock, _) => "the call goes on, by a tail jump, in another lock function, whose probes time it as the lock operation",
        }
    }
}

