//! A small line diff for failure messages.

use std::fmt::Write as _;

/// A unified-ish line diff (LCS based; falls back to a plain dump for
/// large inputs).
pub fn diff(a_label: &str, a: &str, b_label: &str, b: &str) -> String {
    let al: Vec<&str> = a.lines().collect();
    let bl: Vec<&str> = b.lines().collect();
    let mut out = format!("--- {a_label}\n+++ {b_label}\n");
    if al.len() * bl.len() > 4_000_000 {
        let first = al
            .iter()
            .zip(&bl)
            .position(|(x, y)| x != y)
            .unwrap_or(al.len().min(bl.len()));
        let _ = writeln!(
            out,
            "(large outputs: {} vs {} lines; first difference at line {})",
            al.len(),
            bl.len(),
            first + 1
        );
        for l in al.iter().skip(first).take(10) {
            let _ = writeln!(out, "-{l}");
        }
        for l in bl.iter().skip(first).take(10) {
            let _ = writeln!(out, "+{l}");
        }
        return out;
    }
    let (n, m) = (al.len(), bl.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if al[i] == bl[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut shown = 0;
    while (i < n || j < m) && shown < 200 {
        if i < n && j < m && al[i] == bl[j] {
            let _ = writeln!(out, " {}", al[i]);
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            let _ = writeln!(out, "+{}", bl[j]);
            j += 1;
        } else {
            let _ = writeln!(out, "-{}", al[i]);
            i += 1;
        }
        shown += 1;
    }
    if a.ends_with('\n') != b.ends_with('\n') {
        out.push_str("(trailing newline differs)\n");
    }
    out
}

#[cfg(test)]
mod helper_tests {
    use super::*;

    #[test]
    fn diff_marks_changes() {
        let d = diff("a", "x\ny\nz\n", "b", "x\nY\nz\n");
        assert!(
            d.contains("-y\n") && d.contains("+Y\n") && d.contains(" x\n"),
            "{d}"
        );
    }
}
