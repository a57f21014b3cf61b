//! `lopi run --log`: the system calls a followed program makes between its `exec` and its entry
//! point (the dynamic loader's, its libraries' constructors'), before any probe can see them,
//! logged through ptrace's system-call stops as the runtime's probes log the others
//! (`runtime/lopi-rt/src/timing/probes/syscall_log.rs`): the same record, the same bytes with
//! the same limits, the same TSC clock. Encoded as a trace region encodes them (an
//! [`EVENT_SYSCALL`] event, then its payload's slots), for the process record.
use crate::tracee::Regs;
use lopi_rt_abi::syscall_log::{self as log, Bytes, SyscallRecord, LEN_RESULT, SLOT_LEN};
use lopi_rt_abi::{syscall_name, EVENT_SYSCALL};
use std::fs::File;
use std::os::unix::fs::FileExt;

const EXECVE: u64 = 59;
/// The auxiliary vector's `AT_EXECFN`: the path the program was executed by.
const AT_EXECFN: u64 = 31;

/// The calls logged so far, and the one a thread is in.
pub(crate) struct StartupLog {
    /// The process's memory (`/proc/PID/mem`: a page it cannot read ends a string there).
    mem: Option<File>,
    /// The registers at the entry of the call in progress.
    entered: Option<Regs>,
    /// The encoded calls.
    pub(crate) bytes: Vec<u8>,
}

impl StartupLog {
    pub(crate) fn new(pid: i32) -> StartupLog {
        StartupLog { mem: File::open(format!("/proc/{pid}/mem")).ok(), entered: None, bytes: Vec::new() }
    }

    /// A system-call stop with `regs`: a call's entry (`entering`: the kernel set `rax` to
    /// `-ENOSYS`) is kept until its exit, which logs it. The first stop after an `exec` is
    /// `execve`'s exit, with no entry seen: not logged here (see [`StartupLog::exec`]).
    pub(crate) fn stop(&mut self, regs: &Regs, entering: bool) {
        match self.entered.take() {
            Some(entry) => self.log(&entry, regs.rax, crate::tsc()),
            None if entering => self.entered = Some(*regs),
            None => {}
        }
    }

    /// Logs the `execve` that started the program now at its exec stop (`regs`), which no probe
    /// saw (lopi's child made the root's; an unprobed process others'): its path from
    /// `AT_EXECFN`, its argv and envp where the kernel put them on the new stack (`argc`,
    /// then the pointers).
    pub(crate) fn exec(&mut self, pid: i32, regs: &Regs) {
        let execfn = crate::procfs::auxv(pid, AT_EXECFN).unwrap_or(0);
        let argc = self.read(regs.rsp, 8).try_into().map(u64::from_le_bytes).unwrap_or(0);
        let argv = regs.rsp + 8;
        let envp = argv.wrapping_add(8 * (argc.min(1 << 20) + 1));
        let mut call = *regs;
        (call.orig_rax, call.rdi, call.rsi, call.rdx, call.r10, call.r8, call.r9) = (EXECVE, execfn, argv, envp, 0, 0, 0);
        self.log(&call, 0, crate::tsc());
    }

    /// Logs the call `entry` made that returned `ret` at `tsc`.
    fn log(&mut self, entry: &Regs, ret: u64, tsc: u64) {
        let nr = entry.orig_rax;
        let args = [entry.rdi, entry.rsi, entry.rdx, entry.r10, entry.r8, entry.r9];
        let result = (!syscall_name::is_error(ret)).then_some(ret);
        let parts = log::bytes_of(nr).map(|part| self.part(part, &args, result));
        let record = SyscallRecord {
            nr: nr as u32,
            flags: log::RETURNED,
            ret,
            args,
            lens: [parts[0].0.len() as u16, parts[1].0.len() as u16],
            cut: [parts[0].1, parts[1].1],
            envc: log::envp_arg(nr).map_or(0, |a| self.env_count(args[a])),
            ..Default::default()
        };
        let payload_slots = log::slots_of(log::SYSCALL_RECORD_LEN) + parts.iter().map(|p| log::slots_of(p.0.len())).sum::<usize>();
        self.bytes.extend_from_slice(&tsc.to_le_bytes());
        self.bytes.extend_from_slice(&(payload_slots as u32).to_le_bytes());
        self.bytes.extend_from_slice(&EVENT_SYSCALL.to_le_bytes());
        self.bytes.extend_from_slice(&record.to_bytes());
        for (bytes, _) in &parts {
            self.bytes.extend_from_slice(bytes);
            self.bytes.resize(self.bytes.len().next_multiple_of(SLOT_LEN), 0);
        }
    }

    /// One part of a call's bytes, and how many it named beyond them (1 for "more" where the
    /// length is unknown), as the runtime's `copy_bytes` takes it. Data a call returned only
    /// when it returned, `result`.
    fn part(&self, part: Bytes, args: &[u64; 6], result: Option<u64>) -> (Vec<u8>, u16) {
        match part {
            Bytes::None => (Vec::new(), 0),
            Bytes::Path(a) => self.string(args[a as usize], log::PATH_BYTES),
            Bytes::Data { buf, len } => {
                let named = if len == LEN_RESULT { result.unwrap_or(0) } else { args[len as usize] };
                let got = self.read(args[buf as usize], named.min(log::DATA_BYTES as u64) as usize);
                let cut = (named - got.len() as u64).min(u64::from(u16::MAX)) as u16;
                (got, cut)
            }
            Bytes::Argv(a) => {
                let words = self.read(args[a as usize], 8 * log::ARGV_STRINGS);
                let mut out = Vec::new();
                let pointers: Vec<u64> = words.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())).collect();
                for &p in &pointers {
                    if p == 0 {
                        return (out, 0);
                    }
                    let room = log::ARGV_BYTES - out.len();
                    let (s, cut) = self.string(p, room.saturating_sub(1));
                    if s.len() + 1 > room || cut != 0 {
                        return (out, 1);
                    }
                    out.extend_from_slice(&s);
                    out.push(0);
                }
                (out, u16::from(pointers.len() == log::ARGV_STRINGS))
            }
        }
    }

    /// How many pointers the NULL-terminated array at `at` holds, plus 1 (0: unreadable), as
    /// the runtime counts an environment.
    fn env_count(&self, at: u64) -> u32 {
        let mut count = 0;
        while count < log::MAX_ENV {
            let words = self.read(at + 8 * u64::from(count), 8 * 64);
            if words.len() < 8 {
                return if count == 0 { 0 } else { count + 1 };
            }
            for w in words.chunks_exact(8) {
                if w.iter().all(|&b| b == 0) {
                    return count + 1;
                }
                count += 1;
            }
        }
        count + 1
    }

    /// The NUL-terminated string at `at`, at most `max` bytes of it, without its NUL, and 1
    /// when it went on beyond `max`.
    fn string(&self, at: u64, max: usize) -> (Vec<u8>, u16) {
        let mut got = self.read(at, max);
        match got.iter().position(|&b| b == 0) {
            Some(len) => {
                got.truncate(len);
                (got, 0)
            }
            None => {
                let cut = u16::from(got.len() == max);
                (got, cut)
            }
        }
    }

    /// Up to `len` bytes at `at`: those before the first page the process cannot read (none
    /// for a bad pointer).
    fn read(&self, at: u64, len: usize) -> Vec<u8> {
        let Some(mem) = &self.mem else { return Vec::new() };
        let mut buf = vec![0; len];
        // /proc/PID/mem reads page by page and returns what it read before a page it could
        // not; an address past i64::MAX is refused.
        let got = if at > i64::MAX as u64 || len == 0 { 0 } else { mem.read_at(&mut buf, at).unwrap_or(0) };
        buf.truncate(got);
        buf
    }
}
