//! `lopi report --processes`: the tree of processes a followed `lopi run` or `lopi attach -f` saw, and the
//! `--pid`/`--comm` selection every view of such a record can be narrowed to.
use crate::output::print_json;
use crate::report::{Shown, Source};
use lopi_trace::{DataFile, Processes};
use std::collections::HashSet;

impl Shown for Processes {
    fn text(&self, _: &Source<'_>) -> String {
        let mut out = format!("{:>8} {:>8} {:>11} {:>9}  {:<16} COMMAND\n", "PID", "PARENT", "WALL", "STARTUP", "ENDED");
        for p in &self.processes {
            let indent = "  ".repeat(p.depth.min(16) as usize);
            let command = shorten(&p.command.join(" "), 100);
            out += &format!("{:>8} {:>8} {:>8.1} ms {:>9}  {:<16} {indent}{command}\n", p.pid, p.parent, p.wall_ms, p.startup_calls, p.ended);
        }
        out + &format!("{} processes; STARTUP: system calls made before the probes went live (counted through ptrace)\n", self.processes.len())
    }

    fn json(&self, _: &Source<'_>) -> anyhow::Result<()> {
        print_json(self)
    }
}

fn shorten(text: &str, most: usize) -> String {
    match text.char_indices().nth(most) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

/// Which processes of a record a view shows (`--pid`, `--comm`); none given: all.
#[derive(clap::Args, Default)]
pub(crate) struct ProcessSelect {
    /// Show only process PID (repeatable) of a record with several processes.
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Show only the processes running program NAME (its file name; repeatable).
    #[arg(long = "comm", value_name = "NAME")]
    comms: Vec<String>,
}

impl ProcessSelect {
    /// Narrows `data` to the selected processes; an error when none is in it.
    pub(crate) fn apply(&self, data: &mut DataFile) -> anyhow::Result<()> {
        if self.pids.is_empty() && self.comms.is_empty() {
            return Ok(());
        }
        let file_name = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
        let mut keep: HashSet<u32> = self.pids.iter().copied().collect();
        keep.extend(data.records.iter().filter(|r| self.comms.contains(&file_name(&r.exe))).map(|r| r.pid));
        keep.extend(data.processes.iter().filter(|p| self.comms.iter().any(|c| c == p.program())).map(|p| p.pid));
        let present: HashSet<u32> = data.records.iter().map(|r| r.pid).chain(data.processes.iter().map(|p| p.pid)).chain(data.threads.iter().map(|t| t.header.pid)).collect();
        if keep.is_disjoint(&present) {
            anyhow::bail!("no process of this record matches --pid/--comm (see `lopi report --processes`)");
        }
        data.retain_processes(|pid| keep.contains(&pid));
        Ok(())
    }
}
