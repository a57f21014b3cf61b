/// A fixed-capacity byte string on the stack; silently truncates (paths are bounded).
///
/// Left uninitialised: zeroing would make LLVM call `memset` through a GOT slot, which the
/// flat blob cannot have. Only `bytes[..len]` is ever read.
pub(crate) struct Buf<const N: usize> {
    bytes: core::mem::MaybeUninit<[u8; N]>,
    len: usize,
}

impl<const N: usize> Buf<N> {
    pub(crate) fn new() -> Self {
        Self { bytes: core::mem::MaybeUninit::uninit(), len: 0 }
    }

    fn ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr() as *mut u8
    }

    pub(crate) fn push(&mut self, b: u8) {
        if self.len < N - 1 {
            // SAFETY: len < N - 1 < N.
            unsafe { *self.ptr().add(self.len) = b };
            self.len += 1;
        }
    }

    pub(crate) fn push_bytes(&mut self, s: &[u8]) {
        for &b in s {
            self.push(b);
        }
    }

    /// # Safety
    /// `s` must point to a NUL-terminated string.
    pub(crate) unsafe fn push_cstr(&mut self, mut s: *const u8) {
        // SAFETY: the caller guarantees NUL termination.
        unsafe {
            while *s != 0 {
                self.push(*s);
                s = s.add(1);
            }
        }
    }

    pub(crate) fn push_decimal(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut n = 0;
        loop {
            // SAFETY: a u64 has at most 20 decimal digits.
            unsafe { *digits.as_mut_ptr().add(n) = b'0' + (v % 10) as u8 };
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        while n > 0 {
            n -= 1;
            // SAFETY: n < 20.
            self.push(unsafe { *digits.as_ptr().add(n) });
        }
    }

    /// NUL-terminated pointer for syscalls (push never fills the last byte).
    pub(crate) fn as_cstr(&mut self) -> *const u8 {
        // SAFETY: len <= N - 1.
        unsafe { *self.ptr().add(self.len) = 0 };
        self.ptr()
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: bytes[..len] were written by push.
        unsafe { core::slice::from_raw_parts(self.bytes.as_ptr() as *const u8, self.len) }
    }

    /// Lets a syscall fill the buffer; `n` is how many bytes it wrote.
    pub(crate) fn fill_with(&mut self, f: impl FnOnce(*mut u8, usize) -> isize) {
        let n = f(self.ptr(), N - 1);
        if n > 0 && (n as usize) < N {
            self.len = n as usize;
        }
    }
}
