//! Maps written the way bpftrace writes them at exit: `@name[key, key]: value` lines sorted by
//! value, then a blank line; a histogram as `@name[key]:` and one bar per bucket, then a blank
//! line, for each key.
use super::buckets::{buckets, label};
use super::{key, Entry, MergedMap, Symbolizer, Value};
use crate::ir::{AggKind, ValueKind};
use std::cmp::Ordering;

/// Width of the longest bar, as bpftrace's.
const BAR_WIDTH: u128 = 52;

/// Every map with entries, in the alphabetical order of their names.
pub fn text(maps: &[MergedMap], symbolize: Symbolizer) -> String {
    let mut sorted: Vec<&MergedMap> = maps.iter().collect();
    sorted.sort_by(|a, b| a.map.name.cmp(&b.map.name));
    sorted.into_iter().map(|map| text_map(map, symbolize)).collect()
}

/// One map (what `print(@m)` shows); nothing for a map without entries.
pub fn text_map(map: &MergedMap, symbolize: Symbolizer) -> String {
    if map.entries.is_empty() {
        return String::new();
    }
    let mut entries: Vec<&Entry> = map.entries.iter().collect();
    entries.sort_by(|a, b| by_value(&a.value, &b.value).then_with(|| a.key.cmp(&b.key)));
    let mut out = String::new();
    let name = format!("@{}", map.map.name);
    for entry in &entries {
        let key = key::text(&entry.key, symbolize);
        match &entry.value {
            Value::Buckets { kind, counts } => out += &format!("{name}{key}:\n{}\n", bars(*kind, counts)),
            other => out += &format!("{name}{key}: {}\n", value(other)),
        }
    }
    if !matches!(map.map.value, ValueKind::Agg(AggKind::Hist | AggKind::Lhist { .. })) {
        out.push('\n');
    }
    out
}

/// The value after `: `; `stats()` as bpftrace shows it, without its min and max.
fn value(value: &Value) -> String {
    match value {
        Value::Count(count) => count.to_string(),
        Value::Int(int) => int.to_string(),
        Value::Uint(int) => int.to_string(),
        Value::Str(text) => String::from_utf8_lossy(text).into_owned(),
        Value::Avg { sum, count } => Value::average(*sum, *count).to_string(),
        Value::Stats { count, sum, .. } => format!("count {count}, average {}, total {sum}", Value::average(*sum, *count)),
        Value::Buckets { counts, .. } => counts.iter().map(|&c| u128::from(c)).sum::<u128>().to_string(),
    }
}

/// bpftrace's order: by the number shown (an average for `avg()` and `stats()`, the total
/// count for a histogram), strings by their bytes.
pub(super) fn by_value(a: &Value, b: &Value) -> Ordering {
    fn number(value: &Value) -> i128 {
        match value {
            Value::Count(count) => i128::from(*count),
            Value::Int(int) => i128::from(*int),
            Value::Uint(int) => i128::from(*int),
            Value::Avg { sum, count } | Value::Stats { sum, count, .. } => i128::from(Value::average(*sum, *count)),
            Value::Buckets { counts, .. } => counts.iter().map(|&c| i128::from(c)).sum(),
            Value::Str(_) => 0,
        }
    }
    match (a, b) {
        (Value::Str(a), Value::Str(b)) => a.cmp(b),
        _ => number(a).cmp(&number(b)),
    }
}

/// The bucket lines of one histogram: label left in 16 columns, count right in 8, then the bar
/// scaled so that the largest count fills [`BAR_WIDTH`].
fn bars(kind: AggKind, counts: &[u64]) -> String {
    let buckets = buckets(kind, counts);
    let most = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    buckets
        .iter()
        .map(|bucket| {
            let bar = "@".repeat((u128::from(bucket.count) * BAR_WIDTH / u128::from(most)) as usize);
            format!("{:<16}{:>8} |{bar:<52}|\n", label(kind, bucket), bucket.count)
        })
        .collect()
}
