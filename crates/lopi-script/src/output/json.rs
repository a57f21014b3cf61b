//! The `--format json` output: `{"maps": {"@name": V}}`, V a number (a string for a plain
//! `str`), `{"count", "sum", "avg", "min", "max"}` for `stats()`, `{"buckets": [{"lo", "hi",
//! "count"}]}` for a histogram (`null` for an unbounded end, the buckets those the text shows),
//! or, for a keyed map, an object of these by key (tuple keys joined with `,`, a stack's frames
//! with `;`). Two keys that write the same name keep the later one in key order.
use super::buckets::buckets;
use super::{key, MergedMap, Symbolizer, Value};
use serde_json::{json, Map, Value as Json};

/// The document for `maps`, without their maps that have no entries, as text.
pub fn json(maps: &[MergedMap], symbolize: Symbolizer) -> String {
    json_value(maps, symbolize).to_string()
}

/// The same document as a [`serde_json::Value`].
pub fn json_value(maps: &[MergedMap], symbolize: Symbolizer) -> Json {
    let mut out = Map::new();
    for map in maps.iter().filter(|map| !map.entries.is_empty()) {
        let value = match (map.map.keys.is_empty(), &map.entries[..]) {
            (true, [entry]) => value(&entry.value),
            _ => Json::Object(map.entries.iter().map(|entry| (key::json(&entry.key, symbolize), value(&entry.value))).collect()),
        };
        out.insert(format!("@{}", map.map.name), value);
    }
    json!({ "maps": out })
}

/// V for one value.
fn value(value: &Value) -> Json {
    match value {
        Value::Count(count) => json!(count),
        Value::Int(int) => json!(int),
        Value::Uint(int) => json!(int),
        Value::Str(text) => json!(String::from_utf8_lossy(text)),
        Value::Avg { sum, count } => json!(Value::average(*sum, *count)),
        Value::Stats { count, sum, min, max } => json!({
            "count": count,
            "sum": sum,
            "avg": Value::average(*sum, *count),
            "min": min,
            "max": max,
        }),
        Value::Buckets { kind, counts } => {
            let buckets = buckets(*kind, counts);
            let list: Vec<Json> = buckets.iter().map(|b| json!({ "lo": end(b.lo), "hi": end(b.hi), "count": b.count })).collect();
            json!({ "buckets": list })
        }
    }
}

/// A bucket's end: within `-2^63..=2^63`, so an `i64` or else a `u64`; `null` if unbounded.
fn end(end: Option<i128>) -> Json {
    match end {
        None => Json::Null,
        Some(end) => i64::try_from(end).map(Json::from).unwrap_or_else(|_| Json::from(end as u64)),
    }
}
