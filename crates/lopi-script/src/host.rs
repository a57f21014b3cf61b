//! The probes that run in lopi rather than in the traced program: `begin` (before the program
//! runs on), `interval:` (while it runs) and `end` (after it ended). They touch no program
//! state, only maps and output, so lopi runs them by walking the IR with the semantics the
//! code generator gives the same statements: two's complement wrapping, `x / 0 == x % 0 == 0`
//! with a fault counted, `i64::MIN / -1 == i64::MIN`, shift counts modulo 64, unsigned
//! operations where an operand is unsigned (`>>` arithmetic otherwise), `&&` `||` `?:`
//! evaluating only what they need, keys and slots in the bytes of [`crate::codegen::abi`].
use crate::codegen::abi::{self, AvgSlot, ExtremeSlot, StatsSlot};
use crate::ir::{AggKind, BinOp, Builtin, Expr, ExprKind, FormatId, MapId, Probe, Program, Stmt, StrId, Type, UnOp, ValueKind};
use crate::output::Arg;
use core::mem::offset_of;

/// What a host probe reads and changes.
pub trait Host {
    /// `pid`, `tid`, `uid`, `gid`, `cpid`, `cpu`, `nsecs`, `elapsed` (the others are not given
    /// to these points).
    fn int_builtin(&mut self, builtin: Builtin) -> i64;
    /// `comm`.
    fn comm(&mut self) -> Vec<u8>;
    /// The value slot of `key` as every thread and the host probes left it (a plain map's
    /// value), if any.
    fn value(&mut self, map: MapId, key: &[u8]) -> Option<Vec<u8>>;
    /// The host probes' own slot of `key`, made zeroed if absent; `None` when full.
    fn slot(&mut self, map: MapId, key: &[u8]) -> Option<&mut [u8]>;
    fn delete(&mut self, map: MapId, key: &[u8]);
    fn clear(&mut self, map: MapId);
    fn printf(&mut self, format: FormatId, args: &[Arg]);
    /// `print(@m, top, div)` (0: all entries; 1: values as they are).
    fn print_map(&mut self, map: MapId, top: u32, div: u32);
    /// `print(value)` of a value of type `ty`, in its bytes.
    fn print_value(&mut self, ty: Type, bytes: &[u8]);
    /// The name of the symbol at `addr` (`usym()`).
    fn symbol(&mut self, addr: u64) -> Vec<u8>;
    /// `join()`'s line: `args` joined by the string `sep`.
    fn join(&mut self, sep: StrId, args: &[&[u8]]);
    fn exit(&mut self);
}

/// A value: an int, or the bytes of a `str` (`str_size` of them) or a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Int(i64),
    Bytes(Vec<u8>),
}

impl Value {
    fn int(&self) -> i64 {
        match self {
            Value::Int(v) => *v,
            Value::Bytes(_) => 0,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Value::Int(v) => v.to_le_bytes().to_vec(),
            Value::Bytes(b) => b.clone(),
        }
    }
}

struct Run<'a> {
    program: &'a Program,
    probe: &'a Probe,
    host: &'a mut dyn Host,
    point: String,
    locals: Vec<Value>,
    faults: u64,
    exited: bool,
}

/// Runs `probe` for its point `point` (as the point displays itself, for `probe`); returns the
/// faults it counted.
pub fn run(program: &Program, probe: &Probe, point: &str, host: &mut dyn Host) -> u64 {
    let locals = probe.locals.iter().map(|l| zero(program, l.ty)).collect();
    let mut r = Run { program, probe, host, point: point.to_string(), locals, faults: 0, exited: false };
    if probe.predicate.as_ref().is_none_or(|p| r.expr(p).int() != 0) {
        r.stmts(&probe.body);
    }
    r.faults
}

fn zero(program: &Program, ty: Type) -> Value {
    match ty {
        Type::Int | Type::Uint | Type::Usym => Value::Int(0),
        _ => Value::Bytes(vec![0; abi::value_size(ty, program.str_size)]),
    }
}

/// `text` as a `str` value: cut to `str_size`, NUL-padded.
fn string(program: &Program, text: &[u8]) -> Value {
    let mut bytes = vec![0; program.str_size];
    let n = text.iter().position(|&b| b == 0).unwrap_or(text.len()).min(program.str_size);
    bytes[..n].copy_from_slice(&text[..n]);
    Value::Bytes(bytes)
}

fn word(slot: &[u8], at: usize) -> i64 {
    slot.get(at..at + 8).map_or(0, |w| i64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
}

fn set_word(slot: &mut [u8], at: usize, value: i64) {
    if let Some(w) = slot.get_mut(at..at + 8) {
        w.copy_from_slice(&value.to_le_bytes());
    }
}

impl Run<'_> {
    fn stmts(&mut self, stmts: &[Stmt]) {
        for stmt in stmts {
            if self.exited {
                return;
            }
            self.stmt(stmt);
        }
    }

    /// The packed key of `map` (a stack part cut to the frames the map keeps).
    fn key(&mut self, map: MapId, keys: &[Expr]) -> Vec<u8> {
        let m = self.program.map(map);
        let parts: Vec<usize> = (0..keys.len()).map(|i| abi::key_part_size(m, i, self.program.str_size)).collect();
        keys.iter().zip(parts).flat_map(|(k, part)| self.expr(k).bytes().into_iter().take(part)).collect()
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::SetLocal { local, op, value: v } => {
                let value = self.expr(v);
                let value = match op {
                    Some(op) => {
                        let unsigned = Type::unsigned_op(*op, self.probe.locals[local.0].ty, v.ty);
                        Value::Int(self.binary(*op, self.locals[local.0].int(), value.int(), unsigned))
                    }
                    None => value,
                };
                self.locals[local.0] = value;
            }
            Stmt::SetMap { map, keys, op, value: v } => {
                let key = self.key(*map, keys);
                let value = self.expr(v);
                let value = match op {
                    Some(op) => {
                        let old = self.host.value(*map, &key).map_or(0, |slot| word(&slot, 0));
                        let ValueKind::Plain(ty) = self.program.map(*map).value else { return };
                        Value::Int(self.binary(*op, old, value.int(), Type::unsigned_op(*op, ty, v.ty)))
                    }
                    None => value,
                };
                if let Some(slot) = self.host.slot(*map, &key) {
                    let bytes = value.bytes();
                    let n = bytes.len().min(slot.len());
                    slot[..n].copy_from_slice(&bytes[..n]);
                }
            }
            Stmt::Aggregate { map, keys, value } => {
                let key = self.key(*map, keys);
                let value = value.as_ref().map_or(0, |v| self.expr(v).int());
                let ValueKind::Agg(kind) = self.program.map(*map).value else { return };
                if let Some(slot) = self.host.slot(*map, &key) {
                    update(slot, kind, value);
                }
            }
            Stmt::If { arms, els } => match arms.iter().find(|arm| self.expr(&arm.cond).int() != 0) {
                Some(arm) => self.stmts(&arm.body),
                None => self.stmts(els),
            },
            Stmt::Delete { map, keys } => {
                let key = self.key(*map, keys);
                self.host.delete(*map, &key);
            }
            Stmt::Clear(map) => self.host.clear(*map),
            Stmt::Exit => {
                self.host.exit();
                self.exited = true;
            }
            Stmt::Printf { format, args } => {
                let args: Vec<Arg> = args
                    .iter()
                    .map(|a| match self.expr(a) {
                        Value::Int(v) if a.ty == Type::Usym => Arg::Str(self.host.symbol(v as u64)),
                        Value::Int(v) => Arg::Int(v),
                        Value::Bytes(b) => Arg::Str(b),
                    })
                    .collect();
                self.host.printf(*format, &args);
            }
            Stmt::PrintMap { map, top, div } => self.host.print_map(*map, *top, *div),
            Stmt::Print(value) => {
                let bytes = self.expr(value).bytes();
                self.host.print_value(value.ty, &bytes);
            }
            // No program memory here: an empty line, as of an array that cannot be read.
            Stmt::Join { array, sep } => {
                self.expr(array);
                self.faults += 1;
                self.host.join(*sep, &[]);
            }
        }
    }

    fn binary(&mut self, op: BinOp, l: i64, r: i64, unsigned: bool) -> i64 {
        int_op(op, l, r, unsigned).unwrap_or_else(|| {
            self.faults += 1;
            0
        })
    }

    fn expr(&mut self, expr: &Expr) -> Value {
        match &expr.kind {
            ExprKind::Int(v) => Value::Int(*v),
            ExprKind::Str(id) => string(self.program, self.program.string(*id)),
            ExprKind::Builtin(Builtin::Comm) => {
                let comm = self.host.comm();
                string(self.program, &comm)
            }
            ExprKind::Builtin(Builtin::Probe) => {
                let point = self.point.clone();
                string(self.program, point.as_bytes())
            }
            ExprKind::Builtin(Builtin::Func) => string(self.program, b""),
            ExprKind::Builtin(b) => Value::Int(self.host.int_builtin(*b)),
            ExprKind::Local(id) => self.locals[id.0].clone(),
            ExprKind::Map { map, keys } => {
                let key = self.key(*map, keys);
                match (self.host.value(*map, &key), expr.ty) {
                    (Some(slot), Type::Int | Type::Uint) => Value::Int(word(&slot, 0)),
                    (Some(slot), _) => string(self.program, &slot),
                    (None, ty) => zero(self.program, ty),
                }
            }
            // No program memory or stack here: the checker gives these points neither.
            ExprKind::ReadStr { .. } | ExprKind::Ustack { .. } | ExprKind::Pystack { .. } => {
                self.faults += 1;
                zero(self.program, expr.ty)
            }
            ExprKind::Usym(addr) => self.expr(addr),
            ExprKind::Unary { op, expr } => {
                let v = self.expr(expr).int();
                Value::Int(match op {
                    UnOp::Neg => v.wrapping_neg(),
                    UnOp::BitNot => !v,
                    UnOp::Not => i64::from(v == 0),
                })
            }
            ExprKind::Binary { op: BinOp::And, lhs, rhs } => Value::Int(i64::from(self.expr(lhs).int() != 0 && self.expr(rhs).int() != 0)),
            ExprKind::Binary { op: BinOp::Or, lhs, rhs } => Value::Int(i64::from(self.expr(lhs).int() != 0 || self.expr(rhs).int() != 0)),
            ExprKind::Binary { op, lhs, rhs } if lhs.ty == Type::Str => {
                let equal = self.expr(lhs) == self.expr(rhs);
                Value::Int(i64::from(if *op == BinOp::Eq { equal } else { !equal }))
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (l, r) = (self.expr(lhs).int(), self.expr(rhs).int());
                Value::Int(self.binary(*op, l, r, Type::unsigned_op(*op, lhs.ty, rhs.ty)))
            }
            ExprKind::Ternary { cond, then, els } => {
                if self.expr(cond).int() != 0 {
                    self.expr(then)
                } else {
                    self.expr(els)
                }
            }
        }
    }
}

/// `l op r` on ints as the generated code computes it, their bits taken as unsigned numbers
/// with `unsigned`; `None` for a division or remainder by zero, which gives 0 and counts a
/// fault. `&&` and `||` here take both values (the callers evaluate only what they need).
pub fn int_op(op: BinOp, l: i64, r: i64, unsigned: bool) -> Option<i64> {
    let (a, b) = (l as u64, r as u64);
    Some(match op {
        BinOp::Div | BinOp::Rem if r == 0 => return None,
        BinOp::Div if unsigned => (a / b) as i64,
        BinOp::Rem if unsigned => (a % b) as i64,
        BinOp::Shr if unsigned => a.wrapping_shr(r as u32) as i64,
        BinOp::Lt if unsigned => i64::from(a < b),
        BinOp::Le if unsigned => i64::from(a <= b),
        BinOp::Gt if unsigned => i64::from(a > b),
        BinOp::Ge if unsigned => i64::from(a >= b),
        BinOp::Add => l.wrapping_add(r),
        BinOp::Sub => l.wrapping_sub(r),
        BinOp::Mul => l.wrapping_mul(r),
        BinOp::Div => l.wrapping_div(r),
        BinOp::Rem => l.wrapping_rem(r),
        // `wrapping_sh*` take the count modulo the width; `>>` of an i64 is arithmetic.
        BinOp::Shl => l.wrapping_shl(r as u32),
        BinOp::Shr => l.wrapping_shr(r as u32),
        BinOp::Lt => i64::from(l < r),
        BinOp::Le => i64::from(l <= r),
        BinOp::Gt => i64::from(l > r),
        BinOp::Ge => i64::from(l >= r),
        BinOp::Eq => i64::from(l == r),
        BinOp::Ne => i64::from(l != r),
        BinOp::BitAnd => l & r,
        BinOp::BitXor => l ^ r,
        BinOp::BitOr => l | r,
        BinOp::And => i64::from(l != 0 && r != 0),
        BinOp::Or => i64::from(l != 0 || r != 0),
    })
}

/// Adds `value` to an aggregation's slot, as the generated code does.
fn update(slot: &mut [u8], kind: AggKind, value: i64) {
    match kind {
        AggKind::Count => set_word(slot, 0, word(slot, 0).wrapping_add(1)),
        AggKind::Sum { .. } => set_word(slot, 0, word(slot, 0).wrapping_add(value)),
        AggKind::Avg => {
            set_word(slot, offset_of!(AvgSlot, sum), word(slot, offset_of!(AvgSlot, sum)).wrapping_add(value));
            set_word(slot, offset_of!(AvgSlot, count), word(slot, offset_of!(AvgSlot, count)).wrapping_add(1));
        }
        AggKind::Min | AggKind::Max => {
            let (set, old) = (word(slot, offset_of!(ExtremeSlot, set)), word(slot, offset_of!(ExtremeSlot, value)));
            if set == 0 || (kind == AggKind::Min && value < old) || (kind == AggKind::Max && value > old) {
                set_word(slot, offset_of!(ExtremeSlot, value), value);
                set_word(slot, offset_of!(ExtremeSlot, set), 1);
            }
        }
        AggKind::Stats => {
            let count = word(slot, offset_of!(StatsSlot, count));
            set_word(slot, offset_of!(StatsSlot, count), count.wrapping_add(1));
            set_word(slot, offset_of!(StatsSlot, sum), word(slot, offset_of!(StatsSlot, sum)).wrapping_add(value));
            if count == 0 || value < word(slot, offset_of!(StatsSlot, min)) {
                set_word(slot, offset_of!(StatsSlot, min), value);
            }
            if count == 0 || value > word(slot, offset_of!(StatsSlot, max)) {
                set_word(slot, offset_of!(StatsSlot, max), value);
            }
        }
        AggKind::Hist => {
            let at = 8 * abi::hist_bucket(value);
            set_word(slot, at, word(slot, at).wrapping_add(1));
        }
        AggKind::Lhist { min, max, step } => {
            let at = 8 * abi::lhist_bucket(value, min, max, step);
            set_word(slot, at, word(slot, at).wrapping_add(1));
        }
    }
}
