//! End-to-end tests of names for stripped programs, on `fixtures/names/cold_parts.c`:
//! - symbols from a separate debug file (`objcopy --only-keep-debug`), found by build-id under
//!   the debug directory, or by `.gnu_debuglink` next to the file, in its `.debug/`, or under
//!   the debug directory; a debug file that does not match (build-id, CRC) is ignored. The
//!   stripped file then shows the unstripped file's names, counts and timing.
//! - `.cold` parts of functions in a stripped file are parts of their functions, not `sub_`
//!   entries, with the unstripped build's functions, counts and timing.
//!
//! `LOPI_DEBUG_DIR` always points into the test's own directory: nothing is read from or
//! written to /usr/lib/debug.

mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURE: &str = "names/cold_parts.c";

fn must(cmd: &mut Command) -> Output {
    let line = render_cmd(cmd);
    let out = run(cmd, default_timeout()).unwrap_or_else(|e| panic!("cannot run `{line}`: {e}"));
    assert!(out.status.success(), "`{line}` failed ({}):\n{}{}", out.describe_status(), out.stdout_str(), out.stderr_str());
    out
}

fn lopi(debug_dir: &Path) -> Command {
    let mut cmd = Command::new(lopi_bin());
    cmd.env("LOPI_DEBUG_DIR", debug_dir);
    cmd
}

fn build(dir: &Path, name: &str, source: &Path, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    compile(Command::new("cc").args(flags).arg("-o").arg(&out).arg(source)).unwrap();
    out
}

/// `prog.debug` (only the debug sections) and `prog.stripped`, next to `prog`.
fn split(prog: &Path) -> (PathBuf, PathBuf) {
    let debug = prog.with_extension("debug");
    let stripped = prog.with_extension("stripped");
    must(Command::new("objcopy").arg("--only-keep-debug").arg(prog).arg(&debug));
    must(Command::new("strip").arg("-o").arg(&stripped).arg(prog));
    (debug, stripped)
}

/// Copies `stripped` to `to` with a `.gnu_debuglink` naming `debug` (its CRC included).
fn add_link(stripped: &Path, debug: &Path, to: &Path) {
    must(Command::new("objcopy").arg(format!("--add-gnu-debuglink={}", debug.display())).arg(stripped).arg(to));
}

fn build_id(prog: &Path) -> String {
    let out = must(Command::new("readelf").arg("-n").arg(prog)).stdout_str();
    out.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).map(str::to_string).expect("a build-id note")
}

fn info(prog: &Path, debug_dir: &Path, timing: bool) -> Json {
    let mut cmd = lopi(debug_dir);
    cmd.arg("info").arg(prog).args(["--format", "json"]);
    if timing {
        cmd.args(["--probe", "entry,exit"]);
    }
    serde_json::from_str(&must(&mut cmd).stdout_str()).expect("info JSON")
}

/// address -> (name, timing) of every function `lopi info` lists.
fn functions(info: &Json) -> BTreeMap<u64, (String, String)> {
    let text = |f: &Json, k: &str| f[k].as_str().unwrap_or("").to_string();
    info["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| (u64::from_str_radix(text(f, "addr").trim_start_matches("0x"), 16).unwrap(), (text(f, "name"), text(f, "timing"))))
        .collect()
}

fn names(info: &Json) -> BTreeMap<u64, String> {
    functions(info).into_iter().map(|(a, (n, _))| (a, n)).collect()
}

/// Rewrites `prog` with exit probes (or runs it under `lopi run`), runs it, and returns its
/// stdout and the report.
fn profile(prog: &Path, debug_dir: &Path, live: bool) -> (String, Json) {
    let data = prog.with_extension("data.lopi");
    let _ = std::fs::remove_file(&data);
    let out = if live {
        must(lopi(debug_dir).args([OsStr::new("run"), OsStr::new("-q"), OsStr::new("--probe"), OsStr::new("entry,exit"), OsStr::new("--")]).arg(prog).env("LOPI_OUTPUT", &data))
    } else {
        let rewritten = prog.with_extension("lopi");
        must(lopi(debug_dir).arg("rewrite").arg(prog).arg("-o").arg(&rewritten).args(["--probe", "entry,exit"]));
        must(Command::new(&rewritten).env("LOPI_OUTPUT", &data))
    };
    let report = must(lopi(debug_dir).arg("report").arg(&data).args(["--format", "json"])).stdout_str();
    (out.stdout_str(), serde_json::from_str(&report).expect("report JSON"))
}

/// address -> (calls, timed) of every function the report lists.
fn calls(report: &Json) -> BTreeMap<String, (u64, bool)> {
    report["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| (f["addr"].as_str().unwrap().to_string(), (f["calls"].as_u64().unwrap(), f["timed"].as_bool().unwrap_or(false))))
        .collect()
}

fn unmatched_exits(report: &Json) -> u64 {
    report["timing"]["threads"].as_array().expect("timed threads").iter().map(|t| t["unmatched_exits"].as_u64().unwrap()).sum()
}

/// Names and calls per name, as a user reads them.
fn named_calls(report: &Json) -> BTreeMap<String, u64> {
    report["functions"].as_array().unwrap().iter().map(|f| (f["name"].as_str().unwrap().to_string(), f["calls"].as_u64().unwrap())).collect()
}

#[test]
fn separate_debug_files_name_stripped_functions() {
    let source = fixtures_dir().join(FIXTURE);
    for (label, flags) in [("O2-pie", &["-g", "-O2", "-fPIE", "-pie"][..]), ("O2-nopie", &["-g", "-O2", "-fno-pie", "-no-pie"])] {
        let dir = fresh_dir(&format!("names-debug-{label}"));
        let nowhere = dir.join("no-debug-dir");
        let prog = build(&dir, "prog", &source, flags);
        let want = names(&info(&prog, &nowhere, false));
        let (debug, stripped) = split(&prog);
        let alone = info(&stripped, &nowhere, false);
        assert!(alone["debug_file"].is_null() && !names(&alone).values().any(|n| n == "checked_double"), "{label}: stripped file named without a debug file");

        let check = |what: &str, file: &Path, debug_dir: &Path, found: Option<&Path>| {
            let got = info(file, debug_dir, false);
            let expect_path = found.map(|p| p.display().to_string());
            assert_eq!(got["debug_file"].as_str().map(str::to_string), expect_path, "{label} {what}: debug_file");
            if found.is_some() {
                assert_eq!(names(&got), want, "{label} {what}: names differ from the unstripped file's");
            } else {
                assert_eq!(names(&got), names(&alone), "{label} {what}: a mismatching debug file was used");
            }
        };

        // By build-id, under the debug directory.
        let id = build_id(&prog);
        let global = dir.join("debug-dir");
        let by_id = global.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]));
        std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
        std::fs::copy(&debug, &by_id).unwrap();
        check("build-id", &stripped, &global, Some(&by_id));

        // By .gnu_debuglink: next to the file, in its .debug/, under the debug directory.
        let linked = |sub: &str| {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).unwrap();
            add_link(&stripped, &debug, &d.join("prog"));
            d
        };
        let next_to = linked("next-to");
        std::fs::copy(&debug, next_to.join("prog.debug")).unwrap();
        check("debuglink next to it", &next_to.join("prog"), &nowhere, Some(&next_to.join("prog.debug")));
        let dot_debug = linked("dot-debug");
        std::fs::create_dir_all(dot_debug.join(".debug")).unwrap();
        std::fs::copy(&debug, dot_debug.join(".debug/prog.debug")).unwrap();
        check("debuglink in .debug/", &dot_debug.join("prog"), &nowhere, Some(&dot_debug.join(".debug/prog.debug")));
        let under = linked("under-debug-dir");
        let global2 = dir.join("debug-dir-2");
        let mirrored = global2.join(under.canonicalize().unwrap().strip_prefix("/").unwrap()).join("prog.debug");
        std::fs::create_dir_all(mirrored.parent().unwrap()).unwrap();
        std::fs::copy(&debug, &mirrored).unwrap();
        check("debuglink under the debug directory", &under.join("prog"), &global2, Some(&mirrored));

        // Another program's debug file at this one's build-id path, or garbage there: ignored.
        let other_src = dir.join("other.c");
        std::fs::write(&other_src, "int other(int x) { return x + 1; }\nint main(void) { return other(0) - 1; }\n").unwrap();
        let other = build(&dir, "other", &other_src, flags);
        let (other_debug, _) = split(&other);
        std::fs::copy(&other_debug, &by_id).unwrap();
        check("another program's debug file at the build-id path", &stripped, &global, None);
        std::fs::write(&by_id, b"not an ELF file").unwrap();
        check("garbage at the build-id path", &stripped, &global, None);
        std::fs::copy(&debug, &by_id).unwrap();

        // Without build-ids only the link's CRC tells: the right file is used, another is not.
        let no_id: Vec<&str> = flags.iter().copied().chain(["-Wl,--build-id=none"]).collect();
        let plain = build(&dir, "plain", &source, &no_id);
        let plain_want = names(&info(&plain, &nowhere, false));
        let (plain_debug, plain_stripped) = split(&plain);
        let crc = dir.join("crc");
        std::fs::create_dir_all(&crc).unwrap();
        add_link(&plain_stripped, &plain_debug, &crc.join("plain"));
        std::fs::copy(&plain_debug, crc.join("plain.debug")).unwrap();
        let got = info(&crc.join("plain"), &nowhere, false);
        assert_eq!(names(&got), plain_want, "{label}: CRC-matched debug file not used");
        let other_plain = build(&dir, "other_plain", &other_src, &no_id);
        let (other_plain_debug, _) = split(&other_plain);
        std::fs::copy(&other_plain_debug, crc.join("plain.debug")).unwrap();
        let got = info(&crc.join("plain"), &nowhere, false);
        assert!(got["debug_file"].is_null(), "{label}: a debug file with the wrong CRC was used");

        // Rewritten and live profiles of the stripped file name and count as the unstripped one's.
        let (out, unstripped) = profile(&prog, &nowhere, false);
        let want_calls = named_calls(&unstripped);
        for fx in Fixture::load(FIXTURE).expect {
            assert_eq!(want_calls.get(&fx.0), Some(&fx.1), "{label}: unstripped {}", fx.0);
        }
        for live in [false, true] {
            let (got_out, report) = profile(&stripped, &global, live);
            assert_eq!(got_out, out, "{label} live={live}: output");
            assert_eq!(named_calls(&report), want_calls, "{label} live={live}: calls by name");
        }
        cleanup(&dir);
    }
}

#[test]
fn cold_parts_of_stripped_functions_are_not_functions() {
    let source = fixtures_dir().join(FIXTURE);
    let configs = [
        ("O2-pie", &["-O2", "-fPIE", "-pie"][..]),
        ("O2-nopie", &["-O2", "-fno-pie", "-no-pie"]),
        ("O3-pie-cet", &["-O3", "-fPIE", "-pie", "-fcf-protection=full"]),
    ];
    let fixture = Fixture::load(FIXTURE);
    for (label, flags) in configs {
        let dir = fresh_dir(&format!("names-cold-{label}"));
        let nowhere = dir.join("no-debug-dir");
        let prog = build(&dir, "prog", &source, flags);
        let (stripped, symbols, cold) = strip_and_list_cold(&dir, &prog);
        assert!(cold.len() >= 2, "{label}: the fixture should have .cold parts:\n{symbols}");

        let full = functions(&info(&prog, &nowhere, true));
        let bare = functions(&info(&stripped, &nowhere, true));
        for addr in &cold {
            assert!(!bare.contains_key(addr), "{label}: .cold part at {addr:#x} listed as {:?}", bare[addr]);
        }
        // The fixture's own functions: found, and timed (or not) alike.
        let mut addrs = BTreeMap::new();
        for (name, _) in &fixture.expect {
            let (&addr, (_, timing)) = full.iter().find(|(_, (n, _))| n == name).unwrap_or_else(|| panic!("{label}: {name} in the unstripped file"));
            let (_, bare_timing) = bare.get(&addr).unwrap_or_else(|| panic!("{label}: {name} ({addr:#x}) not a function of the stripped file"));
            assert_eq!(bare_timing, timing, "{label}: timing of {name}");
            addrs.insert(format!("{addr:#x}"), name.clone());
        }

        let original = must(&mut Command::new(&prog)).stdout_str();
        let (out_full, report_full) = profile(&prog, &nowhere, false);
        let (out_bare, report_bare) = profile(&stripped, &nowhere, false);
        assert_eq!(out_full, original, "{label}: rewritten output");
        assert_eq!(out_bare, original, "{label}: rewritten stripped output");
        let (calls_full, calls_bare) = (calls(&report_full), calls(&report_bare));
        for (addr, name) in &addrs {
            let want = fixture.expect.iter().find(|(n, _)| n == name).unwrap().1;
            assert_eq!(calls_full.get(addr).map(|c| c.0), Some(want), "{label}: calls of {name}, unstripped");
            assert_eq!(calls_bare.get(addr), calls_full.get(addr), "{label}: calls and timing of {name}, stripped");
        }
        assert_eq!(unmatched_exits(&report_full), 0, "{label}: unmatched exits, unstripped");
        assert_eq!(unmatched_exits(&report_bare), 0, "{label}: unmatched exits, stripped");
        cleanup(&dir);
    }
}

/// Debian's libc6-dbg installs libc's debug file under /usr/lib/debug/.build-id: its local
/// functions get their names (the package is installed when it is not).
#[test]
fn libc_is_named_from_its_debug_package() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let id = match libc.exists().then(|| build_id(libc)) {
        Some(id) => id,
        None => return eprintln!("note: skipped: no {}", libc.display()),
    };
    let debug = PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));
    require_package("libc6-dbg");
    assert!(debug.exists(), "libc6-dbg is installed but {} is not there: it does not match this libc (apt-get install libc6 libc6-dbg: the same version)", debug.display());
    let got = info(libc, Path::new("/usr/lib/debug"), false);
    assert_eq!(got["debug_file"].as_str(), Some(debug.to_str().unwrap()));
    let names = names(&got);
    for local in ["_int_malloc", "_int_free", "sysmalloc", "__libc_start_call_main"] {
        assert!(names.values().any(|n| n == local), "{local} not named");
    }
    let subs = names.values().filter(|n| n.starts_with("sub_")).count();
    assert!(subs * 100 < names.len(), "{subs} of {} functions unnamed", names.len());
    let text = must(lopi(Path::new("/usr/lib/debug")).arg("info").arg(libc)).stdout_str();
    assert_eq!(text.lines().next(), Some(format!("symbols: {}", debug.display()).as_str()));
}

/// C++ with exceptions: the linker puts `.cold` parts (here a throw) first in `.text`, right
/// after the PLT, with no code of the file before them.
#[test]
fn cold_parts_at_the_start_of_text_are_not_functions() {
    let fixture = Fixture::load("exceptions.cpp");
    for opt in ["-O2", "-O3"] {
        let dir = fresh_dir(&format!("names-cold-cxx{opt}"));
        let nowhere = dir.join("no-debug-dir");
        let prog = dir.join("prog");
        compile(Command::new("c++").arg(opt).arg("-o").arg(&prog).arg(&fixture.path)).unwrap();
        let (stripped, _, cold) = strip_and_list_cold(&dir, &prog);
        assert!(!cold.is_empty(), "{opt}: the fixture should have .cold parts");
        let full = names(&info(&prog, &nowhere, false));
        let bare = names(&info(&stripped, &nowhere, false));
        for (addr, name) in &bare {
            assert!(full.contains_key(addr), "{opt}: {name} ({addr:#x}) is no function of the unstripped file");
        }
        for (name, _) in &fixture.expect {
            let addr = full.iter().find(|(_, n)| *n == name).map(|(a, _)| a).unwrap_or_else(|| panic!("{opt}: {name}"));
            assert!(bare.contains_key(addr), "{opt}: {name} ({addr:#x}) not found in the stripped file");
        }
        cleanup(&dir);
    }
}

/// `prog` stripped into `DIR/prog.stripped`; `prog`'s symbol table (`readelf -sW`) and the
/// addresses of its `.cold` parts.
fn strip_and_list_cold(dir: &Path, prog: &Path) -> (PathBuf, String, Vec<u64>) {
    let stripped = dir.join("prog.stripped");
    must(Command::new("strip").arg("-o").arg(&stripped).arg(prog));
    let symbols = must(Command::new("readelf").arg("-sW").arg(prog)).stdout_str();
    let cold = symbols
        .lines()
        .filter(|l| l.contains(".cold"))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .collect();
    (stripped, symbols, cold)
}

/// A lock in a library the program `dlopen`s after lopi's start is named by its symbol: the
/// process's map recorded at its `exit_group` has the library.
#[test]
fn locks_in_dlopened_libraries_are_named() {
    let dir = fresh_dir("names_dlopen");
    let lib_src = dir.join("plugin.c");
    std::fs::write(
        &lib_src,
        "#include <pthread.h>\npthread_mutex_t plugin_lock = PTHREAD_MUTEX_INITIALIZER;\n\
         int plugin_work(int n) { int s = 0; for (int i = 0; i < n; i++) { pthread_mutex_lock(&plugin_lock); s += i; pthread_mutex_unlock(&plugin_lock); } return s; }\n",
    )
    .unwrap();
    let main_src = dir.join("main.c");
    std::fs::write(
        &main_src,
        "#include <dlfcn.h>\n#include <stdio.h>\nint main(int argc, char **argv) { void *h = dlopen(argv[1], RTLD_NOW); if (!h) return 1;\n\
         int (*f)(int) = (int (*)(int))dlsym(h, \"plugin_work\"); printf(\"%d\\n\", f(100)); return 0; }\n",
    )
    .unwrap();
    let lib = build(&dir, "libplugin.so", &lib_src, &["-O2", "-shared", "-fPIC"]);
    let prog = build(&dir, "dlmain", &main_src, &["-O2"]);
    let data = dir.join("d.lopi");
    let out = must(lopi(&dir).args(["run", "-q", "--probe", "locks", "--"]).arg(&prog).arg(&lib).env("LOPI_OUTPUT", &data));
    assert_eq!(out.stdout_str(), "4950\n");
    let report: Json = serde_json::from_str(&must(lopi(&dir).args(["report", "--locks", "--format", "json"]).arg(&data)).stdout_str()).unwrap();
    let lock = report["locks"].as_array().unwrap().iter().find(|l| l["acquisitions"] == 100).unwrap_or_else(|| panic!("no lock taken 100 times: {report}"));
    assert_eq!(lock["name"], "plugin_lock", "{lock}");
    assert_eq!(lock["sites"][0]["function"], "plugin_work", "{lock}");
    cleanup(&dir);
}

/// A stripped library whose internal function `locked_add` (no symbol) takes the library's own
/// static lock, from two threads: the lock and its call site are named by file and address
/// (`libsx.so+0x...`, the site within `locked_add`) in the lock report and the mutex profile
/// (a frame with that name and the library's mapping), never by a run-time address; with the
/// library's debug file, by `sx_lock` and `locked_add`.
#[test]
fn stripped_library_lock_sites_are_named_by_file_and_address() {
    let dir = fresh_dir("names_stripped_lib");
    let lib_src = dir.join("sx.c");
    std::fs::write(
        &lib_src,
        "#include <pthread.h>\nstatic pthread_mutex_t sx_lock = PTHREAD_MUTEX_INITIALIZER;\nstatic long total;\n\
         __attribute__((noinline)) static void locked_add(long x) { pthread_mutex_lock(&sx_lock); total += x; pthread_mutex_unlock(&sx_lock); }\n\
         long sx_work(long n) { for (long i = 0; i < n; i++) locked_add(i); return total; }\n",
    )
    .unwrap();
    let main_src = dir.join("main.c");
    std::fs::write(
        &main_src,
        "#include <pthread.h>\n#include <stdio.h>\nlong sx_work(long n);\nstatic void *worker(void *a) { sx_work(1000); return a; }\n\
         int main(void) { pthread_t t[2]; for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, 0); for (int i = 0; i < 2; i++) pthread_join(t[i], 0); printf(\"%ld\\n\", sx_work(0)); return 0; }\n",
    )
    .unwrap();
    let full = build(&dir, "libsx.full", &lib_src, &["-O2", "-g", "-shared", "-fPIC"]);
    let (debug, stripped) = split(&full);
    std::fs::rename(&stripped, dir.join("libsx.so")).unwrap();
    let prog = dir.join("sxmain");
    compile(Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&prog).arg(&main_src).arg("-L").arg(&dir).args(["-lsx", &format!("-Wl,-rpath,{}", dir.display())])).unwrap();
    // Where locked_add is in the file: the site must be inside it.
    let symbols = must(Command::new("readelf").arg("-sW").arg(&full)).stdout_str();
    let (start, size) = symbols
        .lines()
        .find(|l| l.ends_with(" locked_add"))
        .and_then(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some((u64::from_str_radix(w[1], 16).ok()?, w[2].parse::<u64>().ok()?))
        })
        .expect("locked_add in the unstripped library");
    let nowhere = dir.join("no-debug-dir");
    let data = dir.join("d.lopi");
    let out = must(lopi(&nowhere).args(["run", "-q", "--probe", "locks", "--"]).arg(&prog).env("LOPI_OUTPUT", &data));
    assert_eq!(out.stdout_str(), "999000\n");
    let report = |debug_dir: &Path| -> Json { serde_json::from_str(&must(lopi(debug_dir).args(["report", "--locks", "--format", "json"]).arg(&data)).stdout_str()).unwrap() };
    let named = report(&nowhere);
    let lock = named["locks"].as_array().unwrap().iter().find(|l| l["acquisitions"] == 2000).unwrap_or_else(|| panic!("no lock taken 2000 times: {named}"));
    assert!(lock["name"].as_str().unwrap().starts_with("libsx.so+0x"), "{lock}");
    let site = lock["sites"][0]["function"].as_str().unwrap().to_string();
    let offset = site.strip_prefix("libsx.so+0x").and_then(|o| u64::from_str_radix(o, 16).ok()).unwrap_or_else(|| panic!("site {site:?}"));
    assert!((start..start + size).contains(&(offset - 1)), "site {site} outside locked_add ({start:#x}, {size} bytes)");
    let text = must(lopi(&nowhere).args(["report", "--locks"]).arg(&data)).stdout_str();
    assert!(text.contains(&format!("from {site}")) && !text.contains("from 0x"), "{text}");
    if Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        let pb = dir.join("mutex.pb");
        must(lopi(&nowhere).args(["export", "--format", "pprof", "--profile", "mutex", "-o"]).arg(&pb).arg(&data));
        let raw = must(Command::new("go").args(["tool", "pprof", "-raw"]).arg(&pb)).stdout_str();
        // `    55: 0x1138 M=4 libsx.so+0x1138 /tmp/.../libsx.so:0:0 s=0`, and mapping 4 is the library.
        let location = raw.lines().find(|l| l.contains(&format!(" {site} "))).unwrap_or_else(|| panic!("no frame {site}:\n{raw}"));
        let mapping = location.split_whitespace().nth(2).and_then(|m| m.strip_prefix("M=")).unwrap_or_default();
        assert!(location.contains(&format!("{:#x}", offset)) && raw.lines().any(|l| l.starts_with(&format!("{mapping}: ")) && l.contains("/libsx.so")), "{raw}");
    }
    let id = build_id(&full);
    let debug_dir = dir.join("debug");
    std::fs::create_dir_all(debug_dir.join(".build-id").join(&id[..2])).unwrap();
    std::fs::copy(&debug, debug_dir.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]))).unwrap();
    let named = report(&debug_dir);
    let lock = named["locks"].as_array().unwrap().iter().find(|l| l["acquisitions"] == 2000).unwrap();
    assert!(lock["name"] == "sx_lock" && lock["sites"][0]["function"] == "locked_add", "{lock}");
    cleanup(&dir);
}

/// Threads that rename themselves after they started, by `pthread_setname_np` and by
/// `prctl(PR_SET_NAME)` (which `--probe locks` does not see), and wait until the process ends:
/// `--threads` shows the names they were given, under `lopi run` and at a detach.
#[test]
fn threads_renamed_after_their_start_show_their_new_names() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = fresh_dir("names_setname");
    let src = dir.join("setname.c");
    std::fs::write(
        &src,
        "#define _GNU_SOURCE\n#include <pthread.h>\n#include <signal.h>\n#include <stdio.h>\n#include <string.h>\n#include <sys/prctl.h>\n#include <unistd.h>\n\
         static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;\n\
         static void *a_main(void *x) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); pthread_setname_np(pthread_self(), \"worker-a\"); pause(); return x; }\n\
         static void *b_main(void *x) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); prctl(PR_SET_NAME, \"worker-b\"); pause(); return x; }\n\
         int main(int argc, char **argv) { sigset_t s; int sig; sigemptyset(&s); sigaddset(&s, SIGUSR1); sigprocmask(SIG_BLOCK, &s, 0);\n\
         if (argc > 1) { printf(\"ready\\n\"); fflush(stdout); sigwait(&s, &sig); }\n\
         pthread_t t; pthread_create(&t, 0, a_main, 0); pthread_create(&t, 0, b_main, 0); usleep(300000); printf(\"done\\n\"); return 0; }\n",
    )
    .unwrap();
    let prog = build(&dir, "setname", &src, &["-O2", "-pthread"]);
    let check = |data: &Path| {
        let threads: Json = serde_json::from_str(&must(lopi(&dir).args(["report", "--threads", "--format", "json"]).arg(data)).stdout_str()).unwrap();
        for (name, routine) in [("worker-a", "a_main"), ("worker-b", "b_main")] {
            let found = threads["threads"].as_array().unwrap().iter().any(|t| t["name"] == name && t["start_routine"] == routine);
            assert!(found, "no thread {name} started by {routine}: {threads}");
        }
    };
    let data = dir.join("run.lopi");
    let out = must(lopi(&dir).args(["run", "-q", "--probe", "locks", "--"]).arg(&prog).env("LOPI_OUTPUT", &data));
    assert_eq!(out.stdout_str(), "done\n");
    check(&data);
    // Attached before the threads start, detached while they wait.
    let mut child = Command::new(&prog).arg("wait").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    let data = dir.join("attach.lopi");
    let pid = child.id().to_string();
    let attach = std::thread::spawn({
        let (data, dir) = (data.clone(), dir.clone());
        move || must(lopi(&dir).args(["attach", &pid, "--probe", "locks", "--duration", "200ms"]).env("LOPI_OUTPUT", &data))
    });
    while !data.exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    must(Command::new("kill").args(["-USR1", &child.id().to_string()]));
    attach.join().unwrap();
    assert!(child.wait().unwrap().success());
    check(&data);
    cleanup(&dir);
}
