//! Probe points, read straight from the text: `func:libc.so.6:malloc:return`,
//! `func:/usr/lib/libz.so.1:inflate`, `func:main+0x10`, `interval:500ms`. A point ends at white
//! space, `,`, `{` or `/` (where a predicate starts); only the library path of a `func:` or
//! `usdt:` point (one that starts with `/`, `./` or `../`) may hold a `/`, and it runs to the
//! next `:`.
use crate::ast::{LockEvent, Name, Point, PointSpec, Spelling};
use crate::diag::{Issue, Span};
use crate::limits::MIN_INTERVAL_NS;

/// A `:`-separated part of a point.
pub(super) struct Part<'a> {
    pub(super) text: &'a str,
    pub(super) span: Span,
}

impl Part<'_> {
    pub(super) fn name(&self) -> Name {
        Name { text: self.text.to_string(), span: self.span }
    }

    /// The part's bytes `from..to`.
    pub(super) fn sub(&self, from: usize, to: usize) -> Part<'_> {
        Part { text: &self.text[from..to], span: Span::new(self.span.start + from, self.span.start + to) }
    }
}

/// Characters a point's part may have: globs, library file names (`libstdc++.so.6`,
/// `ld-linux-x86-64.so.2`), offsets, durations.
fn is_point_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"_.*?$@+-[]!^".contains(&c)
}

/// The point at `start` of `src`, and where it ends.
pub(crate) fn point(src: &str, start: usize) -> Result<(Point, usize), Issue> {
    let bytes = src.as_bytes();
    let mut i = start;
    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
        i += 1;
    }
    let kind = Part { text: &src[start..i], span: Span::new(start, i) };
    if kind.text.is_empty() {
        let found = src[start..].chars().next();
        let message = match found {
            Some(c) => format!("expected a probe point, found `{}`", c.escape_debug()),
            None => "expected a probe point, found the end of the script".to_string(),
        };
        return Err(Issue::new(Span::new(start, start + found.map_or(0, char::len_utf8)), message));
    }
    let mut parts = Vec::new();
    while bytes.get(i) == Some(&b':') {
        i += 1;
        let part_start = i;
        let rest = &src[i..];
        let path = matches!(kind.text, "func" | "uprobe" | "uretprobe" | "usdt") && parts.is_empty() && (rest.starts_with('/') || rest.starts_with("./") || rest.starts_with("../"));
        while i < bytes.len() && if path { !b":,{".contains(&bytes[i]) && !bytes[i].is_ascii_whitespace() } else { is_point_char(bytes[i]) } {
            i += 1;
        }
        parts.push(Part { text: &src[part_start..i], span: Span::new(part_start, i) });
    }
    let bpftrace = matches!(kind.text, "BEGIN" | "END" | "uprobe" | "uretprobe" | "tracepoint");
    Ok((Point { spec: spec(&kind, &parts)?, span: Span::new(start, i), bpftrace }, i))
}

fn spec(kind: &Part, parts: &[Part]) -> Result<PointSpec, Issue> {
    let bare = |spec: PointSpec| match parts.first() {
        None => Ok(spec),
        Some(p) => Err(Issue::new(p.span, format!("`{}` takes no `:` part", kind.text))),
    };
    Ok(match kind.text {
        "begin" => bare(PointSpec::Begin)?,
        "end" => bare(PointSpec::End)?,
        "func" => func(kind, parts)?,
        "addr" => PointSpec::Addr(number(one(kind, parts, "addr:0x401000")?)?),
        "syscall" => syscall(kind, parts)?,
        "interval" => match super::bpftrace_point::interval(kind, parts) {
            Some(ns) => PointSpec::Interval { ns: ns? },
            None => PointSpec::Interval { ns: duration(one(kind, parts, "interval:500ms")?)? },
        },
        "lock" => {
            let part = one(kind, parts, "lock:acquire")?;
            let event = LockEvent::ALL.into_iter().find(|e| e.name() == part.text);
            if event.is_none() && part.text != "*" {
                let message = format!("unknown lock event `{}`; expected acquire, acquired, release, contended or *", part.text);
                return Err(Issue::new(part.span, message));
            }
            PointSpec::Lock(event)
        }
        "thread" => match one(kind, parts, "thread:start")? {
            Part { text: "start", .. } => PointSpec::ThreadStart,
            Part { text: "exit", .. } => PointSpec::ThreadExit,
            part => return Err(Issue::new(part.span, format!("unknown thread event `{}`; expected start or exit", part.text))),
        },
        _ if let Some(spec) = super::bpftrace_point::spec(kind, parts) => spec?,
        other => {
            let message = format!("unknown probe type `{other}`; expected func, addr, syscall, lock, begin, end, interval or thread");
            return Err(Issue::new(kind.span, message));
        }
    })
}

/// The single part of a point that takes one, as in `example`.
fn one<'p, 'a>(kind: &Part, parts: &'p [Part<'a>], example: &str) -> Result<&'p Part<'a>, Issue> {
    match parts {
        [] => Err(Issue::new(kind.span, format!("`{}` needs a `:` part, as in `{example}`", kind.text))),
        [part] if part.text.is_empty() => Err(Issue::new(part.span, format!("expected something after `{}:`, as in `{example}`", kind.text))),
        [part] => Ok(part),
        [_, extra, ..] => Err(Issue::new(extra.span, format!("unexpected `:{}` in a `{}` point", extra.text, kind.text))),
    }
}

/// `Some(true)` for `return`, `Some(false)` for `entry`.
fn is_return(part: &Part) -> Option<bool> {
    match part.text {
        "entry" => Some(false),
        "return" => Some(true),
        _ => None,
    }
}

/// `func:GLOB`, `func:GLOB:KIND`, `func:LIB:GLOB`, `func:LIB:GLOB:KIND`, `func:[LIB:]NAME+OFF`:
/// with two parts, a last part `entry` or `return` makes it `GLOB:KIND`.
pub(super) fn func(kind: &Part, parts: &[Part]) -> Result<PointSpec, Issue> {
    let (lib, target, ret) = match parts {
        [] => return Err(Issue::new(kind.span, "`func` needs a function, as in `func:main` or `func:libc.so.6:malloc:return`")),
        [f] => (None, f, None),
        [a, b] => match is_return(b) {
            Some(ret) => (None, a, Some((ret, b))),
            None => (Some(a), b, None),
        },
        [a, b, c] => match is_return(c) {
            Some(ret) => (Some(a), b, Some((ret, c))),
            None => return Err(Issue::new(c.span, format!("expected `entry` or `return`, found `{}`", c.text))),
        },
        [_, _, _, d, ..] => return Err(Issue::new(d.span, "too many `:` parts in a `func` point")),
    };
    if let Some(lib) = lib.filter(|l| l.text.is_empty()) {
        return Err(Issue::new(lib.span, "expected a library path or file name"));
    }
    let lib = lib.map(Part::name);
    let Some(plus) = target.text.find('+') else {
        glob(target, "function")?;
        return Ok(PointSpec::Func { lib, glob: target.name(), ret: ret.is_some_and(|(r, _)| r) });
    };
    if let Some((_, part)) = ret {
        return Err(Issue::new(part.span, "a `func:NAME+OFF` point is neither an entry nor a return"));
    }
    let name = target.sub(0, plus);
    if name.text.is_empty() {
        return Err(Issue::new(name.span, "expected a function name before `+`"));
    }
    if let Some((i, c)) = name.text.char_indices().find(|&(_, c)| !(c.is_ascii_alphanumeric() || "_.$@".contains(c))) {
        let message = match c {
            '*' | '?' | '[' => "an offset needs one function, not a glob".to_string(),
            c => format!("`{}` cannot appear in a function name", c.escape_debug()),
        };
        return Err(Issue::new(name.sub(i, i + c.len_utf8()).span, message));
    }
    let offset = number(&target.sub(plus + 1, target.text.len()))?;
    Ok(PointSpec::FuncOffset { lib, name: name.name(), offset })
}

fn syscall(kind: &Part, parts: &[Part]) -> Result<PointSpec, Issue> {
    let (name, ret) = match parts {
        [name] => (name, false),
        [name, k] => match is_return(k) {
            Some(ret) => (name, ret),
            None => return Err(Issue::new(k.span, format!("expected `entry` or `return`, found `{}`", k.text))),
        },
        [] => return Err(Issue::new(kind.span, "`syscall` needs a system call, as in `syscall:read` or `syscall:*:return`")),
        [_, _, extra, ..] => return Err(Issue::new(extra.span, "too many `:` parts in a `syscall` point")),
    };
    glob(name, "system call")?;
    Ok(PointSpec::Syscall { glob: name.name(), ret, spelling: Spelling::Lopi })
}

/// Checks that `part` is a glob over `what` names: name characters, `*`, `?` and closed,
/// non-empty `[...]` classes.
pub(super) fn glob(part: &Part, what: &str) -> Result<(), Issue> {
    if part.text.is_empty() {
        return Err(Issue::new(part.span, format!("expected a {what} name or glob")));
    }
    let mut class: Option<usize> = None;
    for (i, c) in part.text.char_indices() {
        let ok = match (class, c) {
            (None, '[') => {
                class = Some(i);
                true
            }
            (Some(open), ']') => {
                class = None;
                i > open + 1
            }
            (Some(_), c) => c.is_ascii_alphanumeric() || "_.$@-!^".contains(c),
            (None, c) => c.is_ascii_alphanumeric() || "_.$@*?".contains(c),
        };
        if !ok {
            let message = match c {
                ']' if class.is_none() && part.text[..i].ends_with('[') => "empty `[]` in a glob".to_string(),
                c => format!("`{}` cannot appear in a {what} glob", c.escape_debug()),
            };
            return Err(Issue::new(part.sub(i, i + c.len_utf8()).span, message));
        }
    }
    match class {
        Some(open) => Err(Issue::new(part.sub(open, open + 1).span, "unclosed `[` in a glob")),
        None => Ok(()),
    }
}

/// A decimal or `0x` number with optional `_` separators.
pub(super) fn number(part: &Part) -> Result<u64, Issue> {
    let (digits, radix) = match part.text.get(..2) {
        Some("0x" | "0X") => (&part.text[2..], 16),
        _ => (part.text, 10),
    };
    let valid = digits.starts_with(|c: char| c.is_digit(radix)) && digits.chars().all(|c| c == '_' || c.is_digit(radix));
    if !valid {
        return Err(Issue::new(part.span, format!("expected a decimal or 0x number, found `{}`", part.text)));
    }
    u64::from_str_radix(&digits.replace('_', ""), radix)
        .map_err(|_| Issue::new(part.span, format!("`{}` does not fit in 64 bits", part.text)))
}

/// `1s`, `500ms`, `100us`, `2000000ns`: at least [`MIN_INTERVAL_NS`].
pub(super) fn duration(part: &Part) -> Result<u64, Issue> {
    let digits = part.text.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(part.text.len());
    let (value, unit) = (part.sub(0, digits), part.sub(digits, part.text.len()));
    if value.text.is_empty() {
        return Err(Issue::new(part.span, format!("expected a period such as `1s` or `500ms`, found `{}`", part.text)));
    }
    let scale: u64 = match unit.text {
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "ns" => 1,
        "" => return Err(Issue::new(part.span, format!("`{}` needs a unit: s, ms, us or ns", part.text))),
        other => return Err(Issue::new(unit.span, format!("unknown unit `{other}`; expected s, ms, us or ns"))),
    };
    let too_long = || Issue::new(part.span, format!("interval `{}` is too long", part.text));
    let ns = number(&value)?.checked_mul(scale).ok_or_else(too_long)?;
    if ns < MIN_INTERVAL_NS {
        return Err(Issue::new(part.span, format!("interval `{}` is shorter than the minimum, 1ms", part.text)));
    }
    Ok(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_of(src: &str) -> Result<(PointSpec, usize), String> {
        point(src, 0).map(|(p, end)| (p.spec, end)).map_err(|e| e.message)
    }

    fn name(text: &str, start: usize) -> Name {
        Name { text: text.into(), span: Span::new(start, start + text.len()) }
    }

    #[test]
    fn func_points_disambiguate_library_and_kind() {
        assert_eq!(spec_of("func:a*:return {").unwrap(), (PointSpec::Func { lib: None, glob: name("a*", 5), ret: true }, 14));
        let (spec, _) = spec_of("func:libc.so.6:malloc").unwrap();
        assert_eq!(spec, PointSpec::Func { lib: Some(name("libc.so.6", 5)), glob: name("malloc", 15), ret: false });
        let (spec, end) = spec_of("func:/usr/lib/libz.so.1:inflate:return/pid/").unwrap();
        assert_eq!(spec, PointSpec::Func { lib: Some(name("/usr/lib/libz.so.1", 5)), glob: name("inflate", 24), ret: true });
        assert_eq!(end, 38);
        let (spec, _) = spec_of("func:main+0x1_0").unwrap();
        assert_eq!(spec, PointSpec::FuncOffset { lib: None, name: name("main", 5), offset: 16 });
        assert_eq!(spec_of("func:foo/pid/").unwrap().1, 8);
        let (spec, _) = spec_of("func:libstdc++.so.6:_Z3foov:return").unwrap();
        assert_eq!(spec, PointSpec::Func { lib: Some(name("libstdc++.so.6", 5)), glob: name("_Z3foov", 20), ret: true });
    }

    #[test]
    fn other_points() {
        assert_eq!(spec_of("interval:500ms").unwrap().0, PointSpec::Interval { ns: 500_000_000 });
        assert_eq!(spec_of("addr:0x401000").unwrap().0, PointSpec::Addr(0x401000));
        assert_eq!(spec_of("lock:*").unwrap().0, PointSpec::Lock(None));
        assert_eq!(spec_of("syscall:*:return").unwrap().0, PointSpec::Syscall { glob: name("*", 8), ret: true, spelling: Spelling::Lopi });
        assert!(spec_of("interval:999us").unwrap_err().contains("minimum"));
        assert!(spec_of("interval:5").unwrap_err().contains("needs a unit"));
        assert!(spec_of("func:foo[a").unwrap_err().contains("unclosed"));
        assert!(spec_of("func:f*+4").unwrap_err().contains("not a glob"));
        assert!(spec_of("kprobe:x").unwrap_err().contains("the kernel's"));
        assert!(spec_of("nosuch:x").unwrap_err().contains("unknown probe type"));
        assert!(spec_of("begin:x").unwrap_err().contains("takes no"));
        assert!(spec_of("func:a:b:c").unwrap_err().contains("expected `entry` or `return`"));
        assert!(spec_of("func:f[]").unwrap_err().contains("empty `[]`"));
        assert!(spec_of("func:./caf\u{e9}.so").unwrap_err().contains("`/` cannot appear"));
        assert!(spec_of("func:./\u{e9}+1").unwrap_err().contains("`/` cannot appear in a function name"));
    }
}
