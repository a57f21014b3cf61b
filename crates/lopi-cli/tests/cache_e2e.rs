//! The plan cache end to end: running, rewriting or listing the same program again takes
//! its plan from the cache, and gives exactly what planning gives; changing any input of
//! planning (the file, lopi's own build, the probe options) plans again; damaged entries are
//! replaced; `LOPI_CACHE=off` and `--no-cache` turn the cache off. Each test has a cache
//! directory of its own (`XDG_CACHE_HOME`).
//!
//! Knobs: LOPI_BIN, LOPI_KEEP_TMP.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const FROM_CACHE: &str = "(plan from the cache)";
const REPLACED: &str = "a cached plan was unusable and was replaced";

/// A test's directory: the fixture program, its cache and its data files.
struct Case {
    dir: PathBuf,
    prog: PathBuf,
}

impl Case {
    /// `fixtures/recursion.c` (known counts: main=1 fib=21891 add=10945 down=101
    /// down_helper=100), built -O2 into a fresh directory.
    fn new(label: &str) -> Case {
        let dir = fresh_dir(&format!("cache-{label}"));
        let prog = dir.join("recursion");
        let mut cc = Command::new("cc");
        cc.args(["-O2", "-o"]).arg(&prog).arg(fixtures_dir().join("recursion.c"));
        compile(&mut cc).unwrap_or_else(|e| panic!("{e}"));
        Case { dir, prog }
    }

    fn cache_dir(&self) -> PathBuf {
        self.dir.join("xdg").join("lopi")
    }

    fn entries(&self) -> usize {
        std::fs::read_dir(self.cache_dir()).map(|d| d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "plan")).count()).unwrap_or(0)
    }

    fn lopi_with(&self, lopi: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(lopi);
        cmd.args(args).env("XDG_CACHE_HOME", self.dir.join("xdg")).env_remove("LOPI_CACHE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        // A copy of lopi written by this test may be "busy" for a moment: another test's
        // thread that forked while its write descriptor was open holds it until its exec.
        let mut tries = 0;
        let out = loop {
            match run(&mut cmd, default_timeout()) {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                result => break result.expect("run lopi"),
            }
        };
        assert!(out.status.success(), "lopi {args:?}: {}\n{}", out.describe_status(), out.stderr_str());
        out
    }

    fn lopi(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.lopi_with(&lopi_bin(), args, env)
    }

    /// `lopi run OPTIONS -- PROG 20 100` with `lopi`: whether the plan came from the cache,
    /// and the calls per function recorded.
    fn run_with(&self, lopi: &Path, options: &[&str], env: &[(&str, &str)]) -> (bool, BTreeMap<String, u64>) {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data = self.dir.join(format!("run{n}.lopi"));
        let data_str = data.to_str().unwrap().to_string();
        let mut args = vec!["run"];
        args.extend_from_slice(options);
        args.extend_from_slice(&["--", self.prog.to_str().unwrap(), "20", "100"]);
        let mut env = env.to_vec();
        env.push(("LOPI_OUTPUT", &data_str));
        let out = self.lopi_with(lopi, &args, &env);
        let stderr = out.stderr_str();
        assert!(!stderr.contains("note:"), "unexpected note from lopi run:\n{stderr}");
        (stderr.contains(FROM_CACHE), self.calls(&data))
    }

    fn run(&self, options: &[&str], env: &[(&str, &str)]) -> (bool, BTreeMap<String, u64>) {
        self.run_with(&lopi_bin(), options, env)
    }

    fn calls(&self, data: &Path) -> BTreeMap<String, u64> {
        let out = self.lopi(&["report", data.to_str().unwrap(), "--format", "json"], &[]);
        parse_report(&out.stdout_str()).unwrap().into_iter().map(|e| (e.name, e.calls)).collect()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        cleanup(&self.dir);
    }
}

fn expected() -> BTreeMap<String, u64> {
    [("main", 1), ("fib", 21891), ("add", 10945), ("down", 101), ("down_helper", 100)].into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The fixture's own functions of a report (the C runtime's vary with the libc).
fn own(calls: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    calls.iter().filter(|(k, _)| expected().contains_key(*k)).map(|(k, v)| (k.clone(), *v)).collect()
}

#[test]
fn a_second_run_takes_the_plan_from_the_cache_and_records_the_same() {
    let case = Case::new("hit");
    for probes in ["entry", "entry,exit"] {
        let (hit, planned) = case.run(&["--probe", probes], &[]);
        assert!(!hit, "{probes}: the first run plans");
        let (hit, cached) = case.run(&["--probe", probes], &[]);
        assert!(hit, "{probes}: the second run takes the plan from the cache");
        assert_eq!(own(&planned), expected(), "{probes}: planned");
        assert_eq!(cached, planned, "{probes}: every function's calls, from the cache and planned");
    }
    assert_eq!(case.entries(), 4, "per set of options, the selection and the image laid out below the program");
}

#[test]
fn an_image_laid_out_with_other_room_takes_the_selection_from_the_cache() {
    let case = Case::new("room");
    let (_, planned) = case.run(&["--probe", "entry,exit"], &[]);
    // A LOPI_OUTPUT 1000 bytes longer needs more room in the image for the runtime's
    // environment: another image, from the cached selection.
    let long = case.dir.join("x".repeat(200)).join("x".repeat(200)).join("x".repeat(200)).join("x".repeat(200)).join("x".repeat(200));
    std::fs::create_dir_all(&long).unwrap();
    let data = long.join("long.lopi");
    let out = case.lopi(
        &["run", "--probe", "entry,exit", "--", case.prog.to_str().unwrap(), "20", "100"],
        &[("LOPI_OUTPUT", data.to_str().unwrap())],
    );
    assert!(out.stderr_str().contains(FROM_CACHE), "{}", out.stderr_str());
    assert_eq!(case.calls(&data), planned);
    assert_eq!(case.entries(), 3, "one selection, two images");
}

#[test]
fn changing_an_input_of_planning_plans_again() {
    let case = Case::new("inputs");
    let prog = case.prog.to_str().unwrap();
    assert!(!case.run(&[], &[]).0);
    assert!(case.run(&[], &[]).0);

    // The program file: touched (a rebuild that writes the same bytes looks the same).
    let touched = Command::new("touch").args(["-d", "2001-02-03 04:05:06", prog]).status().unwrap();
    assert!(touched.success());
    assert!(!case.run(&[], &[]).0, "touched file");
    assert!(case.run(&[], &[]).0);

    // The options.
    for options in [&["--probe", "entry,exit"][..], &["--functions", "fib"], &["--exclude", "add"], &["--functions", "f*", "--exclude", "add"]] {
        let (hit, calls) = case.run(options, &[]);
        assert!(!hit, "{options:?}");
        let (hit, again) = case.run(options, &[]);
        assert!(hit, "{options:?} again");
        assert_eq!(again, calls, "{options:?}");
    }
    let (_, only_fib) = case.run(&["--functions", "fib"], &[]);
    assert_eq!(only_fib.get("fib"), Some(&21891));
    assert_eq!(only_fib.get("add"), None, "--functions fib: add not probed");

    // lopi's own build: a copy of lopi whose build-id differs in one byte.
    let other = case.dir.join("lopi-other-build");
    std::fs::write(&other, with_other_build_id(&std::fs::read(lopi_bin()).unwrap())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (hit, calls) = case.run_with(&other, &[], &[]);
    assert!(!hit, "another lopi build does not use this one's plans");
    assert_eq!(own(&calls), expected());
    assert!(case.run_with(&other, &[], &[]).0, "but its own");
    assert!(case.run(&[], &[]).0, "and this lopi still has its own");
}

/// `lopi`'s bytes with one byte of its GNU build-id changed (found with readelf).
fn with_other_build_id(lopi: &[u8]) -> Vec<u8> {
    let out = Command::new("readelf").args(["-n"]).arg(lopi_bin()).output().expect("readelf (binutils) must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("lopi has a GNU build-id");
    let id: Vec<u8> = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    let at = lopi.windows(id.len()).position(|w| w == id).expect("the build-id's bytes in the file");
    let mut bytes = lopi.to_vec();
    bytes[at] ^= 0xff;
    bytes
}

#[test]
fn damaged_entries_are_replaced() {
    let case = Case::new("damaged");
    let (_, planned) = case.run(&["--probe", "entry,exit"], &[]);
    // The selection and the image laid out from it (the larger).
    let mut entries: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(case.cache_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "plan"))
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    entries.sort_by_key(|(_, bytes)| bytes.len());
    assert_eq!(entries.len(), 2);
    type Damage = fn(&[u8]) -> Vec<u8>;
    let damages: Vec<(&str, Damage)> = vec![
        ("empty", |_| Vec::new()),
        ("truncated", |b| b[..b.len() / 2].to_vec()),
        ("a flipped bit", |b| {
            let mut b = b.to_vec();
            let at = b.len() / 3;
            b[at] ^= 4;
            b
        }),
        ("garbage", |b| (0..b.len()).map(|i| (i * 7919 % 251) as u8).collect()),
        ("another format", |b| {
            let mut b = b.to_vec();
            b[8] ^= 1;
            b
        }),
    ];
    let data = case.dir.join("damaged.lopi");
    for (what, damage) in damages {
        // The image alone, or both (a damaged selection alone is not read while the image
        // serves; lopi-cache's robustness tests replace damaged selections).
        for damaged in [&entries[1..], &entries[..]] {
            for (path, good) in damaged {
                std::fs::write(path, damage(good)).unwrap();
            }
            let out = case.lopi(
                &["run", "--probe", "entry,exit", "--", case.prog.to_str().unwrap(), "20", "100"],
                &[("LOPI_OUTPUT", data.to_str().unwrap())],
            );
            let stderr = out.stderr_str();
            let which = damaged.len();
            assert!(stderr.contains(REPLACED), "{what} ({which} entries):\n{stderr}");
            assert_eq!(case.calls(&data), planned, "{what}: planned again, same record");
            std::fs::remove_file(&data).unwrap();
            for (path, good) in &entries {
                assert!(std::fs::read(path).unwrap() == *good, "{what}: {} written again", path.display());
            }
            assert!(case.run(&["--probe", "entry,exit"], &[]).0, "{what}: the next run uses them");
        }
    }
}

#[test]
fn the_cache_can_be_turned_off() {
    let case = Case::new("off");
    for (options, env) in [(&["--no-cache"][..], &[][..]), (&[], &[("LOPI_CACHE", "off")])] {
        for _ in 0..2 {
            let (hit, calls) = case.run(options, env);
            assert!(!hit);
            assert_eq!(own(&calls), expected());
        }
    }
    assert!(!case.cache_dir().exists(), "nothing written");
    let out = case.lopi(&["cache"], &[("LOPI_CACHE", "off")]);
    assert!(out.stderr_str().contains("the plan cache is off"), "{}", out.stderr_str());
}

#[test]
fn rewrite_and_info_from_the_cache_give_the_same_files() {
    let case = Case::new("rewrite");
    let prog = case.prog.to_str().unwrap();
    let output = |name: &str| case.dir.join(name).to_str().unwrap().to_string();
    let mut files = Vec::new();
    for (name, extra) in [("planned", &["--no-cache"][..]), ("stored", &[]), ("hit", &[])] {
        // The output's name is recorded in it: rewrite to one name, then keep a copy.
        let out = case.lopi(&[&["rewrite", prog, "-o", &output("out"), "--probe", "entry,exit"][..], extra].concat(), &[]);
        assert_eq!(out.stderr_str().contains(FROM_CACHE), name == "hit", "{name}: {}", out.stderr_str());
        let info = case.lopi(&[&["info", prog, "--probe", "entry,exit", "--format", "json"][..], extra].concat(), &[]);
        files.push((name, std::fs::read(output("out")).unwrap(), info.stdout));
    }
    for (name, bytes, info) in &files[1..] {
        assert!(bytes == &files[0].1, "{name}: the rewritten file differs from the one planned without the cache");
        assert!(info == &files[0].2, "{name}: lopi info differs");
    }
    let out = case.lopi(&["cache"], &[]);
    assert!(out.stdout_str().contains(": 1 entry "), "{}", out.stdout_str());
    let out = case.lopi(&["cache", "--clear"], &[]);
    assert!(out.stderr_str().contains("removed 1 entry"), "{}", out.stderr_str());
    assert_eq!(case.entries(), 0);
}
