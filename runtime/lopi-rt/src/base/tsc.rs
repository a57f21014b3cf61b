//! The time-stamp counter: the runtime's clock, by which it times everything.
use core::arch::asm;

#[inline(always)]
pub(crate) fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdtsc reads the time-stamp counter; no memory, no stack.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) };
    (u64::from(hi) << 32) | u64::from(lo)
}
