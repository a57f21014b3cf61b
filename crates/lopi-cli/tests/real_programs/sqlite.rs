//! sqlite3: the source-built shell in every mode, sqlite's own test suite through
//! testfixture, and Debian's stripped shell and libraries.

use super::running::{assert_same, original, run};
use super::steps::{info, rewrite, Report};
use super::{bash, fresh_data, prepared, run_dir, secs, Cleanup, Mode};
use std::fs;
use std::time::Instant;

/// Source-built sqlite3 shell (engine compiled in, full symbols).
fn sqlite3_source_built(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("sqlite3-src");
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let orig = p.path("SQLITE3_SRC_BIN");
    info(tag, &orig);
    let rw = dir.join("sqlite3");
    rewrite(tag, &orig, &rw, mode);

    let scratch = dir.join("scratch");
    let a = original(&format!("sqlite-battery.sh {}", orig.display()), || {
        let mut c = bash("sqlite-battery.sh");
        c.arg(&orig).arg(&scratch);
        c
    });
    let data = fresh_data(&dir, "battery.lopi");
    let b = run(mode.record(bash("sqlite-battery.sh").arg(&rw).arg(&scratch), &data));
    assert_same(tag, "sqlite-battery.sh", &dir, &a, &b);

    let r = Report::load(tag, &data, mode);
    r.expect(tag, "sqlite3_prepare_v2", None);
    r.expect(tag, "sqlite3_step", None);
    r.expect(tag, "sqlite3VdbeExec", None);
    r.expect(tag, "sqlite3_open_v2", None);
    r.expect(tag, "do_meta_command", None);
    r.print_top(tag, "source-built sqlite3 shell (battery)", None);
    if mode.timed() {
        r.expect_hot(tag, "sqlite3VdbeExec", 15);
        r.expect_hot(tag, "sqlite3_step", 15);
    }
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_sqlite3_source_built() {
    sqlite3_source_built(Mode::Timing);
}

#[test]
fn real_sqlite3_source_built_entry() {
    sqlite3_source_built(Mode::Entry);
}

#[test]
fn real_sqlite3_source_built_trace() {
    sqlite3_source_built(Mode::Trace);
}

#[test]
fn real_sqlite3_source_built_live() {
    sqlite3_source_built(Mode::Live);
}

#[test]
fn real_sqlite3_source_built_budget() {
    sqlite3_source_built(Mode::Budget);
}

/// testfixture (sqlite's TCL test harness) running sqlite's own test files.
#[test]
fn real_sqlite3_testfixture() {
    let p = prepared();
    let tag = "testfixture";
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let orig = p.path("TESTFIXTURE");
    let src = p.path("SQLITE_SRC");
    info(tag, &orig);
    // The original and the rewritten testfixture run from paths of the same length and with
    // the same environment (LOPI_OUTPUT too: the original ignores it): how many cases sqlite's
    // test/withM.test counts (1095, 1096 or 1097) depends on the size of argv + environment.
    let copy = dir.join("o/testfixture");
    let rw = dir.join("r/testfixture");
    fs::create_dir_all(copy.parent().unwrap()).unwrap();
    fs::create_dir_all(rw.parent().unwrap()).unwrap();
    fs::copy(&orig, &copy).unwrap();
    rewrite(tag, &orig, &rw, Mode::Timing);

    let data = fresh_data(&dir, "suite.lopi");
    let a = run(Mode::Timing.record(bash("sqlite-testfixture.sh").arg(&copy).arg(&src), &data));
    assert!(
        !data.exists(),
        "[{tag}] the original testfixture wrote {}",
        data.display()
    );
    let b = run(Mode::Timing.record(bash("sqlite-testfixture.sh").arg(&rw).arg(&src), &data));
    if let Some(last) = a.stdout.lines().last() {
        println!("[{tag}] original: {last}");
    }
    if let Some(last) = b.stdout.lines().last() {
        println!("[{tag}] rewritten: {last}");
    }
    assert_same(tag, "sqlite test/*.test via testfixture", &dir, &a, &b);

    let r = Report::load(tag, &data, Mode::Timing);
    r.expect(tag, "sqlite3_prepare_v2", None);
    r.expect(tag, "sqlite3VdbeExec", None);
    r.expect(tag, "sqlite3BtreeInsert", None);
    r.expect(tag, "DbObjCmd", None);
    r.print_top(tag, "testfixture (sqlite's own tests)", None);
    println!("[{tag}] total {}", secs(t.elapsed()));
}

/// Debian's stripped sqlite3 + libsqlite3.so.0, and the source-built
/// libsqlite3.so.0 under Debian's shell; top-10 of both libraries.
fn sqlite3_debian_and_libraries(mode: Mode) {
    let p = prepared();
    let tag = &mode.tag("sqlite3-deb");
    let t = Instant::now();
    let dir = run_dir(tag);
    let _cleanup = Cleanup(dir.clone());
    let deb_shell = p.path("DEB_SQLITE3");
    let deb_lib = p.path("DEB_LIBSQLITE3");
    let src_lib = p.path("LIBSQLITE3_SRC");
    info(tag, &deb_shell);
    info(tag, &deb_lib);
    info(tag, &src_lib);

    let deb_lib_dir = deb_lib.parent().unwrap().to_path_buf();
    let rw_deb_dir = dir.join("deb-lib");
    let rw_src_dir = dir.join("src-lib");
    fs::create_dir_all(&rw_deb_dir).unwrap();
    fs::create_dir_all(&rw_src_dir).unwrap();
    let rw_shell = dir.join("sqlite3");
    rewrite(tag, &deb_shell, &rw_shell, mode);
    rewrite(tag, &deb_lib, &rw_deb_dir.join("libsqlite3.so.0"), mode);
    rewrite(tag, &src_lib, &rw_src_dir.join("libsqlite3.so.0"), mode);

    let scratch = dir.join("scratch");
    // baseline: Debian's shell and library, untouched
    let base = original(
        &format!(
            "sqlite-battery.sh {} {}",
            deb_shell.display(),
            deb_lib.display()
        ),
        || {
            let mut c = bash("sqlite-battery.sh");
            c.arg(&deb_shell)
                .arg(&scratch)
                .env("LD_LIBRARY_PATH", &deb_lib_dir);
            c
        },
    );

    // Debian's shell and library, both rewritten
    let data_deb = fresh_data(&dir, "debian.lopi");
    let b = run(mode.record(
        bash("sqlite-battery.sh")
            .arg(&rw_shell)
            .arg(&scratch)
            .env("LD_LIBRARY_PATH", &rw_deb_dir),
        &data_deb,
    ));
    assert_same(
        tag,
        "sqlite-battery.sh, rewritten Debian sqlite3 + libsqlite3.so.0",
        &dir,
        &base,
        &b,
    );

    // Debian's shell (original) over the rewritten source-built library
    let data_src = fresh_data(&dir, "srclib.lopi");
    let c = run(mode.record(
        bash("sqlite-battery.sh")
            .arg(&deb_shell)
            .arg(&scratch)
            .env("LD_LIBRARY_PATH", &rw_src_dir),
        &data_src,
    ));
    assert_same(
        tag,
        "sqlite-battery.sh, Debian sqlite3 + rewritten source-built libsqlite3.so.0",
        &dir,
        &base,
        &c,
    );

    let rd = Report::load(tag, &data_deb, mode);
    rd.expect(tag, "sqlite3_prepare_v2", Some("libsqlite3"));
    rd.expect(tag, "sqlite3_step", Some("libsqlite3"));
    let (n, calls) = rd.module_totals(rw_shell.to_str().unwrap());
    println!("[{tag}]   stripped shell: {n} functions called, {calls} calls");
    assert!(
        n > 10 && calls > 0,
        "[{tag}] the rewritten stripped shell recorded too little ({n} functions)"
    );
    let (n, calls) = rd.module_totals("libsqlite3");
    println!("[{tag}]   stripped libsqlite3.so.0: {n} functions called, {calls} calls");

    let rs = Report::load(tag, &data_src, mode);
    rs.expect(tag, "sqlite3_prepare_v2", Some("libsqlite3"));
    rs.expect(tag, "sqlite3VdbeExec", Some("libsqlite3"));
    let (n, calls) = rs.module_totals("libsqlite3");
    println!("[{tag}]   source-built libsqlite3.so.0: {n} functions called, {calls} calls");

    rs.print_top(
        tag,
        "source-built libsqlite3.so.0 (symbols)",
        Some("libsqlite3"),
    );
    rd.print_top(tag, "Debian's stripped libsqlite3.so.0", Some("libsqlite3"));
    rd.print_top(
        tag,
        "Debian's stripped sqlite3 shell",
        Some(rw_shell.to_str().unwrap()),
    );
    println!("[{tag}] total {}", secs(t.elapsed()));
}

#[test]
fn real_sqlite3_debian_and_libraries() {
    sqlite3_debian_and_libraries(Mode::Timing);
}

#[test]
fn real_sqlite3_debian_and_libraries_entry() {
    sqlite3_debian_and_libraries(Mode::Entry);
}

#[test]
fn real_sqlite3_debian_and_libraries_trace() {
    sqlite3_debian_and_libraries(Mode::Trace);
}
