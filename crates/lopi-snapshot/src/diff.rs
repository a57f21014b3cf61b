//! A unified diff of two texts by lines (Myers' O(ND) algorithm), as `diff -u` prints it:
//! hunks of changed lines with three lines of context.

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Beyond this many differing lines the texts are only summarised (memory grows as its square).
const MAX_EDITS: usize = 2000;
/// Diff lines printed at most.
const MAX_LINES: usize = 400;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Delete,
    Insert,
}

/// `old` and `new` as a unified diff, headed `--- OLD_LABEL` and `+++ NEW_LABEL`.
pub fn unified(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut out = format!("--- {old_label}\n+++ {new_label}\n");
    let Some(ops) = edit_script(&a, &b) else {
        let first = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        out.push_str(&format!("(more than {MAX_EDITS} lines differ: {} lines against {}, the first difference at line {})\n", a.len(), b.len(), first + 1));
        return out;
    };
    // Where each op reads in `a` and `b`.
    let mut at = Vec::with_capacity(ops.len() + 1);
    let (mut i, mut j) = (0, 0);
    for op in &ops {
        at.push((i, j));
        match op {
            Op::Same => (i, j) = (i + 1, j + 1),
            Op::Delete => i += 1,
            Op::Insert => j += 1,
        }
    }
    at.push((i, j));
    let mut printed = 0;
    for (start, end) in hunks(&ops) {
        let (a0, b0) = at[start];
        let (a1, b1) = at[end];
        out.push_str(&format!("@@ -{} +{} @@\n", span(a0, a1 - a0), span(b0, b1 - b0)));
        for (k, op) in ops[start..end].iter().enumerate() {
            if printed == MAX_LINES {
                out.push_str("(diff cut here)\n");
                return out;
            }
            let (i, j) = at[start + k];
            let line = match op {
                Op::Same => format!(" {}", a[i]),
                Op::Delete => format!("-{}", a[i]),
                Op::Insert => format!("+{}", b[j]),
            };
            out.push_str(&line);
            out.push('\n');
            printed += 1;
        }
    }
    out
}

/// `start,len` as a hunk header writes it (1-based; after the line before an empty range).
fn span(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

/// The ranges of `ops` to print: each change with its context, overlapping ones merged.
fn hunks(ops: &[Op]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (k, _) in ops.iter().enumerate().filter(|(_, op)| **op != Op::Same) {
        let (start, end) = (k.saturating_sub(CONTEXT), (k + 1 + CONTEXT).min(ops.len()));
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => out.push((start, end)),
        }
    }
    out
}

/// The shortest edit script from `a` to `b`, or `None` beyond [`MAX_EDITS`] edits. `trace[d]`
/// keeps, before round `d`, the furthest `x` reached on each diagonal `k` in `-d..=d` (at index
/// `k + d`), from which the path is walked back.
fn edit_script(a: &[&str], b: &[&str]) -> Option<Vec<Op>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = a.len() + b.len();
    let offset = max as isize + 1;
    let mut v = vec![0isize; 2 * max + 3];
    let mut trace: Vec<Vec<isize>> = Vec::new();
    for d in 0..=max.min(MAX_EDITS) as isize {
        trace.push(v[(offset - d) as usize..=(offset + d) as usize].to_vec());
        for k in (-d..=d).step_by(2) {
            let down = k == -d || (k != d && v[(offset + k - 1) as usize] < v[(offset + k + 1) as usize]);
            let mut x = if down { v[(offset + k + 1) as usize] } else { v[(offset + k - 1) as usize] + 1 };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[(offset + k) as usize] = x;
            if x >= n && y >= m {
                return Some(walk_back(&trace, n, m));
            }
        }
    }
    None
}

fn walk_back(trace: &[Vec<isize>], n: isize, m: isize) -> Vec<Op> {
    let mut ops = Vec::new();
    let (mut x, mut y) = (n, m);
    for (d, v) in trace.iter().enumerate().skip(1).rev() {
        let d = d as isize;
        let furthest = |k: isize| v[(k + d) as usize];
        let k = x - y;
        let prev_k = if k == -d || (k != d && furthest(k - 1) < furthest(k + 1)) { k + 1 } else { k - 1 };
        let prev_x = furthest(prev_k);
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            ops.push(Op::Same);
            (x, y) = (x - 1, y - 1);
        }
        ops.push(if x == prev_x { Op::Insert } else { Op::Delete });
        (x, y) = (prev_x, prev_y);
    }
    // Round 0: the common start.
    ops.extend(std::iter::repeat_n(Op::Same, x as usize));
    ops.reverse();
    ops
}

#[cfg(test)]
mod tests {
    use super::unified;

    #[test]
    fn one_changed_line_is_one_hunk_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\n";
        assert_eq!(unified(old, new, "old", "new"), "--- old\n+++ new\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n");
    }

    #[test]
    fn insertions_deletions_and_far_apart_changes() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n";
        let new = "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n12\n";
        let diff = unified(old, new, "a", "b");
        assert_eq!(diff, "--- a\n+++ b\n@@ -1,3 +1,4 @@\n+0\n 1\n 2\n 3\n@@ -8,5 +9,4 @@\n 8\n 9\n 10\n-11\n 12\n");
        assert_eq!(unified("x\n", "x\n", "a", "b"), "--- a\n+++ b\n");
        assert_eq!(unified("", "y\n", "a", "b"), "--- a\n+++ b\n@@ -0,0 +1 @@\n+y\n");
        assert_eq!(unified("y\n", "", "a", "b"), "--- a\n+++ b\n@@ -1 +0,0 @@\n-y\n");
    }
}
