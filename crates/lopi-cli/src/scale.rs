//! `lopi scale`: the program, uninstrumented, pinned to 1, 2, ... CPUs, several runs each: wall
//! time, speedup, efficiency and the Karp-Flatt serial fraction per CPU count, a Universal
//! Scalability Law fit from three counts on, and the chart.
//!
//! lopi pins itself to the first N CPUs it may use before each run, and the program inherits
//! that affinity (lopi is single-threaded here): no code runs between fork and exec. The CPU
//! counts are interleaved run by run, so that a slow spell of the machine spreads over all.
use crate::scaling::{self, Measured, PointStats, Usl};
use anyhow::{bail, Context, Result};
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use serde_json::json;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What `lopi scale` was asked.
pub struct Request {
    pub cpus: Vec<u32>,
    pub runs: u32,
    /// Also record up to three runs on the most CPUs with `--probe syscall,locks`, whose
    /// breakdowns give the serial fraction for Amdahl's bound.
    pub breakdown: bool,
    pub chart: Option<PathBuf>,
    pub json: bool,
    pub command: Vec<OsString>,
}

/// What the placeholder in the arguments becomes: the CPU count of the run.
const PLACEHOLDER: &str = "{cpus}";

pub fn run(req: Request) -> Result<()> {
    let allowed = allowed_cpus()?;
    let counts = cpu_counts(&req.cpus, allowed.len())?;
    if req.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let Some((prog, _)) = req.command.split_first() else { bail!("no program given") };
    if !req.json {
        eprintln!(
            "lopi scale: {} on {} CPU{} ({} this machine lets lopi use: {}), {} run{} each after a warm-up run",
            prog.to_string_lossy(),
            list(&counts),
            if counts.len() == 1 && counts[0] == 1 { "" } else { "s" },
            allowed.len(),
            ranges(&allowed),
            req.runs,
            if req.runs == 1 { "" } else { "s" },
        );
    }
    let mut measured: Vec<Measured> = counts.iter().map(|&cpus| Measured { cpus, wall_ns: Vec::new() }).collect();
    run_once(&req.command, counts[counts.len() - 1], &allowed, "the warm-up run")?;
    for round in 1..=req.runs {
        for m in &mut measured {
            let ns = run_once(&req.command, m.cpus, &allowed, &format!("run {round} of {}", req.runs))?;
            m.wall_ns.push(ns);
        }
    }
    let largest = counts[counts.len() - 1];
    // One recorded run of a short program is a noisy basis for a bound: the median of a few.
    let serial = if req.breakdown {
        let mut fractions = Vec::new();
        for _ in 0..req.runs.min(RECORDED_RUNS) {
            fractions.extend(serial_fraction(&req.command, largest, &allowed)?);
        }
        fractions.sort_by(f64::total_cmp);
        Some(fractions.get(fractions.len() / 2).copied())
    } else {
        None
    };
    restore_affinity(&allowed)?;
    let points = scaling::point_stats(&measured)?;
    let usl = scaling::fit_usl(&points.iter().map(|p| (f64::from(p.cpus), p.speedup)).collect::<Vec<_>>());
    if let Some(path) = &req.chart {
        let title = format!("{}: speedup by CPU count", file_name(prog));
        let svg = scaling::chart_svg(&points, serial.flatten(), usl.as_ref().ok(), &title)?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    if req.json {
        println!("{}", serde_json::to_string_pretty(&report_json(allowed.len(), req.runs, &points, &usl, serial.flatten()))?);
    } else {
        print!("{}", report_text(&points, &usl));
        match serial {
            Some(Some(s)) => {
                let bounds: Vec<String> = AMDAHL_CPUS.iter().map(|&n| format!("{n}: {:.2}", scaling::amdahl(s, f64::from(n)))).collect();
                println!("Amdahl bound (serial fraction {s:.3}, the median of {} runs recorded with --probe syscall,locks on {largest} CPUs): {}", req.runs.min(RECORDED_RUNS), bounds.join(", "));
            }
            Some(None) => println!("Amdahl bound: none: a run on one CPU tells no serial fraction"),
            None => {}
        }
        if let Some(path) = &req.chart {
            println!("chart: {}", path.display());
        }
    }
    Ok(())
}

/// The CPUs this process may run on, in order.
pub(crate) fn allowed_cpus() -> Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).context("reading lopi's CPU affinity")?;
    Ok((0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect())
}

/// The counts asked for (sorted, without repeats), or by default 1, 2, 4, ... and all allowed.
fn cpu_counts(asked: &[u32], allowed: usize) -> Result<Vec<u32>> {
    let max = u32::try_from(allowed).unwrap_or(u32::MAX);
    let mut counts: Vec<u32> = if asked.is_empty() {
        std::iter::successors(Some(1u32), |&n| n.checked_mul(2)).take_while(|&n| n < max).chain([max]).collect()
    } else {
        asked.to_vec()
    };
    counts.sort_unstable();
    counts.dedup();
    if counts.first() == Some(&0) {
        bail!("--cpus: a CPU count must be at least 1");
    }
    if let Some(&too_many) = counts.iter().find(|&&n| n > max) {
        bail!("--cpus {too_many}: lopi may use only {allowed} CPU{} here (its affinity, as `taskset -p` shows)", if allowed == 1 { "" } else { "s" });
    }
    Ok(counts)
}

const AMDAHL_CPUS: [u32; 6] = [2, 4, 8, 16, 32, 64];
/// Recorded runs for `--breakdown` (at most `--runs`).
const RECORDED_RUNS: u32 = 3;

/// The serial fraction a breakdown of one recorded run on `cpus` CPUs implies: from its
/// parallelism profile, else Karp-Flatt (None on one CPU).
fn serial_fraction(command: &[OsString], cpus: u32, allowed: &[usize]) -> Result<Option<f64>> {
    let run = recorded_run(command, cpus, allowed, None, false)?;
    let threads = lopi_trace::Threads::from_data(&run.data);
    Ok(lopi_trace::Breakdown::from_threads(&threads).serial(run.data.parallelism.as_ref()).map(|(s, _)| s))
}

/// A run recorded by lopi itself (`lopi run -q --probe syscall,locks`, with `LOPI_WHATIF` set
/// to `kernel` if any) into a temporary file, which is read and removed.
pub(crate) struct RecordedRun {
    /// The program's standard output, if kept (else discarded as it is written).
    pub stdout: Vec<u8>,
    pub data: lopi_trace::DataFile,
}

pub(crate) fn recorded_run(command: &[OsString], cpus: u32, allowed: &[usize], kernel: Option<&str>, keep_output: bool) -> Result<RecordedRun> {
    pin(&allowed[..cpus as usize])?;
    let path = std::env::temp_dir().join(format!("lopi-recorded-{}.lopi", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (prog, args) = command.split_first().context("no program given")?;
    let mut cmd = Command::new(std::env::current_exe().context("finding the lopi binary")?);
    cmd.args(["run", "-q", "--probe", "syscall,locks", "--"]).arg(prog).args(args.iter().map(|a| substitute(a, cpus)));
    cmd.env("LOPI_OUTPUT", &path).stdin(Stdio::null()).stderr(Stdio::piped());
    cmd.stdout(if keep_output { Stdio::piped() } else { Stdio::null() });
    match kernel {
        Some(k) => cmd.env("LOPI_WHATIF", k),
        None => cmd.env_remove("LOPI_WHATIF"),
    };
    let out = cmd.output().context("running lopi run")?;
    let data = crate::files::read_data(&path);
    let _ = std::fs::remove_file(&path);
    if !out.status.success() {
        // lopi run's own error line, without its prefix: this one says it.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr.trim().trim_start_matches("lopi: error: ");
        bail!("{} under lopi run failed ({}): {why}", prog.to_string_lossy(), describe(out.status));
    }
    Ok(RecordedRun { stdout: out.stdout, data: data? })
}

/// One run on the first `cpus` allowed CPUs; its wall time in ns. A failed run stops all.
fn run_once(command: &[OsString], cpus: u32, allowed: &[usize], which: &str) -> Result<u64> {
    pin(&allowed[..cpus as usize])?;
    let (prog, args) = command.split_first().expect("checked by the caller");
    let args: Vec<OsString> = args.iter().map(|a| substitute(a, cpus)).collect();
    let start = Instant::now();
    let out = Command::new(prog)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| anyhow::anyhow!("cannot start {}: {}", prog.to_string_lossy(), lopi_live::start_failure(&prog.to_string_lossy(), &e)))?;
    let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "{} failed on {cpus} CPU{} ({which}): {}{}{}",
            prog.to_string_lossy(),
            if cpus == 1 { "" } else { "s" },
            describe(out.status),
            if tail.is_empty() { "" } else { "; its last words:\n  " },
            tail.join("\n  ")
        );
    }
    Ok(ns)
}

/// "exit status 3", "killed by SIGSEGV".
pub(crate) fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => match nix::sys::signal::Signal::try_from(sig) {
            Ok(s) => format!("killed by {}", s.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        _ => status.to_string(),
    }
}

pub(crate) fn pin(cpus: &[usize]) -> Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).context("a CPU number beyond what the kernel's affinity mask holds")?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).context("setting lopi's CPU affinity")
}

pub(crate) fn restore_affinity(allowed: &[usize]) -> Result<()> {
    pin(allowed)
}

/// `{cpus}` anywhere in an argument becomes the CPU count (`-T{cpus}` -> `-T2`).
pub(crate) fn substitute(arg: &OsString, cpus: u32) -> OsString {
    match arg.to_str() {
        Some(s) if s.contains(PLACEHOLDER) => s.replace(PLACEHOLDER, &cpus.to_string()).into(),
        _ => arg.clone(),
    }
}

fn file_name(prog: &OsString) -> String {
    Path::new(prog).file_name().unwrap_or(prog.as_os_str()).to_string_lossy().into_owned()
}

fn list(counts: &[u32]) -> String {
    counts.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// `0-3,6` for a set of CPU numbers.
pub(crate) fn ranges(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn report_text(points: &[PointStats], usl: &Result<Usl, scaling::UslRefusal>) -> String {
    let mut out = String::from("CPUS    WALL ms median [min-max]      SPEEDUP  EFFICIENCY  KARP-FLATT\n");
    for p in points {
        let range = format!("{:.1} [{:.1}-{:.1}]", ms(p.median_ns), ms(p.min_ns), ms(p.max_ns));
        let kf = p.karp_flatt.map_or("-".to_string(), |e| format!("{e:.3}"));
        out.push_str(&format!("{:>4}    {range:<28} {:>8.2}  {:>10.2}  {kf:>10}\n", p.cpus, p.speedup, p.efficiency));
    }
    match usl {
        Ok(u) => {
            out.push_str(&format!("USL fit: contention sigma {:.4}, coherency kappa {:.5}", u.sigma, u.kappa));
            match (u.peak_cpus, u.peak_speedup) {
                (Some(n), Some(s)) => out.push_str(&format!("; predicted peak: speedup {s:.2} at {n:.1} CPUs\n")),
                _ => out.push_str("; no peak predicted (no coherency cost)\n"),
            }
        }
        Err(why) => out.push_str(&format!("USL fit: none: {why}\n")),
    }
    out
}

fn report_json(machine_cpus: usize, runs: u32, points: &[PointStats], usl: &Result<Usl, scaling::UslRefusal>, serial: Option<f64>) -> serde_json::Value {
    let amdahl: Option<serde_json::Map<String, serde_json::Value>> =
        serial.map(|s| AMDAHL_CPUS.iter().map(|&n| (n.to_string(), scaling::amdahl(s, f64::from(n)).into())).collect());
    json!({
        "machine_cpus": machine_cpus,
        "runs": runs,
        "points": points.iter().map(|p| json!({
            "cpus": p.cpus,
            "wall_ns": p.median_ns,
            "min_ns": p.min_ns,
            "max_ns": p.max_ns,
            "speedup": p.speedup,
            "efficiency": p.efficiency,
            "karp_flatt": p.karp_flatt,
        })).collect::<Vec<_>>(),
        "serial_fraction": serial,
        "amdahl_bound": amdahl,
        "usl": usl.as_ref().ok().map(|u| json!({
            "sigma": u.sigma,
            "kappa": u.kappa,
            "peak_cpus": u.peak_cpus,
            "peak_speedup": u.peak_speedup,
        })),
        "usl_refused": usl.as_ref().err().map(|e| e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_default_to_powers_of_two_and_all() {
        assert_eq!(cpu_counts(&[], 1).unwrap(), [1]);
        assert_eq!(cpu_counts(&[], 2).unwrap(), [1, 2]);
        assert_eq!(cpu_counts(&[], 6).unwrap(), [1, 2, 4, 6]);
        assert_eq!(cpu_counts(&[2, 1, 2], 2).unwrap(), [1, 2]);
        assert!(cpu_counts(&[3], 2).unwrap_err().to_string().contains("only 2 CPUs"));
        assert!(cpu_counts(&[0], 2).is_err());
    }

    #[test]
    fn placeholder_and_ranges() {
        assert_eq!(substitute(&"-T{cpus}".into(), 4), OsString::from("-T4"));
        assert_eq!(substitute(&"-p".into(), 4), OsString::from("-p"));
        assert_eq!(ranges(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }
}
