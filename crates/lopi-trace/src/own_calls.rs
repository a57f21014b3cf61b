//! The system calls lopi itself made inside the program's processes, which are not the
//! program's: its runtime's (registering records, thread chunks, calibration, the application
//! kernel's proxies), counted per module record (`lopi_rt_abi::own_calls`) with the calls a
//! live installer injected before each module's init, and the `munmap`s of a detach (the
//! process-end record). Views show them apart from the program's calls.
use crate::DataFile;
use serde::Serialize;
use std::collections::BTreeMap;

/// lopi's own calls of one system call.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OwnCall {
    pub name: String,
    pub nr: u64,
    pub calls: u64,
    /// Their time (`None` when a record that made some has no TSC rate).
    pub ns: Option<f64>,
}

/// Every system call lopi made in the program's processes.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OwnCalls {
    pub calls: u64,
    pub ns: Option<f64>,
    /// Most calls first.
    pub by_call: Vec<OwnCall>,
}

impl OwnCalls {
    pub fn from_data(data: &DataFile) -> OwnCalls {
        // Per number: calls, ns, and whether every part had a rate.
        let mut by_nr: BTreeMap<u64, (u64, f64, bool)> = BTreeMap::new();
        let mut add = |nr: u64, calls: u64, ticks: u64, hz: u64| {
            let e = by_nr.entry(nr).or_insert((0, 0.0, true));
            e.0 += calls;
            if hz == 0 {
                e.2 = false;
            } else {
                e.1 += ticks as f64 * 1e9 / hz as f64;
            }
        };
        for r in &data.records {
            for &(nr, calls, ticks) in &r.own_calls {
                add(nr, calls, ticks, r.tsc_hz);
            }
        }
        const MUNMAP: u64 = 11;
        for end in data.ends.iter().filter(|e| e.unmaps > 0) {
            let hz = data.records.iter().find(|r| r.pid == end.pid && r.tsc_hz != 0).map_or(0, |r| r.tsc_hz);
            add(MUNMAP, end.unmaps, end.unmap_ticks, hz);
        }
        let mut by_call: Vec<OwnCall> = by_nr
            .into_iter()
            .map(|(nr, (calls, ns, timed))| OwnCall { name: crate::syscall_name(nr), nr, calls, ns: timed.then_some(ns) })
            .collect();
        by_call.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.nr.cmp(&b.nr)));
        OwnCalls {
            calls: by_call.iter().map(|c| c.calls).sum(),
            ns: by_call.iter().map(|c| c.ns).sum(),
            by_call,
        }
    }
}
