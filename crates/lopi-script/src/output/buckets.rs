//! What each counter of a `hist()` or `lhist()` slot counts
//! ([`crate::codegen::abi::hist_bucket`], [`crate::codegen::abi::lhist_bucket`]), and
//! bpftrace's labels for them.
use crate::ir::AggKind;

/// The values `lo <= v < hi` one counter counts; `None` for an unbounded end. Ends are `i128`
/// because the last power of two ends at 2^63.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub lo: Option<i128>,
    pub hi: Option<i128>,
    pub count: u64,
}

/// The buckets of `counts`, a slot of a `kind` map, from the first non-empty one to the last
/// (bpftrace shows that range, empty buckets inside it included); none if all are empty.
pub fn buckets(kind: AggKind, counts: &[u64]) -> Vec<Bucket> {
    let Some(first) = counts.iter().position(|&c| c != 0) else {
        return Vec::new();
    };
    let last = counts.iter().rposition(|&c| c != 0).unwrap_or(first);
    (first..=last).map(|index| {
        let (lo, hi) = range(kind, index, counts.len());
        Bucket { lo, hi, count: counts[index] }
    }).collect()
}

/// The ends of counter `index` of `len`.
fn range(kind: AggKind, index: usize, len: usize) -> (Option<i128>, Option<i128>) {
    match kind {
        AggKind::Lhist { min, max, step } => {
            let (min, max) = (i128::from(min), i128::from(max));
            let step = i128::from(step.unsigned_abs().max(1));
            match index {
                0 => (None, Some(min)),
                i if i + 1 == len => (Some(max), None),
                i => (Some(min + (i as i128 - 1) * step), Some((min + i as i128 * step).min(max))),
            }
        }
        _ => match index {
            0 => (None, Some(0)),
            1 => (Some(0), Some(1)),
            i => (Some(1 << (i - 2)), Some(1 << (i - 1))),
        },
    }
}

/// bpftrace's label of a bucket: `(..., 0)`, `[0]`, `[1]`, `[2, 4)`, `[1K, 2K)` for `hist()`;
/// `(..., min)`, `[lo, hi)`, `[max, ...)` with numbers in K or M when they are multiples of
/// them for `lhist()`.
pub(super) fn label(kind: AggKind, bucket: &Bucket) -> String {
    let number = match kind {
        AggKind::Lhist { .. } => linear_label,
        _ => power_label,
    };
    match (bucket.lo, bucket.hi) {
        (None, Some(hi)) => format!("(..., {})", number(hi)),
        (Some(lo), None) => format!("[{}, ...)", number(lo)),
        (Some(lo), Some(hi)) if kind == AggKind::Hist && lo + 1 == hi => format!("[{lo}]"),
        (Some(lo), Some(hi)) => format!("[{}, {})", number(lo), number(hi)),
        (None, None) => "(..., ...)".to_string(),
    }
}

/// A power of two as bpftrace writes it: 512, 1K, 2M, ... 8E.
fn power_label(value: i128) -> String {
    if value <= 0 {
        return value.to_string();
    }
    let power = value.ilog2();
    match ["", "K", "M", "G", "T", "P", "E"].get((power / 10) as usize) {
        Some(suffix) => format!("{}{suffix}", 1u64 << (power % 10)),
        None => value.to_string(),
    }
}

/// A number of a linear histogram as bpftrace writes it: in M or K when a multiple of them.
fn linear_label(value: i128) -> String {
    const KILO: i128 = 1024;
    const MEGA: i128 = 1024 * 1024;
    match value {
        0 => "0".to_string(),
        v if v % MEGA == 0 => format!("{}M", v / MEGA),
        v if v % KILO == 0 => format!("{}K", v / KILO),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::abi;

    #[test]
    fn power_labels_use_binary_suffixes() {
        let labels: Vec<String> = [1, 512, 1 << 10, 1 << 20, 1 << 30, 1 << 40, 1 << 50, 1 << 60, 1 << 63].into_iter().map(power_label).collect();
        assert_eq!(labels, ["1", "512", "1K", "1M", "1G", "1T", "1P", "1E", "8E"]);
    }

    #[test]
    fn ranges_follow_the_abi() {
        for value in [-5, 0, 1, 2, 3, 1000, i64::MAX] {
            let (lo, hi) = range(AggKind::Hist, abi::hist_bucket(value), abi::HIST_BUCKETS);
            assert!(lo.is_none_or(|lo| lo <= i128::from(value)) && hi.is_some_and(|hi| i128::from(value) < hi), "{value}");
        }
        let kind = AggKind::Lhist { min: 0, max: 100, step: 30 };
        let len = abi::lhist_linear_buckets(0, 100, 30) + 2;
        for value in [-1, 0, 29, 30, 99, 100, 1000] {
            let (lo, hi) = range(kind, abi::lhist_bucket(value, 0, 100, 30), len);
            assert!(lo.is_none_or(|lo| lo <= i128::from(value)) && hi.is_none_or(|hi| i128::from(value) < hi), "{value}");
        }
        assert_eq!(range(kind, 4, len), (Some(90), Some(100)));
    }

    #[test]
    fn linear_labels_use_k_and_m() {
        assert_eq!([0, 10, 1024, -2048, 3 << 20, 1000].map(linear_label), ["0", "10", "1K", "-2K", "3M", "1000"]);
    }
}
