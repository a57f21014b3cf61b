//! Keys and value slots laid out as `codegen::abi` says, and maps to hold them.
use lopi_script::codegen::abi::{self, AvgSlot, ExtremeSlot, StatsSlot, StackValue, STACK_FRAMES};
use lopi_script::ir::{AggKind, Map, Type, ValueKind};
use lopi_script::output::{merge, MergedMap};
use std::mem::{offset_of, size_of};

/// String size of the test maps: small, so that keys stay readable.
pub const STR: usize = 16;

pub fn map(name: &str, keys: &[Type], value: ValueKind) -> Map {
    Map { name: name.to_string(), keys: keys.to_vec(), value, max_entries: 100, key_frames: keys.iter().map(|&t| if t == Type::Stack { 127 } else { 0 }).collect() }
}

pub fn agg(name: &str, keys: &[Type], kind: AggKind) -> Map {
    map(name, keys, ValueKind::Agg(kind))
}

/// Merges `entries` (key, slot) of `map`, or panics.
pub fn merged<'m>(map: &'m Map, entries: &[(Vec<u8>, Vec<u8>)]) -> MergedMap<'m> {
    merge(map, STR, entries.iter().map(|(k, s)| (&k[..], &s[..]))).unwrap()
}

/// `words` as little-endian `u64`s at the given offsets of a `size`-byte slot.
fn words(size: usize, words: &[(usize, i64)]) -> Vec<u8> {
    let mut slot = vec![0; size];
    for &(offset, word) in words {
        slot[offset..offset + 8].copy_from_slice(&word.to_le_bytes());
    }
    slot
}

pub fn int(value: i64) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

pub fn str(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.resize(STR, 0);
    bytes
}

pub fn stack(frames: &[u64]) -> Vec<u8> {
    let mut all = vec![(0, frames.len() as i64)];
    all.extend(frames.iter().enumerate().map(|(i, &pc)| (offset_of!(StackValue, frames) + 8 * i, pc as i64)));
    assert!(frames.len() <= STACK_FRAMES);
    words(size_of::<StackValue>(), &all)
}

pub fn avg(sum: i64, count: u64) -> Vec<u8> {
    words(size_of::<AvgSlot>(), &[(offset_of!(AvgSlot, sum), sum), (offset_of!(AvgSlot, count), count as i64)])
}

pub fn extreme(value: Option<i64>) -> Vec<u8> {
    let (value, set) = value.map_or((0, 0), |v| (v, 1));
    words(size_of::<ExtremeSlot>(), &[(offset_of!(ExtremeSlot, value), value), (offset_of!(ExtremeSlot, set), set)])
}

/// The `stats()` slot after `values`, as the generated code keeps it.
pub fn stats(values: &[i64]) -> Vec<u8> {
    let (min, max) = (values.iter().copied().min().unwrap_or(0), values.iter().copied().max().unwrap_or(0));
    words(
        size_of::<StatsSlot>(),
        &[
            (offset_of!(StatsSlot, count), values.len() as i64),
            (offset_of!(StatsSlot, sum), values.iter().sum()),
            (offset_of!(StatsSlot, min), min),
            (offset_of!(StatsSlot, max), max),
        ],
    )
}

/// The slot of a `hist()` or `lhist()` map of `kind` after `values`.
pub fn hist(kind: AggKind, values: &[i64]) -> Vec<u8> {
    let mut slot = vec![0; abi::slot_size(ValueKind::Agg(kind), STR)];
    for &value in values {
        let bucket = match kind {
            AggKind::Lhist { min, max, step } => abi::lhist_bucket(value, min, max, step),
            _ => abi::hist_bucket(value),
        };
        let at = 8 * bucket;
        let count = u64::from_le_bytes(slot[at..at + 8].try_into().unwrap()) + 1;
        slot[at..at + 8].copy_from_slice(&count.to_le_bytes());
    }
    slot
}

/// A symbolizer that names every address.
pub fn symbol(pc: u64) -> String {
    format!("f{pc:x}")
}
