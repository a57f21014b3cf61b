//! Clocks: the runtime's (the TSC) and the one lopi's own timings are printed in.
use std::time::Instant;

/// The time-stamp counter, the clock of lopi's runtime.
#[allow(unsafe_code)]
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The TSC's rate in ticks a second, measured once (over 5 ms against the monotonic clock,
/// each end read between two TSC reads: precise to about 0.01%).
pub fn tsc_hz() -> u64 {
    static RATE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let pair = || {
            let before = tsc();
            let now = Instant::now();
            let after = tsc();
            (before / 2 + after / 2, now)
        };
        let (t0, i0) = pair();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (t1, i1) = pair();
        let ns = (i1 - i0).as_nanos().max(1);
        (u128::from(t1.saturating_sub(t0)) * 1_000_000_000 / ns) as u64
    })
}

/// Milliseconds since `start`, for the timings lopi prints.
pub fn millis(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
