//! The JSON of `--format json`: its structure for every kind of map.
use super::slots::*;
use lopi_script::ir::{AggKind, Type, ValueKind};
use lopi_script::output::{json, json_value};
use serde_json::json;

#[test]
fn scalars_are_numbers_and_stats_an_object() {
    let maps = [
        agg("n", &[], AggKind::Count),
        agg("sum", &[], AggKind::Sum { unsigned: false }),
        agg("mean", &[], AggKind::Avg),
        agg("lo", &[], AggKind::Min),
        agg("hi", &[], AggKind::Max),
        agg("s", &[], AggKind::Stats),
        map("i", &[], ValueKind::Plain(Type::Int)),
        map("t", &[], ValueKind::Plain(Type::Str)),
    ];
    let slots = [int(3), int(-4), avg(10, 4), extreme(Some(-1)), extreme(Some(8)), stats(&[2, 4, 9]), int(7), str("hi")];
    let merged: Vec<_> = maps.iter().zip(slots).map(|(m, s)| merged(m, &[(Vec::new(), s)])).collect();
    let expected = json!({"maps": {
        "@n": 3, "@sum": -4, "@mean": 2, "@lo": -1, "@hi": 8,
        "@s": {"count": 3, "sum": 15, "avg": 5, "min": 2, "max": 9},
        "@i": 7, "@t": "hi",
    }});
    assert_eq!(json_value(&merged, &symbol), expected);
}

#[test]
fn unsigned_numbers_stay_unsigned() {
    let keyed = agg("k", &[Type::Uint], AggKind::Sum { unsigned: true });
    let got = json_value(&[merged(&keyed, &[(int(-1), int(-2))])], &symbol);
    assert_eq!(got, json!({"maps": {"@k": {"18446744073709551615": 18446744073709551614u64}}}));
}

#[test]
fn histograms_are_bucket_lists_with_null_for_open_ends() {
    let h = agg("h", &[], AggKind::Hist);
    let kind = AggKind::Lhist { min: 0, max: 100, step: 50 };
    let l = agg("l", &[], kind);
    let maps = [
        merged(&h, &[(Vec::new(), hist(AggKind::Hist, &[-3, 0, 5, 5, i64::MAX]))]),
        merged(&l, &[(Vec::new(), hist(kind, &[-1, 20, 150]))]),
    ];
    let got = json_value(&maps, &symbol);
    let buckets = got["maps"]["@h"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 65, "from the negative bucket to 2^62..2^63");
    assert_eq!(buckets[0], json!({"lo": null, "hi": 0, "count": 1}));
    assert_eq!(buckets[1], json!({"lo": 0, "hi": 1, "count": 1}));
    assert_eq!(buckets[2], json!({"lo": 1, "hi": 2, "count": 0}));
    assert_eq!(buckets[4], json!({"lo": 4, "hi": 8, "count": 2}));
    assert_eq!(buckets[64], json!({"lo": 1u64 << 62, "hi": 1u64 << 63, "count": 1}));
    let expected = json!({"buckets": [
        {"lo": null, "hi": 0, "count": 1},
        {"lo": 0, "hi": 50, "count": 1},
        {"lo": 50, "hi": 100, "count": 0},
        {"lo": 100, "hi": null, "count": 1},
    ]});
    assert_eq!(got["maps"]["@l"], expected);
}

#[test]
fn keyed_maps_are_objects_by_key() {
    let calls = agg("calls", &[Type::Str, Type::Int], AggKind::Count);
    let stacks = agg("st", &[Type::Stack], AggKind::Stats);
    let lat = agg("lat", &[Type::Int], AggKind::Hist);
    let maps = [
        merged(&calls, &[([str("bash"), int(2)].concat(), int(1)), ([str("sshd"), int(-1)].concat(), int(4))]),
        merged(&stacks, &[(stack(&[0xa, 0xb]), stats(&[3]))]),
        merged(&lat, &[(int(1), hist(AggKind::Hist, &[2]))]),
    ];
    let expected = json!({"maps": {
        "@calls": {"bash,2": 1, "sshd,-1": 4},
        "@st": {"fa;fb": {"count": 1, "sum": 3, "avg": 3, "min": 3, "max": 3}},
        "@lat": {"1": {"buckets": [{"lo": 2, "hi": 4, "count": 1}]}},
    }});
    assert_eq!(json_value(&maps, &symbol), expected);
}

#[test]
fn the_text_form_parses_back_and_skips_empty_maps() {
    let (a, empty) = (agg("a", &[Type::Str], AggKind::Sum { unsigned: false }), agg("b", &[Type::Str], AggKind::Sum { unsigned: false }));
    let maps = [merged(&a, &[(str("x\"y"), int(5))]), merged(&empty, &[])];
    let text = json(&maps, &symbol);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), json!({"maps": {"@a": {"x\"y": 5}}}));
    assert_eq!(json(&[], &symbol), r#"{"maps":{}}"#);
}
