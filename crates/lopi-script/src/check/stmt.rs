//! Typing statements: assignments to locals and maps (plain values or aggregations), `if`
//! chains with locals tracked along each branch, and the built-in statements.
use super::expr::{divides_by_zero, literal};
use super::Checker;
use crate::ast::{self, AggFunc, AssignOp, BinOp, Rhs, StrLit, Target};
use crate::diag::Issue;
use crate::format::{self, Part};
use crate::ir::{AggKind, ConvKind, Expr, Format, FormatId, IfArm, Piece, Stmt, Type, ValueKind};
use crate::limits::MAX_LHIST_BUCKETS;

impl Checker<'_> {
    /// The statements that checked; the others have left errors.
    pub(super) fn block(&mut self, stmts: &[ast::Stmt]) -> Vec<Stmt> {
        stmts.iter().filter_map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, stmt: &ast::Stmt) -> Option<Stmt> {
        match &stmt.kind {
            ast::StmtKind::Assign { target, op, value } => self.assign(target, *op, value),
            ast::StmtKind::If { arms, els } => self.if_chain(arms, els.as_deref()),
            ast::StmtKind::Delete(map) => {
                let (id, keys) = self.map_use(map)?;
                self.maps.check_assigned(&map.name, &mut self.issues).then_some(Stmt::Delete { map: id, keys })
            }
            ast::StmtKind::Clear(name) => {
                let id = self.maps.id(name, &mut self.issues)?;
                self.maps.check_assigned(name, &mut self.issues).then_some(Stmt::Clear(id))
            }
            ast::StmtKind::PrintMap { map: name, args } => {
                let id = self.maps.id(name, &mut self.issues);
                let mut limit = args.iter().map(|arg| match literal(arg).and_then(|v| u32::try_from(v).ok()) {
                    Some(v) => Some(v),
                    None => {
                        self.issues.push(Issue::new(arg.span, "the top and the divisor of `print(@m, top, div)` must be integer literals from 0 to 4294967295"));
                        None
                    }
                });
                let (top, div) = (limit.next().unwrap_or(Some(0)), limit.next().unwrap_or(Some(1)));
                let id = id?;
                let (top, div) = (top?, div?);
                self.maps.check_assigned(name, &mut self.issues).then_some(Stmt::PrintMap { map: id, top, div })
            }
            ast::StmtKind::Exit => Some(Stmt::Exit),
            ast::StmtKind::Printf { format, args } => self.printf(format, args),
            ast::StmtKind::Time(format) => {
                // bpftrace's default, a line of its own.
                let format = format.as_ref().map_or(&b"%H:%M:%S\n"[..], |f| &f.bytes);
                let format = Format { pieces: vec![Piece::Time(self.intern(format))] };
                self.formats.push(format);
                Some(Stmt::Printf { format: FormatId(self.formats.len() - 1), args: Vec::new() })
            }
            ast::StmtKind::Print(value) => Some(Stmt::Print(self.expr(value)?)),
            ast::StmtKind::Join { array, sep } => {
                let value = self.expr(array)?;
                self.want_int(&value, array.span, "`join` needs the address of an array of string pointers")?;
                // bpftrace's separator is a space.
                let sep = self.intern(sep.as_ref().map_or(&b" "[..], |s| &s.bytes));
                Some(Stmt::Join { array: value, sep })
            }
        }
    }

    fn assign(&mut self, target: &Target, op: AssignOp, value: &Rhs) -> Option<Stmt> {
        let (binop, op_name) = match op {
            AssignOp::Set => (None, "=".to_string()),
            AssignOp::Compound(b) => (Some(b), format!("{}=", b.symbol())),
            AssignOp::Incr => (Some(BinOp::Add), "++".to_string()),
            AssignOp::Decr => (Some(BinOp::Sub), "--".to_string()),
        };
        let value = match value {
            Rhs::Agg(agg) if binop.is_some() => {
                self.issues.push(Issue::new(agg.span, format!("an aggregation is assigned with `=`, not `{op_name}`")));
                return None;
            }
            Rhs::Agg(agg) => match target {
                Target::Map(map) => return self.aggregate(map, agg),
                Target::Local(_) => {
                    let message = format!("an aggregation can only be assigned to a map, as in `@m = {}(..)`", agg.func.name());
                    self.issues.push(Issue::new(agg.span, message));
                    return None;
                }
            },
            Rhs::Expr(value) => value,
        };
        let zero = binop.is_some_and(|b| divides_by_zero(b, value));
        if zero {
            self.issues.push(Issue::new(value.span, "division by zero"));
        }
        let what = format!("`{op_name}` needs an int");
        match target {
            Target::Local(name) => {
                let Some(op) = binop else {
                    let typed = self.expr(value);
                    let local = self.locals.assign(name, typed.as_ref().map(|v| v.ty), &mut self.issues);
                    return Some(Stmt::SetLocal { local: local?, op: None, value: typed? });
                };
                let current = self.locals.read(&name.text, name.span, &mut self.issues);
                let typed = self.expr(value);
                let ((local, ty), typed) = (current?, typed?);
                let mut ok = !zero;
                if !ty.is_int() {
                    self.issues.push(Issue::new(name.span, format!("{what} local, and `${}` holds {ty} values", name.text)));
                    ok = false;
                }
                ok &= self.want_int(&typed, value.span, &format!("{what} value")).is_some();
                ok.then_some(Stmt::SetLocal { local, op: Some(op), value: typed })
            }
            Target::Map(map) => {
                let target = self.map_use(map);
                let typed = self.expr(value);
                let ((id, keys), typed) = (target?, typed?);
                let ty = match binop {
                    None if matches!(typed.ty, Type::Stack | Type::Usym) => {
                        let message = "a map value must be an int or a str; a stack or a usym can only be a key";
                        self.issues.push(Issue::new(value.span, message));
                        return None;
                    }
                    None => typed.ty,
                    Some(_) => {
                        self.want_int(&typed, value.span, &format!("{what} value"))?;
                        typed.ty
                    }
                };
                let ok = self.maps.assign(id, ValueKind::Plain(ty), map.name.span, &mut self.issues);
                (ok && !zero).then_some(Stmt::SetMap { map: id, keys, op: binop, value: typed })
            }
        }
    }

    /// `@m[k] = AGG(..)`.
    fn aggregate(&mut self, map: &ast::MapRef, agg: &ast::Agg) -> Option<Stmt> {
        let target = self.map_use(map);
        let aggregation = self.aggregation(agg);
        let ((id, keys), (kind, value)) = (target?, aggregation?);
        self.maps.assign(id, ValueKind::Agg(kind), map.name.span, &mut self.issues).then_some(Stmt::Aggregate { map: id, keys, value })
    }

    /// The kind of an aggregation and the value it takes, if any.
    fn aggregation(&mut self, agg: &ast::Agg) -> Option<(AggKind, Option<Expr>)> {
        let name = agg.func.name();
        match agg.func {
            AggFunc::Count if agg.args.is_empty() => return Some((AggKind::Count, None)),
            AggFunc::Count => {
                self.issues.push(Issue::new(agg.span, "`count()` takes no arguments"));
                return None;
            }
            AggFunc::Lhist => return self.lhist(agg),
            _ => {}
        }
        let [arg] = agg.args.as_slice() else {
            self.issues.push(Issue::new(agg.span, format!("`{name}` takes one int argument")));
            return None;
        };
        let value = self.expr(arg)?;
        self.want_int(&value, arg.span, &format!("`{name}` needs an int"))?;
        let unsigned = value.ty == Type::Uint;
        let kind = match agg.func {
            AggFunc::Sum => AggKind::Sum { unsigned },
            AggFunc::Min => AggKind::Min,
            AggFunc::Max => AggKind::Max,
            AggFunc::Avg => AggKind::Avg,
            AggFunc::Stats => AggKind::Stats,
            _ => AggKind::Hist,
        };
        Some((kind, Some(value)))
    }

    /// `lhist(x, min, max, step)`: literal bounds, a positive step, at most
    /// [`MAX_LHIST_BUCKETS`] buckets.
    fn lhist(&mut self, agg: &ast::Agg) -> Option<(AggKind, Option<Expr>)> {
        let [arg, min, max, step] = agg.args.as_slice() else {
            self.issues.push(Issue::new(agg.span, "`lhist` takes a value and three integer literals: `lhist(x, min, max, step)`"));
            return None;
        };
        let value = self.expr(arg).and_then(|v| self.want_int(&v, arg.span, "`lhist` needs an int").map(|_| v));
        let mut bound = |e: &ast::Expr, what: &str| {
            let v = literal(e).and_then(|v| i64::try_from(v).ok());
            if v.is_none() {
                self.issues.push(Issue::new(e.span, format!("the {what} of `lhist` must be an integer literal that fits in 64 bits")));
            }
            v
        };
        let (lo, hi, width) = (bound(min, "min"), bound(max, "max"), bound(step, "step"));
        let (lo, hi, width) = (lo?, hi?, width?);
        if width <= 0 {
            self.issues.push(Issue::new(step.span, "the step of `lhist` must be positive"));
            return None;
        }
        if hi <= lo {
            self.issues.push(Issue::new(max.span, "the max of `lhist` must be greater than its min"));
            return None;
        }
        let buckets = (i128::from(hi) - i128::from(lo) + i128::from(width) - 1) / i128::from(width);
        if buckets > MAX_LHIST_BUCKETS {
            let message = format!("`lhist` would have {buckets} buckets; at most {MAX_LHIST_BUCKETS} are allowed");
            self.issues.push(Issue::new(agg.span, message));
            return None;
        }
        Some((AggKind::Lhist { min: lo, max: hi, step: width }, Some(value?)))
    }

    /// `if .. else if .. else ..`: a local is assigned after it if every branch (the missing
    /// `else` included) assigns it.
    fn if_chain(&mut self, arms: &[ast::IfArm], els: Option<&[ast::Stmt]>) -> Option<Stmt> {
        let before = self.locals.snapshot();
        let mut paths = Vec::new();
        let mut checked = Vec::new();
        let mut ok = true;
        for arm in arms {
            self.locals.restore(&before);
            let cond = self.condition(&arm.cond, "an `if` condition");
            let body = self.block(&arm.body);
            paths.push(self.locals.snapshot());
            match cond {
                Some(cond) => checked.push(IfArm { cond, body }),
                None => ok = false,
            }
        }
        self.locals.restore(&before);
        let els = els.map(|stmts| self.block(stmts)).unwrap_or_default();
        paths.push(self.locals.snapshot());
        self.locals.join(&paths);
        ok.then_some(Stmt::If { arms: checked, els })
    }

    /// `printf(FORMAT, ARGS..)`: one argument of the right type per conversion.
    fn printf(&mut self, format: &StrLit, args: &[ast::Expr]) -> Option<Stmt> {
        let typed: Vec<Option<Expr>> = args.iter().map(|a| self.expr(a)).collect();
        let parts = match format::parse(&format.bytes) {
            Ok(parts) => parts,
            Err(error) => {
                self.issues.push(Issue::new(format.span_of(error.at.start, error.at.end), error.message));
                return None;
            }
        };
        let mut pieces = Vec::new();
        let mut used = 0;
        let mut ok = true;
        for part in parts {
            let (mut conv, at) = match part {
                Part::Text(text) => {
                    pieces.push(Piece::Text(self.intern(&text)));
                    continue;
                }
                Part::Conv(conv, at) => (conv, at),
            };
            let shown = String::from_utf8_lossy(&format.bytes[at.clone()]).into_owned();
            let want = conv.kind.arg_type();
            match (args.get(used), typed.get(used)) {
                (None, _) => {
                    self.issues.push(Issue::new(format.span_of(at.start, at.end), format!("`{shown}` has no argument")));
                    ok = false;
                }
                // `%s` names a usym's address.
                (Some(_), Some(Some(value))) if conv.kind == ConvKind::Str && value.ty == Type::Usym => conv.kind = ConvKind::Sym,
                (Some(arg), Some(Some(value))) if !value.ty.same_kind(want) => {
                    let article = if want.is_int() { "an" } else { "a" };
                    self.issues.push(Issue::new(arg.span, format!("`{shown}` needs {article} {want}, found {}", value.ty)));
                    ok = false;
                }
                _ => {}
            }
            used += 1;
            pieces.push(Piece::Conv(conv));
        }
        if let Some(extra) = args.get(used) {
            let message = format!("too many arguments: the format has {used} conversion{}", if used == 1 { "" } else { "s" });
            self.issues.push(Issue::new(extra.span, message));
            ok = false;
        }
        let args = typed.into_iter().collect::<Option<Vec<_>>>()?;
        if !ok {
            return None;
        }
        self.formats.push(Format { pieces });
        Some(Stmt::Printf { format: FormatId(self.formats.len() - 1), args })
    }
}
