//! Statements. Each one releases the temporaries it took; evaluation is left to right, keys
//! before values, and a map's slot is asked for only once the value is known, so that no map
//! call comes between getting a slot and writing it.
use super::abi::{value_size, ScriptCtx, ValueType};
use super::func::{Gen, Helper, Result};
use super::CodegenError;
use crate::ir::{BinOp, Expr, FormatId, IfArm, LocalId, MapId, Stmt, Type, ValueKind};
use core::mem::offset_of;
use iced_x86::code_asm::*;

impl Gen<'_> {
    pub fn stmts(&mut self, stmts: &[Stmt]) -> Result {
        stmts.iter().try_for_each(|stmt| self.stmt(stmt))
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result {
        let mark = self.frame.mark();
        match stmt {
            Stmt::SetLocal { local, op, value } => self.set_local(*local, *op, value)?,
            Stmt::SetMap { map, keys, op, value } => self.set_map(*map, keys, *op, value)?,
            Stmt::Aggregate { map, keys, value } => self.aggregate(*map, keys, value.as_ref())?,
            Stmt::If { arms, els } => self.if_chain(arms, els)?,
            Stmt::Delete { map, keys } => self.map_call(Helper::MapDelete, *map, keys)?,
            Stmt::Clear(map) => self.map_only(Helper::MapClear, *map)?,
            Stmt::PrintMap { map, top, div } => {
                self.imm(rdx, i64::from(*top))?;
                self.imm(rcx, i64::from(*div))?;
                self.map_only(Helper::PrintMap, *map)?;
            }
            // `exit()` also ends this run: what follows it would run after the script asked to stop.
            Stmt::Exit => {
                self.asm.mov(qword_ptr(rbx + offset_of!(ScriptCtx, exit)), 1)?;
                self.asm.jmp(self.exit)?;
            }
            Stmt::Printf { format, args } => self.printf(*format, args)?,
            Stmt::Print(value) => self.print(value)?,
            Stmt::Join { array, sep } => {
                self.int(array)?;
                self.asm.mov(rsi, rax)?;
                self.imm(rdx, sep.0 as i64)?;
                self.call(Helper::Join)?;
            }
        }
        self.frame.release(mark);
        Ok(())
    }

    fn set_local(&mut self, local: LocalId, op: Option<BinOp>, value: &Expr) -> Result {
        let at = self.frame.local(local.0);
        let ty = self.frame.local_type(local.0);
        match (value.ty, op) {
            (Type::Int | Type::Uint | Type::Usym, None) => {
                self.int(value)?;
                self.asm.mov(self.frame_qword(at)?, rax)?;
            }
            (Type::Int | Type::Uint, Some(op)) => {
                self.int(value)?;
                self.asm.mov(rcx, rax)?;
                self.asm.mov(rax, self.frame_qword(at)?)?;
                self.arith(op, Type::unsigned_op(op, ty, value.ty))?;
                self.asm.mov(self.frame_qword(at)?, rax)?;
            }
            // A copy onto itself (`$s = $s`) is harmless.
            (ty, _) => {
                self.value(value)?;
                self.copy_to_frame(at, value_size(ty, self.program.str_size))?;
            }
        }
        Ok(())
    }

    /// Evaluates the keys and the value (kept in a temporary: the value, or the address of a
    /// string), then `r8` = the slot, skipping to `skip` when the map is full.
    fn slot_for(&mut self, map: MapId, keys: &[Expr], value: Option<&Expr>, skip: CodeLabel) -> Result<usize> {
        let (key, len) = self.key(map, keys)?;
        let held = self.frame.alloc(8);
        if let Some(value) = value {
            self.value(value)?;
            self.asm.mov(self.frame_qword(held)?, rax)?;
        }
        // A map without keys: the slot the thread cached, if it did (no helper call).
        let mut found = self.asm.create_label();
        let mut call = self.asm.create_label();
        if keys.is_empty() {
            self.asm.mov(rax, qword_ptr(rbx + offset_of!(ScriptCtx, scalars)))?;
            self.asm.test(rax, rax)?;
            self.asm.jz(call)?;
            self.asm.mov(rax, qword_ptr(rax + 8 * map.0))?;
            self.asm.test(rax, rax)?;
            self.asm.jnz(found)?;
        }
        self.bind(&mut call)?;
        self.imm(rsi, map.0 as i64)?;
        self.frame_addr(rdx, key)?;
        self.imm(rcx, len as i64)?;
        self.call(Helper::MapSlot)?;
        self.asm.test(rax, rax)?;
        self.asm.jz(skip)?;
        self.bind(&mut found)?;
        self.asm.mov(r8, rax)?;
        Ok(held)
    }

    fn set_map(&mut self, map: MapId, keys: &[Expr], op: Option<BinOp>, value: &Expr) -> Result {
        let mut skip = self.asm.create_label();
        let held = self.slot_for(map, keys, Some(value), skip)?;
        let ty = match self.program.map(map).value {
            ValueKind::Plain(ty) => ty,
            ValueKind::Agg(_) => return Err(CodegenError::Unchecked("an assignment to a map of aggregations")),
        };
        match (value.ty, op) {
            (Type::Int | Type::Uint, None) => {
                self.asm.mov(rax, self.frame_qword(held)?)?;
                self.asm.mov(qword_ptr(r8), rax)?;
            }
            (Type::Int | Type::Uint, Some(op)) => {
                self.asm.mov(rcx, self.frame_qword(held)?)?;
                self.asm.mov(rax, qword_ptr(r8))?;
                self.arith(op, Type::unsigned_op(op, ty, value.ty))?;
                self.asm.mov(qword_ptr(r8), rax)?;
            }
            (ty, _) => {
                self.asm.mov(rsi, self.frame_qword(held)?)?;
                self.asm.mov(rdi, r8)?;
                self.copy(value_size(ty, self.program.str_size))?;
            }
        }
        self.bind(&mut skip)
    }

    fn aggregate(&mut self, map: MapId, keys: &[Expr], value: Option<&Expr>) -> Result {
        let ValueKind::Agg(kind) = self.program.map(map).value else {
            return Err(CodegenError::Unchecked("an aggregation into a map of plain values"));
        };
        let mut skip = self.asm.create_label();
        let held = self.slot_for(map, keys, value, skip)?;
        if value.is_some() {
            self.asm.mov(rax, self.frame_qword(held)?)?;
        }
        self.update(kind)?;
        self.bind(&mut skip)
    }

    fn if_chain(&mut self, arms: &[IfArm], els: &[Stmt]) -> Result {
        let mut done = self.asm.create_label();
        for arm in arms {
            let mut next = self.asm.create_label();
            self.int(&arm.cond)?;
            self.asm.test(rax, rax)?;
            self.asm.jz(next)?;
            self.stmts(&arm.body)?;
            self.asm.jmp(done)?;
            self.bind(&mut next)?;
        }
        self.stmts(els)?;
        self.bind(&mut done)
    }

    /// `map_clear` or `print_map`: a helper that takes the map (`print_map`'s top and divisor
    /// are already in place).
    fn map_only(&mut self, helper: Helper, map: MapId) -> Result {
        self.imm(rsi, map.0 as i64)?;
        self.call(helper)
    }

    /// The arguments go to a frame array, one `u64` each: an int, or the address of a string
    /// (all kept live until the call).
    fn printf(&mut self, format: FormatId, args: &[Expr]) -> Result {
        let array = self.frame.alloc(8 * args.len());
        for (i, arg) in args.iter().enumerate() {
            self.value(arg)?;
            self.asm.mov(self.frame_qword(array + 8 * i)?, rax)?;
        }
        self.imm(rsi, format.0 as i64)?;
        self.frame_addr(rdx, array)?;
        self.call(Helper::Printf)
    }

    fn print(&mut self, value: &Expr) -> Result {
        self.value(value)?;
        if value.ty.is_word() {
            let spill = self.frame.alloc(8);
            self.asm.mov(self.frame_qword(spill)?, rax)?;
            self.frame_addr(rax, spill)?;
        }
        self.asm.mov(rdx, rax)?;
        self.imm(rsi, ValueType::from(value.ty) as i64)?;
        self.call(Helper::PrintValue)
    }
}
