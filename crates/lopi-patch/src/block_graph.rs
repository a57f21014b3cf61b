//! A function's basic blocks as the planner finds them and the coverage analysis reads them:
//! the types both `blocks.rs` (which finds them and places their probes) and `implied.rs`
//! (which tells which blocks need no probe of their own) use, below both.
use crate::{Outcome, Refusal};

/// Where control goes from a block's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Edge {
    /// Falls through into the next block.
    Next(u64),
    /// A direct jump, conditional or not, to a block of the function.
    Jump(u64),
    /// An indirect jump: to any of the function's jump-table entries.
    Table,
    /// Returns, tail-calls or jumps out of the function.
    Leaves,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Block {
    pub start: u64,
    pub end: u64,
    pub instructions: u32,
    pub edges: Vec<Edge>,
    /// It calls (or traps): the call may not return, so running it does not imply its end.
    pub calls: bool,
}

/// A function's blocks, in address order (its entry first when it lies lowest), or why its
/// graph is not known.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct FunctionBlocks {
    pub function: usize,
    /// The function's address: its entry block's start.
    pub entry: u64,
    /// Each block with what a probe at its start is (`Probed` or `Skipped`).
    pub blocks: Result<Vec<(Block, Outcome)>, Refusal>,
    /// Where its indirect jumps may go (its jump tables' entries): the targets of `Edge::Table`.
    pub table: Vec<u64>,
}
