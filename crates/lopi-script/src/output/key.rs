//! Keys of a map, decoded from the packed bytes [`abi::key_size`] describes, and written for
//! the text and JSON outputs.
use super::{OutputError, Symbolizer};
use crate::codegen::abi::{self, STACK_FRAMES};
use crate::ir::{Map, Type};

/// One element of a key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Int(i64),
    Uint(u64),
    /// A `usym()`'s address.
    Sym(u64),
    /// The text up to its NUL.
    Str(Vec<u8>),
    /// Return addresses, innermost first.
    Stack(Vec<u64>),
}

/// Splits `bytes`, a key of `map`, into its elements.
pub(super) fn decode(map: &Map, str_size: usize, bytes: &[u8]) -> Result<Vec<Key>, OutputError> {
    let expected = abi::key_size(map, str_size);
    if bytes.len() != expected {
        return Err(OutputError::KeyLength { map: map.name.clone(), expected, found: bytes.len() });
    }
    let mut rest = bytes;
    let mut key = Vec::with_capacity(map.keys.len());
    for (i, &ty) in map.keys.iter().enumerate() {
        let (value, tail) = rest.split_at(abi::key_part_size(map, i, str_size));
        rest = tail;
        key.push(match ty {
            Type::Int => Key::Int(le_i64(value)),
            Type::Uint => Key::Uint(le_i64(value) as u64),
            Type::Usym => Key::Sym(le_i64(value) as u64),
            Type::Str => Key::Str(until_nul(value).to_vec()),
            Type::Stack => {
                let mut words = value.chunks_exact(8).map(|w| le_i64(w) as u64);
                let frames = words.next().unwrap_or(0);
                if frames > STACK_FRAMES as u64 {
                    return Err(OutputError::StackDepth { map: map.name.clone(), frames, max: STACK_FRAMES });
                }
                Key::Stack(words.take(frames as usize).collect())
            }
        });
    }
    Ok(key)
}

/// The little-endian `i64` at the start of `bytes`, which holds at least 8.
pub(super) fn le_i64(bytes: &[u8]) -> i64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[..8]);
    i64::from_le_bytes(word)
}

/// A `str` value's text: up to its first NUL, or all of it.
pub(super) fn until_nul(bytes: &[u8]) -> &[u8] {
    bytes.iter().position(|&b| b == 0).map_or(bytes, |end| &bytes[..end])
}

/// bpftrace's `[a, b]` after the map name: elements joined by `, `, a stack on its own lines,
/// one frame each indented by 8 spaces.
pub(super) fn text(key: &[Key], symbolize: Symbolizer) -> String {
    if key.is_empty() {
        return String::new();
    }
    let stack = |frames: &[u64]| frames.iter().map(|&pc| format!("\n        {}", symbolize(pc))).collect::<String>() + "\n";
    format!("[{}]", join(key, ", ", symbolize, stack))
}

/// The name of a key in a JSON object: elements joined by `,`, a stack's frames by `;`.
pub(super) fn json(key: &[Key], symbolize: Symbolizer) -> String {
    join(key, ",", symbolize, |frames| frames.iter().map(|&pc| symbolize(pc)).collect::<Vec<_>>().join(";"))
}

/// The symbol a frame's name (`main+12`, `libc.so.6+0x29d90`) is in: without its offset, as
/// bpftrace's `usym` prints it.
pub fn symbol(frame: &str) -> &str {
    match frame.rsplit_once('+') {
        Some((name, offset)) if !name.is_empty() && offset.strip_prefix("0x").map_or(offset.bytes().all(|b| b.is_ascii_digit()), |hex| hex.bytes().all(|b| b.is_ascii_hexdigit())) && !offset.is_empty() => name,
        _ => frame,
    }
}

fn join(key: &[Key], separator: &str, symbolize: Symbolizer, stack: impl Fn(&[u64]) -> String) -> String {
    let parts: Vec<String> = key
        .iter()
        .map(|element| match element {
            Key::Int(value) => value.to_string(),
            Key::Uint(value) => value.to_string(),
            Key::Sym(addr) => symbol(&symbolize(*addr)).to_string(),
            Key::Str(text) => String::from_utf8_lossy(text).into_owned(),
            Key::Stack(frames) => stack(frames),
        })
        .collect();
    parts.join(separator)
}
