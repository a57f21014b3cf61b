//! Views of a data file, read by one trait: each view is built from the file, or refused with
//! what the file lacks and the probes that record it. `lopi report` shows the views as text or
//! JSON (lopi-cli), the exports write them for other tools.
use crate::{DataFile, FunctionsRan, Locks, Profile, Syscalls, Threads};

/// A view of a data file.
pub trait View: Sized {
    /// The view of `data`; [`Missing`] when `data` does not hold what it shows.
    fn read(data: &DataFile) -> Result<Self, Missing>;
}

/// What a view needs that a data file does not hold, and how to record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("has no {what}: record the program with {record}")]
pub struct Missing {
    pub what: &'static str,
    pub record: &'static str,
}

/// The functions and their calls: any record has them, but one that only marks which
/// functions ran (`--probe entry:mark`).
impl View for Profile {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        let profile = Profile::from_data(data);
        if profile.functions.is_empty() && FunctionsRan::read(data).is_ok() {
            return Err(Missing { what: "call counts (it marks which functions ran: `lopi coverage` lists them)", record: "--probe entry" });
        }
        Ok(profile)
    }
}

impl View for Locks {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        let locks = Locks::from_data(data);
        // A module with lock probes records the process's memory map at its start: with one,
        // the program simply took no lock (dash), and the view says so.
        if locks.locks.is_empty() && data.maps.is_empty() {
            return Err(Missing { what: "lock data", record: "--probe locks (lopi run, rewrite or attach)" });
        }
        Ok(locks)
    }
}

impl View for Syscalls {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        Syscalls::from_data(data).ok_or(Missing { what: "system-call data", record: "--probe syscall (lopi run, rewrite or attach)" })
    }
}

impl View for Threads {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        let threads = Threads::from_data(data);
        if threads.threads.is_empty() {
            return Err(Missing { what: "thread data", record: "--probe locks" });
        }
        Ok(threads)
    }
}
