//! zstd: the source-built and Debian's stripped zstd (battery, then zstd's own cli-tests and
//! playTests.sh), and libzstd.so.1 through its C API.

use super::running::{assert_same, original, run};
use super::steps::{info, rewrite, Report};
use super::{bash, fresh_data, prepared, real_dir, run_dir, secs, Cleanup, Mode};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn playtests_wanted(which: &str) -> bool {
    match std::env::var("LOPI_REAL_PLAYTESTS").as_deref() {
        Ok("none") => false,
        Ok("source") => which == "source",
        _ => true,
    }
}

/// zstd-battery.sh with the original and the rewritten ORIG, then (in timing mode only)
/// zstd's own cli-tests and playTests.sh.
fn zstd_common(tag: &str, orig: &Path, which: &str, mode: Mode) -> (Cleanup, Report) {
    let p = prepared();
    let datagen = p.path("DATAGEN");
    let src = p.path("ZSTD_SRC");
    let dir = run_dir(tag);
    let cleanup = Cleanup(dir.clone());
    info(tag, orig);
    let rw = dir.join("zstd");
    rewrite(tag, orig, &rw, mode);
    let data = fresh_data(&dir, "zstd.lopi");

    let scratch = dir.join("scratch");
    let a = original(&format!("zstd-battery.sh {}", orig.display()), || {
        let mut c = bash("zstd-battery.sh");
        c.arg(orig).arg(&datagen).arg(&scratch);
        c
    });
    let b = run(mode.record(
        bash("zstd-battery.sh").arg(&rw).arg(&datagen).arg(&scratch),
        &data,
    ));
    assert_same(tag, "zstd-battery.sh", &dir, &a, &b);
    if mode != Mode::Timing {
        return (cleanup, Report::load(tag, &data, mode));
    }

    let what = if playtests_wanted(which) {
        "all"
    } else {
        "cli"
    };
    let a = run(bash("zstd-playtests.sh")
        .arg(orig)
        .arg(&datagen)
        .arg(&src)
        .arg(what));
    let b = run(mode.record(
        bash("zstd-playtests.sh")
            .arg(&rw)
            .arg(&datagen)
            .arg(&src)
            .arg(what),
        &data,
    ));
    for l in a
        .stdout
        .lines()
        .filter(|l| l.starts_with("PASSED") || l.starts_with("FAILED") || l.contains(" rc="))
    {
        println!("[{tag}] original suite: {l}");
    }
    for l in b
        .stdout
        .lines()
        .filter(|l| l.starts_with("PASSED") || l.starts_with("FAILED") || l.contains(" rc="))
    {
        println!("[{tag}] rewritten suite: {l}");
    }
    let label = if what == "all" {
        "zstd tests/cli-tests + tests/playTests.sh"
    } else {
        "zstd tests/cli-tests"
    };
    assert_same(tag, label, &dir, &a, &b);

    let r = Report::load(tag, &data, mode);
    (cleanup, r)
}

/// Source-built zstd (libzstd compiled in, full symbols).
fn zstd_source_built(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("zstd-src");
    let t = Instant::now();
    let orig = p.path("ZSTD_SRC_BIN");
    let (_cleanup, r) = zstd_common(tag, &orig, "source", mode);
    let c = r.calls_prefix("ZSTD_compress");
    println!("[{tag}]   ZSTD_compress*: {c} calls");
    assert!(c > 0, "[{tag}] no ZSTD_compress* calls recorded");
    r.expect(tag, "ZSTD_compressStream2", None);
    r.expect(tag, "ZSTD_decompressStream", None);
    r.expect(tag, "FIO_compressFilename", None);
    r.expect(tag, "main", None);
    r.print_top(tag, "source-built zstd", None);
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_zstd_source_built() {
    zstd_source_built(Mode::Timing);
}

#[test]
fn real_zstd_source_built_budget() {
    zstd_source_built(Mode::Budget);
}

#[test]
fn real_zstd_source_built_entry() {
    zstd_source_built(Mode::Entry);
}

#[test]
fn real_zstd_source_built_trace() {
    zstd_source_built(Mode::Trace);
}

#[test]
fn real_zstd_source_built_live() {
    zstd_source_built(Mode::Live);
}

/// Debian's stripped zstd (it links libzstd statically: its ldd shows no
/// libzstd.so.1, so the shared library is tested on its own below).
fn zstd_debian_stripped(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("zstd-deb");
    let t = Instant::now();
    let orig = p.path("DEB_ZSTD");
    let (_cleanup, r) = zstd_common(tag, &orig, "debian", mode);
    let (n, calls) = r.module_totals("zstd");
    println!("[{tag}]   stripped zstd: {n} functions called, {calls} calls");
    assert!(
        n > 100,
        "[{tag}] only {n} functions of the stripped zstd were called"
    );
    r.print_top(tag, "Debian's stripped zstd", None);

    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_zstd_debian_stripped() {
    zstd_debian_stripped(Mode::Timing);
}

#[test]
fn real_zstd_debian_stripped_entry() {
    zstd_debian_stripped(Mode::Entry);
}

#[test]
fn real_zstd_debian_stripped_trace() {
    zstd_debian_stripped(Mode::Trace);
}

#[test]
fn real_zstd_debian_stripped_live() {
    zstd_debian_stripped(Mode::Live);
}

/// libzstd.so.1, source-built (symbols) and Debian's (stripped), driven
/// through its C API by tests/real/libzstd-battery.py; top-10 of both.
fn libzstd_source_vs_debian(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("libzstd");
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let script = real_dir().join("libzstd-battery.py");
    let mut reports = Vec::new();
    for (which, key) in [("source-built", "LIBZSTD_SRC"), ("Debian", "DEB_LIBZSTD")] {
        let lib = p.path(key);
        info(tag, &lib);
        let rw_dir = dir.join(key);
        fs::create_dir_all(&rw_dir).unwrap();
        let rw_lib = rw_dir.join("libzstd.so.1");
        rewrite(tag, &lib, &rw_lib, mode);
        let a = original(&format!("libzstd-battery.py {}", lib.display()), || {
            let mut c = Command::new("python3");
            c.arg(&script)
                .arg(&lib)
                .env_remove("LOPI_OUTPUT")
                .env_remove("LOPI_TRACE_EVENTS");
            c
        });
        let data = fresh_data(&dir, &format!("{key}.lopi"));
        let b = run(mode.record(Command::new("python3").arg(&script).arg(&rw_lib), &data));
        assert_same(
            tag,
            &format!("libzstd-battery.py on the {which} libzstd.so.1"),
            &dir,
            &a,
            &b,
        );
        let r = Report::load(tag, &data, mode);
        r.expect(tag, "ZSTD_compress", Some("libzstd"));
        r.expect(tag, "ZSTD_decompress", Some("libzstd"));
        r.expect(tag, "ZSTD_compressStream2", Some("libzstd"));
        r.expect(tag, "ZDICT_trainFromBuffer", Some("libzstd"));
        let (n, calls) = r.module_totals("libzstd");
        println!("[{tag}]   {which} libzstd.so.1: {n} functions called, {calls} calls");
        reports.push((which, r, a.stdout.clone()));
    }
    assert_eq!(
        reports[0].2, reports[1].2,
        "[{tag}] the source-built and Debian's libzstd.so.1 disagree on the battery (before any rewriting)"
    );
    for (which, r, _) in &reports {
        r.print_top(tag, &format!("{which} libzstd.so.1"), Some("libzstd"));
    }
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_libzstd_source_vs_debian() {
    libzstd_source_vs_debian(Mode::Timing);
}

#[test]
fn real_libzstd_source_vs_debian_entry() {
    libzstd_source_vs_debian(Mode::Entry);
}

#[test]
fn real_libzstd_source_vs_debian_trace() {
    libzstd_source_vs_debian(Mode::Trace);
}
