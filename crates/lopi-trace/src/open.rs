//! Calls still open when a thread's recording ended: lock waits, holds, system calls and timed
//! calls that had not returned when their process ended or lopi detached (a server's threads
//! asleep in `pthread_cond_wait` when it is stopped). Each is closed at that end, as the
//! runtime would have closed it at its return: its node gets the call and its time so far,
//! and the chunk lists it in [`crate::ThreadChunk::open`], by which the views mark it.
//!
//! A thread's recording ends at its own `exit` or `exit_group` (its `ThreadEnd`), else at the
//! first of these that comes at or after its last probe: its process's `exit_group` (made by
//! another thread, which also recorded which threads it ended: a thread not among them had
//! ended before, unseen), a successful `execve` (a frame it leaves open), the process's end
//! or the detach as `lopi run` or `lopi attach` saw them (`END_MAGIC` records); failing all,
//! at its last probe (a rewritten program killed by a signal). Without an `exit_group` probe
//! (timing alone), a thread whose end no probe saw is taken to have run until its process
//! ended.
use crate::DataFile;
use lopi_rt_abi::{self as abi, syscall_name};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

const EXECVE: u64 = 59;
const EXECVEAT: u64 = 322;
const EXIT_GROUP: u32 = 231;

/// How the end of a thread's recording is known.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EndSeen {
    /// Its own `exit` (or `exit_group`) system call.
    Exit,
    /// An `exit_group` by another thread ended its process.
    ExitGroup,
    /// Its process's image was replaced (`execve`).
    Exec,
    /// `lopi run` or `lopi attach` saw its process end (no probe did).
    ProcessEnd,
    /// lopi took its probes out (`lopi attach`).
    Detach,
    /// Not seen: its last probe.
    #[default]
    LastProbe,
}

/// Where a thread's recording ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// TSC (not the thread's clock).
    pub tsc: u64,
    pub seen: EndSeen,
}

/// A call still open at the end of its thread's recording, closed there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenCall {
    /// Its node in the chunk's tree (a hold: its hold node).
    pub node: u32,
    /// Its time up to the end, in the thread's clock ticks.
    pub ticks: u64,
    /// A lock held, not a call.
    pub hold: bool,
}

/// The start of the `execve` a chunk's innermost open frame is (its call succeeded: the
/// image it was made from is gone), as a TSC.
fn exec_at(chunk: &crate::ThreadChunk) -> Option<u64> {
    let top = chunk.open_frames.last()?;
    let node = chunk.nodes.get(top.node as usize)?;
    syscall_name::decode(node.func).filter(|c| c.nr == EXECVE || c.nr == EXECVEAT)?;
    Some(top.start_tsc.wrapping_add(chunk.header.paused_ticks))
}

/// Closes every chunk's open calls at the end of its recording.
pub(crate) fn close(data: &mut DataFile) {
    // What ended each process (an exec ends an image; the pid lives on): (TSC, how).
    let mut ends: HashMap<u32, Vec<(u64, EndSeen)>> = HashMap::new();
    for chunk in &data.threads {
        if chunk.end.tsc != 0 && chunk.end.nr == EXIT_GROUP {
            ends.entry(chunk.header.pid).or_default().push((chunk.end.tsc, EndSeen::ExitGroup));
        }
        if let Some(tsc) = exec_at(chunk) {
            ends.entry(chunk.header.pid).or_default().push((tsc, EndSeen::Exec));
        }
    }
    for e in &data.ends {
        let seen = if e.how == abi::END_DETACHED { EndSeen::Detach } else { EndSeen::ProcessEnd };
        ends.entry(e.pid).or_default().push((e.tsc, seen));
    }
    ends.values_mut().for_each(|list| list.sort_unstable_by_key(|&(tsc, _)| tsc));
    // The threads each exit_group found running.
    let counted: HashSet<u32> = data.ended_cpus.iter().map(|e| e.pid).collect();
    let running: HashSet<(u32, u32)> = data.ended_cpus.iter().map(|e| (e.pid, e.tid)).collect();
    for chunk in &mut data.threads {
        let h = &chunk.header;
        // With sampled time the thread's clock is its samples', not the TSC: its end is found
        // from its start, and its open calls end at its clock's last value.
        let sampled = h.sample_ticks != 0;
        let last = if sampled { h.start_tsc } else { h.last_tsc.wrapping_add(h.paused_ticks) };
        chunk.ended = if chunk.end.tsc != 0 {
            Ended { tsc: chunk.end.tsc, seen: EndSeen::Exit }
        } else if let Some(tsc) = exec_at(chunk) {
            Ended { tsc, seen: EndSeen::Exec }
        } else {
            let next = ends.get(&h.pid).and_then(|list| list.iter().find(|&&(tsc, _)| tsc >= last)).copied();
            match next {
                Some((_, EndSeen::ExitGroup)) if counted.contains(&h.pid) && !running.contains(&(h.pid, h.tid)) => Ended { tsc: last, seen: EndSeen::LastProbe },
                Some((tsc, seen)) => Ended { tsc, seen },
                None => Ended { tsc: last, seen: EndSeen::LastProbe },
            }
        };
        // The thread's clock then (never before its last probe).
        let at = if sampled { h.sample_clock } else { chunk.ended.tsc.wrapping_sub(h.paused_ticks) }.max(h.last_tsc);
        close_frames(chunk, at);
        close_holds(chunk, at);
    }
}

/// Closes the open frames at `at` (the thread's clock) as the runtime would have at their
/// exits (a forked child's copies of its parent's calls add time, not calls).
fn close_frames(chunk: &mut crate::ThreadChunk, at: u64) {
    let exec = exec_at(chunk).is_some();
    for i in (0..chunk.open_frames.len()).rev() {
        let frame = chunk.open_frames[i];
        if frame.flags & abi::FRAME_UNTIMED != 0 {
            continue;
        }
        let dt = at.saturating_sub(frame.start_tsc);
        let merged = frame.flags & abi::FRAME_MERGED != 0;
        let counted = frame.flags & abi::FRAME_INHERITED == 0;
        let n = &mut chunk.nodes[frame.node as usize];
        n.calls += u64::from(counted);
        n.ticks = n.ticks.wrapping_add(dt);
        n.max_ticks = n.max_ticks.max(dt);
        // A path node's `aux` counts its calls that ended without their exit probe; a merged
        // node's is its outermost calls' time.
        if !merged {
            n.aux += u64::from(counted);
        } else if frame.flags & abi::FRAME_NESTED == 0 {
            n.aux = n.aux.wrapping_add(dt);
        }
        if merged {
            if let Some(below) = i.checked_sub(1).map(|b| chunk.open_frames[b]).filter(|b| b.flags & abi::FRAME_UNTIMED == 0) {
                let inner = chunk.header.probe_inner_ticks;
                chunk.nodes[below.node as usize].merged_ticks += dt.saturating_sub(inner);
            }
        }
        // A successful execve is over, not open.
        if counted && !(exec && i + 1 == chunk.open_frames.len()) {
            chunk.open.push(OpenCall { node: frame.node, ticks: dt, hold: false });
        }
    }
}

/// Ends at `at` the holds of the locks the thread still held (not a condition wait's mutex,
/// which the wait has released, nor a recursive relock, whose release ends no hold).
fn close_holds(chunk: &mut crate::ThreadChunk, at: u64) {
    for e in &chunk.held {
        if e.flags & (abi::HELD_PENDING | abi::HELD_NESTED) != 0 || e.node == 0 {
            continue;
        }
        let Some(n) = chunk.nodes.get_mut(e.node as usize) else { continue };
        let dt = at.saturating_sub(e.start);
        n.calls += 1;
        n.ticks = n.ticks.wrapping_add(dt);
        n.max_ticks = n.max_ticks.max(dt);
        chunk.open.push(OpenCall { node: e.node, ticks: dt, hold: true });
    }
}

impl crate::ThreadChunk {
    /// Calls still open at the end, by node.
    pub fn open_by_node(&self) -> HashMap<u32, u64> {
        let mut out = HashMap::new();
        for o in &self.open {
            *out.entry(o.node).or_default() += 1;
        }
        out
    }
}
