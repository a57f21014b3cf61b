//! Damaged data files through the commands that read them (`lopi report` and its views,
//! `flamegraph`, `export`, `coverage`): a real record (module records, thread chunks, memory maps, CPU
//! times) cut at many offsets and with random bytes changed. Never a panic; a line on stderr
//! names what is damaged (its kind, number and offset, and why); what is whole is reported,
//! exit status 0; when no module record is whole, one error line and status 1.
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// Two threads, a lock, a few system calls: every kind of item a data file holds.
const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long total;
__attribute__((noinline)) long step(long i) { return i % 7 == 0 ? i / 7 : i + 1; }
static void *worker(void *arg) {
    for (long i = 0; i < 2000; i++) {
        pthread_mutex_lock(&lock);
        total += step(i + (long)arg);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}
int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("%ld\n", total);
    return 0;
}
"#;

/// xorshift64*, as in the other robustness tests: a failure names its case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The commands run on each damaged file (one per case, in turn); `OUT` is a file in the
/// test's directory.
const COMMANDS: [&[&str]; 6] = [
    &["report"],
    &["report", "--format", "json"],
    &["report", "--syscalls"],
    &["report", "--locks"],
    &["flamegraph", "-o", "OUT"],
    &["export", "--format", "folded", "-o", "OUT"],
];

/// Runs `lopi ARGS FILE`; checks it did not panic or die of a signal, that it exited 0 when
/// `whole` (module records remain) and 1 otherwise, with one error line then; returns stderr.
fn check(case: &str, args: &[&str], file: &Path, whole: bool) -> String {
    let output = file.with_extension("out");
    let args: Vec<&str> = args.iter().map(|&a| if a == "OUT" { output.to_str().unwrap() } else { a }).collect();
    let out = run(Command::new(lopi_bin()).args(&args[..1]).arg(file).args(&args[1..]), default_timeout()).unwrap();
    let (code, err) = (out.status.code(), out.stderr_str());
    assert!(!err.contains("panicked"), "{case}: `lopi {}` panicked:\n{err}", args.join(" "));
    if whole {
        // A view the damaged part held is missing: that view's own one-line refusal.
        let refused = code == Some(1) && err.lines().filter(|l| l.starts_with("lopi: error: ")).count() == 1 && err.contains(" has no ");
        assert!(code == Some(0) || refused, "{case}: `lopi {}` exited {code:?} on a file with whole records:\n{err}", args.join(" "));
    } else {
        assert_eq!(code, Some(1), "{case}: `lopi {}` on a file with no whole record:\n{err}", args.join(" "));
        let lines: Vec<&str> = err.lines().collect();
        let what_to_do = lines.first().is_some_and(|l| l.ends_with("record the run again") || l.ends_with("not a lopi data file"));
        assert!(lines.len() == 1 && lines[0].starts_with("lopi: error: ") && what_to_do, "{case}: one error line:\n{err}");
    }
    err
}

#[test]
fn damaged_data_files_report_what_is_whole() {
    let dir = fresh_dir("data-files-damaged");
    let prog = build_c(&dir, "prog", PROGRAM, &["-O1", "-pthread"]);
    let data = dir.join("whole.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "entry,exit,syscall,locks", "--"]).arg(&prog).env("LOPI_OUTPUT", &data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let bytes = std::fs::read(&data).unwrap();
    let parsed = lopi_trace::DataFile::parse(&bytes).unwrap();
    assert!(parsed.damage.is_empty() && parsed.records.len() >= 3 && parsed.threads.len() >= 3 && !parsed.maps.is_empty(), "a whole record of every kind");
    let mut native = Command::new(lopi_bin());
    let report = run(native.arg("report").arg(&data), default_timeout()).unwrap();
    assert!(report.status.success() && report.stderr_str().is_empty(), "the whole file reads without a word: {}", report.stderr_str());

    // Where items start (page-aligned magics): a cut there leaves whole items only.
    let page = lopi_rt_abi::PAGE_SIZE as usize;
    let starts: Vec<usize> = (page..bytes.len()).step_by(page).filter(|&at| bytes[at..].starts_with(b"LOPI")).collect();
    let first_record_end = starts.get(1).copied().unwrap_or(bytes.len());
    let mut cuts: Vec<usize> = vec![0, 8, 100, 1000, page - 1, page, page + 4, page + 100, first_record_end - 1, first_record_end];
    cuts.extend(starts.iter().flat_map(|&s| [s, s + 1, s + 16, s + page - 8, s + page, s + 3 * page / 2]));
    let mut rng = Rng(0xda7a_f11e_0000_0007);
    cuts.extend((0..40).map(|_| rng.below(bytes.len())));
    cuts.retain(|&c| c < bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let cut_file = dir.join("cut.lopi");
    for (i, &cut) in cuts.iter().enumerate() {
        std::fs::write(&cut_file, &bytes[..cut]).unwrap();
        let case = format!("cut at {cut} of {}", bytes.len());
        if cut == 0 {
            let err = check(&case, &["report"], &cut_file, false);
            assert!(err.contains("is empty"), "{case}: {err}");
            continue;
        }
        // What the reader keeps: module records that end before the cut.
        let whole = cut >= first_record_end;
        let err = check(&case, COMMANDS[i % COMMANDS.len()], &cut_file, whole);
        let at_boundary = cut == 8 || cut == page || starts.contains(&cut);
        if !at_boundary {
            assert!(err.contains("truncated"), "{case}: the damage is named:\n{err}");
        }
        if whole && !at_boundary {
            let line = err.lines().find(|l| l.contains("truncated")).unwrap();
            assert!(line.starts_with(&format!("lopi: warning: {}: ", cut_file.display())) && line.contains(" at offset 0x") && line.ends_with("skipped, the rest is read"), "{case}: {line}");
        }
    }

    // Random bytes changed, mostly in the items' headers.
    let flipped = dir.join("flipped.lopi");
    for case in 0..240 {
        let mut damaged = bytes.clone();
        for _ in 0..1 + rng.below(4) {
            let at = match rng.below(3) {
                0 => rng.below(damaged.len()),
                _ => starts[rng.below(starts.len())] + rng.below(256),
            };
            damaged[at] = rng.next() as u8;
        }
        std::fs::write(&flipped, &damaged).unwrap();
        let whole = lopi_trace::DataFile::parse(&damaged).is_ok_and(|d| !d.records.is_empty());
        let magic_ok = damaged.starts_with(&lopi_rt_abi::DATA_MAGIC);
        let err = if magic_ok {
            check(&format!("flip case {case}"), COMMANDS[case % COMMANDS.len()], &flipped, whole)
        } else {
            let out = run(Command::new(lopi_bin()).arg("report").arg(&flipped), default_timeout()).unwrap();
            assert_eq!(out.status.code(), Some(1), "flip case {case}: the file's magic changed:\n{}", out.stderr_str());
            out.stderr_str()
        };
        assert!(!err.contains("panicked"), "flip case {case}: {err}");
    }

    // `lopi coverage` reads block records (which combine with no other probe).
    let blocks = dir.join("blocks.lopi");
    let out = run(Command::new(lopi_bin()).args(["run", "-q", "--probe", "block", "--"]).arg(&prog).env("LOPI_OUTPUT", &blocks), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let bytes = std::fs::read(&blocks).unwrap();
    let first_record_end = (2 * page..bytes.len()).step_by(page).find(|&at| bytes[at..].starts_with(b"LOPI")).unwrap_or(bytes.len());
    for _ in 0..20 {
        let cut = page + rng.below(bytes.len() - page);
        std::fs::write(&cut_file, &bytes[..cut]).unwrap();
        let err = check(&format!("block record cut at {cut}"), &["coverage"], &cut_file, cut >= first_record_end);
        assert!(cut.is_multiple_of(page) || err.contains("truncated"), "cut at {cut}: {err}");
    }
    cleanup(&dir);
}
