//! The count checker: the entry counts a fixture expects against those of lopi's report,
//! and its self-test.

use crate::common::*;

/// Compare expected counts with the report. `present`: the module is
/// rewritten, so each name must appear with exactly the expected count;
/// otherwise the names must not be counted at all.
pub fn check_counts(
    problems: &mut Vec<String>,
    entries: &[ReportEntry],
    expect: &[(String, u64)],
    present: bool,
    lib_module: bool,
    info: Option<&Info>,
    may_skip: &[String],
) {
    for (name, want) in expect {
        let hits: Vec<&ReportEntry> = entries.iter().filter(|e| &e.name == name).collect();
        let got: u64 = hits.iter().map(|e| e.calls).sum();
        if !present {
            if got != 0 {
                problems.push(format!(
                    "{name}: module not rewritten, yet the report counts {got} calls"
                ));
            }
            continue;
        }
        if hits.is_empty() {
            let status = info.and_then(|i| i.functions.get(name));
            let why = status
                .map(|(st, d)| format!(" (lopi info: status={st} {d})"))
                .unwrap_or_else(|| " (not listed by lopi info either)".into());
            let msg = format!("{name}: missing from report, expected {want} calls{why}");
            if may_skip.contains(name) && status.is_some_and(|(st, _)| st == "skipped") {
                eprintln!("note: {msg} (allowed by lopi-may-skip)");
            } else {
                problems.push(msg);
            }
            continue;
        }
        if got != *want {
            let detail: Vec<String> = hits
                .iter()
                .map(|e| format!("{}@{} in {}: {}", e.name, e.addr, e.module, e.calls))
                .collect();
            problems.push(format!(
                "{name}: expected {want} calls, report says {got} [{}]",
                detail.join("; ")
            ));
        }
        if lib_module {
            for e in &hits {
                if !e.module.ends_with("libfix.so") {
                    problems.push(format!(
                        "{name}: expected module .../libfix.so, report says {:?}",
                        e.module
                    ));
                }
            }
        }
    }
}

/// Self-test of the count checker (independent of lopi).
#[test]
fn count_checker_self_test() {
    let e = |name: &str, module: &str, calls: u64| ReportEntry {
        name: name.into(),
        module: module.into(),
        addr: "0x0".into(),
        calls,
    };
    let entries = vec![
        e("fib", "/a/prog", 5),
        e("dup", "/a/prog", 2),
        e("dup", "/b/libfix.so", 3),
        e("zero", "/a/prog", 0),
    ];
    let exp = |v: &[(&str, u64)]| {
        v.iter()
            .map(|(n, c)| (n.to_string(), *c))
            .collect::<Vec<_>>()
    };
    let mut p = Vec::new();
    check_counts(
        &mut p,
        &entries,
        &exp(&[("fib", 5), ("dup", 5), ("zero", 0)]),
        true,
        false,
        None,
        &[],
    );
    assert!(p.is_empty(), "{p:?}");
    check_counts(
        &mut p,
        &entries,
        &exp(&[("fib", 6), ("missing", 0)]),
        true,
        false,
        None,
        &[],
    );
    assert_eq!(p.len(), 2, "{p:?}");
    p.clear();
    check_counts(&mut p, &entries, &exp(&[("dup", 5)]), true, true, None, &[]);
    assert_eq!(p.len(), 1, "module check: {p:?}");
    p.clear();
    check_counts(
        &mut p,
        &entries,
        &exp(&[("zero", 7), ("missing", 1)]),
        false,
        false,
        None,
        &[],
    );
    assert!(p.is_empty(), "{p:?}");
    check_counts(&mut p, &entries, &exp(&[("fib", 5)]), false, false, None, &[]);
    assert_eq!(p.len(), 1, "{p:?}");
}
