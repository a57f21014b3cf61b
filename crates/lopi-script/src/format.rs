//! `printf` formats, parsed once by the checker into text and typed conversions, so that
//! neither the code generator nor the runtime reads a format string again.
use crate::ir::{ConvKind, Conversion};
use std::ops::Range;

/// Widths and precisions above this are refused: output lines stay bounded.
const MAX_WIDTH: u32 = 255;

pub(crate) enum Part {
    Text(Vec<u8>),
    /// A conversion and the bytes of the format that wrote it.
    Conv(Conversion, Range<usize>),
}

/// What is wrong, at which bytes of the format.
pub(crate) struct FormatError {
    pub at: Range<usize>,
    pub message: String,
}

/// `%[flags][width][.precision][length]conv` with flags `-+ 0#`, lengths `hh h l ll z`
/// (ignored) and conversions `d i u x X s c`; `%%` is a `%`.
pub(crate) fn parse(format: &[u8]) -> Result<Vec<Part>, FormatError> {
    let mut parts = Vec::new();
    let mut text = Vec::new();
    let mut i = 0;
    while i < format.len() {
        if format[i] != b'%' {
            text.push(format[i]);
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        if format.get(i) == Some(&b'%') {
            text.push(b'%');
            i += 1;
            continue;
        }
        let mut conv = Conversion::default();
        while let Some(&c) = format.get(i) {
            match c {
                b'-' => conv.left = true,
                b'0' => conv.zero = true,
                b'+' => conv.plus = true,
                b' ' => conv.space = true,
                b'#' => conv.alt = true,
                _ => break,
            }
            i += 1;
        }
        conv.width = number(format, &mut i, start)?;
        if format.get(i) == Some(&b'.') {
            i += 1;
            conv.precision = Some(number(format, &mut i, start)?.unwrap_or(0));
        }
        for length in [&b"hh"[..], b"h", b"ll", b"l", b"z"] {
            if format[i..].starts_with(length) {
                i += length.len();
                break;
            }
        }
        conv.kind = match format.get(i) {
            Some(b'd' | b'i') => ConvKind::Signed,
            Some(b'u') => ConvKind::Unsigned,
            Some(b'x') => ConvKind::Hex,
            Some(b'X') => ConvKind::HexUpper,
            Some(b's') => ConvKind::Str,
            Some(b'c') => ConvKind::Char,
            Some(&c) => {
                let shown = String::from_utf8_lossy(&format[start..=i]);
                let message = if c.is_ascii_graphic() {
                    format!("unknown conversion `{shown}`; expected %d, %i, %u, %x, %X, %s, %c or %%")
                } else {
                    format!("unfinished conversion `{}`; expected %d, %i, %u, %x, %X, %s, %c or %%", shown.trim_end())
                };
                return Err(FormatError { at: start..i + 1, message });
            }
            None => return Err(FormatError { at: start..i, message: "unfinished conversion at the end of the format".to_string() }),
        };
        i += 1;
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(Part::Conv(conv, start..i));
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

/// Decimal digits at `i`, if any, up to [`MAX_WIDTH`].
fn number(format: &[u8], i: &mut usize, start: usize) -> Result<Option<u8>, FormatError> {
    let from = *i;
    let mut value: u32 = 0;
    while let Some(digit) = format.get(*i).filter(|c| c.is_ascii_digit()) {
        value = (value * 10 + u32::from(digit - b'0')).min(MAX_WIDTH + 1);
        *i += 1;
    }
    if *i == from {
        return Ok(None);
    }
    match u8::try_from(value) {
        Ok(value) => Ok(Some(value)),
        Err(_) => Err(FormatError { at: start..*i, message: format!("field width or precision above {MAX_WIDTH}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(format: &str) -> Vec<String> {
        parse(format.as_bytes())
            .unwrap_or_else(|e| panic!("{}", e.message))
            .into_iter()
            .map(|p| match p {
                Part::Text(t) => String::from_utf8(t).unwrap(),
                Part::Conv(c, at) => format!("{:?}{:?}{:?}{}{}@{at:?}", c.kind, c.width, c.precision, c.left, c.zero),
            })
            .collect()
    }

    #[test]
    fn splits_text_and_conversions() {
        assert_eq!(kinds("a %d%%b"), ["a ", "SignedNoneNonefalsefalse@2..4", "%b"]);
        assert_eq!(kinds("%-10s|%08lx"), ["StrSome(10)Nonetruefalse@0..5", "|", "HexSome(8)Nonefalsetrue@6..11"]);
        assert_eq!(kinds("%.3s"), ["StrNoneSome(3)falsefalse@0..4"]);
    }

    #[test]
    fn refuses_what_it_cannot_print() {
        let error = |f: &str| parse(f.as_bytes()).err().map(|e| (e.message, e.at)).unwrap();
        assert_eq!(error("x %q").1, 2..4);
        assert!(error("x %q").0.contains("unknown conversion `%q`"));
        assert!(error("%5").0.contains("end of the format"));
        assert!(error("%999d").0.contains("above 255"));
    }
}
