//! `printf` on the host: the checked [`Format`] and the arguments the generated code passed,
//! written with C's semantics (glibc's where C leaves a choice, e.g. `%05s` pads with spaces).
use super::key::until_nul;
use super::OutputError;
use crate::ir::{ConvKind, Conversion, Format, Piece, Program, StrId};

/// One argument of a `printf`: an int, or the bytes of a `str` (its text ends at a NUL) or of a
/// `usym`'s name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    Int(i64),
    Str(Vec<u8>),
}

/// The bytes `format` (of `program`) writes with `args`, one per conversion in order. Bytes
/// rather than text: a `%s` copies whatever the traced program held.
pub fn printf(program: &Program, format: &Format, args: &[Arg]) -> Result<Vec<u8>, OutputError> {
    let expected = format.pieces.iter().filter(|p| matches!(p, Piece::Conv(_))).count();
    let count_error = OutputError::ArgCount { expected, found: args.len() };
    if args.len() != expected {
        return Err(count_error);
    }
    let mut args = args.iter().enumerate();
    let mut out = Vec::new();
    for piece in &format.pieces {
        let conv = match piece {
            Piece::Text(text) => {
                out.extend_from_slice(program.string(*text));
                continue;
            }
            Piece::Conv(conv) => conv,
            Piece::Time(format) => {
                out.extend(super::time::now(program.string(*format)));
                continue;
            }
        };
        let (index, arg) = args.next().ok_or_else(|| count_error.clone())?;
        match (conv.kind, arg) {
            (ConvKind::Str | ConvKind::Sym, Arg::Str(text)) => {
                let text = until_nul(text);
                let text = &text[..conv.precision.map_or(text.len(), |p| text.len().min(p.into()))];
                pad(&mut out, conv, b"", text, false);
            }
            (ConvKind::Str | ConvKind::Sym, _) | (_, Arg::Str(_)) => return Err(OutputError::ArgType { index }),
            (ConvKind::Char, &Arg::Int(value)) => pad(&mut out, conv, b"", &[value as u8], false),
            (_, &Arg::Int(value)) => number(&mut out, conv, value),
        }
    }
    Ok(out)
}

/// `join()`'s line: `args` (each up to its NUL) joined by the string `sep` of `program`.
pub fn join(program: &Program, sep: StrId, args: &[&[u8]]) -> Vec<u8> {
    let mut out = args.iter().map(|a| until_nul(a)).collect::<Vec<_>>().join(program.string(sep));
    out.push(b'\n');
    out
}

/// `%d %i %u %x %X`: sign or `0x` prefix, digits padded to the precision (none at all for 0
/// with precision 0), then the field.
fn number(out: &mut Vec<u8>, conv: &Conversion, value: i64) {
    let (prefix, digits) = match conv.kind {
        ConvKind::Unsigned => ("", (value as u64).to_string()),
        ConvKind::Hex => (if conv.alt && value != 0 { "0x" } else { "" }, format!("{:x}", value as u64)),
        ConvKind::HexUpper => (if conv.alt && value != 0 { "0X" } else { "" }, format!("{:X}", value as u64)),
        _ => {
            let sign = match (value < 0, conv.plus, conv.space) {
                (true, _, _) => "-",
                (false, true, _) => "+",
                (false, false, true) => " ",
                _ => "",
            };
            (sign, value.unsigned_abs().to_string())
        }
    };
    let digits = match conv.precision {
        Some(0) if value == 0 => String::new(),
        Some(precision) => format!("{digits:0>width$}", width = usize::from(precision)),
        None => digits,
    };
    pad(out, conv, prefix.as_bytes(), digits.as_bytes(), conv.precision.is_none());
}

/// `prefix` and `body` in a field of the conversion's width: spaces after them with `-`,
/// zeros between them with `0` when `zeros_allowed`, else spaces before.
fn pad(out: &mut Vec<u8>, conv: &Conversion, prefix: &[u8], body: &[u8], zeros_allowed: bool) {
    let fill = usize::from(conv.width.unwrap_or(0)).saturating_sub(prefix.len() + body.len());
    if conv.left {
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
        out.resize(out.len() + fill, b' ');
    } else if conv.zero && zeros_allowed {
        out.extend_from_slice(prefix);
        out.resize(out.len() + fill, b'0');
        out.extend_from_slice(body);
    } else {
        out.resize(out.len() + fill, b' ');
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
    }
}
