//! Reading lopi's reports: `lopi report` and `lopi info` JSON, the system-call report, the
//! breakdown's parts and the blocks of a function.

use super::{default_timeout, lopi_bin, run};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

#[derive(Debug, Clone)]
pub struct ReportEntry {
    pub name: String,
    pub module: String,
    pub addr: String,
    pub calls: u64,
}

/// Parse the output of `lopi report DATA --format json`.
pub fn parse_report(text: &str) -> Result<Vec<ReportEntry>, String> {
    let j = serde_json::from_str::<Json>(text).map_err(|e| e.to_string())?;
    if j.get("program").and_then(Json::as_str).is_none() {
        return Err("report: missing string field \"program\"".into());
    }
    let funcs = j
        .get("functions")
        .and_then(Json::as_array)
        .ok_or("report: missing array \"functions\"")?;
    let mut v = Vec::new();
    for f in funcs {
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .ok_or("report: function without \"name\"")?;
        let calls = f
            .get("calls")
            .and_then(Json::as_u64)
            .ok_or_else(|| format!("report: {name}: missing/invalid \"calls\""))?;
        v.push(ReportEntry {
            name: name.to_string(),
            module: f
                .get("module")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
            addr: f
                .get("addr")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
            calls,
        });
    }
    Ok(v)
}

/// name -> (status, reason/tactic) from `lopi info --format json`, plus the summary.
pub struct Info {
    pub functions: BTreeMap<String, (String, String)>,
    pub summary: Json,
}

pub fn parse_info(text: &str) -> Result<Info, String> {
    let j = serde_json::from_str::<Json>(text).map_err(|e| e.to_string())?;
    let funcs = j
        .get("functions")
        .and_then(Json::as_array)
        .ok_or("info: missing array \"functions\"")?;
    let mut functions = BTreeMap::new();
    for f in funcs {
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .unwrap_or("?")
            .to_string();
        let status = f
            .get("status")
            .and_then(Json::as_str)
            .unwrap_or("?")
            .to_string();
        let detail = f
            .get("reason")
            .or_else(|| f.get("tactic"))
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string();
        functions.insert(name, (status, detail));
    }
    let summary = j
        .get("summary")
        .cloned()
        .ok_or("info: missing object \"summary\"")?;
    Ok(Info { functions, summary })
}

/// Check a parsed `lopi info` summary: coverage_percent present and in
/// [0, 100], found = probed + skipped.
pub fn check_info_summary(info: &Info) -> Result<f64, String> {
    let s = &info.summary;
    let cov = s
        .get("coverage_percent")
        .and_then(Json::as_f64)
        .ok_or("info: summary.coverage_percent missing or not a number")?;
    if !(0.0..=100.0).contains(&cov) {
        return Err(format!("info: coverage_percent {cov} outside [0, 100]"));
    }
    let num = |k: &str| s.get(k).and_then(Json::as_u64);
    match (num("found"), num("probed"), num("skipped")) {
        (Some(f), Some(p), Some(k)) if f == p + k => {}
        (f, p, k) => {
            return Err(format!(
                "info: summary found/probed/skipped inconsistent: {f:?}/{p:?}/{k:?}"
            ))
        }
    }
    Ok(cov)
}

// ---------------------------------------------------------------------------
// System-call reports
// ---------------------------------------------------------------------------

/// `lopi report --syscalls --format json DATA`, parsed.
pub fn syscall_report(data: &Path) -> Json {
    let out = run(Command::new(lopi_bin()).args(["report", "--syscalls", "--format", "json"]).arg(data), default_timeout()).expect("lopi report");
    assert!(out.status.success(), "lopi report --syscalls failed: {}", out.stderr_str());
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// A `syscalls` list of that report as name -> `field` (`calls`, `errors`), zeros left out.
pub fn by_syscall(list: &Json, field: &str) -> BTreeMap<String, u64> {
    list.as_array().into_iter().flatten().map(|s| (s["name"].as_str().unwrap_or("").to_string(), s[field].as_u64().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}

// ---------------------------------------------------------------------------
// The multiprocessor analysis
// ---------------------------------------------------------------------------

/// A thread of `lopi report --breakdown --format json`: its parts add up to its wall time
/// within 2%.
pub fn assert_parts_add_up(thread: &Json) {
    let ns = |key: &str| thread[key].as_u64().unwrap_or_else(|| panic!("{key} in {thread}")) as f64;
    let parts: f64 = ["user_ns", "kernel_ns", "syscall_blocked_ns", "lock_wait_ns", "kernel_lock_spin_ns", "other_ns"].iter().map(|k| ns(k)).sum();
    let wall = ns("wall_ns");
    assert!((parts - wall).abs() <= 0.02 * wall, "parts {parts} vs wall {wall}: {thread}");
}

// ---------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------

/// What `lopi report --blocks FUNC` says of each block of FUNC in the record `data`.
pub fn block_counts(data: &Path, func: &str) -> Vec<Json> {
    let out = run(Command::new(lopi_bin()).args(["report", "--format", "json", "--blocks", func]).arg(data), default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    json[0]["blocks"].as_array().unwrap().clone()
}
