//! The processes of a followed tree (`lopi run` follows forks and execs): each one's parent,
//! command line, wait status, start and end, and the system calls its programs made before
//! their probes went live (counted, and with `lopi run --log` logged), from the
//! `PROCESS_MAGIC` records lopi appends as each one ends.
use crate::view::{Missing, View};
use crate::DataFile;
use crate::LoggedCall;
use lopi_rt_abi::{PROCESS_CALL_LEN, PROCESS_HEADER_LEN, PROCESS_LOG_ALIGN};
use serde::Serialize;

/// One process of a followed tree, as lopi saw it end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRun {
    pub pid: u32,
    /// 0 for the program lopi launched.
    pub parent: u32,
    /// As `waitpid` gave it.
    pub status: i32,
    /// The programs it executed (0: a fork that never executed one).
    pub execs: u32,
    pub started_tsc: u64,
    pub ended_tsc: u64,
    /// System calls made before its programs' probes went live: (number, calls).
    pub startup: Vec<(u64, u64)>,
    /// Those calls logged (`lopi run --log`), each program's `execve` that no probe saw first;
    /// made by the process's pid.
    pub startup_log: Vec<LoggedCall>,
    /// Its last program's command line.
    pub command: Vec<String>,
}

/// A process record (`None` while its writer was filling it in).
pub(crate) fn process_run(record: &[u8]) -> Option<ProcessRun> {
    let u32_at = |at: usize| record.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
    let u64_at = |at: usize| record.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let pid = u32_at(16)?;
    if pid == 0 {
        return None;
    }
    let (calls, command_len) = (u32_at(48)? as usize, u32_at(52)? as usize);
    let calls_at = PROCESS_HEADER_LEN as usize;
    let command_at = calls_at.checked_add(calls.checked_mul(PROCESS_CALL_LEN as usize)?)?;
    let startup = (0..calls).map(|i| calls_at + i * PROCESS_CALL_LEN as usize).map(|e| Some((u64::from(u32_at(e)?), u64_at(e + 8)?))).collect::<Option<Vec<_>>>()?;
    let command_end = command_at.checked_add(command_len)?;
    let command = record.get(command_at..command_end)?;
    let log_at = command_end.checked_next_multiple_of(PROCESS_LOG_ALIGN as usize)?;
    let log = record.get(log_at..log_at.checked_add(u32_at(56)? as usize)?)?;
    let (_, startup_log) = crate::syscall_log::split(log)?;
    Some(ProcessRun {
        pid,
        parent: u32_at(20)?,
        status: u32_at(24)? as i32,
        execs: u32_at(28)?,
        started_tsc: u64_at(32)?,
        ended_tsc: u64_at(40)?,
        startup,
        startup_log,
        command: command.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect(),
    })
}

impl ProcessRun {
    /// `exit 0`, `killed by signal 9`, as a shell would say; `detached` for a process `lopi
    /// attach -f` let go running (recorded with a stop's wait status, which no end has).
    pub fn ended(&self) -> String {
        match (self.status & 0x7f, (self.status >> 8) & 0xff) {
            (0x7f, _) => "detached".to_string(),
            (0, code) => format!("exit {code}"),
            (signal, _) => format!("killed by {}", signal_name(signal)),
        }
    }

    /// The program's name: its command's first word's file name.
    pub fn program(&self) -> &str {
        let first = self.command.first().map_or("", |a| a.as_str());
        first.rsplit('/').next().unwrap_or(first)
    }
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
}

impl DataFile {
    /// Keeps only what processes `keep` says yes to recorded (their module records, threads,
    /// maps, ends, names and process records). A fork that executed nothing records into its
    /// parent's module records: it keeps a copy of them for their functions and sites, with no
    /// counts (the counters are shared by the parent and its forks: they stay in the parent's).
    pub fn retain_processes(&mut self, keep: impl Fn(u32) -> bool) {
        let kept: std::collections::BTreeSet<u32> = self.threads.iter().map(|t| t.header.pid).chain(self.processes.iter().map(|p| p.pid)).filter(|&pid| keep(pid)).collect();
        let mut borrowed = Vec::new();
        for &pid in &kept {
            if self.records.iter().any(|r| r.pid == pid) {
                continue;
            }
            let Some(owner) = self.record_owner(pid) else { continue };
            for record in self.records.iter().filter(|r| r.pid == owner) {
                let mut copy = record.clone();
                copy.pid = pid;
                copy.counts.iter_mut().for_each(|c| *c = 0);
                copy.own_calls.clear();
                borrowed.push(copy);
            }
        }
        self.records.retain(|r| keep(r.pid));
        self.records.extend(borrowed);
        self.threads.retain(|t| keep(t.header.pid));
        self.maps.retain(|m| keep(m.pid));
        self.ended_cpus.retain(|e| keep(e.pid));
        self.ends.retain(|e| keep(e.pid));
        self.names.retain(|n| keep(n.pid));
        self.processes.retain(|p| keep(p.pid));
    }
}

impl DataFile {
    /// The nearest ancestor of `pid` (by the process records) that has module records.
    fn record_owner(&self, mut pid: u32) -> Option<u32> {
        for _ in 0..64 {
            pid = self.processes.iter().find(|p| p.pid == pid)?.parent;
            if self.records.iter().any(|r| r.pid == pid) {
                return Some(pid);
            }
        }
        None
    }
}

/// One process in the tree view.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProcessRow {
    pub pid: u32,
    pub parent: u32,
    /// Its depth in the tree (0: the program lopi launched, or a process whose parent lopi did
    /// not see end).
    pub depth: u32,
    pub program: String,
    pub command: Vec<String>,
    pub ended: String,
    pub wall_ms: f64,
    /// System calls made before its probes went live (the dynamic loader's, constructors').
    pub startup_calls: u64,
}

/// The process tree of a followed run, parents before their children.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Processes {
    pub processes: Vec<ProcessRow>,
}

impl View for Processes {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        if data.processes.is_empty() {
            return Err(Missing { what: "process tree", record: "lopi run (which follows the program's forks and execs)" });
        }
        let tsc_hz = data.records.iter().map(|r| r.tsc_hz).find(|&hz| hz != 0).unwrap_or(0);
        let known: std::collections::HashSet<u32> = data.processes.iter().map(|p| p.pid).collect();
        let mut rows = Vec::new();
        let mut roots: Vec<&ProcessRun> = data.processes.iter().filter(|p| !known.contains(&p.parent)).collect();
        roots.sort_by_key(|p| p.started_tsc);
        let mut stack: Vec<(&ProcessRun, u32)> = roots.into_iter().rev().map(|p| (p, 0)).collect();
        while let Some((p, depth)) = stack.pop() {
            let wall = p.ended_tsc.saturating_sub(p.started_tsc);
            rows.push(ProcessRow {
                pid: p.pid,
                parent: p.parent,
                depth,
                program: p.program().to_string(),
                command: p.command.clone(),
                ended: p.ended(),
                wall_ms: if tsc_hz == 0 { 0.0 } else { wall as f64 * 1e3 / tsc_hz as f64 },
                startup_calls: p.startup.iter().map(|&(_, n)| n).sum(),
            });
            let mut children: Vec<&ProcessRun> = data.processes.iter().filter(|c| c.parent == p.pid && c.pid != p.pid).collect();
            children.sort_by_key(|c| std::cmp::Reverse(c.started_tsc));
            stack.extend(children.into_iter().map(|c| (c, depth + 1)));
        }
        Ok(Processes { processes: rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lopi_rt_abi::syscall_log::{self as log, SyscallRecord};
    use lopi_rt_abi::EVENT_SYSCALL;

    #[test]
    fn a_record_reads_back_and_damage_is_refused() {
        let mut record = vec![0u8; 4096];
        record[16..20].copy_from_slice(&7u32.to_le_bytes());
        record[20..24].copy_from_slice(&3u32.to_le_bytes());
        record[24..28].copy_from_slice(&(9i32).to_le_bytes());
        record[48..52].copy_from_slice(&1u32.to_le_bytes());
        record[52..56].copy_from_slice(&9u32.to_le_bytes());
        record[64..68].copy_from_slice(&12u32.to_le_bytes());
        record[72..80].copy_from_slice(&5u64.to_le_bytes());
        record[80..89].copy_from_slice(b"gzip\0-c\0x");
        // The start-up log, at the next slot after the command line: one execve.
        let execve = SyscallRecord { nr: 59, flags: log::RETURNED, args: [0x1000, 0x2000, 0x3000, 0, 0, 0], lens: [9, 3], ..Default::default() };
        let mut startup_log = [11u64.to_le_bytes().as_slice(), &7u32.to_le_bytes(), &EVENT_SYSCALL.to_le_bytes(), &execve.to_bytes()].concat();
        startup_log.extend(b"/bin/gzip\0\0\0\0\0\0\0sh\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        record[56..60].copy_from_slice(&(startup_log.len() as u32).to_le_bytes());
        record[96..96 + startup_log.len()].copy_from_slice(&startup_log);
        let run = process_run(&record).expect("a whole record");
        assert_eq!((run.pid, run.parent, run.startup.clone(), run.command.clone()), (7, 3, vec![(12, 5)], vec!["gzip".into(), "-c".into(), "x".into()]));
        assert_eq!(run.startup_log, vec![LoggedCall { tsc: 11, record: execve, bytes: [b"/bin/gzip".to_vec(), b"sh\0".to_vec()] }]);
        assert_eq!(run.ended(), "killed by SIGKILL");
        assert_eq!(ProcessRun { status: 3 << 8, ..run.clone() }.ended(), "exit 3");
        assert_eq!(ProcessRun { status: 0x7f, ..run.clone() }.ended(), "detached");
        // Damage anywhere is refused or read as something, never a panic: cut records, and
        // each header field and the log's first slots set to all ones.
        for len in 0..record.len().min(512) {
            let _ = process_run(&record[..len]);
        }
        for at in (16..60).step_by(4).chain(96..96 + 48) {
            let mut damaged = record.clone();
            damaged[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            let _ = process_run(&damaged);
        }
        // A log longer than the record, or a payload longer than any, is refused.
        let mut long = record.clone();
        long[56..60].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(process_run(&long), None);
        let mut slots = record.clone();
        slots[104..108].copy_from_slice(&(log::MAX_SLOTS as u32 + 1).to_le_bytes());
        assert_eq!(process_run(&slots), None);
        record[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(process_run(&record), None);
    }
}
