//! Bad inputs: `lopi rewrite` fails cleanly on what it cannot rewrite, and leaves its input
//! and an existing output alone.

use super::case::Case;
use super::{build_and_rewrite, O2_PIE};
use crate::common::*;
use std::path::Path;
use std::process::Command;

/// `lopi rewrite INPUT -o OUT` must fail cleanly: non-zero exit (not a
/// signal), exactly one line on stderr, no panic, INPUT unchanged, and a
/// pre-existing OUT left untouched.
fn expect_clean_failure(
    case: &mut Case,
    input: &Path,
    want_code: Option<i32>,
) -> Result<(), String> {
    let before = std::fs::read(input).ok();
    let out_path = case.dir.join(format!(
        "{}.out",
        input.file_name().unwrap().to_string_lossy()
    ));
    let sentinel = b"pre-existing output file: must be left untouched\n";
    std::fs::write(&out_path, sentinel).unwrap();
    let mut cmd = Command::new(lopi_bin());
    cmd.arg("rewrite").arg(input).arg("-o").arg(&out_path);
    let out = case.run(&mut cmd, "lopi rewrite")?;
    let stderr = out.stderr_str();
    let mut problems = Vec::new();
    match out.status.code() {
        None => problems.push(format!("lopi rewrite was {}", out.describe_status())),
        Some(0) => problems.push("lopi rewrite exited 0 on a bad input".to_string()),
        Some(c) => {
            if let Some(w) = want_code {
                if c != w {
                    problems.push(format!("exit code {c}, expected {w}"));
                }
            }
        }
    }
    if stderr.contains("panicked") {
        problems.push("stderr shows a panic".to_string());
    }
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    if lines.len() != 1 || lines[0].trim().is_empty() {
        problems.push(format!(
            "stderr must be exactly one non-empty line, got {} lines",
            lines.len()
        ));
    }
    if std::fs::read(input).ok() != before {
        problems.push("the input file was modified".to_string());
    }
    match std::fs::read(&out_path) {
        Ok(b) if b == sentinel => {}
        Ok(_) => problems.push("the pre-existing -o file was modified".to_string()),
        Err(e) => problems.push(format!("the pre-existing -o file is gone: {e}")),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(case.fail(format!("{}\nstderr:\n{stderr}", problems.join("\n"))))
    }
}

/// A real PIE fixture to derive broken inputs from.
fn sample_elf(case: &mut Case) -> Vec<u8> {
    let fx = Fixture::load("recursion.c");
    let exe = case.dir.join("sample");
    let mut cmd = Command::new(fx.compiler());
    cmd.args(O2_PIE.prog_flags())
        .arg(&fx.path)
        .arg("-o")
        .arg(&exe);
    case.compile(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
    std::fs::read(&exe).unwrap()
}

#[test]
fn rewrite_rejects_bad_inputs() {
    let mut case = Case::new("bad-inputs".into());
    let elf = sample_elf(&mut case);
    let mut inputs: Vec<(&str, Vec<u8>)> = vec![
        (
            "not_elf.txt",
            b"#!/bin/sh\necho this is not an ELF file\n".to_vec(),
        ),
        ("empty", Vec::new()),
        ("truncated_header", elf[..40].to_vec()),
        ("truncated_64", elf[..64].to_vec()),
        ("truncated_half", elf[..elf.len() / 2].to_vec()),
    ];
    let mut aarch64 = elf.clone();
    aarch64[18..20].copy_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
    inputs.push(("other_arch_aarch64", aarch64));
    let mut i386 = elf.clone();
    i386[18..20].copy_from_slice(&3u16.to_le_bytes()); // EM_386
    inputs.push(("other_arch_i386", i386));
    let mut class32 = elf.clone();
    class32[4] = 1; // ELFCLASS32 header bytes on a 64-bit body
    inputs.push(("elfclass32", class32));
    let mut big_endian = elf.clone();
    big_endian[5] = 2; // ELFDATA2MSB
    inputs.push(("big_endian", big_endian));
    let mut relocatable = elf.clone();
    relocatable[16..18].copy_from_slice(&1u16.to_le_bytes()); // ET_REL
    inputs.push(("et_rel", relocatable));

    let mut failures = Vec::new();
    for (name, bytes) in &inputs {
        let p = case.dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        if let Err(e) = expect_clean_failure(&mut case, &p, None) {
            failures.push(format!("input {name}: {e}"));
        }
    }
    let missing = case.dir.join("does_not_exist");
    if let Err(e) = expect_clean_failure(&mut case, &missing, None) {
        failures.push(format!("missing input: {e}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    cleanup(&case.dir);
}

#[test]
fn rewrite_refuses_static_executables() {
    let mut case = Case::new("static".into());
    let fx = Fixture::load("recursion.c");
    let exe = case.dir.join("static_prog");
    let mut cmd = Command::new(fx.compiler());
    cmd.args(["-O2", "-static"])
        .arg(&fx.path)
        .arg("-o")
        .arg(&exe);
    if let Err(e) = case.compile(&mut cmd) {
        // No static libc on this machine: nothing to test.
        eprintln!("skipping: cannot link a static executable here:\n{e}");
        return;
    }
    let r = expect_clean_failure(&mut case, &exe, Some(1));
    assert!(r.is_ok(), "{}", r.unwrap_err());
    cleanup(&case.dir);
}

/// The input is never modified, even when OUT is the same directory and
/// the rewrite succeeds (checked in every matrix case too); here: OUT
/// already exists and is overwritten with a valid ELF, and `lopi info`
/// reports coverage.
#[test]
fn rewrite_overwrites_existing_output_and_info_reports_coverage() {
    let (mut case, orig, rw) = build_and_rewrite("jumptable.c", O2_PIE, &[]);
    std::fs::write(&rw, b"stale").unwrap();
    case.rewrite(&orig, &rw, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let bytes = std::fs::read(&rw).unwrap();
    assert!(
        bytes.starts_with(b"\x7fELF"),
        "{}",
        case.fail("output is not an ELF file")
    );
    let info = case.info(&orig).unwrap_or_else(|e| panic!("{e}"));
    let cov = check_info_summary(&info).unwrap();
    assert!(
        cov > 0.0,
        "{}",
        case.fail(format!("coverage_percent is {cov}"))
    );
    for name in ["dispatch", "op_add", "classify"] {
        let st = info.functions.get(name).map(|(s, _)| s.as_str());
        assert_eq!(
            st,
            Some("probed"),
            "{}",
            case.fail(format!("lopi info status of {name}"))
        );
    }
    cleanup(&case.dir);
}
