//! `str` and `stack` expressions, map keys and map reads.
//!
//! A `str` or `stack` expression leaves in `rax` the address of its value: a string constant,
//! a local, or a buffer of the frame it fills (a temporary the consumer releases once done
//! with it). What comes from a map is copied out at once, as a later map update may move the
//! slot it was read from.
use super::abi::{key_part_size, key_size, StackValue, StrBuiltin, STACK_FRAMES};
use super::func::{Gen, Helper, Result};
use super::CodegenError;
use crate::ir::{BinOp, Builtin, Expr, ExprKind, MapId, Type};
use core::mem::{offset_of, size_of};
use iced_x86::code_asm::*;

impl Gen<'_> {
    /// Evaluates a `str` expression: `rax` = the address of its `str_size` bytes.
    pub fn str(&mut self, expr: &Expr) -> Result {
        let size = self.program.str_size;
        match &expr.kind {
            ExprKind::Str(id) => self.literal(*id),
            ExprKind::Local(id) if expr.ty == Type::Str => self.frame_addr(rax, self.frame.local(id.0)),
            ExprKind::Builtin(builtin) => {
                let which = match builtin {
                    Builtin::Comm => StrBuiltin::Comm,
                    Builtin::Func => StrBuiltin::Func,
                    Builtin::Probe => StrBuiltin::Probe,
                    _ => return Err(CodegenError::Unchecked("a builtin that is not a str")),
                };
                let buffer = self.frame.alloc(size);
                self.zero(buffer, size)?;
                self.asm.mov(esi, which as u32)?;
                self.frame_addr(rdx, buffer)?;
                self.imm(rcx, size as i64)?;
                self.call(Helper::BuiltinStr)?;
                self.frame_addr(rax, buffer)
            }
            ExprKind::Map { map, keys } if expr.ty == Type::Str => {
                let buffer = self.frame.alloc(size);
                let mark = self.frame.mark();
                self.lookup(*map, keys)?;
                self.frame.release(mark);
                let (mut absent, mut done) = (self.asm.create_label(), self.asm.create_label());
                self.asm.test(rax, rax)?;
                self.asm.jz(absent)?;
                self.copy_to_frame(buffer, size)?;
                self.asm.jmp(done)?;
                self.bind(&mut absent)?;
                self.zero(buffer, size)?;
                self.bind(&mut done)?;
                self.frame_addr(rax, buffer)
            }
            ExprKind::ReadStr { ptr, len } => self.read_str(ptr, len.as_deref()),
            ExprKind::Ternary { cond, then, els } => self.ternary(cond, then, els, Gen::str),
            _ => Err(CodegenError::Unchecked("a str expression of another type")),
        }
    }

    /// `str(ptr)`, `str(ptr, len)`: at most `str_size` - 1 bytes, none for a length below 1.
    /// The last byte stays NUL, as bpftrace's strings of `str_size` bytes end with theirs
    /// (64: `str()` gives 63 characters).
    fn read_str(&mut self, ptr: &Expr, len: Option<&Expr>) -> Result {
        let size = self.program.str_size;
        let most = size.saturating_sub(1) as i64;
        let buffer = self.frame.alloc(size);
        let mark = self.frame.mark();
        let source = self.frame.alloc(8);
        self.zero(buffer, size)?;
        self.int(ptr)?;
        self.asm.mov(self.frame_qword(source)?, rax)?;
        match len {
            Some(len) => {
                self.int(len)?;
                self.imm(rcx, most)?;
                self.asm.cmp(rax, rcx)?;
                self.asm.cmovl(rcx, rax)?;
                self.asm.xor(eax, eax)?;
                self.asm.test(rcx, rcx)?;
                self.asm.cmovs(rcx, rax)?;
            }
            None => self.imm(rcx, most)?,
        }
        self.frame_addr(rsi, buffer)?;
        self.asm.mov(rdx, self.frame_qword(source)?)?;
        self.call(Helper::ReadStr)?;
        self.frame.release(mark);
        self.frame_addr(rax, buffer)
    }

    /// Evaluates a `stack` expression: `rax` = the address of its [`StackValue`].
    pub fn stack(&mut self, expr: &Expr) -> Result {
        match &expr.kind {
            ExprKind::Ustack { depth } | ExprKind::Pystack { depth, .. } => {
                let (helper, flags) = match expr.kind {
                    ExprKind::Pystack { gil_held: true, .. } => (Helper::Pystack, lopi_rt_abi::python::PYSTACK_GIL_HELD as i64),
                    ExprKind::Pystack { .. } => (Helper::Pystack, 0),
                    _ => (Helper::Ustack, 0),
                };
                let buffer = self.frame.alloc(size_of::<StackValue>());
                self.zero(buffer, size_of::<StackValue>())?;
                self.frame_addr(rsi, buffer + offset_of!(StackValue, frames))?;
                let depth = i64::from(*depth).min(STACK_FRAMES as i64);
                self.imm(rdx, depth | flags)?;
                self.call(helper)?;
                // The frame count is the helper's word, but never past the room it was given.
                self.imm(rcx, depth)?;
                self.asm.cmp(rax, rcx)?;
                self.asm.cmova(rax, rcx)?;
                self.asm.mov(self.frame_qword(buffer + offset_of!(StackValue, len))?, rax)?;
                self.frame_addr(rax, buffer)
            }
            ExprKind::Local(id) if expr.ty == Type::Stack => self.frame_addr(rax, self.frame.local(id.0)),
            ExprKind::Ternary { cond, then, els } => self.ternary(cond, then, els, Gen::stack),
            _ => Err(CodegenError::Unchecked("a stack expression of another type")),
        }
    }

    /// Evaluates `expr` of any type: an `int` into `rax`, the others' address into `rax`.
    pub fn value(&mut self, expr: &Expr) -> Result {
        match expr.ty {
            Type::Int | Type::Uint | Type::Usym => self.int(expr),
            Type::Str => self.str(expr),
            Type::Stack => self.stack(expr),
        }
    }

    /// `==`, `!=` of two strings: their `str_size` bytes compared with `repe cmpsb`, a count
    /// fixed at compile time.
    pub fn str_eq(&mut self, op: BinOp, lhs: &Expr, rhs: &Expr) -> Result {
        let left = self.frame.alloc(8);
        self.str(lhs)?;
        self.asm.mov(self.frame_qword(left)?, rax)?;
        self.str(rhs)?;
        self.asm.mov(rdi, rax)?;
        self.asm.mov(rsi, self.frame_qword(left)?)?;
        // ZF stays set when there is nothing to compare.
        self.asm.xor(eax, eax)?;
        self.imm(rcx, self.program.str_size as i64)?;
        self.asm.repe().cmpsb()?;
        if op == BinOp::Eq {
            self.asm.sete(al)?;
        } else {
            self.asm.setne(al)?;
        }
        Ok(())
    }

    /// Builds the key of `keys` in a frame temporary: each element's value in turn, packed as
    /// [`key_size`] says. Returns its offset and length.
    pub fn key(&mut self, map: MapId, keys: &[Expr]) -> Result<(usize, usize)> {
        let size = self.program.str_size;
        let map = &self.program.maps[map.0];
        let len = key_size(map, size);
        let parts: Vec<usize> = (0..keys.len()).map(|i| key_part_size(map, i, size)).collect();
        let key = self.frame.alloc(len);
        let mut at = key;
        for (element, part) in keys.iter().zip(parts) {
            let mark = self.frame.mark();
            self.value(element)?;
            match element.ty {
                Type::Int | Type::Uint | Type::Usym => self.asm.mov(self.frame_qword(at)?, rax)?,
                // A string whole; a stack's first words (its count, then the frames the map keeps).
                _ => self.copy_to_frame(at, part)?,
            }
            self.frame.release(mark);
            at += part;
        }
        Ok((key, len))
    }

    /// Calls a map helper (`map_slot`, `map_lookup`, `map_delete`) on `map` with the key of
    /// `keys`; the key's temporary stays allocated.
    pub fn map_call(&mut self, helper: Helper, map: MapId, keys: &[Expr]) -> Result {
        let (key, len) = self.key(map, keys)?;
        self.imm(rsi, map.0 as i64)?;
        self.frame_addr(rdx, key)?;
        self.imm(rcx, len as i64)?;
        self.call(helper)
    }

    /// `rax` = the slot of `map[keys]`, or null if absent.
    pub fn lookup(&mut self, map: MapId, keys: &[Expr]) -> Result {
        self.map_call(Helper::MapLookup, map, keys)
    }
}
