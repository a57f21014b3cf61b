//! Tokens, read one at a time on demand. Probe points are not made of tokens
//! (`func:/usr/lib/libz.so.1:inflate`), so the parser reads them straight from the text and then
//! sets the lexer where they ended.
use crate::ast::{BinOp, StrLit};
use crate::diag::{Issue, Span};
use crate::limits::MAX_STR_LITERAL;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// `$name`, without the `$`.
    Local(String),
    /// `@name`, without the `@`; `@` alone is the map with the empty name.
    Map(String),
    Int(u64),
    Str(StrLit),
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Semi,
    Question,
    Colon,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Shl,
    Shr,
    Lt,
    Le,
    Gt,
    Ge,
    EqEq,
    Ne,
    Amp,
    Caret,
    Pipe,
    AndAnd,
    OrOr,
    Bang,
    Tilde,
    Assign,
    /// `+=` and the other compound assignments.
    OpAssign(BinOp),
    PlusPlus,
    MinusMinus,
    /// `->` and `.`: only in `args->NAME` and `args.NAME`, a tracepoint's field.
    Arrow,
    Dot,
    Eof,
}

/// Punctuation, longest first so that `<<=` is not read as `<<` then `=`.
const PUNCT: &[(&str, Tok)] = &[
    ("<<=", Tok::OpAssign(BinOp::Shl)),
    (">>=", Tok::OpAssign(BinOp::Shr)),
    ("<<", Tok::Shl),
    (">>", Tok::Shr),
    ("<=", Tok::Le),
    (">=", Tok::Ge),
    ("==", Tok::EqEq),
    ("!=", Tok::Ne),
    ("&&", Tok::AndAnd),
    ("||", Tok::OrOr),
    ("++", Tok::PlusPlus),
    ("--", Tok::MinusMinus),
    ("->", Tok::Arrow),
    ("+=", Tok::OpAssign(BinOp::Add)),
    ("-=", Tok::OpAssign(BinOp::Sub)),
    ("*=", Tok::OpAssign(BinOp::Mul)),
    ("/=", Tok::OpAssign(BinOp::Div)),
    ("%=", Tok::OpAssign(BinOp::Rem)),
    ("&=", Tok::OpAssign(BinOp::BitAnd)),
    ("|=", Tok::OpAssign(BinOp::BitOr)),
    ("^=", Tok::OpAssign(BinOp::BitXor)),
    ("{", Tok::LBrace),
    ("}", Tok::RBrace),
    ("(", Tok::LParen),
    (")", Tok::RParen),
    ("[", Tok::LBracket),
    ("]", Tok::RBracket),
    (",", Tok::Comma),
    (";", Tok::Semi),
    ("?", Tok::Question),
    (":", Tok::Colon),
    ("+", Tok::Plus),
    ("-", Tok::Minus),
    ("*", Tok::Star),
    ("/", Tok::Slash),
    ("%", Tok::Percent),
    ("<", Tok::Lt),
    (">", Tok::Gt),
    ("&", Tok::Amp),
    ("^", Tok::Caret),
    ("|", Tok::Pipe),
    ("!", Tok::Bang),
    ("~", Tok::Tilde),
    ("=", Tok::Assign),
    (".", Tok::Dot),
];

impl Tok {
    /// How an error message names it: "`;`", "`$x`", "the end of the script".
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(name) => format!("`{name}`"),
            Tok::Local(name) => format!("`${name}`"),
            Tok::Map(name) => format!("`@{name}`"),
            Tok::Int(value) => format!("integer `{value}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Eof => "the end of the script".to_string(),
            other => match PUNCT.iter().find(|(_, t)| t == other) {
                Some((text, _)) => format!("`{text}`"),
                None => format!("{other:?}"),
            },
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

pub(crate) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Lexer<'a> {
        Lexer { src, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Goes on from `pos`, a character boundary.
    pub fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }

    pub fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    pub fn bump_char(&mut self) {
        if let Some(c) = self.peek_char() {
            self.pos += c.len_utf8();
        }
    }

    /// Skips white space and comments; a line that starts with `#!` is one too, as in
    /// bpftrace, so that an executable script's `#!/usr/bin/env bpftrace` line is read.
    pub fn skip_trivia(&mut self) -> Result<(), Issue> {
        loop {
            let rest = &self.src[self.pos..];
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            let line_start = self.pos == 0 || self.src[..self.pos].ends_with('\n');
            if trimmed.starts_with("//") || (line_start && trimmed.starts_with("#!")) {
                self.pos += trimmed.find('\n').unwrap_or(trimmed.len());
            } else if let Some(comment) = trimmed.strip_prefix("/*") {
                match comment.find("*/") {
                    Some(end) => self.pos += end + 4,
                    None => return Err(Issue::new(Span::new(self.pos, self.pos + 2), "unterminated comment")),
                }
            } else {
                return Ok(());
            }
        }
    }

    fn eat_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek_char().is_some_and(&keep) {
            self.bump_char();
        }
        &self.src[start..self.pos]
    }

    pub fn next(&mut self) -> Result<Token, Issue> {
        self.skip_trivia()?;
        let start = self.pos;
        let Some(c) = self.peek_char() else { return Ok(Token { tok: Tok::Eof, span: Span::new(start, start) }) };
        let tok = match c {
            c if c.is_ascii_alphabetic() || c == '_' => Tok::Ident(self.eat_while(is_ident_char).to_string()),
            '$' | '@' => {
                self.bump_char();
                let name = self.eat_while(is_ident_char);
                if name.starts_with(|c: char| c.is_ascii_digit()) || (c == '$' && name.is_empty()) {
                    let what = if c == '$' { "local" } else { "map" };
                    let message = format!("a {what} name starts with a letter or `_` after `{c}`");
                    return Err(Issue::new(Span::new(start, self.pos.max(start + 1)), message));
                }
                if c == '$' {
                    Tok::Local(name.to_string())
                } else {
                    Tok::Map(name.to_string())
                }
            }
            '0'..='9' => Tok::Int(self.number()?),
            '"' => Tok::Str(self.string()?),
            _ => {
                let rest = &self.src[start..];
                let Some((text, tok)) = PUNCT.iter().find(|(text, _)| rest.starts_with(text)) else {
                    return Err(Issue::new(Span::new(start, start + c.len_utf8()), format!("unexpected character `{}`", c.escape_debug())));
                };
                self.pos += text.len();
                tok.clone()
            }
        };
        Ok(Token { tok, span: Span::new(start, self.pos) })
    }

    /// A decimal or `0x` literal with optional `_` separators, up to `u64::MAX`; a decimal
    /// one may have bpftrace's exponent (`1e6` is 1000000).
    fn number(&mut self) -> Result<u64, Issue> {
        let start = self.pos;
        let text = self.eat_while(is_ident_char);
        let (digits, radix, skip) = match text.get(..2) {
            Some("0x" | "0X") => (&text[2..], 16, 2),
            _ => (text, 10, 0),
        };
        let (digits, exponent) = match digits.split_once('e') {
            Some((mantissa, exp)) if radix == 10 && !mantissa.is_empty() && !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit()) => (mantissa, exp.parse::<u32>().ok()),
            _ => (digits, Some(0)),
        };
        let too_big = || Issue::new(Span::new(start, self.pos), format!("integer literal `{text}` does not fit in 64 bits"));
        let mut value = 0u64;
        let mut any = false;
        for (i, ch) in digits.char_indices() {
            if ch == '_' {
                continue;
            }
            let Some(digit) = ch.to_digit(radix) else {
                let at = start + skip + i;
                let kind = if radix == 16 { "hexadecimal" } else { "decimal" };
                return Err(Issue::new(Span::new(at, at + 1), format!("invalid digit `{ch}` in {kind} literal")));
            };
            value = value.checked_mul(u64::from(radix)).and_then(|v| v.checked_add(u64::from(digit))).ok_or_else(too_big)?;
            any = true;
        }
        if !any {
            return Err(Issue::new(Span::new(start, self.pos), "expected hexadecimal digits after `0x`"));
        }
        exponent.and_then(|e| 10u64.checked_pow(e)).and_then(|scale| value.checked_mul(scale)).ok_or_else(too_big)
    }

    /// A `"..."` literal with escapes `\n \t \\ \" \xHH`, on one line.
    fn string(&mut self) -> Result<StrLit, Issue> {
        let start = self.pos;
        self.bump_char();
        let (mut bytes, mut starts) = (Vec::new(), Vec::new());
        loop {
            let at = self.pos;
            let unterminated = || Issue::new(Span::new(start, start + 1), "unterminated string literal");
            match self.peek_char() {
                None | Some('\n') => return Err(unterminated()),
                Some('"') => {
                    self.bump_char();
                    break;
                }
                Some('\\') => {
                    self.bump_char();
                    let escaped = self.peek_char().ok_or_else(unterminated)?;
                    self.bump_char();
                    let byte = match escaped {
                        'n' => b'\n',
                        't' => b'\t',
                        '\\' => b'\\',
                        '"' => b'"',
                        'x' => {
                            let hex = self.src.get(self.pos..self.pos + 2).and_then(|h| u8::from_str_radix(h, 16).ok().filter(|_| !h.starts_with('+')));
                            let Some(byte) = hex else {
                                return Err(Issue::new(Span::new(at, self.pos), "`\\x` needs two hexadecimal digits"));
                            };
                            self.pos += 2;
                            byte
                        }
                        other => {
                            let message = format!("unknown escape `\\{}`", other.escape_debug());
                            return Err(Issue::new(Span::new(at, self.pos), message));
                        }
                    };
                    bytes.push(byte);
                    starts.push(at);
                }
                Some(c) => {
                    bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    starts.extend(std::iter::repeat_n(at, c.len_utf8()));
                    self.bump_char();
                }
            }
        }
        starts.push(self.pos - 1);
        let span = Span::new(start, self.pos);
        if bytes.len() > MAX_STR_LITERAL {
            let message = format!("string literal is {} bytes long; at most {MAX_STR_LITERAL} are allowed", bytes.len());
            return Err(Issue::new(span, message));
        }
        Ok(StrLit { bytes, span, starts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(src: &str) -> Result<Vec<Tok>, String> {
        let mut lexer = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            match lexer.next() {
                Ok(Token { tok: Tok::Eof, .. }) => return Ok(out),
                Ok(t) => out.push(t.tok),
                Err(e) => return Err(e.message),
            }
        }
    }

    #[test]
    fn reads_operators_longest_first_and_skips_comments() {
        let toks = tokens("a <<= 1_000 /* c */ >> 0x_ff; // end\n@ @m $x").unwrap();
        let expected = [
            Tok::Ident("a".into()),
            Tok::OpAssign(BinOp::Shl),
            Tok::Int(1000),
            Tok::Shr,
            Tok::Int(255),
            Tok::Semi,
            Tok::Map(String::new()),
            Tok::Map("m".into()),
            Tok::Local("x".into()),
        ];
        assert_eq!(toks, expected);
        let toks = tokens("#!/usr/bin/env bpftrace\nargs->ret args.fd\n#!x\n").unwrap();
        assert_eq!(toks, [Tok::Ident("args".into()), Tok::Arrow, Tok::Ident("ret".into()), Tok::Ident("args".into()), Tok::Dot, Tok::Ident("fd".into())]);
    }

    #[test]
    fn literals_are_checked() {
        assert_eq!(tokens("18446744073709551615").unwrap(), [Tok::Int(u64::MAX)]);
        assert!(tokens("18446744073709551616").unwrap_err().contains("does not fit in 64 bits"));
        assert!(tokens("12ab").unwrap_err().contains("invalid digit `a`"));
        assert!(tokens("0x").unwrap_err().contains("hexadecimal digits"));
        assert_eq!(tokens("1e6 2_5e2 1e0").unwrap(), [Tok::Int(1_000_000), Tok::Int(2_500), Tok::Int(1)]);
        assert!(tokens("2e19").unwrap_err().contains("does not fit in 64 bits"));
        assert!(tokens("1e").unwrap_err().contains("invalid digit `e`"));
        assert!(tokens("0x1e3").is_ok());
        assert!(tokens("\"a\\q\"").unwrap_err().contains("unknown escape `\\q`"));
        assert!(tokens("\"abc").unwrap_err().contains("unterminated string"));
        assert!(tokens("/* x").unwrap_err().contains("unterminated comment"));
        assert!(tokens("\"\\x+1\"").unwrap_err().contains("two hexadecimal digits"));
        let Tok::Str(lit) = &tokens("\"a\\x41\\n\\\"\u{e9}\"").unwrap()[0] else { panic!() };
        assert_eq!(lit.bytes, b"aA\n\"\xc3\xa9");
        assert_eq!(lit.starts, [1, 2, 6, 8, 10, 10, 12]);
    }
}
