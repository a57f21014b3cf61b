//! What a script prints, on the host side: the per-thread tables the runtime keeps (each
//! traced thread its own, so the hot path takes no lock) merged into one value per key
//! ([`merge`]), their keys decoded ([`Key`]), and the result written the way bpftrace writes
//! it ([`text`]) or as the JSON of `--format json` ([`json`]); plus `printf` itself
//! ([`printf`]).
//!
//! Everything here reads the bytes [`crate::codegen::abi`] lays out and trusts none of them:
//! a key or slot of the wrong length is an [`OutputError`], never a panic.
//!
//! Choices, where bpftrace gives no answer or lopi differs:
//! - a plain value (`@x = v`) written by several threads keeps the one of the last entry in
//!   the order the caller passes them (per-thread-last, like bpftrace's per-CPU maps);
//! - a slot holding no value yet (`min()`/`max()` never set, `stats()` with count 0)
//!   contributes nothing, and a key without a value in any thread is left out;
//! - `avg` is the integer quotient truncated toward zero, as bpftrace's;
//! - a map without entries prints nothing and is absent from the JSON, as bpftrace skips it;
//! - maps come in the alphabetical order of their names, entries sorted by value ascending
//!   (histograms by their total count), ties by key.
mod buckets;
mod json;
mod key;
mod merge;
mod printf;
mod text;
mod time;

pub use buckets::{buckets, Bucket};
pub use json::{json, json_value};
pub use key::{symbol, Key};
pub use merge::merge;
pub use printf::{join, printf, Arg};
pub use text::{text, text_map};

use crate::ir::{AggKind, Map, ValueKind};

/// Turns a return address into the text a stack shows for it (`main+0x12`).
pub type Symbolizer<'a> = &'a dyn Fn(u64) -> String;

/// One map, merged across threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedMap<'p> {
    pub map: &'p Map,
    /// One entry per distinct key, in the order of the keys' bytes.
    pub entries: Vec<Entry>,
}

/// A key of a merged map and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// One element per key type of the map; empty for a scalar.
    pub key: Vec<Key>,
    pub value: Value,
}

/// The merged value of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `count()`.
    Count(u64),
    /// `sum()`, `min()`, `max()` or a plain `int`.
    Int(i64),
    /// A `sum()` of unsigned values, or a plain `uint`.
    Uint(u64),
    /// A plain `str`, up to its NUL.
    Str(Vec<u8>),
    Avg { sum: i64, count: u64 },
    /// `min` and `max` of the values counted.
    Stats { count: u64, sum: i64, min: i64, max: i64 },
    /// The counters of a `hist()` or `lhist()` slot (`kind`), as the ABI lays them out;
    /// [`buckets`] says what each counts.
    Buckets { kind: AggKind, counts: Vec<u64> },
}

impl Value {
    /// The value `print(@m, top, div)` shows: its number divided by `div` (not 0), a `hist`'s
    /// counts each, an average as a whole.
    fn divided(&self, div: u32) -> Value {
        let d = u64::from(div);
        match self {
            Value::Count(c) => Value::Count(c / d),
            Value::Int(v) => Value::Int(v / i64::from(div)),
            Value::Uint(v) => Value::Uint(v / d),
            Value::Avg { sum, count } => Value::Avg { sum: Value::average(*sum, *count) / i64::from(div), count: 1 },
            Value::Buckets { kind: AggKind::Hist, counts } => Value::Buckets { kind: AggKind::Hist, counts: counts.iter().map(|c| c / d).collect() },
            other => other.clone(),
        }
    }

    /// The average of an `avg()` or `stats()` value (0 with nothing counted), truncated toward
    /// zero as bpftrace's.
    pub fn average(sum: i64, count: u64) -> i64 {
        match count {
            0 => 0,
            count => (i128::from(sum) / i128::from(count)) as i64,
        }
    }
}

/// What `print(@m, top, div)` shows of `map`, as bpftrace's: its `top` greatest entries (all for
/// 0, and for `stats()`, which takes neither), each value divided by `div` (0 is 1): a
/// `hist`'s counts each, an `lhist`'s not, as bpftrace's.
pub fn limited<'p>(map: &MergedMap<'p>, top: u32, div: u32) -> MergedMap<'p> {
    let stats = map.map.value == ValueKind::Agg(AggKind::Stats);
    let mut entries: Vec<&Entry> = map.entries.iter().collect();
    let top = top as usize;
    if top != 0 && !stats && entries.len() > top {
        entries.sort_by(|a, b| text::by_value(&a.value, &b.value).then_with(|| a.key.cmp(&b.key)));
        entries.drain(..entries.len() - top);
    }
    let div = div.max(1);
    let entries = entries.into_iter().map(|e| Entry { key: e.key.clone(), value: if stats { e.value.clone() } else { e.value.divided(div) } }).collect();
    MergedMap { map: map.map, entries }
}

/// What was wrong with the bytes of a map or the arguments of a `printf`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("map @{map}: a key of {found} bytes, expected {expected}")]
    KeyLength { map: String, expected: usize, found: usize },
    #[error("map @{map}: a value slot of {found} bytes, expected {expected}")]
    SlotLength { map: String, expected: usize, found: usize },
    #[error("map @{map}: a stack key of {frames} frames, at most {max}")]
    StackDepth { map: String, frames: u64, max: usize },
    #[error("printf: {found} arguments for {expected} conversions")]
    ArgCount { expected: usize, found: usize },
    #[error("printf: argument {index} is not of the type its conversion takes")]
    ArgType { index: usize },
}
