//! The live installer: puts the planner's probes into a running process and takes them out.
//!
//! This is GILK's runtime code splicing applied to a user process. With every thread held
//! (ptrace), lopi maps each module's probe image (`lopi-image`: counters, runtime, trampolines)
//! within `jmp rel32` reach of the module, writes it through `/proc/PID/mem`, runs the
//! runtime's init in one thread, then writes the jumps and lets the threads go. From then on
//! the probes run in-process exactly as in a rewritten file; ptrace is not involved again
//! until removal, which writes the original bytes back, waits until no thread is inside a
//! trampoline or the runtime, and unmaps everything lopi mapped.
//!
//! Safety with running threads: nothing is written while a thread runs, and no thread is left
//! with its instruction pointer strictly inside bytes being replaced. A thread found there is
//! stepped out (a few instructions: a site's bytes hold no branch target); one that cannot be
//! (waiting in a system call that would restart there) costs that site: the planner drops it
//! and lays out again.
#![deny(unsafe_code)]

mod glibc;
mod placement;
mod plan;
pub mod procfs;
mod tracee;

use lopi_elf::Svma;
use lopi_image::{ProbeImage, Recording};
pub use plan::{plan, ModulePlan, Plan};
use lopi_patch::{CodePatch, Filter, Outcome, Probes, TimingOutcome};
use lopi_rt_abi::{own_calls, page_align, RuntimeVars, PAGE_SIZE};
use nix::errno::Errno;
use procfs::{Mapping, Memory};
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::{Duration, Instant};
use tracee::{Regs, Threads};

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    #[error("not allowed to trace pid {pid}: {hint}")]
    PermissionDenied { pid: i32, hint: String },
    #[error("pid {pid} is already traced by pid {tracer} ({name}); detach that tool first")]
    AlreadyTraced { pid: i32, tracer: i32, name: String },
    #[error("pid {pid} runs {exe}, which is not an x86-64 program ({what})")]
    WrongArchitecture { pid: i32, exe: String, what: &'static str },
    #[error("{what} thread {tid}: {errno}")]
    Ptrace { what: &'static str, tid: i32, errno: Errno },
    #[error("process {0} exited")]
    TargetExited(i32),
    #[error("lopi's code injected into thread {tid} stopped with {signal} at {rip:#x}")]
    InjectedFault { tid: i32, signal: nix::sys::signal::Signal, rip: u64 },
    #[error("lopi's code injected into thread {0} did not finish within 20 s")]
    InjectedTimeout(i32),
    #[error("{0}")]
    Module(String),
    #[error("cannot start {program}: {why}")]
    Start { program: String, why: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

impl LiveError {
    fn ptrace(what: &'static str, tid: i32, errno: Errno) -> Self {
        LiveError::Ptrace { what, tid, errno }
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| LiveError::Io { what, source }
    }
}

/// Which functions of which module to probe.
#[derive(Clone, Debug)]
pub struct ModuleRequest {
    /// `None`: the main executable. `Some(name)`: the loaded library whose file name is
    /// `name` or starts with `name.` or `name-` (`libc` finds `libc.so.6`).
    pub library: Option<String>,
    pub filter: Filter,
    pub probes: Probes,
    /// Functions (by name) counted, not timed, whatever `probes` says (a script only counts
    /// their calls).
    pub count_only: Vec<String>,
    /// The module gets the spec's script (its points name functions of it).
    pub scripted: bool,
}

/// What to install.
#[derive(Clone, Debug)]
pub struct Spec {
    pub modules: Vec<ModuleRequest>,
    /// Probes for every loaded module, asked for or not: `syscall` instructions (libc, ld.so,
    /// the vDSO) and lock functions (libc).
    pub everywhere: lopi_patch::Probes,
    pub recording: Recording,
    /// Environment the runtime sees: `LOPI_OUTPUT` (absolute) and its knobs.
    pub env: Vec<(String, String)>,
    /// Where planned selections are kept and looked up; `None`: plan every time.
    pub cache: Option<lopi_cache::PlanCache>,
    /// A probe script for the main executable (`lopi trace`).
    pub script: Option<std::sync::Arc<lopi_image::script::ScriptSpec>>,
}

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
    vars: u64,
    timed: bool,
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

/// A process with every thread held.
pub struct Target {
    threads: Threads,
    mem: Memory,
    /// Set by `lopi run`: the program's entry point, where it was stopped.
    entry: Option<u64>,
    /// The system calls lopi made in the process since they were last accounted for: calls
    /// and TSC ticks (the time the thread was held for them) by number. They are lopi's own,
    /// as its runtime's are (`lopi_rt_abi::own_calls`).
    injected: BTreeMap<u64, (u64, u64)>,
}

/// The time-stamp counter, the clock of lopi's runtime.
#[allow(unsafe_code)]
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// `syscall; int3`, written where injected system calls run.
const SYSCALL_GADGET: [u8; 3] = [0x0f, 0x05, 0xcc];

mod sys {
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const PROT_READ: u64 = 1;
    pub const PROT_WRITE: u64 = 2;
    pub const PROT_EXEC: u64 = 4;
    pub const MAP_PRIVATE_ANONYMOUS: u64 = 0x02 | 0x20;
    pub const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;
    /// Kernel return values that restart the interrupted system call (include/linux/errno.h).
    pub const RESTARTS: [i64; 4] = [-512, -513, -514, -516];
}

/// What can be checked about `pid` without touching it: it exists, is not lopi, runs
/// x86-64 code, and no other tracer holds it.
pub fn preflight(pid: i32) -> Result<(), LiveError> {
    if pid <= 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(LiveError::NoSuchProcess(pid));
    }
    if pid as u32 == std::process::id() {
        return Err(LiveError::Module("lopi cannot attach to itself".into()));
    }
    check_architecture(pid)?;
    match procfs::tracer(pid) {
        Some(tracer) => Err(already_traced(pid, tracer)),
        None => Ok(()),
    }
}

/// Starts `command` under ptrace and takes it over at its entry point (see
/// [`Target::adopt_launched`]). The child is killed if that fails.
pub fn launch(mut command: std::process::Command) -> Result<(Target, std::process::Child), LiveError> {
    use std::os::unix::process::CommandExt;
    let program = command.get_program().to_string_lossy().into_owned();
    // SAFETY: the closure runs in the forked child before exec and makes only the
    // ptrace(PTRACE_TRACEME) system call, which is async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| nix::sys::ptrace::traceme().map_err(std::io::Error::from));
    }
    let mut child = command.spawn().map_err(|e| LiveError::Start { why: start_failure(&program, &e), program })?;
    match Target::adopt_launched(child.id() as i32) {
        Ok(target) => Ok((target, child)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Why `program` could not be started (`spawn`'s error `e`), and what to do.
pub fn start_failure(program: &str, e: &std::io::Error) -> String {
    let given = std::path::Path::new(program);
    match e.kind() {
        std::io::ErrorKind::NotFound if !program.contains('/') => "no such program in PATH (give its path)".into(),
        std::io::ErrorKind::NotFound if given.exists() => "its interpreter (the ELF loader, or a script's #! line) does not exist".into(),
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied (a directory, or a file without execute permission: chmod +x)".into(),
        _ => e.to_string(),
    }
}

impl Target {
    /// Seizes every thread of `pid`. Checks first what a user can fix ([`preflight`]).
    pub fn attach(pid: i32) -> Result<Self, LiveError> {
        preflight(pid)?;
        let threads = Threads::stop_all(pid).map_err(|e| match e {
            LiveError::Ptrace { errno: Errno::EPERM, .. } => match procfs::tracer(pid) {
                Some(tracer) => already_traced(pid, tracer),
                None => LiveError::PermissionDenied { pid, hint: permission_hint() },
            },
            LiveError::Ptrace { errno: Errno::ESRCH, .. } => LiveError::NoSuchProcess(pid),
            e => e,
        })?;
        let mem = Memory::open(pid).map_err(LiveError::io(format!("opening /proc/{pid}/mem")))?;
        Ok(Target { threads, mem, entry: None, injected: BTreeMap::new() })
    }

    /// Takes over a child launched with `PTRACE_TRACEME` and stopped at its `exec`: runs it
    /// to its entry point, where every library is loaded and initialised (glibc's TLS and
    /// rseq registration included) and the program's own code has not run.
    pub fn adopt_launched(pid: i32) -> Result<Self, LiveError> {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let child = nix::unistd::Pid::from_raw(pid);
        match waitpid(child, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Stopped(_, nix::sys::signal::Signal::SIGTRAP)) => {}
            Ok(other) => return Err(LiveError::Module(format!("the launched program did not stop at exec ({other:?})"))),
            Err(e) => return Err(LiveError::ptrace("waiting for", pid, e)),
        }
        check_architecture(pid)?;
        let mem = Memory::open(pid).map_err(LiveError::io(format!("opening /proc/{pid}/mem")))?;
        let entry = procfs::auxv(pid, 9).ok_or_else(|| LiveError::Module("no AT_ENTRY in the program's auxiliary vector".into()))?;
        let original = mem.read(entry, 1).map_err(LiveError::io("reading the entry point"))?;
        mem.write(entry, &[0xcc]).map_err(LiveError::io("writing a breakpoint at the entry point"))?;
        let mut threads = Threads::adopt(pid)?;
        let regs = threads.regs(pid)?;
        let reached = threads.run_injected(pid, regs, entry);
        mem.write(entry, &original).map_err(LiveError::io("restoring the entry point"))?;
        let mut at_entry = reached?;
        // run_injected put the exec-stop registers back; the program continues from its entry.
        at_entry.rip = entry;
        threads.set_regs(pid, at_entry)?;
        // Library constructors may have started threads.
        threads.stop_new_threads()?;
        Ok(Target { threads, mem, entry: Some(entry), injected: BTreeMap::new() })
    }

    pub fn pid(&self) -> i32 {
        self.threads.pid
    }

    /// Where `lopi run` stopped the program (its entry point), for [`plan`].
    pub fn entry(&self) -> Option<u64> {
        self.entry
    }

    pub fn thread_count(&self) -> usize {
        self.threads.tids().len()
    }

    /// Lets every thread go.
    pub fn release(self) {
        self.threads.release();
    }

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

        let maps = procfs::maps(self.pid()).map_err(LiveError::io("reading the process's mappings"))?;
        let exe = procfs::exe(self.pid()).map(|p| p.display().to_string()).unwrap_or_default();
        let gadget = self.place_gadget(&maps, &exe)?;
        let result = self.unmap(installation, &maps, gadget, &mut removal);
        self.restore_gadget(gadget)?;
        result?;
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

    /// Runs one system call in the leader thread through the gadget (counted in `injected`).
    fn syscall(&mut self, gadget: Gadget, nr: u64, args: [u64; 6]) -> Result<u64, LiveError> {
        let tid = self.threads.leader();
        let mut regs: Regs = self.threads.regs(tid)?;
        regs.rip = gadget.at;
        regs.rax = nr;
        (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
        let start = tsc();
        let done = self.threads.run_injected(tid, regs, gadget.at + 2);
        let e = self.injected.entry(nr).or_default();
        *e = (e.0 + 1, e.1 + tsc().saturating_sub(start));
        Ok(done?.rax)
    }

    /// Adds the calls injected so far into a module's table of the runtime's own calls,
    /// before its init (which carries the table over into the data file; it is zero and
    /// private until then, and no thread runs).
    fn account_injected(&mut self, table: u64) -> Result<(), LiveError> {
        for (nr, (calls, ticks)) in std::mem::take(&mut self.injected) {
            let mut entry = calls.to_le_bytes().to_vec();
            entry.extend_from_slice(&ticks.to_le_bytes());
            self.mem.write(table + own_calls::entry(nr), &entry).map_err(LiveError::io("writing lopi's call counts into the process"))?;
        }
        Ok(())
    }

    /// Writes `syscall; int3` into the alignment padding after the main executable's code
    /// segment: bytes of an executable page that no code reaches.
    fn place_gadget(&self, maps: &[Mapping], exe: &str) -> Result<Gadget, LiveError> {
        let executable = maps.iter().filter(|m| m.executable && m.path == exe);
        for m in executable {
            // The padding ends the mapping; the segment's last code byte is before it.
            let bytes = self.mem.read(m.end - 64, 64).map_err(LiveError::io("reading the executable's code"))?;
            let zeros = bytes.iter().rev().take_while(|&&b| b == 0).count();
            if zeros >= 8 {
                let at = m.end - 4;
                let saved = self.mem.read(at, 3).map_err(LiveError::io("reading the executable's code"))?;
                self.mem.write(at, &SYSCALL_GADGET).map_err(LiveError::io("writing into the executable's code"))?;
                return Ok(Gadget { at, saved: saved.try_into().unwrap_or_default() });
            }
        }
        Err(LiveError::Module(format!("{exe}: no padding after its code for lopi's system-call stub")))
    }

    fn restore_gadget(&self, gadget: Gadget) -> Result<(), LiveError> {
        self.mem.write(gadget.at, &gadget.saved).map_err(LiveError::io("restoring the executable's code"))
    }
}

#[derive(Clone, Copy)]
struct Gadget {
    at: u64,
    saved: [u8; 3],
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

/// `NAME=value` strings and the NULL-terminated pointer array the runtime reads as `envp`.
pub(crate) struct EnvBlock {
    strings: Vec<Vec<u8>>,
}

impl EnvBlock {
    pub(crate) fn new(env: &[(String, String)]) -> Self {
        let strings = env
            .iter()
            .map(|(k, v)| {
                let mut s = format!("{k}={v}").into_bytes();
                s.retain(|&b| b != 0);
                s.push(0);
                s
            })
            .collect();
        EnvBlock { strings }
    }

    fn pointers_len(&self) -> usize {
        8 * (self.strings.len() + 1)
    }

    pub(crate) fn len(&self) -> usize {
        self.pointers_len() + self.strings.iter().map(Vec::len).sum::<usize>()
    }

    /// The block as it must appear at run-time address `at`.
    fn bytes(&self, at: u64) -> Vec<u8> {
        let mut pointers = Vec::new();
        let mut text = Vec::new();
        for s in &self.strings {
            pointers.extend_from_slice(&(at + (self.pointers_len() + text.len()) as u64).to_le_bytes());
            text.extend_from_slice(s);
        }
        pointers.extend_from_slice(&[0; 8]);
        pointers.extend_from_slice(&text);
        pointers
    }
}

/// Whether the library at `path` is the one `name` names: its file name is `name`, or starts
/// with `name.` or `name-` (`libc` names `libc.so.6`), or its `DT_SONAME` is `name` (the name
/// `ldd` prints: `libjsoncpp.so.25` is the file `libjsoncpp.so.1.9.5`); a `name` that is an
/// absolute path names that file (also seen through a process's root, `/proc/PID/root/...`).
pub fn library_named(path: &str, name: &str) -> bool {
    if name.starts_with('/') {
        return path.ends_with(name) && (path.len() == name.len() || path[..path.len() - name.len()].ends_with("/root"));
    }
    let file = path.rsplit('/').next().unwrap_or(path);
    file == name || file.strip_prefix(name).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-')) || soname(path).as_deref() == Some(name)
}

/// The `DT_SONAME` of the ELF file at `path`, if it has one.
fn soname(path: &str) -> Option<String> {
    use object::read::elf::{Dyn, FileHeader, ProgramHeader};
    let data = std::fs::read(path).ok()?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&*data).ok()?;
    let endian = header.endian().ok()?;
    let segments = header.program_headers(endian, &*data).ok()?;
    let dynamic = segments.iter().find_map(|p| p.dynamic(endian, &*data).ok().flatten())?;
    let strtab = dynamic.iter().find(|d| d.tag32(endian) == Some(object::elf::DT_STRTAB))?.d_val(endian);
    let name = dynamic.iter().find(|d| d.tag32(endian) == Some(object::elf::DT_SONAME))?.d_val(endian);
    // DT_STRTAB is an address: the file offset of the segment that holds it.
    let at = segments.iter().find(|p| p.p_type(endian) == object::elf::PT_LOAD && (p.p_vaddr(endian)..p.p_vaddr(endian) + p.p_filesz(endian)).contains(&strtab))?;
    let offset = usize::try_from(strtab - at.p_vaddr(endian) + at.p_offset(endian) + name).ok()?;
    let bytes = data.get(offset..)?;
    let end = bytes.iter().position(|&b| b == 0)?;
    String::from_utf8(bytes[..end].to_vec()).ok()
}

/// The path of the module a request names, as `/proc/PID/maps` shows it.
pub(crate) fn module_path(maps: &[Mapping], exe: &str, library: Option<&str>) -> Result<String, LiveError> {
    let Some(name) = library else {
        return maps
            .iter()
            .find(|m| m.path == exe)
            .map(|m| m.path.clone())
            .ok_or_else(|| LiveError::Module(format!("{exe} is not mapped in the process (deleted or replaced since it started?)")));
    };
    let mut paths: Vec<&str> = maps
        .iter()
        .filter(|m| m.path.starts_with('/') && m.executable)
        .map(|m| m.path.as_str())
        .filter(|p| library_named(p, name))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    match paths.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(LiveError::Module(format!("no library named {name:?} is loaded in the process (`ldd PROG` lists those it loads at start; one it opens later with dlopen cannot be probed)"))),
        many => Err(LiveError::Module(format!("{name:?} names several loaded libraries: {}", many.join(", ")))),
    }
}

/// Run-time address minus file address, from the mapping of file offset 0.
/// From the program headers only: a plan from the cache needs no more of the file.
pub(crate) fn load_bias(data: &[u8], mapped: &[&Mapping]) -> Option<u64> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let first = mapped.iter().filter(|m| m.offset == 0).map(|m| m.start).min()?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let load = header.program_headers(endian, data).ok()?.iter().find(|p| p.p_type(endian) == object::elf::PT_LOAD && p.p_offset(endian) == 0)?;
    Some(first.wrapping_sub(load.p_vaddr(endian) & !(PAGE_SIZE - 1)))
}

fn check_architecture(pid: i32) -> Result<(), LiveError> {
    let exe = procfs::exe(pid).map(|p| p.display().to_string()).unwrap_or_else(|_| "?".into());
    let Ok(header) = std::fs::File::open(format!("/proc/{pid}/exe")).and_then(|f| {
        use std::io::Read;
        let mut h = [0u8; 20];
        f.take(20).read_exact(&mut h).map(|()| h)
    }) else {
        // Unreadable: ptrace will say why.
        return Ok(());
    };
    match architecture_problem(&header) {
        None => Ok(()),
        Some(what) => Err(LiveError::WrongArchitecture { pid, exe, what }),
    }
}

/// What is wrong with an executable's first 20 bytes for lopi, if anything.
fn architecture_problem(header: &[u8; 20]) -> Option<&'static str> {
    if &header[..4] != b"\x7fELF" {
        Some("not an ELF file")
    } else if header[4] != 2 {
        Some("32-bit")
    } else if u16::from_le_bytes([header[18], header[19]]) != 62 {
        Some("another machine type")
    } else {
        None
    }
}

fn already_traced(pid: i32, tracer: i32) -> LiveError {
    let name = std::fs::read_to_string(format!("/proc/{tracer}/comm")).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into());
    LiveError::AlreadyTraced { pid, tracer, name }
}

pub(crate) fn permission_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|s| s.trim().parse::<u32>().ok());
    match scope {
        Some(1) => "kernel.yama.ptrace_scope is 1 (only a parent may trace its children): run lopi as root or with CAP_SYS_PTRACE, or `sysctl kernel.yama.ptrace_scope=0`, or start the program with `lopi run`".into(),
        Some(2) => "kernel.yama.ptrace_scope is 2 (admin-only attach): run lopi as root or with CAP_SYS_PTRACE".into(),
        Some(3) => "kernel.yama.ptrace_scope is 3 (no attaching at all, until reboot): use `lopi run` or `lopi rewrite` instead".into(),
        _ => "the process belongs to another user or is not dumpable: run lopi as that user, as root, or with CAP_SYS_PTRACE".into(),
    }
}

/// Each probed `syscall`'s return address in the original code and in its trampoline, as
/// run-time addresses.
fn syscall_returns(image: &ProbeImage, bias: u64) -> Vec<(u64, u64)> {
    image.plan.syscall_probes.iter().map(|p| (p.at.0.wrapping_add(2).wrapping_add(bias), p.returns_to.0.wrapping_add(bias))).collect()
}

/// Milliseconds since `start`, for the timings lopi prints.
pub fn millis(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
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

    #[test]
    fn architectures() {
        let mut header = [0u8; 20];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 2;
        header[18] = 62;
        assert_eq!(architecture_problem(&header), None);
        header[18] = 183; // EM_AARCH64
        assert_eq!(architecture_problem(&header), Some("another machine type"));
        header[4] = 1;
        assert_eq!(architecture_problem(&header), Some("32-bit"));
        assert_eq!(architecture_problem(&[b'#'; 20]), Some("not an ELF file"));
    }

    #[test]
    fn env_block_points_at_its_strings() {
        let env = EnvBlock::new(&[("LOPI_OUTPUT".into(), "/tmp/x".into()), ("LOPI_DEPTH".into(), "64".into())]);
        let at = 0x7000_0000u64;
        let bytes = env.bytes(at);
        assert_eq!(bytes.len(), env.len());
        let pointer = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
        let string = |p: u64| {
            let s = &bytes[(p - at) as usize..];
            String::from_utf8(s[..s.iter().position(|&b| b == 0).unwrap()].to_vec()).unwrap()
        };
        assert_eq!(string(pointer(0)), "LOPI_OUTPUT=/tmp/x");
        assert_eq!(string(pointer(1)), "LOPI_DEPTH=64");
        assert_eq!(pointer(2), 0);
    }

    #[test]
    fn library_names() {
        let maps = procfs::parse_maps(
            "7f00-7f10 r-xp 00001000 fe:00 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
             7f20-7f30 r-xp 00001000 fe:00 2 /usr/lib/x86_64-linux-gnu/libcrypt.so.1\n\
             7f40-7f50 r-xp 00001000 fe:00 3 /opt/lib/libfoo-2.1.so\n",
        );
        assert_eq!(module_path(&maps, "/bin/x", Some("libc")).unwrap(), "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(module_path(&maps, "/bin/x", Some("libc.so.6")).unwrap(), "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(module_path(&maps, "/bin/x", Some("libfoo")).unwrap(), "/opt/lib/libfoo-2.1.so");
        assert!(module_path(&maps, "/bin/x", Some("libz")).is_err());
        assert!(module_path(&maps, "/bin/x", None).is_err(), "the executable is not mapped");
    }
}
