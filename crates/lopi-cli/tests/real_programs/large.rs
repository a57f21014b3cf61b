//! Large programs from Debian (python3.11, perl, gcc's cc1) profiled under `lopi run` with
//! default settings.

use super::running::{assert_same, run};
use super::steps::lopi_json;
use super::{fresh_data, lopi, prepared, run_dir, secs, Cleanup};
use crate::common;
use std::path::PathBuf;
use std::process::Command;

/// Large programs from Debian, profiled as a new user would (`lopi run --probe entry,exit`,
/// default settings): python3.11 (stripped, computed-goto interpreter), perl and gcc's cc1
/// compiling sqlite's shell. Output identical to the original's; the profile right by
/// default: every exit matched its entry (or began before timing), no call path merged, no
/// call untimed, every thread's calls timed in its tree.
#[test]
fn real_large_programs_profile_right() {
    let p = prepared();
    let dir = run_dir("large");
    let _cleanup = Cleanup(dir.clone());
    let build = p.path("SQLITE3_SRC_BIN").parent().expect("sqlite's build directory").to_path_buf();
    let (shell_c, sqlite_h) = (build.join("shell.c"), build);
    let cc1 = Command::new("gcc").arg("-print-prog-name=cc1").output().expect("gcc -print-prog-name");
    let cc1 = PathBuf::from(String::from_utf8_lossy(&cc1.stdout).trim());
    let shell_i = dir.join("shell.i");
    let pre = Command::new("gcc")
        .args(["-E", "-I"])
        .arg(&sqlite_h)
        .arg(&shell_c)
        .arg("-o")
        .arg(&shell_i)
        .status()
        .expect("gcc -E");
    assert!(pre.success(), "preprocessing {} failed", shell_c.display());
    let python = "import json, re\nd = {str(i): [i, i * 2] for i in range(50000)}\ns = json.dumps(d)\nprint(len(s), len(re.findall(r'\\d+', s)))";
    let perl = "my %h; for my $i (1..100000) { $h{$i} = sqrt($i) } my @k = sort { $a <=> $b } keys %h; print scalar(@k), \" $k[-1]\\n\"";
    let (python3_11, perl_bin) = (common::require_file("/usr/bin/python3.11", "python3.11"), common::require_file("/usr/bin/perl", "perl"));
    let programs: Vec<(&str, Vec<String>)> = vec![
        ("python3.11", vec![python3_11.display().to_string(), "-c".into(), python.into()]),
        ("perl", vec![perl_bin.display().to_string(), "-e".into(), perl.into()]),
        ("cc1", vec![cc1.display().to_string(), "-quiet".into(), "-O1".into(), shell_i.display().to_string(), "-o".into(), "-".into()]),
    ];
    for (tag, argv) in programs {
        let orig = run(Command::new(&argv[0]).args(&argv[1..]).current_dir(&dir));
        assert_eq!(orig.code, 0, "[{tag}] the original failed");
        let data = fresh_data(&dir, tag);
        let live = run(Command::new(lopi())
            .args(["run", "-q", "--probe", "entry,exit", "--"])
            .args(&argv)
            .current_dir(&dir)
            .env("LOPI_OUTPUT", &data));
        assert_same(tag, "lopi run", &dir, &orig, &live);
        let report = lopi_json(&["report", data.to_str().unwrap(), "--format", "json"]);
        let threads = report["timing"]["threads"].as_array().cloned().unwrap_or_default();
        assert!(!threads.is_empty(), "[{tag}] no timed thread");
        let sum = |field: &str| threads.iter().map(|t| t[field].as_u64().unwrap_or(u64::MAX)).sum::<u64>();
        let calls = sum("calls");
        println!(
            "[{tag}] {} timed calls in {} threads ({}); unmatched {} early {} merged {} untimed {} too deep {}",
            calls,
            threads.len(),
            secs(live.took),
            sum("unmatched_exits"),
            sum("early_exits"),
            sum("merged_calls"),
            sum("untimed_calls"),
            sum("too_deep")
        );
        for field in ["unmatched_exits", "merged_calls", "untimed_calls", "too_deep", "nested_skipped"] {
            assert_eq!(sum(field), 0, "[{tag}] {field} in a default run: {:?}", threads.iter().map(|t| &t["unmatched_by_function"]).collect::<Vec<_>>());
        }
        assert!(calls > 100_000, "[{tag}] only {calls} timed calls");
    }
}
