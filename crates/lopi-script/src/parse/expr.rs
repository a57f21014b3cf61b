//! Expressions: precedence climbing over C's binary operators, under `?:`, over unary
//! operators and primaries. Each function returns the height of the tree it built too: a
//! left-deep chain (`1 + 1 + ... + 1`) is as deep as nested parentheses for whatever walks it
//! later, so both count against [`MAX_DEPTH`].
use super::Parser;
use crate::ast::{AggFunc, BinOp, Builtin, Callee, Expr, ExprKind, MapRef, Name, UnOp};
use crate::diag::{Issue, Span};
use crate::lexer::Tok;
use crate::limits::MAX_DEPTH;

fn too_deep(span: Span) -> Issue {
    Issue::new(span, format!("expression nested too deeply (more than {MAX_DEPTH} levels)"))
}

impl Parser<'_> {
    pub(super) fn expr(&mut self) -> Result<Expr, Issue> {
        Ok(self.nested()?.0)
    }

    /// A whole expression, one level deeper than the one it is in.
    fn nested(&mut self) -> Result<(Expr, usize), Issue> {
        self.enter()?;
        let expr = self.ternary();
        self.depth -= 1;
        expr
    }

    fn enter(&mut self) -> Result<(), Issue> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(too_deep(self.peek()?.span));
        }
        Ok(())
    }

    /// A node of height `height`, or an error at `at` when that is too deep.
    fn tree(kind: ExprKind, span: Span, height: usize, at: Span) -> Result<(Expr, usize), Issue> {
        if height > MAX_DEPTH {
            return Err(too_deep(at));
        }
        Ok((Expr { kind, span }, height))
    }

    /// `C ? A : B`, right-associative, below every binary operator.
    fn ternary(&mut self) -> Result<(Expr, usize), Issue> {
        let (cond, cond_height) = self.binary(1)?;
        if !self.at(&Tok::Question)? {
            return Ok((cond, cond_height));
        }
        let question = self.bump()?.span;
        let (then, then_height) = self.bracketed(Parser::nested)?;
        self.expect(Tok::Colon, " in a `?:` expression")?;
        let (els, els_height) = self.nested()?;
        let span = cond.span.to(els.span);
        let height = cond_height.max(then_height).max(els_height) + 1;
        Self::tree(ExprKind::Ternary { cond: Box::new(cond), then: Box::new(then), els: Box::new(els) }, span, height, question)
    }

    /// Operators binding at least as tightly as `min`, left-associative.
    fn binary(&mut self, min: u8) -> Result<(Expr, usize), Issue> {
        let (mut lhs, mut height) = self.unary()?;
        while let Some(op) = self.binary_op()? {
            if op.precedence() < min {
                break;
            }
            let at = self.bump()?.span;
            let (rhs, rhs_height) = self.binary(op.precedence() + 1)?;
            let span = lhs.span.to(rhs.span);
            (lhs, height) = Self::tree(ExprKind::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }, span, height.max(rhs_height) + 1, at)?;
        }
        Ok((lhs, height))
    }

    fn binary_op(&mut self) -> Result<Option<BinOp>, Issue> {
        let in_predicate = self.in_predicate;
        Ok(Some(match self.peek()?.tok {
            Tok::Star => BinOp::Mul,
            Tok::Slash if !in_predicate => BinOp::Div,
            Tok::Percent => BinOp::Rem,
            Tok::Plus => BinOp::Add,
            Tok::Minus => BinOp::Sub,
            Tok::Shl => BinOp::Shl,
            Tok::Shr => BinOp::Shr,
            Tok::Lt => BinOp::Lt,
            Tok::Le => BinOp::Le,
            Tok::Gt => BinOp::Gt,
            Tok::Ge => BinOp::Ge,
            Tok::EqEq => BinOp::Eq,
            Tok::Ne => BinOp::Ne,
            Tok::Amp => BinOp::BitAnd,
            Tok::Caret => BinOp::BitXor,
            Tok::Pipe => BinOp::BitOr,
            Tok::AndAnd => BinOp::And,
            Tok::OrOr => BinOp::Or,
            _ => return Ok(None),
        }))
    }

    fn unary(&mut self) -> Result<(Expr, usize), Issue> {
        let op = match self.peek()?.tok {
            Tok::Minus => UnOp::Neg,
            Tok::Bang => UnOp::Not,
            Tok::Tilde => UnOp::BitNot,
            _ => return self.primary(),
        };
        let at = self.bump()?.span;
        self.enter()?;
        let operand = self.unary();
        self.depth -= 1;
        let (operand, height) = operand?;
        let span = at.to(operand.span);
        Self::tree(ExprKind::Unary { op, expr: Box::new(operand) }, span, height + 1, at)
    }

    fn primary(&mut self) -> Result<(Expr, usize), Issue> {
        if matches!(self.peek()?.tok, Tok::Map(_)) {
            let (map, height) = self.map_ref()?;
            let span = map.span;
            return Ok((Expr { kind: ExprKind::Map(map), span }, height));
        }
        let token = self.bump()?;
        let kind = match token.tok {
            Tok::Int(value) => ExprKind::Int(value),
            Tok::Str(lit) => ExprKind::Str(lit),
            Tok::Local(name) => ExprKind::Local(name),
            Tok::Ident(word) => return self.word(&word, token.span),
            Tok::LParen => {
                let (inner, height) = self.bracketed(Parser::nested)?;
                let close = self.expect(Tok::RParen, "")?.span;
                return Ok((Expr { kind: inner.kind, span: token.span.to(close) }, height));
            }
            other => return Err(Issue::new(token.span, format!("expected an expression, found {}", other.describe()))),
        };
        Ok((Expr { kind, span: token.span }, 1))
    }

    /// Runs `parse` where `/` divides again (inside brackets of a predicate).
    fn bracketed<T>(&mut self, parse: impl FnOnce(&mut Self) -> Result<T, Issue>) -> Result<T, Issue> {
        let saved = std::mem::replace(&mut self.in_predicate, false);
        let result = parse(self);
        self.in_predicate = saved;
        result
    }

    /// A builtin (`pid`), a call (`str(arg0)`, `count()`) or a tracepoint's field
    /// (`args.filename`, `args->ret`).
    fn word(&mut self, word: &str, span: Span) -> Result<(Expr, usize), Issue> {
        if word == "args" {
            if !(self.at(&Tok::Arrow)? || self.at(&Tok::Dot)?) {
                return Err(Issue::new(span, "`args` holds a tracepoint's fields: write `args.NAME` or `args->NAME`"));
            }
            self.bump()?;
            let field = self.bump()?;
            let Tok::Ident(name) = field.tok else {
                return Err(Issue::new(field.span, format!("expected a field name after `args`, found {}", field.tok.describe())));
            };
            if !self.args.contains(&name) {
                self.args.push(name.clone());
            }
            return Ok((Expr { kind: ExprKind::Args(Name { text: name, span: field.span }), span: span.to(field.span) }, 1));
        }
        if let Some(builtin) = Builtin::from_name(word) {
            if self.at(&Tok::LParen)? {
                return Err(Issue::new(span, format!("`{word}` is a builtin value, not a function")));
            }
            self.reads_probe |= builtin == Builtin::Probe;
            return Ok((Expr { kind: ExprKind::Builtin(builtin), span }, 1));
        }
        let callee = match word {
            "str" => Callee::Str,
            "ustack" => Callee::Ustack,
            "pystack" => Callee::Pystack,
            "usym" => Callee::Usym,
            "printf" | "print" | "delete" | "clear" | "exit" | "time" | "join" => {
                return Err(Issue::new(span, format!("`{word}` is a statement, not a value")));
            }
            _ => match AggFunc::from_name(word) {
                Some(func) => Callee::Agg(func),
                None if word.starts_with("arg") && word[3..].bytes().all(|b| b.is_ascii_digit()) && word.len() > 3 => {
                    return Err(Issue::new(span, format!("unknown builtin `{word}`: the arguments are arg0 to arg5")));
                }
                None => return Err(Issue::new(span, format!("unknown identifier `{word}`"))),
            },
        };
        // bpftrace writes a stack of the whole depth without brackets: `@[ustack] = count()`.
        if matches!(callee, Callee::Ustack | Callee::Pystack) && !self.at(&Tok::LParen)? {
            return Ok((Expr { kind: ExprKind::Call { callee, args: Vec::new() }, span }, 1));
        }
        self.expect(Tok::LParen, &format!(" after `{word}`"))?;
        let (args, height) = self.bracketed(Parser::list_until_paren)?;
        Ok((Expr { kind: ExprKind::Call { callee, args }, span: Span::new(span.start, self.last_end) }, height + 1))
    }

    /// `E, E, ...)` or `)`, and the tallest `E`.
    fn list_until_paren(&mut self) -> Result<(Vec<Expr>, usize), Issue> {
        let mut list = Vec::new();
        let mut height = 0;
        if self.at(&Tok::RParen)? {
            self.bump()?;
            return Ok((list, height));
        }
        loop {
            let (item, item_height) = self.nested()?;
            list.push(item);
            height = height.max(item_height);
            if self.at(&Tok::Comma)? {
                self.bump()?;
                continue;
            }
            self.expect(Tok::RParen, "")?;
            return Ok((list, height));
        }
    }

    /// `@name` or `@name[K, ...]`, and its height.
    pub(super) fn map_ref(&mut self) -> Result<(MapRef, usize), Issue> {
        let token = self.bump()?;
        let Tok::Map(text) = token.tok else {
            return Err(Issue::new(token.span, format!("expected a map, found {}", token.tok.describe())));
        };
        let name = Name { text, span: token.span };
        if !self.at(&Tok::LBracket)? {
            return Ok((MapRef { name, keys: Vec::new(), span: token.span }, 1));
        }
        self.bump()?;
        let (keys, height) = self.bracketed(|p| {
            let mut keys = Vec::new();
            let mut height = 0;
            loop {
                let (key, key_height) = p.nested()?;
                keys.push(key);
                height = height.max(key_height);
                if !p.at(&Tok::Comma)? {
                    break;
                }
                p.bump()?;
            }
            p.expect(Tok::RBracket, " to end the map key")?;
            Ok((keys, height))
        })?;
        let span = Span::new(token.span.start, self.last_end);
        if height + 1 > MAX_DEPTH {
            return Err(too_deep(span));
        }
        Ok((MapRef { name, keys, span }, height + 1))
    }
}

#[cfg(test)]
mod tests {
    use crate::ast::{Expr, ExprKind, Rhs, StmtKind, UnOp};
    use crate::parse;

    /// The value of `$x = SRC` written as S-expressions.
    fn shape(src: &str) -> String {
        let script = parse(&format!("begin {{ $x = {src} }}")).unwrap();
        let StmtKind::Assign { value: Rhs::Expr(e), .. } = &script.probes[0].body[0].kind else { panic!() };
        fn show(e: &Expr) -> String {
            match &e.kind {
                ExprKind::Int(v) => v.to_string(),
                ExprKind::Local(n) => format!("${n}"),
                ExprKind::Binary { op, lhs, rhs } => format!("({} {} {})", op.symbol(), show(lhs), show(rhs)),
                ExprKind::Unary { op: UnOp::Neg, expr } => format!("(neg {})", show(expr)),
                ExprKind::Unary { expr, .. } => format!("(un {})", show(expr)),
                ExprKind::Ternary { cond, then, els } => format!("(? {} {} {})", show(cond), show(then), show(els)),
                other => format!("{other:?}"),
            }
        }
        show(e)
    }

    #[test]
    fn precedence_is_c() {
        assert_eq!(shape("1 + 2 * 3"), "(+ 1 (* 2 3))");
        assert_eq!(shape("1 - 2 - 3"), "(- (- 1 2) 3)");
        assert_eq!(shape("$a && $b || $c"), "(|| (&& $a $b) $c)");
        assert_eq!(shape("1 | 2 ^ 3 & 4 == 5 < 6 << 7 + 8"), "(| 1 (^ 2 (& 3 (== 4 (< 5 (<< 6 (+ 7 8)))))))");
        assert_eq!(shape("1 ? 2 : 3 ? 4 : 5"), "(? 1 2 (? 3 4 5))");
        assert_eq!(shape("-(1 + 2) * 3"), "(* (neg (+ 1 2)) 3)");
        assert_eq!(shape("!1 == 0"), "(== (un 1) 0)");
    }
}
