//! Further behaviour of the rewritten program: its data file (appended across runs, named
//! by default) and the functions it probes (--functions / --exclude).

use super::{build_and_rewrite, O2_PIE};
use crate::common::*;

fn count_of(entries: &[ReportEntry], name: &str) -> Option<u64> {
    let hits: Vec<_> = entries.iter().filter(|e| e.name == name).collect();
    if hits.is_empty() {
        None
    } else {
        Some(hits.iter().map(|e| e.calls).sum())
    }
}

/// Two runs with the same LOPI_OUTPUT: records are appended and summed.
#[test]
fn data_file_appends_across_runs() {
    let (mut case, _orig, rw) = build_and_rewrite("recursion.c", O2_PIE, &[]);
    let data = case.dir.join("shared.lopi");
    for _ in 0..2 {
        let dir = case.dir.clone();
        case.run_rewritten_ok(&rw, &dir, Some(&data));
    }
    let entries = case.report(&data).unwrap_or_else(|e| panic!("{e}"));
    for (name, want) in [("fib", 2 * 21891), ("add", 2 * 10945), ("main", 2)] {
        assert_eq!(
            count_of(&entries, name),
            Some(want),
            "{}",
            case.fail(format!("{name} after two runs"))
        );
    }
    cleanup(&case.dir);
}

/// Without LOPI_OUTPUT the data goes to ./<progname>.<pid>.lopi.
#[test]
fn default_data_file_name() {
    let (mut case, _orig, rw) = build_and_rewrite("recursion.c", O2_PIE, &[]);
    let cwd = case.dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = case.run_rewritten_ok(&rw, &cwd, None);
    let expected = cwd.join(format!("prog.{}.lopi", out.pid));
    let listing: Vec<String> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        expected.is_file(),
        "{}",
        case.fail(format!(
            "expected data file {}, cwd has {listing:?}",
            expected.display()
        ))
    );
    let entries = case.report(&expected).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        count_of(&entries, "fib"),
        Some(21891),
        "{}",
        case.fail("fib count")
    );
    cleanup(&case.dir);
}

/// --functions / --exclude select what gets probed.
#[test]
fn function_filters() {
    let (mut case, _orig, rw) = build_and_rewrite(
        "tailcall.c",
        O2_PIE,
        &[
            "--functions",
            "is_*",
            "--functions",
            "tail_a",
            "--exclude",
            "is_odd",
        ],
    );
    let data = case.dir.join("data.lopi");
    let dir = case.dir.clone();
    case.run_rewritten_ok(&rw, &dir, Some(&data));
    let entries = case.report(&data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        count_of(&entries, "is_even"),
        Some(5014),
        "{}",
        case.fail("is_even")
    );
    assert_eq!(
        count_of(&entries, "tail_a"),
        Some(300),
        "{}",
        case.fail("tail_a")
    );
    for name in ["is_odd", "tail_b", "main"] {
        assert_eq!(
            count_of(&entries, name),
            None,
            "{}",
            case.fail(format!("{name} must not be probed"))
        );
    }
    cleanup(&case.dir);
}
