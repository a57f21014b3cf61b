//! Typing expressions. A sub-expression that fails gives `None` after its error is recorded,
//! and whatever contains it gives `None` too without adding errors of its own, so that one
//! mistake is reported once.
use super::Checker;
use crate::ast::{self, BinOp, Callee, UnOp};
use crate::diag::{Issue, Span};
use crate::ir::{Expr, ExprKind, MapId, Point, Type};
use crate::limits::MAX_USTACK;

/// The value of an integer literal, negated or not.
pub(super) fn literal(expr: &ast::Expr) -> Option<i128> {
    match &expr.kind {
        ast::ExprKind::Int(v) => Some(i128::from(*v)),
        ast::ExprKind::Unary { op: UnOp::Neg, expr } => match expr.kind {
            ast::ExprKind::Int(v) => Some(-i128::from(v)),
            _ => None,
        },
        _ => None,
    }
}

/// True for `/` or `%` by a literal 0.
pub(super) fn divides_by_zero(op: BinOp, rhs: &ast::Expr) -> bool {
    matches!(op, BinOp::Div | BinOp::Rem) && matches!(rhs.kind, ast::ExprKind::Int(0))
}

impl Checker<'_> {
    pub(super) fn expr(&mut self, expr: &ast::Expr) -> Option<Expr> {
        let (ty, kind) = match &expr.kind {
            // Literals above i64::MAX are masks: they keep their bits.
            ast::ExprKind::Int(v) => (Type::Int, ExprKind::Int(*v as i64)),
            ast::ExprKind::Str(lit) => (Type::Str, ExprKind::Str(self.intern(&lit.bytes))),
            ast::ExprKind::Builtin(b) => {
                let (b, ty) = self.builtin(*b, expr.span)?;
                (ty, ExprKind::Builtin(b))
            }
            // The tracepoints' fields are the kernel's `long`s and `int`s (and pointers and sizes,
            // which stay below 2^63): signed.
            ast::ExprKind::Args(field) => {
                let b = self.args_field(field)?;
                self.builtin(b, expr.span)?;
                (Type::Int, ExprKind::Builtin(b))
            }
            ast::ExprKind::Local(name) => {
                let (id, ty) = self.locals.read(name, expr.span, &mut self.issues)?;
                (ty, ExprKind::Local(id))
            }
            ast::ExprKind::Map(map) => {
                let (id, keys) = self.map_use(map)?;
                (self.maps.read(id, map.name.span, &mut self.issues)?, ExprKind::Map { map: id, keys })
            }
            ast::ExprKind::Call { callee, args } => self.call(*callee, args, expr.span)?,
            ast::ExprKind::Unary { op, expr: operand } => {
                let value = self.expr(operand)?;
                let symbol = match op {
                    UnOp::Neg => "-",
                    UnOp::Not => "!",
                    UnOp::BitNot => "~",
                };
                self.want_int(&value, operand.span, &format!("`{symbol}` needs an int operand"))?;
                // bpftrace's `!` gives an unsigned 0 or 1; `-` and `~` keep the operand's sign.
                let ty = if *op == UnOp::Not { Type::Uint } else { value.ty };
                (ty, ExprKind::Unary { op: *op, expr: Box::new(value) })
            }
            ast::ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, expr.span)?,
            ast::ExprKind::Ternary { cond, then, els } => {
                let (cond, then_value, els_value) = (self.condition(cond, "a `?:` condition"), self.expr(then), self.expr(els));
                let (cond, then_value, els_value) = (cond?, then_value?, els_value?);
                if !then_value.ty.same_kind(els_value.ty) {
                    let message = format!("the branches of `?:` differ: {} and {}", then_value.ty, els_value.ty);
                    self.issues.push(Issue::new(els.span, message));
                    return None;
                }
                // Its sign is the first branch's, as bpftrace's.
                (then_value.ty, ExprKind::Ternary { cond: Box::new(cond), then: Box::new(then_value), els: Box::new(els_value) })
            }
        };
        Some(Expr { ty, kind })
    }

    /// `expr` as an int condition (`what` is "a predicate", "an `if` condition"...).
    pub(super) fn condition(&mut self, expr: &ast::Expr, what: &str) -> Option<Expr> {
        let value = self.expr(expr)?;
        self.want_int(&value, expr.span, &format!("{what} must be an int"))?;
        Some(value)
    }

    /// `Some` for an int, else an error "`what`, found `ty`" at `span`.
    pub(super) fn want_int(&mut self, value: &Expr, span: Span, what: &str) -> Option<()> {
        if value.ty.is_int() {
            return Some(());
        }
        self.issues.push(Issue::new(span, format!("{what}, found {}", value.ty)));
        None
    }

    /// A map with its keys, checked against the keys of its other uses.
    pub(super) fn map_use(&mut self, map: &ast::MapRef) -> Option<(MapId, Vec<Expr>)> {
        let id = self.maps.id(&map.name, &mut self.issues);
        let keys: Vec<Option<Expr>> = map.keys.iter().map(|k| self.expr(k)).collect();
        let id = id?;
        let types: Vec<(Option<Type>, Span)> = keys.iter().zip(&map.keys).map(|(k, key)| (k.as_ref().map(|k| k.ty), key.span)).collect();
        let ok = self.maps.use_keys(id, &types, map.span, &mut self.issues);
        let keys = keys.into_iter().collect::<Option<Vec<_>>>()?;
        ok.then_some((id, keys))
    }

    fn call(&mut self, callee: Callee, args: &[ast::Expr], span: Span) -> Option<(Type, ExprKind)> {
        match callee {
            Callee::Agg(func) => {
                let name = func.name();
                let message = format!("`{name}()` is an aggregation: it can only be the whole value assigned to a map, as in `@m[k] = {name}(..)`");
                self.issues.push(Issue::new(span, message));
                None
            }
            Callee::Ustack | Callee::Pystack => {
                let word = if callee == Callee::Ustack { "ustack" } else { "pystack" };
                let depth = match args {
                    [] => MAX_USTACK,
                    [depth] => match literal(depth).and_then(|d| u8::try_from(d).ok()).filter(|d| (1..=MAX_USTACK).contains(d)) {
                        Some(d) => d,
                        None => {
                            let message = format!("the depth of `{word}(n)` must be a literal from 1 to {MAX_USTACK}");
                            self.issues.push(Issue::new(depth.span, message));
                            return None;
                        }
                    },
                    _ => {
                        self.issues.push(Issue::new(span, format!("`{word}` takes at most one argument, its depth")));
                        return None;
                    }
                };
                let gil_held = !self.points.is_empty() && self.points.iter().all(|p| matches!(p, Point::Usdt { provider: Some(provider), .. } if provider == "python"));
                Some((Type::Stack, if callee == Callee::Ustack { ExprKind::Ustack { depth } } else { ExprKind::Pystack { depth, gil_held } }))
            }
            Callee::Usym => {
                let [arg] = args else {
                    self.issues.push(Issue::new(span, "`usym` takes one argument, an address: `usym(arg0)`"));
                    return None;
                };
                let value = self.expr(arg)?;
                self.want_int(&value, arg.span, "`usym` needs an int, an address")?;
                Some((Type::Usym, ExprKind::Usym(Box::new(value))))
            }
            Callee::Str => {
                if !(1..=2).contains(&args.len()) {
                    self.issues.push(Issue::new(span, "`str` takes a pointer and an optional length: `str(p)` or `str(p, n)`"));
                    return None;
                }
                let values: Vec<Option<Expr>> = args.iter().map(|a| self.expr(a)).collect();
                // `str($1)` of a word given as a positional parameter: already the string.
                if let [Some(text @ Expr { ty: Type::Str, kind: ExprKind::Str(_) })] = &values[..] {
                    return Some((Type::Str, text.kind.clone()));
                }
                let mut ok = true;
                for (value, arg) in values.iter().zip(args) {
                    if let Some(value) = value {
                        ok &= self.want_int(value, arg.span, "`str` needs int arguments").is_some();
                    }
                }
                let mut values = values.into_iter().collect::<Option<Vec<_>>>()?.into_iter();
                let ptr = Box::new(values.next()?);
                let len = values.next().map(Box::new);
                ok.then_some((Type::Str, ExprKind::ReadStr { ptr, len }))
            }
        }
    }

    fn binary(&mut self, op: BinOp, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Option<(Type, ExprKind)> {
        let (left, right) = (self.expr(lhs), self.expr(rhs));
        if divides_by_zero(op, rhs) {
            self.issues.push(Issue::new(rhs.span, "division by zero"));
            return None;
        }
        let (left, right) = (left?, right?);
        let symbol = op.symbol();
        match op {
            BinOp::Eq | BinOp::Ne => {
                let message = match (left.ty, right.ty) {
                    (Type::Stack, Type::Stack) => "stacks cannot be compared".to_string(),
                    (Type::Usym, Type::Usym) => "usyms cannot be compared; compare the addresses".to_string(),
                    (l, r) if !l.same_kind(r) => format!("cannot compare {l} with {r}"),
                    _ => String::new(),
                };
                if !message.is_empty() {
                    self.issues.push(Issue::new(span, message));
                    return None;
                }
            }
            _ => {
                let what = match op {
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => format!("`{symbol}` compares ints (strings compare only with `==` and `!=`)"),
                    _ => format!("`{symbol}` needs int operands"),
                };
                let l = self.want_int(&left, lhs.span, &what);
                let r = self.want_int(&right, rhs.span, &what);
                l.and(r)?;
            }
        }
        let ty = if left.ty.is_int() && Type::unsigned_op(op, left.ty, right.ty) { Type::Uint } else { Type::Int };
        Some((ty, ExprKind::Binary { op, lhs: Box::new(left), rhs: Box::new(right) }))
    }
}
