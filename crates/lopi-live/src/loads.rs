//! Libraries a followed process loads after its probes went in (`dlopen`): ld.so calls
//! `_dl_debug_state` (`r_debug.r_brk`, the debuggers' rendezvous) before and after it changes
//! its list of modules. lopi puts an `int3` on that function's `ret`; at the trap it returns
//! for the thread (pops the return address, as the `ret` would), and when the list is
//! consistent again (`RT_CONSISTENT`) the new modules are planned and probed before the
//! program uses them: their relocations and constructors run after that call.
use crate::error::LiveError;
use crate::procfs::Memory;
use crate::tracee::Regs;
use nix::sys::ptrace;
use nix::unistd::Pid;

/// `struct r_debug` (link.h): `r_brk` and `r_state` offsets, and `RT_CONSISTENT`.
const R_BRK: u64 = 16;
const R_STATE: u64 = 24;
const RT_CONSISTENT: u32 = 0;
const RET: u8 = 0xc3;
const ENDBR64_RET: [u8; 5] = [0xf3, 0x0f, 0x1e, 0xfa, RET];

/// The trap on ld.so's rendezvous in a process (and in its forks, which share its code).
#[derive(Clone, Copy, Debug)]
pub struct LoadWatch {
    /// Where the `int3` is (the `ret` of `_dl_debug_state`).
    pub at: u64,
    r_debug: u64,
}

/// Puts the trap into process `pid` (held by lopi); why not, when ld.so does not look as
/// expected (then later loads go unprobed).
pub(crate) fn watch(pid: i32, mem: &Memory) -> Result<LoadWatch, String> {
    let maps = crate::procfs::maps(pid).map_err(|e| format!("reading the mappings: {e}"))?;
    let ldso = crate::glibc::loaded(pid, &maps, "ld-linux-x86-64.so.2").ok_or("no ld-linux-x86-64.so.2 is loaded")?;
    let r_debug = ldso.symbol("_r_debug").ok_or("ld.so has no _r_debug")?;
    let r_brk = mem.read_u64(r_debug + R_BRK).map_err(|e| format!("reading r_debug: {e}"))?;
    let at = return_of(mem, r_brk)?;
    mem.write(at, &[0xcc]).map_err(|e| format!("writing the trap: {e}"))?;
    Ok(LoadWatch { at, r_debug })
}

/// The `ret` of `_dl_debug_state` at `addr` (after its `endbr64`, if any).
fn return_of(mem: &Memory, addr: u64) -> Result<u64, String> {
    let code = mem.read(addr, ENDBR64_RET.len()).map_err(|e| format!("reading _dl_debug_state: {e}"))?;
    if code[0] == RET {
        Ok(addr)
    } else if code == ENDBR64_RET {
        Ok(addr + 4)
    } else {
        Err(format!("_dl_debug_state is not a bare return ({code:02x?})"))
    }
}

/// A dynamically linked program at its `exec`: where ld.so will tell debuggers that every
/// library is loaded (`_dl_debug_state`'s `ret`, which its `RT_ADD` and then its
/// `RT_CONSISTENT` call reach), and its `r_debug`. By the `RT_CONSISTENT` call the libraries
/// are relocated and the thread's TLS is set up, and no library's constructor has run
/// (`_dl_init` comes after; glibc 2.36's rtld.c). `None` for a program without ld.so.
pub(crate) fn rendezvous(pid: i32, mem: &Memory) -> Option<(u64, u64)> {
    let maps = crate::procfs::maps(pid).ok()?;
    let ldso = crate::glibc::loaded(pid, &maps, "ld-linux-x86-64.so.2")?;
    Some((return_of(mem, ldso.symbol("_dl_debug_state")?).ok()?, ldso.symbol("_r_debug")?))
}

/// Whether ld.so's list of modules at `r_debug` is consistent.
pub(crate) fn consistent(mem: &Memory, r_debug: u64) -> bool {
    mem.read(r_debug + R_STATE, 4).is_ok_and(|s| s == RT_CONSISTENT.to_le_bytes())
}

impl LoadWatch {
    /// Puts the `ret` back.
    pub(crate) fn remove(&self, mem: &Memory) -> std::io::Result<()> {
        mem.write(self.at, &[RET])
    }

    /// Thread `tid`, stopped by a `SIGTRAP` with `regs`, hit this trap: returns from
    /// `_dl_debug_state` for it. `Some(true)` when ld.so's list of modules is consistent (a
    /// load or unload is done), `Some(false)` when it is about to change, `None` when the trap
    /// was not this one.
    pub(crate) fn returned(&self, pid: i32, tid: i32, mut regs: Regs) -> Result<Option<bool>, LiveError> {
        if regs.rip != self.at + 1 {
            return Ok(None);
        }
        let mem = Memory::open(pid).map_err(LiveError::io(format!("opening /proc/{pid}/mem")))?;
        regs.rip = mem.read_u64(regs.rsp).map_err(LiveError::io("reading a return address"))?;
        regs.rsp += 8;
        ptrace::setregs(Pid::from_raw(tid), regs).map_err(|e| LiveError::ptrace("writing registers of", tid, e))?;
        let state = mem.read(self.r_debug + R_STATE, 4).map_err(LiveError::io("reading r_debug"))?;
        Ok(Some(u32::from_le_bytes(state.try_into().unwrap_or([0xff; 4])) == RT_CONSISTENT))
    }
}
