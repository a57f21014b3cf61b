//! Reading strace's output, the oracle of the system-call tests.
use std::collections::BTreeMap;

/// Calls per name from `strace -f -c -o`'s table.
pub fn strace_table(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors,] syscall
        if fields.len() < 5 || fields[0].parse::<f64>().is_err() || fields.last() == Some(&"total") {
            continue;
        }
        if let Ok(calls) = fields[3].parse::<u64>() {
            counts.insert(fields[fields.len() - 1].to_string(), calls);
        }
    }
    counts
}

/// A call's line without the padding strace (and `lopi --log`) put before ` = `.
pub fn unpadded(line: &str) -> String {
    match line.rsplit_once(" = ") {
        Some((call, result)) => format!("{} = {result}", call.trim_end()),
        None => line.to_string(),
    }
}

/// The lines of an `strace -f -o` log (or `lopi --log`'s) with their pids, in order: a call's
/// `<unfinished ...>` and `<... resumed>` joined into one line, signal and exit lines dropped,
/// the padding before ` = ` too.
pub fn strace_lines(log: &str) -> Vec<(u32, String)> {
    let mut unfinished: BTreeMap<u32, String> = BTreeMap::new();
    let mut lines = Vec::new();
    for l in log.lines() {
        let Some((pid, rest)) = l.split_once(' ') else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let rest = rest.trim_start();
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        let line = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            unfinished.insert(pid, start.to_string());
            continue;
        } else if let Some((_, end)) = rest.strip_prefix("<... ").and_then(|r| r.split_once(" resumed>")) {
            unfinished.remove(&pid).unwrap_or_default() + end
        } else {
            rest.to_string()
        };
        lines.push((pid, unpadded(&line)));
    }
    lines
}
