//! The process environment's variables.

/// Compares a NUL-terminated environment entry against `NAME=`; returns the value.
///
/// # Safety
/// `entry` must point to a NUL-terminated string.
unsafe fn env_value(entry: *const u8, name: &[u8]) -> Option<*const u8> {
    // SAFETY: we stop at the first mismatch, which includes the terminating NUL.
    unsafe {
        for (i, &c) in name.iter().enumerate() {
            if *entry.add(i) != c {
                return None;
            }
        }
        if *entry.add(name.len()) != b'=' {
            return None;
        }
        Some(entry.add(name.len() + 1))
    }
}

/// The value of environment variable `name`, if set.
///
/// # Safety
/// `envp` must be null or a NULL-terminated array of NUL-terminated strings.
pub(crate) unsafe fn getenv(envp: *const *const u8, name: &[u8]) -> Option<*const u8> {
    if envp.is_null() {
        return None;
    }
    let mut e = envp;
    // SAFETY: the caller's contract.
    unsafe {
        while !(*e).is_null() {
            if let Some(v) = env_value(*e, name) {
                return Some(v);
            }
            e = e.add(1);
        }
    }
    None
}

/// A decimal environment value, clamped to `1..=max`; `default` when unset or invalid.
pub(crate) fn env_number(envp: *const *const u8, name: &[u8], default: u64, max: u64) -> u64 {
    // SAFETY: envp is the process environment (NULL-terminated, or null).
    let Some(mut p) = (unsafe { getenv(envp, name) }) else { return default };
    let mut n = 0u64;
    // SAFETY: the value is NUL-terminated.
    unsafe {
        while (*p).is_ascii_digit() {
            n = n.saturating_mul(10).saturating_add(u64::from(*p - b'0'));
            p = p.add(1);
        }
        if *p != 0 || n == 0 {
            return default;
        }
    }
    n.min(max)
}
