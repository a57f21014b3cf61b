//! `int` and `uint` expressions, into `rax`. C's semantics without its undefined behaviour:
//! arithmetic wraps (two's complement), `/` and `%` by 0 give 0 and count a fault (and
//! `i64::MIN / -1` wraps to `i64::MIN`, `i64::MIN % -1` is 0, where `idiv` would trap), shifts
//! take their count modulo 64 (as the shift instructions do), comparisons and `!`, `&&`, `||`
//! give 0 or 1, and `&&`, `||`, `?:` evaluate only the side they need. An unsigned operation
//! ([`Type::unsigned_op`]) compares, divides and shifts right (logically) as unsigned.
use super::abi::{IntBuiltin, ScriptCtx};
use super::func::{Gen, Helper, Result};
use super::CodegenError;
use crate::ir::{BinOp, Builtin, Expr, ExprKind, Type, UnOp};
use core::mem::offset_of;
use iced_x86::code_asm::*;

/// A right operand read with one instruction that touches no other register, so that no
/// spill is needed around it.
enum Leaf {
    Imm(i64),
    Mem(AsmMemoryOperand),
}

/// The ctx field holding `builtin`, if one does.
fn ctx_field(builtin: Builtin) -> Option<usize> {
    Some(match builtin {
        Builtin::Arg(n) if n < 6 => offset_of!(ScriptCtx, args) + 8 * usize::from(n),
        Builtin::Retval => offset_of!(ScriptCtx, retval),
        Builtin::Elapsed => offset_of!(ScriptCtx, elapsed_ns),
        Builtin::SyscallNr => offset_of!(ScriptCtx, nr),
        _ => return None,
    })
}

fn ctx(offset: usize) -> AsmMemoryOperand {
    qword_ptr(rbx + offset)
}

impl Gen<'_> {
    /// Evaluates `expr` into `rax`, releasing any temporaries it took.
    pub fn int(&mut self, expr: &Expr) -> Result {
        let mark = self.frame.mark();
        match &expr.kind {
            ExprKind::Int(value) => self.imm(rax, *value)?,
            ExprKind::Builtin(builtin) => self.int_builtin(*builtin)?,
            ExprKind::Local(id) if expr.ty.is_word() => {
                let local = self.frame_qword(self.frame.local(id.0))?;
                self.asm.mov(rax, local)?;
            }
            ExprKind::Map { map, keys } if expr.ty.is_int() => {
                self.lookup(*map, keys)?;
                let (mut absent, mut done) = (self.asm.create_label(), self.asm.create_label());
                self.asm.test(rax, rax)?;
                self.asm.jz(absent)?;
                self.asm.mov(rax, qword_ptr(rax))?;
                self.asm.jmp(done)?;
                self.bind(&mut absent)?;
                self.asm.xor(eax, eax)?;
                self.bind(&mut done)?;
            }
            ExprKind::Unary { op, expr } => {
                self.int(expr)?;
                match op {
                    UnOp::Neg => self.asm.neg(rax)?,
                    UnOp::BitNot => self.asm.not(rax)?,
                    UnOp::Not => {
                        self.asm.test(rax, rax)?;
                        self.asm.sete(al)?;
                        self.asm.movzx(eax, al)?;
                    }
                }
            }
            ExprKind::Binary { op: op @ (BinOp::And | BinOp::Or), lhs, rhs } => self.logical(*op, lhs, rhs)?,
            ExprKind::Binary { op: op @ (BinOp::Eq | BinOp::Ne), lhs, rhs } if lhs.ty == Type::Str => self.str_eq(*op, lhs, rhs)?,
            ExprKind::Binary { op, lhs, rhs } => {
                self.operands(lhs, rhs)?;
                self.arith(*op, Type::unsigned_op(*op, lhs.ty, rhs.ty))?;
            }
            ExprKind::Ternary { cond, then, els } => self.ternary(cond, then, els, Gen::int)?,
            ExprKind::Usym(addr) => self.int(addr)?,
            _ => return Err(CodegenError::Unchecked("an int expression of another type")),
        }
        self.frame.release(mark);
        Ok(())
    }

    fn int_builtin(&mut self, builtin: Builtin) -> Result {
        if let Some(offset) = ctx_field(builtin) {
            self.asm.mov(rax, ctx(offset))?;
            return Ok(());
        }
        let which = match builtin {
            Builtin::Pid => IntBuiltin::Pid,
            Builtin::Tid => IntBuiltin::Tid,
            Builtin::Cpu => IntBuiltin::Cpu,
            Builtin::Nsecs => IntBuiltin::Nsecs,
            Builtin::SinceStart => IntBuiltin::SinceStart,
            Builtin::Uid => IntBuiltin::Uid,
            Builtin::Gid => IntBuiltin::Gid,
            Builtin::Cpid => IntBuiltin::Cpid,
            _ => return Err(CodegenError::Unchecked("a builtin that is not an int")),
        };
        self.asm.mov(esi, which as u32)?;
        self.call(Helper::Builtin)
    }

    /// `rax = lhs`, `rcx = rhs`, in that order.
    fn operands(&mut self, lhs: &Expr, rhs: &Expr) -> Result {
        if let Some(leaf) = self.leaf(rhs)? {
            self.int(lhs)?;
            return match leaf {
                Leaf::Imm(value) => self.imm(rcx, value),
                Leaf::Mem(mem) => Ok(self.asm.mov(rcx, mem)?),
            };
        }
        let spill = self.frame.alloc(8);
        self.int(lhs)?;
        self.asm.mov(self.frame_qword(spill)?, rax)?;
        self.int(rhs)?;
        self.asm.mov(rcx, rax)?;
        self.asm.mov(rax, self.frame_qword(spill)?)?;
        Ok(())
    }

    fn leaf(&self, expr: &Expr) -> Result<Option<Leaf>> {
        Ok(match &expr.kind {
            ExprKind::Int(value) => Some(Leaf::Imm(*value)),
            ExprKind::Local(id) if expr.ty.is_word() => Some(Leaf::Mem(self.frame_qword(self.frame.local(id.0))?)),
            ExprKind::Builtin(builtin) => ctx_field(*builtin).map(|offset| Leaf::Mem(ctx(offset))),
            _ => None,
        })
    }

    /// `rax = rax op rcx`, unsigned or not; touches only `rax`, `rcx`, `rdx` (and ctx's fault
    /// count).
    pub fn arith(&mut self, op: BinOp, unsigned: bool) -> Result {
        let setcc = |asm: &mut CodeAssembler, op: BinOp| match (op, unsigned) {
            (BinOp::Lt, false) => asm.setl(al),
            (BinOp::Le, false) => asm.setle(al),
            (BinOp::Gt, false) => asm.setg(al),
            (BinOp::Ge, false) => asm.setge(al),
            (BinOp::Lt, true) => asm.setb(al),
            (BinOp::Le, true) => asm.setbe(al),
            (BinOp::Gt, true) => asm.seta(al),
            (BinOp::Ge, true) => asm.setae(al),
            (BinOp::Eq, _) => asm.sete(al),
            _ => asm.setne(al),
        };
        match op {
            BinOp::Add => self.asm.add(rax, rcx)?,
            BinOp::Sub => self.asm.sub(rax, rcx)?,
            BinOp::Mul => self.asm.imul_2(rax, rcx)?,
            BinOp::BitAnd => self.asm.and(rax, rcx)?,
            BinOp::BitOr => self.asm.or(rax, rcx)?,
            BinOp::BitXor => self.asm.xor(rax, rcx)?,
            BinOp::Shl => self.asm.shl(rax, cl)?,
            BinOp::Shr if unsigned => self.asm.shr(rax, cl)?,
            BinOp::Shr => self.asm.sar(rax, cl)?,
            BinOp::Div | BinOp::Rem if unsigned => self.divide_unsigned(op == BinOp::Rem)?,
            BinOp::Div | BinOp::Rem => self.divide(op == BinOp::Rem)?,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                self.asm.cmp(rax, rcx)?;
                setcc(self.asm, op)?;
                self.asm.movzx(eax, al)?;
            }
            BinOp::And | BinOp::Or => return Err(CodegenError::Unchecked("`&&` or `||` as a compound assignment")),
        }
        Ok(())
    }

    /// A division's guard: a zero divisor `rcx` counts a fault and gives 0, at `done`; any other
    /// goes on at `nonzero`, which the caller binds next.
    fn zero_divisor_faults(&mut self, nonzero: CodeLabel, done: CodeLabel) -> Result {
        self.asm.test(rcx, rcx)?;
        self.asm.jnz(nonzero)?;
        self.asm.inc(ctx(offset_of!(ScriptCtx, faults)))?;
        self.asm.xor(eax, eax)?;
        Ok(self.asm.jmp(done)?)
    }

    /// `rax = rax / rcx` or `rax % rcx`, without the two cases where `idiv` traps.
    fn divide(&mut self, rem: bool) -> Result {
        let (mut nonzero, mut general, mut done) = (self.asm.create_label(), self.asm.create_label(), self.asm.create_label());
        self.zero_divisor_faults(nonzero, done)?;
        self.bind(&mut nonzero)?;
        self.asm.cmp(rcx, -1)?;
        self.asm.jne(general)?;
        // x / -1 is -x, wrapping for i64::MIN; x % -1 is 0.
        if rem {
            self.asm.xor(eax, eax)?;
        } else {
            self.asm.neg(rax)?;
        }
        self.asm.jmp(done)?;
        self.bind(&mut general)?;
        self.asm.cqo()?;
        self.asm.idiv(rcx)?;
        if rem {
            self.asm.mov(rax, rdx)?;
        }
        self.bind(&mut done)
    }

    /// `rax = rax / rcx` or `rax % rcx` as unsigned numbers: only 0 needs care.
    fn divide_unsigned(&mut self, rem: bool) -> Result {
        let (mut nonzero, mut done) = (self.asm.create_label(), self.asm.create_label());
        self.zero_divisor_faults(nonzero, done)?;
        self.bind(&mut nonzero)?;
        self.asm.xor(edx, edx)?;
        self.asm.div(rcx)?;
        if rem {
            self.asm.mov(rax, rdx)?;
        }
        self.bind(&mut done)
    }

    /// `&&`, `||`: the right side only when the left does not decide; 0 or 1.
    fn logical(&mut self, op: BinOp, lhs: &Expr, rhs: &Expr) -> Result {
        let mut done = self.asm.create_label();
        self.int(lhs)?;
        self.truth()?;
        if op == BinOp::And {
            self.asm.jz(done)?;
        } else {
            self.asm.jnz(done)?;
        }
        self.int(rhs)?;
        self.truth()?;
        self.bind(&mut done)
    }

    /// `rax = rax != 0`, with ZF set when it is 0.
    fn truth(&mut self) -> Result {
        self.asm.test(rax, rax)?;
        self.asm.setne(al)?;
        self.asm.movzx(eax, al)?;
        Ok(())
    }

    /// `cond ? then : els` for a value of any type, each branch evaluated by `value`. A `str`
    /// or `stack` branch may leave its buffer allocated: both branches' stay reserved, the
    /// second reusing the first's space as only one of them runs.
    pub fn ternary(&mut self, cond: &Expr, then: &Expr, els: &Expr, value: fn(&mut Self, &Expr) -> Result) -> Result {
        let (mut other, mut done) = (self.asm.create_label(), self.asm.create_label());
        self.int(cond)?;
        self.asm.test(rax, rax)?;
        self.asm.jz(other)?;
        let start = self.frame.mark();
        value(self, then)?;
        let then_end = self.frame.mark();
        self.frame.release(start);
        self.asm.jmp(done)?;
        self.bind(&mut other)?;
        value(self, els)?;
        self.frame.join(then_end);
        self.bind(&mut done)
    }
}
