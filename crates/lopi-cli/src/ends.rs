//! Where a process's recording ended when no probe saw it end: `lopi run` saw the process end
//! (killed by a signal, or no probe at its `exit_group`), or `lopi attach` took its probes out.
//! The reader closes the calls still open in its threads there (`lopi_trace`'s `open.rs`), so
//! that a thread asleep in a wait at the end shows the wait with its time so far. At a detach
//! the threads' names are recorded too, as an `exit_group` probe records them.
use anyhow::Result;
use lopi_rt_abi::{END_DETACHED, NAMES_ENTRY_LEN, NAMES_HEADER_LEN, NAMES_MAGIC, PAGE_SIZE};

/// Appends to the data file at `data` that process `pid`'s recording ended now, `how`
/// (`END_EXITED`, `END_DETACHED`: then with its threads' names, and the `munmap` calls lopi
/// made in it to detach, with their TSC ticks: `unmaps`). Nothing when the process recorded
/// nothing (no data file).
pub fn record(data: &str, pid: i32, how: u32, unmaps: (u64, u64)) -> Result<()> {
    let tsc = lopi_live::tsc();
    if !std::path::Path::new(data).exists() {
        return Ok(());
    }
    let mut record = vec![0u8; PAGE_SIZE as usize];
    record[..8].copy_from_slice(&lopi_rt_abi::END_MAGIC);
    record[8..16].copy_from_slice(&PAGE_SIZE.to_le_bytes());
    record[16..20].copy_from_slice(&(pid as u32).to_le_bytes());
    record[20..24].copy_from_slice(&how.to_le_bytes());
    record[24..32].copy_from_slice(&tsc.to_le_bytes());
    record[32..40].copy_from_slice(&unmaps.0.to_le_bytes());
    record[40..48].copy_from_slice(&unmaps.1.to_le_bytes());
    crate::parallelism::append(data, &record)?;
    if how == END_DETACHED {
        crate::parallelism::append(data, &names(pid))?;
    }
    Ok(())
}

/// A `NAMES_MAGIC` record of the names of process `pid`'s threads now.
fn names(pid: i32) -> Vec<u8> {
    let threads: Vec<(u32, Vec<u8>)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read(e.path().join("comm")).ok()?;
            Some((tid, comm.strip_suffix(b"\n").unwrap_or(&comm).iter().copied().take(16).collect()))
        })
        .collect();
    let len = (NAMES_HEADER_LEN + threads.len() as u64 * NAMES_ENTRY_LEN).next_multiple_of(PAGE_SIZE);
    let mut record = vec![0u8; len as usize];
    record[..8].copy_from_slice(&NAMES_MAGIC);
    record[8..16].copy_from_slice(&len.to_le_bytes());
    record[16..20].copy_from_slice(&(pid as u32).to_le_bytes());
    record[20..24].copy_from_slice(&(threads.len() as u32).to_le_bytes());
    for (i, (tid, comm)) in threads.iter().enumerate() {
        let e = (NAMES_HEADER_LEN + i as u64 * NAMES_ENTRY_LEN) as usize;
        record[e..e + 4].copy_from_slice(&tid.to_le_bytes());
        record[e + 8..e + 8 + comm.len()].copy_from_slice(comm);
    }
    record
}
