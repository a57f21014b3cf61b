//! Per-thread tables merged into one value per key. Every thread's table holds the same
//! key at most once, but a key may be in any number of tables, so each slot is decoded and
//! folded into the value so far by the map's kind. A key's bytes are decoded once, when
//! first seen: equal bytes decode alike.
use super::key::{self, le_i64, until_nul, Key};
use super::{Entry, MergedMap, OutputError, Value};
use crate::codegen::abi::{self, AvgSlot, ExtremeSlot, StatsSlot};
use crate::ir::{AggKind, Map, Type, ValueKind};
use core::mem::offset_of;
use std::collections::{btree_map, BTreeMap};

/// Merges the `(key, slot)` entries of `map` from every thread's table. A plain value keeps
/// the one of the last entry of its key in `entries`' order, so a caller that knows which
/// thread wrote last passes that thread's table last.
pub fn merge<'p, 'e>(map: &'p Map, str_size: usize, entries: impl IntoIterator<Item = (&'e [u8], &'e [u8])>) -> Result<MergedMap<'p>, OutputError> {
    let slot_size = abi::slot_size(map.value, str_size);
    let mut merged: BTreeMap<&[u8], (Vec<Key>, Option<Value>)> = BTreeMap::new();
    for (key, slot) in entries {
        if slot.len() != slot_size {
            return Err(OutputError::SlotLength { map: map.name.clone(), expected: slot_size, found: slot.len() });
        }
        let (_, so_far) = match merged.entry(key) {
            btree_map::Entry::Occupied(seen) => seen.into_mut(),
            btree_map::Entry::Vacant(new) => new.insert((key::decode(map, str_size, key)?, None)),
        };
        *so_far = match (so_far.take(), decode(map.value, slot)) {
            (Some(old), Some(new)) => Some(combine(map.value, old, new)),
            (old, new) => new.or(old),
        };
    }
    let entries = merged.into_values().filter_map(|(key, value)| Some(Entry { key, value: value? })).collect();
    Ok(MergedMap { map, entries })
}

/// The value one slot holds, `None` if it holds none yet. `slot` has the kind's size.
fn decode(kind: ValueKind, slot: &[u8]) -> Option<Value> {
    let word = |offset: usize| le_i64(&slot[offset..]);
    Some(match kind {
        ValueKind::Plain(Type::Str) => Value::Str(until_nul(slot).to_vec()),
        ValueKind::Plain(Type::Uint) | ValueKind::Agg(AggKind::Sum { unsigned: true }) => Value::Uint(word(0) as u64),
        ValueKind::Plain(_) | ValueKind::Agg(AggKind::Sum { .. }) => Value::Int(word(0)),
        ValueKind::Agg(AggKind::Count) => Value::Count(word(0) as u64),
        ValueKind::Agg(AggKind::Avg) => Value::Avg { sum: word(offset_of!(AvgSlot, sum)), count: word(offset_of!(AvgSlot, count)) as u64 },
        ValueKind::Agg(AggKind::Min | AggKind::Max) => match word(offset_of!(ExtremeSlot, set)) {
            0 => return None,
            _ => Value::Int(word(offset_of!(ExtremeSlot, value))),
        },
        ValueKind::Agg(AggKind::Stats) => match word(offset_of!(StatsSlot, count)) as u64 {
            0 => return None,
            count => Value::Stats {
                count,
                sum: word(offset_of!(StatsSlot, sum)),
                min: word(offset_of!(StatsSlot, min)),
                max: word(offset_of!(StatsSlot, max)),
            },
        },
        ValueKind::Agg(kind @ (AggKind::Hist | AggKind::Lhist { .. })) => {
            Value::Buckets { kind, counts: slot.chunks_exact(8).map(|c| le_i64(c) as u64).collect() }
        }
    })
}

/// `old` and `new`, both decoded from slots of `kind`, as one value. Counts and sums wrap as
/// the generated code's do.
fn combine(kind: ValueKind, old: Value, new: Value) -> Value {
    match (old, new) {
        (Value::Count(a), Value::Count(b)) => Value::Count(a.wrapping_add(b)),
        (Value::Int(a), Value::Int(b)) => Value::Int(match kind {
            ValueKind::Agg(AggKind::Sum { .. }) => a.wrapping_add(b),
            ValueKind::Agg(AggKind::Min) => a.min(b),
            ValueKind::Agg(AggKind::Max) => a.max(b),
            _ => b,
        }),
        (Value::Uint(a), Value::Uint(b)) => Value::Uint(match kind {
            ValueKind::Agg(AggKind::Sum { .. }) => a.wrapping_add(b),
            _ => b,
        }),
        (Value::Avg { sum, count }, Value::Avg { sum: s, count: c }) => Value::Avg { sum: sum.wrapping_add(s), count: count.wrapping_add(c) },
        (Value::Stats { count, sum, min, max }, Value::Stats { count: c, sum: s, min: lo, max: hi }) => {
            Value::Stats { count: count.wrapping_add(c), sum: sum.wrapping_add(s), min: min.min(lo), max: max.max(hi) }
        }
        (Value::Buckets { kind, mut counts }, Value::Buckets { counts: more, .. }) => {
            for (count, more) in counts.iter_mut().zip(more) {
                *count = count.wrapping_add(more);
            }
            Value::Buckets { kind, counts }
        }
        (_, new) => new,
    }
}
