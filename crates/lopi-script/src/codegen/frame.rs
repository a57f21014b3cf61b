//! The stack frame of one probe function: its locals at the bottom, then temporaries (spilled
//! operands, string buffers, keys, `printf` arguments) handed out like a stack. Everything is
//! addressed from `rsp`, which does not move between the prologue and the epilogue.
use super::abi::value_size;
use crate::ir::{Probe, Type};

/// Offsets are multiples of this, so that every `int` and pointer is aligned.
const ALIGN: usize = 8;

fn aligned(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN) * ALIGN
}

pub(super) struct Frame {
    /// Offset and type of each local, by [`crate::ir::LocalId`].
    locals: Vec<(usize, Type)>,
    /// Bytes of the locals: what the prologue zeroes.
    locals_size: usize,
    /// End of the temporaries in use.
    top: usize,
    /// The most `top` has been.
    high: usize,
}

/// Where the temporaries stood; [`Frame::release`] frees everything allocated since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mark(usize);

impl Frame {
    pub fn new(probe: &Probe, str_size: usize) -> Frame {
        let mut locals = Vec::with_capacity(probe.locals.len());
        let mut end = 0;
        for local in &probe.locals {
            locals.push((end, local.ty));
            end += aligned(value_size(local.ty, str_size));
        }
        Frame { locals, locals_size: end, top: end, high: end }
    }

    pub fn local(&self, id: usize) -> usize {
        self.locals[id].0
    }

    pub fn local_type(&self, id: usize) -> Type {
        self.locals[id].1
    }

    pub fn locals_size(&self) -> usize {
        self.locals_size
    }

    /// A temporary of `bytes` (rounded up to 8), live until released.
    pub fn alloc(&mut self, bytes: usize) -> usize {
        let at = self.top;
        self.top += aligned(bytes);
        self.high = self.high.max(self.top);
        at
    }

    pub fn mark(&self) -> Mark {
        Mark(self.top)
    }

    pub fn release(&mut self, mark: Mark) {
        self.top = mark.0;
    }

    /// Keeps whatever either of two alternatives allocated past a common mark: only one of them
    /// runs, so the second reuses the first's space, and the result of either stays live.
    pub fn join(&mut self, other: Mark) {
        self.top = self.top.max(other.0);
    }

    /// Bytes to reserve below the saved register: a multiple of 16, so that `rsp` is aligned
    /// at every call (the return address and one push make 16).
    pub fn size(&self) -> usize {
        self.high.div_ceil(16) * 16
    }
}
