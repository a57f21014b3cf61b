//! Clocks: the runtime's (the TSC) and the one lopi's own timings are printed in.
use std::time::Instant;

/// The time-stamp counter, the clock of lopi's runtime.
#[allow(unsafe_code)]
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Milliseconds since `start`, for the timings lopi prints.
pub fn millis(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
