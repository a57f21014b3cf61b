//! Where a process's recording ended when no probe saw it end: `lopi run` saw the process end
//! (killed by a signal, or no probe at its `exit_group`), or `lopi attach` took its probes out.
//! The reader closes the calls still open in its threads there (`lopi_trace`'s `open.rs`), so
//! that a thread asleep in a wait at the end shows the wait with its time so far.
use anyhow::Result;

/// The time-stamp counter, the clock the runtime's probes read.
#[allow(unsafe_code)]
fn tsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Appends to the data file at `data` that process `pid`'s recording ended now, `how`
/// (`END_EXITED`, `END_DETACHED`). Nothing when the process recorded nothing (no data file).
pub fn record(data: &str, pid: i32, how: u32) -> Result<()> {
    let tsc = tsc();
    if !std::path::Path::new(data).exists() {
        return Ok(());
    }
    let mut record = vec![0u8; lopi_rt_abi::PAGE_SIZE as usize];
    record[..8].copy_from_slice(&lopi_rt_abi::END_MAGIC);
    record[8..16].copy_from_slice(&lopi_rt_abi::PAGE_SIZE.to_le_bytes());
    record[16..20].copy_from_slice(&(pid as u32).to_le_bytes());
    record[20..24].copy_from_slice(&how.to_le_bytes());
    record[24..32].copy_from_slice(&tsc.to_le_bytes());
    crate::parallelism::append(data, &record)
}
