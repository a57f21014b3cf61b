//! Merging per-thread tables, decoding keys, and refusing malformed bytes.
use super::slots::*;
use lopi_script::codegen::abi;
use lopi_script::ir::{AggKind, Type, ValueKind};
use lopi_script::output::{merge, Entry, Key, OutputError, Value};

/// The merged values of a keyless map whose threads hold `slots`.
fn scalar(kind: ValueKind, slots: &[Vec<u8>]) -> Vec<Value> {
    let map = map("x", &[], kind);
    let entries: Vec<_> = slots.iter().map(|s| (Vec::new(), s.clone())).collect();
    merged(&map, &entries).entries.into_iter().map(|e| e.value).collect()
}

#[test]
fn counts_sums_and_averages_add_up() {
    assert_eq!(scalar(ValueKind::Agg(AggKind::Count), &[int(3), int(4), int(5)]), [Value::Count(12)]);
    assert_eq!(scalar(ValueKind::Agg(AggKind::Sum { unsigned: false }), &[int(-3), int(10)]), [Value::Int(7)]);
    assert_eq!(scalar(ValueKind::Agg(AggKind::Sum { unsigned: false }), &[int(i64::MAX), int(1)]), [Value::Int(i64::MIN)], "sums wrap as the code's");
    assert_eq!(scalar(ValueKind::Agg(AggKind::Avg), &[avg(10, 2), avg(5, 3)]), [Value::Avg { sum: 15, count: 5 }]);
}

#[test]
fn extremes_ignore_threads_that_never_set_them() {
    let min = ValueKind::Agg(AggKind::Min);
    let max = ValueKind::Agg(AggKind::Max);
    assert_eq!(scalar(min, &[extreme(Some(4)), extreme(None), extreme(Some(-2))]), [Value::Int(-2)]);
    assert_eq!(scalar(max, &[extreme(Some(4)), extreme(None), extreme(Some(-2))]), [Value::Int(4)]);
    assert_eq!(scalar(min, &[extreme(None), extreme(Some(7))]), [Value::Int(7)], "an unset 0 is no minimum");
    assert_eq!(scalar(max, &[extreme(Some(-7)), extreme(None)]), [Value::Int(-7)], "an unset 0 is no maximum");
    assert_eq!(scalar(max, &[extreme(None)]), [], "no value, no entry");
}

#[test]
fn unsigned_sums_combine_as_unsigned() {
    let sum = ValueKind::Agg(AggKind::Sum { unsigned: true });
    assert_eq!(scalar(sum, &[int(-1), int(3)]), [Value::Uint(2)]);
}

#[test]
fn stats_combine() {
    let kind = ValueKind::Agg(AggKind::Stats);
    assert_eq!(scalar(kind, &[stats(&[1, 9]), stats(&[]), stats(&[-4, 5, 6])]), [Value::Stats { count: 5, sum: 17, min: -4, max: 9 }]);
    assert_eq!(scalar(kind, &[stats(&[])]), []);
}

#[test]
fn histograms_add_bucket_by_bucket() {
    for kind in [AggKind::Hist, AggKind::Lhist { min: 0, max: 100, step: 10 }] {
        let merged = scalar(ValueKind::Agg(kind), &[hist(kind, &[1, 5, 50, -1]), hist(kind, &[5, 500])]);
        let expected = hist(kind, &[1, 5, 50, -1, 5, 500]).chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(merged, [Value::Buckets { kind, counts: expected }], "{kind:?}");
    }
}

#[test]
fn plain_values_keep_the_last_entry() {
    assert_eq!(scalar(ValueKind::Plain(Type::Int), &[int(1), int(3), int(2)]), [Value::Int(2)]);
    assert_eq!(scalar(ValueKind::Plain(Type::Str), &[str("first"), str("last")]), [Value::Str(b"last".to_vec())]);
}

#[test]
fn keys_of_every_thread_merge_by_key() {
    let map = agg("calls", &[Type::Str], AggKind::Count);
    let entries = [(str("b"), int(1)), (str("a"), int(2)), (str("b"), int(10)), (str("c"), int(1))];
    let merged = merged(&map, &entries);
    let got: Vec<_> = merged.entries.iter().map(|e| (e.key.clone(), e.value.clone())).collect();
    let key = |s: &str| vec![Key::Str(s.as_bytes().to_vec())];
    assert_eq!(got, [(key("a"), Value::Count(2)), (key("b"), Value::Count(11)), (key("c"), Value::Count(1))]);
}

#[test]
fn keys_decode_to_their_types() {
    let map = agg("x", &[Type::Int, Type::Str, Type::Stack], AggKind::Count);
    let key = [int(-5), str("sqlite"), stack(&[0x10, 0x20])].concat();
    let merged = merged(&map, &[(key, int(1))]);
    let expected = Entry { key: vec![Key::Int(-5), Key::Str(b"sqlite".to_vec()), Key::Stack(vec![0x10, 0x20])], value: Value::Count(1) };
    assert_eq!(merged.entries, [expected]);
    let full = "0123456789abcdef";
    let map = agg("s", &[Type::Str], AggKind::Count);
    assert_eq!(merged_key(&map, str(full)), [Key::Str(full.as_bytes().to_vec())], "a string filling its bytes has no NUL");
}

fn merged_key(map: &lopi_script::ir::Map, key: Vec<u8>) -> Vec<Key> {
    merged(map, &[(key, int(1))]).entries.remove(0).key
}

#[test]
fn malformed_entries_are_errors() {
    let map = agg("lat", &[Type::Int], AggKind::Avg);
    let error = |key: Vec<u8>, slot: Vec<u8>| merge(&map, STR, [(&key[..], &slot[..])]).unwrap_err();
    assert_eq!(error(int(1), avg(1, 1)[..8].to_vec()), OutputError::SlotLength { map: "lat".into(), expected: 16, found: 8 });
    assert_eq!(error(vec![1, 2, 3], avg(1, 1)), OutputError::KeyLength { map: "lat".into(), expected: 8, found: 3 });
    assert_eq!(error(Vec::new(), avg(0, 1)), OutputError::KeyLength { map: "lat".into(), expected: 8, found: 0 });
    let mut deep = stack(&[]);
    deep[..8].copy_from_slice(&(abi::STACK_FRAMES as u64 + 1).to_le_bytes());
    let stacks = agg("st", &[Type::Stack], AggKind::Count);
    let error = merge(&stacks, STR, [(&deep[..], &int(1)[..])]).unwrap_err();
    assert!(matches!(error, OutputError::StackDepth { frames, .. } if frames == abi::STACK_FRAMES as u64 + 1), "{error}");
    assert!(error.to_string().contains("@st"), "{error}");
    let hist_map = agg("h", &[], AggKind::Hist);
    let short = vec![0; 8 * abi::HIST_BUCKETS - 1];
    assert!(matches!(merge(&hist_map, STR, [(&[][..], &short[..])]), Err(OutputError::SlotLength { .. })));
}
