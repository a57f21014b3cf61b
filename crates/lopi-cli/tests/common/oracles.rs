//! Oracles independent of lopi: the code of a live process against its file (/proc), and
//! the execution counts of instructions from callgrind.

use super::require;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// Every executable mapping of `prog` in process `pid` equals the file's bytes.
pub fn code_matches_file(pid: i32, prog: &Path) -> Result<(), String> {
    match code_differences(pid, prog, prog)?.first() {
        Some(at) => Err(format!("code differs from the file at {at:#x}")),
        None => Ok(()),
    }
}

/// The run-time addresses where the executable mappings of `mapped` in process `pid` differ
/// from the bytes of `original` at the same file offsets (a rewritten file keeps its input's
/// offsets).
pub fn code_differences(pid: i32, mapped: &Path, original: &Path) -> Result<Vec<u64>, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
    let file = std::fs::read(original).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| e.to_string())?;
    let path = mapped.canonicalize().unwrap().display().to_string();
    let mut checked = 0;
    let mut differences = Vec::new();
    for line in maps.lines().filter(|l| l.ends_with(&path)) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !f[1].contains('x') {
            continue;
        }
        let (start, end) = f[0].split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
        let offset = u64::from_str_radix(f[2], 16).unwrap() as usize;
        let len = ((end - start) as usize).min(file.len().saturating_sub(offset));
        let mut now = vec![0; len];
        std::os::unix::fs::FileExt::read_exact_at(&mem, &mut now, start).map_err(|e| e.to_string())?;
        differences.extend((0..len).filter(|&i| now[i] != file[offset + i]).map(|i| start + i as u64));
        checked += len;
    }
    if checked == 0 {
        return Err(format!("no executable mapping of {path} in process {pid}"));
    }
    Ok(differences)
}

/// Executions of each instruction address of the program's own code, from callgrind
/// (`--dump-instr=yes`: an instruction's Ir is its executions).
pub fn callgrind_counts(prog: &Path, args: &[&str], dir: &Path) -> HashMap<u64, u64> {
    let out = dir.join("callgrind.out");
    let status = Command::new(require("valgrind", "valgrind"))
        .args(["-q", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no", "--compress-strings=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(prog)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("valgrind (Debian's valgrind package) is the oracle of block counts");
    assert!(status.success());
    let mut counts = HashMap::new();
    let mut after_call = false;
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        if line.starts_with("calls=") {
            after_call = true;
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let (Some(addr), Some(ir)) = (fields.first().and_then(|a| a.strip_prefix("0x")), fields.last()) {
            // The line after `calls=` is the call's inclusive cost, not the instruction's.
            if !after_call && fields.len() >= 2 {
                *counts.entry(u64::from_str_radix(addr, 16).unwrap()).or_default() += ir.parse::<u64>().unwrap_or(0);
            }
        }
        after_call = false;
    }
    counts
}

/// Runs `cmd`, a program that prints `RESULT PID ADDR` once its work is done and then waits for
/// its input to end, and returns the offsets from ADDR below `size` at which the code of
/// `mapped` in it differs from `original` at that moment (probes that took themselves out
/// leave none). The program must then exit successfully; `what` names the run in failures.
pub fn patched_after_work(cmd: &mut Command, mapped: &Path, original: &Path, size: u64, what: &str) -> Vec<u64> {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{what}: {line:?}");
    let pid: i32 = fields[1].parse().unwrap();
    let at = u64::from_str_radix(fields[2].trim_start_matches("0x"), 16).unwrap();
    let differences = code_differences(pid, mapped, original);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "{what}");
    differences.unwrap().into_iter().filter(|&d| d >= at && d < at + size).map(|d| d - at).collect()
}
