//! Putting a plan's probes into a held process and taking them out again, and the record
//! of what was put where (`Installation`) and of what removal did (`Removal`).
use crate::error::LiveError;
use crate::glibc;
use crate::placement;
use crate::plan::{ModulePlan, Plan};
use crate::procfs::{self, Mapping};
use crate::spec::EnvBlock;
use crate::target::{sys, Gadget, Target};
use lopi_elf::Svma;
use lopi_image::ProbeImage;
use lopi_patch::{CodePatch, Outcome, TimingOutcome};
use lopi_rt_abi::{own_calls, page_align, RuntimeVars, PAGE_SIZE};
use nix::errno::Errno;
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

/// A module with probes in it.
pub struct InstalledModule {
    pub path: String,
    /// Load bias: run-time address minus file address.
    pub bias: u64,
    pub functions: usize,
    pub outcomes: Vec<Outcome>,
    pub timing: Vec<TimingOutcome>,
    pub exit_sites: usize,
    /// Its `syscall` instructions and how each was probed (empty unless asked for).
    pub syscalls: Vec<lopi_patch::SyscallSite>,
    /// The selected functions' basic blocks and their probes (empty unless asked for).
    pub blocks: Vec<lopi_patch::blocks::FunctionBlocks>,
    /// Run-time addresses of the image mapping and of its code.
    pub image: Range<u64>,
    code: Range<u64>,
    pub(crate) vars: u64,
    pub(crate) timed: bool,
    /// Run-time address, jump bytes, original bytes.
    patches: Vec<CodePatch>,
    /// Run-time address and bytes of the jumps the runtime may retarget when the budget
    /// switches a function to counting (see `lopi_patch::SwitchPatches`).
    retargets: Vec<(u64, Vec<u8>)>,
    /// Probed `syscall`s: run-time address right after the original and after its moved
    /// copy, where a thread in that call returns to.
    syscall_returns: Vec<(u64, u64)>,
}

/// Probes in a process, and what it took to put them there.
pub struct Installation {
    pub modules: Vec<InstalledModule>,
    /// Device and inode of the data file (from `/proc/PID/maps`), to unmap its mappings.
    data_file: Option<(String, u64)>,
}

impl Installation {
    pub fn sites(&self) -> usize {
        self.modules.iter().map(|m| m.patches.len()).sum()
    }
}

/// A coverage site its runtime was putting back when the threads were stopped: the filler
/// after the jump is original already, the jump not yet (see the runtime's `retire.rs`). Still
/// lopi's: left as it is, it would jump into a trampoline about to be unmapped.
fn half_retired(now: &[u8], patch: &CodePatch) -> bool {
    let jump = match patch.bytes.first() {
        Some(0xe9) => 5, // jmp rel32
        Some(0xeb) => 2, // jmp rel8, to a bounce
        _ => return false,
    };
    now.len() == patch.original.len() && now.get(..jump) == patch.bytes.get(..jump) && now.get(jump..) == patch.original.get(jump..)
}

/// A site whose jump the runtime retargeted to its trampoline's counting code (the budget
/// switched its function): still lopi's.
fn retargeted(now: &[u8], patch: &CodePatch, retargets: &[(u64, Vec<u8>)]) -> bool {
    retargets.iter().any(|(at, jump)| *at == patch.at.0 && now.len() == patch.bytes.len() && now.starts_with(jump) && now.get(jump.len()..) == patch.bytes.get(jump.len()..))
}

/// What removal did.
#[derive(Debug, Default)]
pub struct Removal {
    pub restored_sites: usize,
    /// Sites whose bytes someone else had changed since: left as they were.
    pub changed_sites: usize,
    /// Threads found inside lopi's code, waited for.
    pub waited_threads: usize,
    /// Mappings left because a thread stayed inside lopi's code (a leak, never a crash).
    pub kept_mappings: usize,
    /// Why threads' timing state was left mapped, if it was (see `glibc.rs`).
    pub kept_thread_state: Option<String>,
    /// The `munmap` calls lopi made in the process to take its mappings out, and their TSC
    /// ticks: its own calls, which the data file's process-end record keeps.
    pub unmaps: u64,
    pub unmap_ticks: u64,
}

impl Target {
    /// Maps, writes and initialises every planned module's probes, then writes the jumps.
    /// On error, whatever was installed is taken out again.
    pub fn install(&mut self, plan: &mut Plan) -> Result<Installation, LiveError> {
        let pid = self.pid();
        if plan.pid != pid {
            return Err(LiveError::Module(format!("the plan is for process {}, not {pid}", plan.pid)));
        }
        let maps = procfs::maps(pid).map_err(LiveError::io(format!("reading /proc/{pid}/maps")))?;
        let gadget = self.place_gadget(&maps, &plan.exe)?;
        let mut installation = Installation { modules: Vec::new(), data_file: None };
        let mut mapped = 0;
        let mut result = self.map_images(plan, &maps, gadget, &mut mapped);
        let env = EnvBlock::new(&plan.env);
        if result.is_ok() {
            for module in &mut plan.modules {
                match self.install_module(module, &env, gadget, &mut installation) {
                    Ok(installed) => installation.modules.push(installed),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        if result.is_err() {
            // Images mapped for modules that were not installed (those that were go below).
            for module in plan.modules.get(installation.modules.len()..mapped).unwrap_or_default() {
                let _ = self.syscall(gadget, sys::MUNMAP, [module.start, module.len, 0, 0, 0, 0]);
            }
        }
        self.restore_gadget(gadget)?;
        if let Err(e) = result {
            let _ = self.remove(&installation);
            return Err(e);
        }
        Ok(installation)
    }

    /// Maps every module's image (read-write: `load` fills it) before any runtime starts,
    /// where it was planned if that is still free, else laid out again in the hole nearest
    /// its module's code: `lopi attach` plans while the process runs, and a runtime's init
    /// maps its data file where the kernel finds room, which would often be where the next
    /// image was planned (right below the lowest library). `mapped`: how many were mapped.
    fn map_images(&mut self, plan: &mut Plan, maps: &[Mapping], gadget: Gadget, mapped: &mut usize) -> Result<(), LiveError> {
        let pid = self.pid();
        let mut busy = placement::occupied(maps, procfs::start_brk(pid));
        for module in &mut plan.modules {
            if !module.fits(&busy) {
                module.place_again(&busy)?;
            }
            let (start, len) = (module.start, module.len);
            let flags = sys::MAP_PRIVATE_ANONYMOUS | sys::MAP_FIXED_NOREPLACE;
            let at = self.syscall(gadget, sys::MMAP, [start, len, sys::PROT_READ | sys::PROT_WRITE, flags, u64::MAX, 0])?;
            if at != start {
                let why = match at as i64 {
                    e if e < 0 => std::io::Error::from_raw_os_error(-e as i32).to_string(),
                    _ => {
                        // A kernel older than MAP_FIXED_NOREPLACE (4.17) maps elsewhere.
                        self.syscall(gadget, sys::MUNMAP, [at, len, 0, 0, 0, 0])?;
                        format!("the kernel put them at {at:#x}")
                    }
                };
                return Err(LiveError::Module(format!("{}: the process could not map {len} bytes at {start:#x}, free in its /proc/{pid}/maps: {why}", module.path)));
            }
            *mapped += 1;
            busy.push((start, start + len + PAGE_SIZE));
            busy.sort_unstable();
        }
        Ok(())
    }

    fn install_module(
        &mut self,
        planned: &mut ModulePlan,
        env: &EnvBlock,
        gadget: Gadget,
        installation: &mut Installation,
    ) -> Result<InstalledModule, LiveError> {
        let (bias, start, len) = (planned.bias, planned.start, planned.len);
        let path = planned.path.clone();
        while let Some(site) = self.free_sites(&planned.image.plan.code_patches, &syscall_returns(&planned.image, bias), bias)? {
            planned.withdraw(site)?;
        }
        let image = &planned.image;
        self.check_originals(&path, &image.plan.code_patches, bias)?;
        let patches: Vec<CodePatch> = image
            .plan
            .code_patches
            .iter()
            .map(|p| CodePatch { at: Svma(p.at.0.wrapping_add(bias)), bytes: p.bytes.clone(), original: p.original.clone() })
            .collect();
        let mut installed = InstalledModule {
            path: path.clone(),
            bias,
            functions: planned.functions,
            outcomes: image.plan.outcomes.clone(),
            timing: image.plan.timing.clone(),
            exit_sites: image.plan.exit_sites,
            syscalls: image.plan.syscalls.clone(),
            blocks: image.plan.blocks.clone(),
            image: start..start + len,
            code: image.rx.start.wrapping_add(bias)..image.rx.end.wrapping_add(bias),
            vars: image.vars.wrapping_add(bias),
            timed: image.plan.keeps_thread_state(),
            patches,
            retargets: image
                .plan
                .switch_patches
                .iter()
                .filter_map(|s| s.entry.as_ref())
                .map(|w| (w.at.0.wrapping_add(bias), w.bytes.clone()))
                .collect(),
            syscall_returns: syscall_returns(image, bias),
        };
        if let Err(e) = self.load(image, env, bias, gadget, &path) {
            installed.patches.clear();
            installation.modules.push(installed);
            return Err(e);
        }
        if installation.data_file.is_none() {
            installation.data_file = self.data_file_of(image.rw.start.wrapping_add(bias));
        }
        // Threads waiting in a probed system call return into its trampoline (a restart
        // runs its moved copy), so that the site can be patched under them.
        self.move_waiting_threads(installed.syscall_returns.iter().copied())?;
        self.write_patches(&installed.patches, |p| &p.bytes)?;
        Ok(installed)
    }

    /// Threads stopped in a system call that returns to (or restarts from) the first of a
    /// pair of addresses continue from the second instead.
    fn move_waiting_threads(&self, moves: impl Iterator<Item = (u64, u64)> + Clone) -> Result<(), LiveError> {
        for tid in self.threads.tids() {
            let mut regs = self.threads.regs(tid)?;
            if regs.orig_rax as i64 >= 0 {
                if let Some((_, to)) = moves.clone().find(|&(from, _)| from == regs.rip) {
                    regs.rip = to;
                    self.threads.set_regs(tid, regs)?;
                }
            }
        }
        Ok(())
    }

    /// Writes the image into its mapping, protects it, and runs the runtime's init.
    fn load(&mut self, image: &ProbeImage, env: &EnvBlock, bias: u64, gadget: Gadget, path: &str) -> Result<(), LiveError> {
        let mut bytes = image.bytes.clone();
        let env_at = image.r.start.wrapping_add(bias);
        let header = (image.r.start - image.rw.start) as usize;
        bytes[header..header + env.len()].copy_from_slice(&env.bytes(env_at));
        let start = image.rw.start.wrapping_add(bias);
        self.mem.write(start, &bytes).map_err(LiveError::io(format!("writing lopi's code into process {}", self.pid())))?;
        for (range, prot) in [(&image.rx, sys::PROT_READ | sys::PROT_EXEC), (&image.r, sys::PROT_READ)] {
            let len = page_align(range.end.wrapping_sub(range.start));
            let r = self.syscall(gadget, sys::MPROTECT, [range.start.wrapping_add(bias), len, prot, 0, 0, 0])?;
            if r != 0 {
                return Err(LiveError::Module(format!("{path}: mprotect in the process failed ({})", r as i64)));
            }
        }
        self.account_injected(image.vars.wrapping_add(bias) - own_calls::LEN)?;
        let tid = self.threads.leader();
        let mut regs = self.threads.regs(tid)?;
        let trap = image.entry_code.wrapping_add(bias);
        // Below the red zone, 16-byte aligned before the call's return address.
        let sp = (regs.rsp - 512) & !15;
        self.mem.write(sp - 8, &trap.to_le_bytes()).map_err(LiveError::io("writing to the target's stack"))?;
        regs.rsp = sp - 8;
        regs.rip = image.init.wrapping_add(bias);
        regs.rdi = image.descriptor.wrapping_add(bias);
        regs.rsi = 0;
        regs.rdx = 0;
        regs.rcx = env_at;
        regs.rax = 0;
        let done = self.threads.run_injected(tid, regs, trap)?;
        let status = done.rax as i64;
        if status == lopi_rt_abi::INIT_NOT_A_DATA_FILE {
            return Err(LiveError::Module("the output exists and is not a lopi data file of this version; remove it or choose another LOPI_OUTPUT".into()));
        }
        if status < 0 {
            let errno = Errno::from_raw(-status as i32);
            return Err(LiveError::Module(format!("{path}: the runtime could not open or register its data file: {errno}")));
        }
        Ok(())
    }

    /// A site with a thread stopped strictly inside its bytes, after stepping such threads
    /// out where possible. A thread in a probed system call is no obstacle: it is moved into
    /// the trampoline (`syscall_returns`).
    fn free_sites(&mut self, patches: &[CodePatch], syscall_returns: &[(u64, u64)], bias: u64) -> Result<Option<Svma>, LiveError> {
        const MAX_STEPS: usize = 64;
        let inside = |rip: u64| {
            patches.iter().find(|p| {
                let start = p.at.0.wrapping_add(bias);
                rip > start && rip < start + p.bytes.len() as u64
            })
        };
        for tid in self.threads.tids() {
            let mut steps = 0;
            loop {
                let regs = self.threads.regs(tid)?;
                let restart = regs.orig_rax as i64 >= 0 && sys::RESTARTS.contains(&(regs.rax as i64));
                let hit = inside(regs.rip).or_else(|| if restart { inside(regs.rip - 2) } else { None });
                let Some(patch) = hit else { break };
                if regs.orig_rax as i64 >= 0 && syscall_returns.iter().any(|&(from, _)| from == regs.rip) {
                    break;
                }
                if restart || steps == MAX_STEPS {
                    return Ok(Some(patch.at));
                }
                self.threads.step(tid)?;
                steps += 1;
            }
        }
        Ok(None)
    }

    /// Refuses a module whose code in memory is not the file's: it was modified (another
    /// tool, a previous lopi still attached) or the file changed on disk.
    /// (One read per code page: thousands of sites cost a few reads, not thousands.)
    fn check_originals(&self, path: &str, patches: &[CodePatch], bias: u64) -> Result<(), LiveError> {
        for (start, end, on_page) in by_page(patches, bias, |p| p.original.len()) {
            let now = self.mem.read(start, (end - start) as usize).map_err(LiveError::io(format!("reading code at {start:#x}")))?;
            for p in on_page {
                let at = p.at.0.wrapping_add(bias);
                let offset = (at - start) as usize;
                if now[offset..offset + p.original.len()] != p.original {
                    return Err(LiveError::Module(format!(
                        "{path}: the code at {at:#x} differs from the file (already instrumented, patched by another tool, or the file changed on disk)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Writes every patch, one read-modify-write per page.
    fn write_patches(&self, patches: &[CodePatch], bytes: impl Fn(&CodePatch) -> &Vec<u8>) -> Result<(), LiveError> {
        for (start, end, on_page) in by_page(patches, 0, |p| bytes(p).len()) {
            let mut buf = self.mem.read(start, (end - start) as usize).map_err(LiveError::io(format!("reading code at {start:#x}")))?;
            for p in on_page {
                let at = (p.at.0 - start) as usize;
                let b = bytes(p);
                buf[at..at + b.len()].copy_from_slice(b);
            }
            self.mem.write(start, &buf).map_err(LiveError::io(format!("writing code at {start:#x}")))?;
        }
        Ok(())
    }

    /// The device and inode of the file mapped at `addr` (the module's counters, which the
    /// runtime maps onto the data file).
    fn data_file_of(&self, addr: u64) -> Option<(String, u64)> {
        let maps = procfs::maps(self.pid()).ok()?;
        let m = maps.into_iter().find(|m| m.start <= addr && addr < m.end)?;
        (m.inode != 0).then_some((m.dev, m.inode))
    }

    /// Takes every probe out: original bytes back, threads out of lopi's code, lopi's
    /// mappings (image, runtime pages, data-file views) unmapped.
    pub fn remove(&mut self, installation: &Installation) -> Result<Removal, LiveError> {
        let mut removal = Removal::default();
        // The gadget's calls below, and calls of the program after it, must not be caught
        // (a thread finishing a trampoline may set its selector back: `unmap` does it again).
        self.allow_calls()?;
        self.stop_sampling_of(installation)?;
        self.stop_profile_of(installation)?;
        for module in &installation.modules {
            let mut restore = Vec::new();
            for p in &module.patches {
                let now = self.mem.read(p.at.0, p.bytes.len()).map_err(LiveError::io(format!("reading code at {:#x}", p.at.0)))?;
                if now == p.bytes || half_retired(&now, p) || retargeted(&now, p, &module.retargets) {
                    restore.push(p.clone());
                } else if now != p.original {
                    removal.changed_sites += 1;
                }
            }
            self.write_patches(&restore, |p| &p.original)?;
            removal.restored_sites += restore.len();
            // A thread waiting in a probed system call would return into the trampoline:
            // it returns to the original code, where the call is again.
            self.move_waiting_threads(module.syscall_returns.iter().map(|&(original, moved)| (moved, original)))?;
        }

        // Nothing jumps into lopi's code any more; wait for threads still inside it.
        let ours: Vec<Range<u64>> = installation.modules.iter().map(|m| m.code.clone()).collect();
        let mut waited = std::collections::BTreeSet::new();
        let mut pause = Duration::from_micros(200);
        let mut inside = self.threads_inside(&ours)?;
        for _ in 0..200 {
            if inside.is_empty() {
                break;
            }
            waited.extend(inside.iter().copied());
            self.threads.run_for(&inside, pause)?;
            pause = (pause * 2).min(Duration::from_millis(50));
            inside = self.threads_inside(&ours)?;
        }
        removal.waited_threads = waited.len();
        let stuck = !inside.is_empty();
        if stuck {
            removal.kept_mappings = installation.modules.len();
            return Ok(removal);
        }

        self.with_gadget(|target, maps, gadget| target.unmap(installation, maps, gadget, &mut removal))?;
        Ok(removal)
    }

    /// Threads whose instruction pointer is in one of `ranges`.
    fn threads_inside(&self, ranges: &[Range<u64>]) -> Result<Vec<i32>, LiveError> {
        let mut inside = Vec::new();
        for tid in self.threads.tids() {
            let rip = self.threads.regs(tid)?.rip;
            if ranges.iter().any(|r| r.contains(&rip)) {
                inside.push(tid);
            }
        }
        Ok(inside)
    }

    fn unmap(&mut self, installation: &Installation, maps: &[Mapping], gadget: Gadget, removal: &mut Removal) -> Result<(), LiveError> {
        self.allow_calls()?;
        self.restore_signal_actions(installation, gadget)?;
        let mut keep_data_mappings = false;
        if installation.modules.iter().any(|m| m.timed) {
            // Threads find their chunk through fs:0x38 (and a fork snapshot through
            // fs:0x40); those words must not outlive the chunks, also in descriptors glibc
            // caches for reuse. If they cannot all be found, the chunks stay mapped.
            for tid in self.threads.tids() {
                let fs = self.threads.regs(tid)?.fs_base;
                if fs != 0 {
                    let _ = self.mem.write(fs + glibc::LOPI_TCB_WORDS, &[0; 16]);
                }
            }
            if let Err(why) = glibc::clear_thread_words(self.pid(), &self.mem, maps) {
                keep_data_mappings = true;
                removal.kept_thread_state = Some(why);
            }
        }
        let mut ranges = Vec::new();
        for m in &installation.modules {
            if m.timed {
                let page = self.mem.read_u64(m.vars + std::mem::offset_of!(RuntimeVars, pid_page) as u64).unwrap_or(0);
                if page != 0 {
                    ranges.push((page, PAGE_SIZE));
                }
            }
            ranges.push((m.image.start, m.image.end - m.image.start));
        }
        if let Some((dev, inode)) = installation.data_file.as_ref().filter(|_| !keep_data_mappings) {
            ranges.extend(maps.iter().filter(|m| &m.dev == dev && m.inode == *inode).map(|m| (m.start, m.end - m.start)));
        }
        self.injected.clear();
        for (start, len) in ranges {
            self.syscall(gadget, sys::MUNMAP, [start, len, 0, 0, 0, 0])?;
        }
        (removal.unmaps, removal.unmap_ticks) = self.injected.remove(&sys::MUNMAP).unwrap_or_default();
        Ok(())
    }
}

/// Patches of `len(patch)` bytes at `patch.at + bias`, grouped by the page they start on:
/// (first address, end, patches) of each page.
fn by_page(patches: &[CodePatch], bias: u64, len: impl Fn(&CodePatch) -> usize) -> Vec<(u64, u64, Vec<&CodePatch>)> {
    let mut pages: BTreeMap<u64, (u64, u64, Vec<&CodePatch>)> = BTreeMap::new();
    for p in patches {
        let at = p.at.0.wrapping_add(bias);
        let page = pages.entry(at & !(PAGE_SIZE - 1)).or_insert((at, at, Vec::new()));
        page.0 = page.0.min(at);
        page.1 = page.1.max(at + len(p) as u64);
        page.2.push(p);
    }
    pages.into_values().collect()
}

/// Each probed `syscall`'s return address in the original code and in its trampoline, as
/// run-time addresses.
fn syscall_returns(image: &ProbeImage, bias: u64) -> Vec<(u64, u64)> {
    let at = |p: &lopi_patch::Probe| match p.point {
        lopi_patch::ProbePoint::Syscall { at, returns_to, .. } => Some((at.0.wrapping_add(2).wrapping_add(bias), returns_to.0.wrapping_add(bias))),
        _ => None,
    };
    image.plan.probes.iter().filter_map(at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_whose_filler_is_back_but_not_its_jump_is_still_lopis() {
        let patch = CodePatch { at: Svma(0x1000), bytes: vec![0xe9, 1, 2, 3, 4, 0xcc, 0xcc], original: vec![0x48, 0x89, 0xe5, 0x41, 0x54, 0x53, 0x90] };
        let half = [0xe9, 1, 2, 3, 4, 0x53, 0x90];
        assert!(half_retired(&half, &patch));
        assert!(!half_retired(&patch.original, &patch));
        assert!(!half_retired(&[0xe9, 9, 2, 3, 4, 0x53, 0x90], &patch));
        assert!(!half_retired(&[0xe9, 1, 2, 3, 4, 0x53, 0x91], &patch));
    }
}
