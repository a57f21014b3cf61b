//! The TSC against `CLOCK_MONOTONIC`: bracketed pairs of the two clocks and the TSC's rate.
use super::sys;
use super::tsc::rdtsc;

/// `clock_gettime(clockid_t, struct timespec *)`.
pub(crate) type VdsoClock = unsafe extern "C" fn(u32, *mut [u64; 2]) -> i32;

/// `CLOCK_MONOTONIC`: through the vDSO when there is one (`clock`), else a system call.
fn monotonic_ns(clock: Option<VdsoClock>) -> u64 {
    let mut ts = [0u64; 2];
    match clock {
        // SAFETY: the vDSO's clock_gettime(CLOCK_MONOTONIC) into a timespec.
        Some(f) => unsafe { f(1, &mut ts) },
        // SAFETY: clock_gettime(CLOCK_MONOTONIC) into a timespec.
        None => unsafe { sys::call3(sys::CLOCK_GETTIME, 1, ts.as_mut_ptr() as usize, 0) as i32 },
    };
    ts[0].wrapping_mul(1_000_000_000).wrapping_add(ts[1])
}

/// A (TSC, CLOCK_MONOTONIC) pair: the clock read between two TSC reads, from the tightest
/// of several tries, so that a preemption inside one try cannot skew it.
pub(crate) fn clock_pair(clock: Option<VdsoClock>) -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..9 {
        let before = rdtsc();
        let ns = monotonic_ns(clock);
        let after = rdtsc();
        let width = after.wrapping_sub(before);
        if width < best.2 {
            best = (before + width / 2, ns, width);
        }
    }
    (best.0, best.1)
}

/// TSC rate against CLOCK_MONOTONIC over 1 ms windows (bracketed pairs make that precise to
/// ~0.01%); the median of three, so that one window spoiled by preemption does not count.
pub(crate) fn tsc_hz(clock: Option<VdsoClock>) -> u64 {
    let mut rates = [0u64; 3];
    for rate in rates.iter_mut() {
        let start = clock_pair(clock);
        while monotonic_ns(clock).wrapping_sub(start.1) < 1_000_000 {}
        *rate = rate_since(start, clock);
    }
    median(&mut rates)
}

/// The TSC rate from the pair `start` to now (0 when the clocks did not both advance). Over
/// the tens of microseconds a module's registration takes, the pairs' brackets (a few tens of
/// ns) make it precise to a fraction of a percent.
pub(crate) fn rate_since((t0, m0): (u64, u64), clock: Option<VdsoClock>) -> u64 {
    let (t1, m1) = clock_pair(clock);
    let dm = m1.wrapping_sub(m0);
    if dm == 0 || t1 <= t0 {
        return 0;
    }
    // Without u128 (its division would need a libgcc helper): ticks x 1e9 fits below 2^64
    // for some seconds, ticks x 1e6 over microseconds for longer.
    let ticks = t1 - t0;
    match ticks.checked_mul(1_000_000_000) {
        Some(n) => n / dm,
        None => ticks.checked_mul(1_000_000).map_or(0, |n| n / (dm / 1000).max(1)),
    }
}

pub(crate) fn median(values: &mut [u64]) -> u64 {
    // Insertion sort: a handful of values, and no library sort in the blob.
    for i in 1..values.len() {
        let mut j = i;
        while j > 0 && values[j - 1] > values[j] {
            values.swap(j - 1, j);
            j -= 1;
        }
    }
    values[values.len() / 2]
}
