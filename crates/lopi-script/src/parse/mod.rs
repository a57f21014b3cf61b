//! Recursive descent from probes down to statements ([`expr`] has the expressions, [`point`]
//! the probe points). The first syntax error ends parsing: what follows one says little.
//! Nesting is counted here against [`MAX_DEPTH`], so that neither the parser nor anything
//! walking its tree can recurse without bound.
mod bpftrace_point;
mod expr;
mod point;

use crate::ast::{Agg, AssignOp, Callee, Expr, ExprKind, IfArm, Name, Probe, Rhs, Script, Stmt, StmtKind, Target};
use crate::diag::{diagnostics, Diagnostics, Issue, SourceMap, Span};
use crate::lexer::{Lexer, Tok, Token};
use crate::limits::{MAX_DEPTH, MAX_UNROLL, MAX_UNROLLED};

/// The syntax tree of `source`, or its first syntax error.
pub fn parse(source: &str) -> Result<Script, Diagnostics> {
    let map = SourceMap::new(source);
    match Parser::new(source).script() {
        Ok(probes) => Ok(Script { probes, source: map }),
        Err(issue) => Err(diagnostics(vec![issue], &map)),
    }
}

pub(crate) struct Parser<'a> {
    src: &'a str,
    lexer: Lexer<'a>,
    peeked: Option<Token>,
    /// End of the last token taken, for the spans of what it ends.
    last_end: usize,
    /// Expressions being parsed inside one another.
    depth: usize,
    /// `if`s being parsed inside one another.
    ifs: usize,
    /// How many times the enclosing `unroll`s write the block at hand out.
    unrolled: usize,
    /// In a predicate and outside brackets, where `/` ends the predicate instead of dividing.
    in_predicate: bool,
    /// The fields of `args` the probe being parsed names, each once.
    args: Vec<String>,
    /// The probe being parsed reads `probe`.
    reads_probe: bool,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Parser<'a> {
        Parser { src, lexer: Lexer::new(src), peeked: None, last_end: 0, depth: 0, ifs: 0, unrolled: 1, in_predicate: false, args: Vec::new(), reads_probe: false }
    }

    fn peek(&mut self) -> Result<&Token, Issue> {
        let token = match self.peeked.take() {
            Some(token) => token,
            None => self.lexer.next()?,
        };
        Ok(self.peeked.insert(token))
    }

    fn bump(&mut self) -> Result<Token, Issue> {
        self.peek()?;
        let token = self.peeked.take().unwrap_or(Token { tok: Tok::Eof, span: Span::new(self.last_end, self.last_end) });
        self.last_end = token.span.end;
        Ok(token)
    }

    /// Forgets a token looked at but not taken, so that the text can be read as a probe point.
    fn unpeek(&mut self) {
        if let Some(token) = self.peeked.take() {
            self.lexer.set_pos(token.span.start);
        }
    }

    fn at(&mut self, tok: &Tok) -> Result<bool, Issue> {
        Ok(&self.peek()?.tok == tok)
    }

    fn at_word(&mut self, word: &str) -> Result<bool, Issue> {
        Ok(matches!(&self.peek()?.tok, Tok::Ident(w) if w == word))
    }

    /// Takes `tok` or fails, saying what it was `for` (" to end the predicate").
    fn expect(&mut self, tok: Tok, purpose: &str) -> Result<Token, Issue> {
        let next = self.peek()?;
        if next.tok == tok {
            return self.bump();
        }
        Err(Issue::new(next.span, format!("expected {}{purpose}, found {}", tok.describe(), next.tok.describe())))
    }

    fn unexpected(&mut self, what: &str) -> Issue {
        match self.peek() {
            Ok(next) => Issue::new(next.span, format!("expected {what}, found {}", next.tok.describe())),
            Err(issue) => issue,
        }
    }

    fn script(&mut self) -> Result<Vec<Probe>, Issue> {
        let mut probes = Vec::new();
        loop {
            self.unpeek();
            self.lexer.skip_trivia()?;
            if self.lexer.peek_char().is_none() {
                break;
            }
            probes.push(self.probe()?);
        }
        if probes.is_empty() {
            return Err(Issue::new(Span::new(0, 0), "a script needs at least one probe, such as `begin { printf(\"hi\\n\"); }`"));
        }
        Ok(probes)
    }

    /// `POINT [, POINT]* [/PREDICATE/] { BODY }`.
    fn probe(&mut self) -> Result<Probe, Issue> {
        let mut points = Vec::new();
        loop {
            let (point, end) = point::point(self.src, self.lexer.pos())?;
            self.lexer.set_pos(end);
            points.push(point);
            self.lexer.skip_trivia()?;
            if self.lexer.peek_char() != Some(',') {
                break;
            }
            self.lexer.bump_char();
            self.lexer.skip_trivia()?;
        }
        let span = points.iter().map(|p| p.span).reduce(Span::to).unwrap_or_default();
        let predicate = if self.lexer.peek_char() == Some('/') {
            self.lexer.bump_char();
            self.in_predicate = true;
            let predicate = self.expr();
            self.in_predicate = false;
            let predicate = predicate?;
            self.expect(Tok::Slash, " to end the predicate")?;
            Some(predicate)
        } else {
            None
        };
        let body = self.block()?;
        Ok(Probe { points, predicate, body, span, args: std::mem::take(&mut self.args), reads_probe: std::mem::take(&mut self.reads_probe) })
    }

    /// `{ STATEMENT [; STATEMENT]* [;] }`: an `if` needs no `;` after its `}`.
    fn block(&mut self) -> Result<Vec<Stmt>, Issue> {
        let open = self.expect(Tok::LBrace, "")?;
        let mut stmts = Vec::new();
        loop {
            match self.peek()?.tok {
                Tok::RBrace => {
                    self.bump()?;
                    return Ok(stmts);
                }
                Tok::Semi => {
                    self.bump()?;
                    continue;
                }
                Tok::Eof => return Err(self.unexpected("`}`").note(Some(open.span), "to close this `{`")),
                _ => {}
            }
            if self.at_word("unroll")? {
                stmts.extend(self.unroll()?);
                continue;
            }
            let stmt = self.statement()?;
            let needs_semi = !matches!(stmt.kind, StmtKind::If { .. });
            stmts.push(stmt);
            if needs_semi && !self.at(&Tok::Semi)? && !self.at(&Tok::RBrace)? && !self.at(&Tok::Eof)? {
                return Err(self.unexpected("`;` or `}` after a statement"));
            }
        }
    }

    fn statement(&mut self) -> Result<Stmt, Issue> {
        let Token { tok, span } = self.peek()?.clone();
        match tok {
            Tok::Ident(word) => match word.as_str() {
                "if" => self.if_stmt(),
                "while" | "for" | "do" => {
                    Err(Issue::new(span, format!("loops are not allowed: `{word}` could run without bound, and a probe must finish in bounded time")))
                }
                "printf" | "print" | "delete" | "clear" | "exit" | "time" | "join" => self.call_stmt(&word, span),
                "else" => Err(Issue::new(span, "`else` without an `if`")),
                _ => Err(self.unexpected("a statement")),
            },
            Tok::Local(name) => {
                self.bump()?;
                self.assignment(Target::Local(Name { text: name, span }), span)
            }
            Tok::Map(_) => {
                let map = self.map_ref()?.0;
                self.assignment(Target::Map(map), span)
            }
            _ => Err(self.unexpected("a statement")),
        }
    }

    /// The operator and value after an assignment's target.
    fn assignment(&mut self, target: Target, start: Span) -> Result<Stmt, Issue> {
        let op_token = self.bump()?;
        let op = match op_token.tok {
            Tok::Assign => AssignOp::Set,
            Tok::OpAssign(op) => AssignOp::Compound(op),
            Tok::PlusPlus => AssignOp::Incr,
            Tok::MinusMinus => AssignOp::Decr,
            other => return Err(Issue::new(op_token.span, format!("expected `=`, `+=`, `++` or another assignment, found {}", other.describe()))),
        };
        let value = match op {
            AssignOp::Incr | AssignOp::Decr => Rhs::Expr(Expr { kind: ExprKind::Int(1), span: op_token.span }),
            _ => match self.expr()? {
                Expr { kind: ExprKind::Call { callee: Callee::Agg(func), args }, span } => Rhs::Agg(Agg { func, args, span }),
                value => Rhs::Expr(value),
            },
        };
        Ok(Stmt { kind: StmtKind::Assign { target, op, value }, span: Span::new(start.start, self.last_end) })
    }

    /// `if (C) {..} [else if (C) {..}]* [else {..}]`.
    /// `unroll (N) { .. }`: the block N times over (bpftrace's bounded loop, N from 1 to
    /// [`MAX_UNROLL`]), written out here; nested ones multiply, up to `MAX_UNROLLED` copies.
    fn unroll(&mut self) -> Result<Vec<Stmt>, Issue> {
        let keyword = self.bump()?.span;
        self.expect(Tok::LParen, " after `unroll`")?;
        let count = self.bump()?;
        let n = match count.tok {
            Tok::Int(n) if (1..=MAX_UNROLL as u64).contains(&n) => n as usize,
            _ => return Err(Issue::new(count.span, format!("`unroll` takes a literal count from 1 to {MAX_UNROLL}"))),
        };
        self.expect(Tok::RParen, " to end the count")?;
        let outer = self.unrolled;
        self.unrolled = outer.saturating_mul(n);
        if self.unrolled > MAX_UNROLLED {
            return Err(Issue::new(keyword, format!("nested `unroll`s would write the block out more than {MAX_UNROLLED} times")));
        }
        let body = self.block()?;
        self.unrolled = outer;
        Ok(std::iter::repeat_n(body, n).flatten().collect())
    }

    fn if_stmt(&mut self) -> Result<Stmt, Issue> {
        let keyword = self.bump()?.span;
        self.ifs += 1;
        if self.ifs > MAX_DEPTH {
            return Err(Issue::new(keyword, format!("`if` nested too deeply (more than {MAX_DEPTH} levels)")));
        }
        let mut arms = vec![self.if_arm()?];
        let mut els = None;
        while self.at_word("else")? {
            self.bump()?;
            if self.at_word("if")? {
                self.bump()?;
                arms.push(self.if_arm()?);
            } else {
                els = Some(self.block()?);
                break;
            }
        }
        self.ifs -= 1;
        Ok(Stmt { kind: StmtKind::If { arms, els }, span: Span::new(keyword.start, self.last_end) })
    }

    fn if_arm(&mut self) -> Result<IfArm, Issue> {
        self.expect(Tok::LParen, " after `if`")?;
        let cond = self.expr()?;
        self.expect(Tok::RParen, " to end the condition")?;
        Ok(IfArm { cond, body: self.block()? })
    }

    /// `printf(..)`, `print(..)`, `delete(@m[..])`, `clear(@m)`, `exit()`, `time([..])`,
    /// `join(..)`.
    fn call_stmt(&mut self, word: &str, start: Span) -> Result<Stmt, Issue> {
        self.bump()?;
        self.expect(Tok::LParen, &format!(" after `{word}`"))?;
        let kind = match word {
            "printf" => {
                let next = self.bump()?;
                let Tok::Str(format) = next.tok else {
                    return Err(Issue::new(next.span, "the format of `printf` must be a string literal"));
                };
                let mut args = Vec::new();
                while self.at(&Tok::Comma)? {
                    self.bump()?;
                    args.push(self.expr()?);
                }
                StmtKind::Printf { format, args }
            }
            "print" => {
                let value = self.expr()?;
                let mut args = Vec::new();
                while self.at(&Tok::Comma)? {
                    self.bump()?;
                    args.push(self.expr()?);
                }
                match value {
                    Expr { kind: ExprKind::Map(map), .. } if map.keys.is_empty() && args.len() <= 2 => StmtKind::PrintMap { map: map.name, args },
                    Expr { kind: ExprKind::Map(map), .. } if map.keys.is_empty() => {
                        return Err(Issue::new(args[2].span, "`print` of a map takes at most a top and a divisor: `print(@m, 10, 1000)`"));
                    }
                    value if args.is_empty() => StmtKind::Print(value),
                    _ => return Err(Issue::new(args[0].span, "`print` of a value takes no more arguments; a top and a divisor are a whole map's")),
                }
            }
            "delete" => {
                if !matches!(self.peek()?.tok, Tok::Map(_)) {
                    return Err(self.unexpected("a map element, as in `delete(@m[k])`"));
                }
                StmtKind::Delete(self.map_ref()?.0)
            }
            "clear" => {
                if !matches!(self.peek()?.tok, Tok::Map(_)) {
                    return Err(self.unexpected("a map, as in `clear(@m)`"));
                }
                let map = self.map_ref()?.0;
                if !map.keys.is_empty() {
                    return Err(Issue::new(map.span, "`clear` empties a whole map: write `clear(@m)`, or `delete(@m[k])` for one element"));
                }
                StmtKind::Clear(map.name)
            }
            "join" => {
                let array = self.expr()?;
                let sep = match self.at(&Tok::Comma)? {
                    true => {
                        self.bump()?;
                        let next = self.bump()?;
                        let Tok::Str(sep) = next.tok else {
                            return Err(Issue::new(next.span, "the separator of `join` must be a string literal"));
                        };
                        Some(sep)
                    }
                    false => None,
                };
                StmtKind::Join { array, sep }
            }
            "time" => match self.peek()?.tok.clone() {
                Tok::Str(format) => {
                    self.bump()?;
                    StmtKind::Time(Some(format))
                }
                Tok::RParen => StmtKind::Time(None),
                _ => return Err(self.unexpected("a string literal, the format of `time`")),
            },
            _ => StmtKind::Exit,
        };
        self.expect(Tok::RParen, &format!(" to end `{word}`"))?;
        Ok(Stmt { kind, span: Span::new(start.start, self.last_end) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::{BinOp, PointSpec};

    fn first_error(src: &str) -> (String, usize, usize) {
        let e = parse(src).unwrap_err().errors.remove(0);
        (e.message, e.line, e.column)
    }

    #[test]
    fn probes_share_bodies_and_take_predicates() {
        let script = parse("func:a, func:b:return /pid == 1 && tid != 2/ { @x = 1 }\nend { print(@x); }").unwrap();
        assert_eq!(script.probes.len(), 2);
        assert_eq!(script.probes[0].points.len(), 2);
        assert!(matches!(script.probes[0].points[1].spec, PointSpec::Func { ret: true, .. }));
        let Some(Expr { kind: ExprKind::Binary { op: BinOp::And, .. }, .. }) = &script.probes[0].predicate else { panic!() };
        assert!(matches!(script.probes[1].body[0].kind, StmtKind::PrintMap { .. }));
    }

    #[test]
    fn predicate_division_needs_parentheses() {
        assert!(parse("begin /(8 / 2) == 4/ { exit() }").is_ok());
        assert_eq!(first_error("begin /8 / 2/ { exit() }"), ("expected `{`, found integer `2`".to_string(), 1, 12));
    }

    #[test]
    fn statements_need_separators_but_ifs_do_not() {
        assert!(parse("begin { if (1) { $a = 1 } $b = 2; ; }").is_ok());
        assert_eq!(first_error("begin { $a = 1 $b = 2 }"), ("expected `;` or `}` after a statement, found `$b`".to_string(), 1, 16));
        assert_eq!(first_error("begin { $a = 1;"), ("expected `}`, found the end of the script".to_string(), 1, 16));
    }
}
