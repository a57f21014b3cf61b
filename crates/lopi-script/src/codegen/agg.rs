//! Aggregation updates on a slot, laid out as [`super::abi`] defines. Maps are per thread, so
//! plain read-modify-writes suffice; sums and counts wrap.
use super::abi::{lhist_linear_buckets, AvgSlot, ExtremeSlot, StatsSlot};
use super::func::{Gen, Result};
use crate::ir::AggKind;
use core::mem::offset_of;
use iced_x86::code_asm::*;

/// A field of the slot `r8` points at.
fn field(offset: usize) -> AsmMemoryOperand {
    qword_ptr(r8 + offset)
}

impl Gen<'_> {
    /// Adds the value in `rax` (none for `count()`) to the slot `r8` points at.
    pub fn update(&mut self, kind: AggKind) -> Result {
        match kind {
            AggKind::Count => self.asm.inc(field(0))?,
            AggKind::Sum { .. } => self.asm.add(field(0), rax)?,
            AggKind::Avg => {
                self.asm.add(field(offset_of!(AvgSlot, sum)), rax)?;
                self.asm.inc(field(offset_of!(AvgSlot, count)))?;
            }
            AggKind::Min | AggKind::Max => self.extreme(kind == AggKind::Min)?,
            AggKind::Stats => self.stats()?,
            AggKind::Hist => self.hist()?,
            AggKind::Lhist { min, max, step } => self.lhist(min, max, step)?,
        }
        Ok(())
    }

    /// `min()`, `max()`: the first value, then whichever is smaller (larger), as signed numbers
    /// whatever their type (bpftrace's compare so).
    fn extreme(&mut self, min: bool) -> Result {
        let (mut store, mut done) = (self.asm.create_label(), self.asm.create_label());
        self.asm.cmp(field(offset_of!(ExtremeSlot, set)), 0)?;
        self.asm.je(store)?;
        self.asm.cmp(rax, field(offset_of!(ExtremeSlot, value)))?;
        if min {
            self.asm.jge(done)?;
        } else {
            self.asm.jle(done)?;
        }
        self.bind(&mut store)?;
        self.asm.mov(field(offset_of!(ExtremeSlot, value)), rax)?;
        self.asm.mov(field(offset_of!(ExtremeSlot, set)), 1)?;
        self.bind(&mut done)
    }

    fn stats(&mut self) -> Result {
        let (mut first, mut max, mut done) = (self.asm.create_label(), self.asm.create_label(), self.asm.create_label());
        let (min_at, max_at) = (field(offset_of!(StatsSlot, min)), field(offset_of!(StatsSlot, max)));
        self.asm.mov(rcx, field(offset_of!(StatsSlot, count)))?;
        self.asm.inc(field(offset_of!(StatsSlot, count)))?;
        self.asm.add(field(offset_of!(StatsSlot, sum)), rax)?;
        self.asm.test(rcx, rcx)?;
        self.asm.jz(first)?;
        self.asm.cmp(rax, min_at)?;
        self.asm.jge(max)?;
        self.asm.mov(min_at, rax)?;
        self.bind(&mut max)?;
        self.asm.cmp(rax, max_at)?;
        self.asm.jle(done)?;
        self.asm.mov(max_at, rax)?;
        self.asm.jmp(done)?;
        self.bind(&mut first)?;
        self.asm.mov(min_at, rax)?;
        self.asm.mov(max_at, rax)?;
        self.bind(&mut done)
    }

    /// `hist()`: counter 0 for negatives, 1 for 0, `2 + floor(log2 v)` above
    /// ([`super::abi::hist_bucket`]).
    fn hist(&mut self) -> Result {
        let (mut negative, mut zero, mut count) = (self.asm.create_label(), self.asm.create_label(), self.asm.create_label());
        self.asm.test(rax, rax)?;
        self.asm.js(negative)?;
        self.asm.jz(zero)?;
        self.asm.bsr(rcx, rax)?;
        self.asm.add(rcx, 2)?;
        self.asm.jmp(count)?;
        self.bind(&mut negative)?;
        self.asm.xor(ecx, ecx)?;
        self.asm.jmp(count)?;
        self.bind(&mut zero)?;
        self.asm.mov(ecx, 1)?;
        self.bind(&mut count)?;
        self.asm.inc(qword_ptr(r8 + rcx * 8))?;
        Ok(())
    }

    /// `lhist(.., min, max, step)`: counter 0 below `min`, the last from `max` up, else
    /// `1 + (v - min) / step` ([`super::abi::lhist_bucket`]). `v - min` is below `max - min`,
    /// so it is exact as an unsigned number even where it overflows an `i64`.
    fn lhist(&mut self, min: i64, max: i64, step: i64) -> Result {
        let (mut below, mut above, mut count) = (self.asm.create_label(), self.asm.create_label(), self.asm.create_label());
        self.imm(rcx, min)?;
        self.asm.cmp(rax, rcx)?;
        self.asm.jl(below)?;
        self.imm(rdx, max)?;
        self.asm.cmp(rax, rdx)?;
        self.asm.jge(above)?;
        self.asm.sub(rax, rcx)?;
        self.imm(rcx, step.max(1))?;
        self.asm.xor(edx, edx)?;
        self.asm.div(rcx)?;
        self.asm.lea(rcx, ptr(rax + 1))?;
        self.asm.jmp(count)?;
        self.bind(&mut below)?;
        self.asm.xor(ecx, ecx)?;
        self.asm.jmp(count)?;
        self.bind(&mut above)?;
        self.imm(rcx, lhist_linear_buckets(min, max, step) as i64 + 1)?;
        self.bind(&mut count)?;
        self.asm.inc(qword_ptr(r8 + rcx * 8))?;
        Ok(())
    }
}
