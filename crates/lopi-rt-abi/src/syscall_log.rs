//! `lopi run --log`: each system call a thread makes, with its arguments, result and the bytes
//! it named (a path, the start of the data it read or wrote, a new program's argv), as one
//! trace event of kind [`EVENT_SYSCALL`](crate::EVENT_SYSCALL) whose `node` field is the number
//! of 16-byte slots of payload after it: a [`SyscallRecord`], then its bytes, each part padded
//! to a slot.

/// The payload's first slots.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallRecord {
    pub nr: u32,
    /// `RETURNED`, `NO_RETURN` or `PENDING`.
    pub flags: u32,
    /// The result (`rax`) when `RETURNED`.
    pub ret: u64,
    pub args: [u64; 6],
    /// Bytes of each of [`bytes_of`]'s two parts that follow.
    pub lens: [u16; 2],
    /// Bytes the call named beyond those copied (a path or argv cut at its size).
    pub cut: [u16; 2],
    /// The caller when it is not the trace's thread (a `vfork` child, which runs on its
    /// suspended parent's state); 0: the trace's.
    pub tid: u32,
    /// An `execve`'s (`execveat`'s) environment: how many variables, plus 1 (strace's `/* N
    /// vars */`); 0 when not counted.
    pub envc: u32,
}

pub const SYSCALL_RECORD_LEN: usize = 80;
const _: () = assert!(core::mem::size_of::<SyscallRecord>() == SYSCALL_RECORD_LEN);
pub const SLOT_LEN: usize = 16;

/// Logged when the call returned.
pub const RETURNED: u32 = 1;
/// A call that never returns (`exit_group`), logged when made.
pub const NO_RETURN: u32 = 2;
/// An `execve` logged when made: the new program replaces the caller unless a [`RETURNED`]
/// record of it follows on the same thread (it failed).
pub const PENDING: u32 = 3;
/// A `vfork` child's call, logged when made; it becomes [`RETURNED`] when the call returns.
pub const MADE: u32 = 4;

/// Most bytes of a path (strace prints paths whole; `PATH_MAX` is longer, but rare).
pub const PATH_BYTES: usize = 256;
/// Most bytes of the data a call read or wrote (strace's default `-s 32`).
pub const DATA_BYTES: usize = 32;
/// Most bytes of an argv, its strings with their NULs, and most of its strings.
pub const ARGV_BYTES: usize = 256;
pub const ARGV_STRINGS: usize = 16;
/// Most slots of a payload.
pub const MAX_SLOTS: usize = (SYSCALL_RECORD_LEN + PATH_BYTES + ARGV_BYTES) / SLOT_LEN;

/// Where a logged call's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    None,
    /// The NUL-terminated string argument `0..6`.
    Path(u8),
    /// At argument `buf`, as many bytes as argument `len` says, or (`len` of 6) as the result.
    Data { buf: u8, len: u8 },
    /// The array of strings at argument `0..6`.
    Argv(u8),
}

/// `len` of [`Bytes::Data`] for "the result".
pub const LEN_RESULT: u8 = 6;

/// The bytes logged with system call `nr` (x86-64's numbers).
pub const fn bytes_of(nr: u64) -> [Bytes; 2] {
    use Bytes::*;
    match nr {
        // read, pread64, recvfrom: what arrived; write, pwrite64, sendto: what was sent.
        0 | 17 | 45 => [Data { buf: 1, len: LEN_RESULT }, None],
        1 | 18 | 44 => [Data { buf: 1, len: 2 }, None],
        // open, stat, lstat, access, truncate, chdir, rename, mkdir, rmdir, creat, link,
        // unlink, symlink, chmod, chown, lchown, statfs, chroot, umount2.
        2 | 4 | 6 | 21 | 76 | 80 | 83 | 84 | 85 | 87 | 90 | 92 | 94 | 137 | 161 | 166 => [Path(0), None],
        82 | 86 | 88 => [Path(0), Path(1)],
        89 => [Path(0), Data { buf: 1, len: LEN_RESULT }],
        79 => [Data { buf: 0, len: LEN_RESULT }, None],
        59 => [Path(0), Argv(1)],
        // openat, mkdirat, mknodat, fchownat, futimesat, newfstatat, unlinkat, fchmodat,
        // faccessat, utimensat, statx, openat2, faccessat2, fchmodat2.
        257 | 258 | 259 | 260 | 261 | 262 | 263 | 268 | 269 | 280 | 332 | 437 | 439 | 452 => [Path(1), None],
        // renameat, linkat, renameat2; symlinkat.
        264 | 265 | 316 => [Path(1), Path(3)],
        266 => [Path(0), Path(2)],
        267 => [Path(1), Data { buf: 2, len: LEN_RESULT }],
        322 => [Path(1), Argv(2)],
        _ => [None, None],
    }
}

/// Most variables of an environment counted (`SyscallRecord::envc`).
pub const MAX_ENV: u32 = 1 << 16;

/// The environment argument of `execve` (2) and `execveat` (3).
pub const fn envp_arg(nr: u64) -> Option<usize> {
    match nr {
        59 => Some(2),
        322 => Some(3),
        _ => None,
    }
}

/// Slots `bytes` take (padded to a slot).
pub const fn slots_of(bytes: usize) -> usize {
    bytes.div_ceil(SLOT_LEN)
}

impl SyscallRecord {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = super::fields::Fields(bytes.get(..SYSCALL_RECORD_LEN)?);
        let mut args = [0; 6];
        for (i, a) in args.iter_mut().enumerate() {
            *a = f.u64(16 + 8 * i);
        }
        Some(Self { nr: f.u32(0), flags: f.u32(4), ret: f.u64(8), args, lens: [f.u16(64), f.u16(66)], cut: [f.u16(68), f.u16(70)], tid: f.u32(72), envc: f.u32(76) })
    }

    /// The record as the runtime writes it (lopi writes the calls it logs through ptrace the same way).
    pub fn to_bytes(&self) -> [u8; SYSCALL_RECORD_LEN] {
        let mut out = [0u8; SYSCALL_RECORD_LEN];
        out[0..4].copy_from_slice(&self.nr.to_le_bytes());
        out[4..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..16].copy_from_slice(&self.ret.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        for i in 0..2 {
            out[64 + 2 * i..66 + 2 * i].copy_from_slice(&self.lens[i].to_le_bytes());
            out[68 + 2 * i..70 + 2 * i].copy_from_slice(&self.cut[i].to_le_bytes());
        }
        out[72..76].copy_from_slice(&self.tid.to_le_bytes());
        out[76..80].copy_from_slice(&self.envc.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back() {
        let r = SyscallRecord { nr: 257, flags: RETURNED, ret: 3, args: [1, 2, 3, 4, 5, 6], lens: [16, 0], cut: [1, 0], tid: 42, envc: 24 };
        assert_eq!(SyscallRecord::from_bytes(&r.to_bytes()), Some(r));
    }
}
