//! The code generator's side of the ABI it shares with the runtime (`lopi_rt_abi::script`,
//! re-exported here): the sizes of keys and value slots, worked out from a script's types.
pub use lopi_rt_abi::script::*;

use crate::ir::{AggKind, Type, ValueKind};
use crate::limits::MAX_USTACK;
use core::mem::size_of;

const _: () = assert!(STACK_FRAMES == MAX_USTACK as usize);
const _: () = assert!(MAX_MAPS == crate::limits::MAX_MAPS);

impl From<Type> for ValueType {
    fn from(ty: Type) -> ValueType {
        match ty {
            Type::Int => ValueType::Int,
            Type::Uint => ValueType::Uint,
            Type::Usym => ValueType::Usym,
            Type::Str => ValueType::Str,
            Type::Stack => ValueType::Stack,
        }
    }
}

/// Bytes of one value slot of a map holding `kind` values. Slots of aggregations are their
/// counters (`lopi_rt_abi::script`'s slot types); a plain int is 8 bytes, a plain `str`
/// `str_size` bytes.
pub fn slot_size(kind: ValueKind, str_size: usize) -> usize {
    match kind {
        ValueKind::Plain(ty) => value_size(ty, str_size),
        ValueKind::Agg(AggKind::Count | AggKind::Sum { .. }) => 8,
        ValueKind::Agg(AggKind::Avg) => size_of::<AvgSlot>(),
        ValueKind::Agg(AggKind::Min | AggKind::Max) => size_of::<ExtremeSlot>(),
        ValueKind::Agg(AggKind::Stats) => size_of::<StatsSlot>(),
        ValueKind::Agg(AggKind::Hist) => 8 * HIST_BUCKETS,
        ValueKind::Agg(AggKind::Lhist { min, max, step }) => 8 * (lhist_linear_buckets(min, max, step) + 2),
    }
}

/// Bytes of one value of type `ty`, as it is stored in a key, a slot or a local.
pub fn value_size(ty: Type, str_size: usize) -> usize {
    match ty {
        Type::Int | Type::Uint | Type::Usym => 8,
        Type::Str => str_size,
        Type::Stack => size_of::<StackValue>(),
    }
}

/// Bytes of a key of `map`: its parts' values one after the other, with no padding
/// ([`key_part_size`] each). A map without keys has the empty key.
pub fn key_size(map: &crate::ir::Map, str_size: usize) -> usize {
    (0..map.keys.len()).map(|i| key_part_size(map, i, str_size)).sum()
}

/// Bytes of part `i` of `map`'s key: an `i64`, `str_size` bytes, or a stack's frame count and
/// the frames the map keeps there ([`crate::ir::Map::key_frames`]), the first words of its
/// [`StackValue`].
pub fn key_part_size(map: &crate::ir::Map, i: usize, str_size: usize) -> usize {
    match map.keys[i] {
        Type::Stack => 8 * (1 + usize::from(map.key_frames.get(i).copied().unwrap_or(STACK_FRAMES as u8)).min(STACK_FRAMES)),
        ty => value_size(ty, str_size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_buckets_are_powers_of_two() {
        let cases = [(i64::MIN, 0), (-1, 0), (0, 1), (1, 2), (2, 3), (3, 3), (4, 4), (1023, 11), (1024, 12), (i64::MAX, 64)];
        for (value, bucket) in cases {
            assert_eq!(hist_bucket(value), bucket, "{value}");
        }
        assert_eq!(hist_bucket(i64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn lhist_buckets_end_at_max() {
        assert_eq!(lhist_linear_buckets(0, 100, 10), 10);
        assert_eq!(lhist_linear_buckets(0, 100, 30), 4);
        let cases = [(-1, 0), (0, 1), (29, 1), (30, 2), (90, 4), (99, 4), (100, 5), (i64::MAX, 5)];
        for (value, bucket) in cases {
            assert_eq!(lhist_bucket(value, 0, 100, 30), bucket, "{value}");
        }
        assert_eq!(lhist_bucket(0, i64::MIN, i64::MAX, i64::MAX), 2);
        assert_eq!(slot_size(ValueKind::Agg(AggKind::Lhist { min: 0, max: 100, step: 30 }), 64), 48);
    }

    #[test]
    fn keys_are_packed() {
        let map = |keys: &[Type], key_frames: &[u8]| crate::ir::Map { name: String::new(), keys: keys.to_vec(), value: ValueKind::Agg(AggKind::Count), max_entries: 1, key_frames: key_frames.to_vec() };
        assert_eq!(key_size(&map(&[], &[]), 64), 0);
        assert_eq!(key_size(&map(&[Type::Int, Type::Str, Type::Stack], &[0, 0, 127]), 16), 8 + 16 + 1024);
        assert_eq!(key_size(&map(&[Type::Stack, Type::Int], &[2, 0]), 16), 24 + 8);
    }
}
