//! Probe scripts (`lopi trace`) and C handlers (`--handler`): the stubs' slow paths run a
//! function's (a system call's, a lock event's, a thread's, an instruction's) compiled probes
//! here; the code they run calls the helpers of `helpers.rs`, which import only `image.rs`
//! (reading the script image) and the layers below.
//!
//! A thread's maps and output live in its script area, appended to the data file on its
//! first script probe: one `script_map` table per map (this thread's only, so no lock), and
//! a ring of output records the host prints from while the program runs.
mod helpers;
mod image;
mod profile;
mod python;
mod site_args;

use super::thread::chunk::Thread;
use crate::abi::script::{self, record, ScriptArea, ScriptCtx, ScriptImage, TableShape};
use crate::abi::{script_map, RuntimeVars, SCRIPT_AREA};
use crate::base::data_file::append;
use core::ptr::{read_volatile, write_volatile};
use helpers::{emit, value_none, Env};
use image::{function, string, table_of};
pub(super) use site_args::point_regs;

/// Where the system-call stubs saved the six arguments (rdi, rsi, rdx, r10, r8, r9): `u64`
/// slots above the `rbp` they pass (`probes/syscalls.rs`).
pub(crate) const SYSCALL_ARG_SLOTS: [usize; 6] = [5, 6, 7, 2, 4, 3];

/// Where a stub saved the registers a probe reads: `u64` slots above the `rbp` it passes.
#[derive(Clone, Copy)]
pub(super) struct Regs {
    at: *const u64,
    /// Slots of the six arguments, and of `rax` (the return value).
    args: [usize; 6],
    ret: usize,
}

impl Regs {
    /// The entry and exit stubs' (`probes/entry_exit_stubs.rs`): arguments in rdi, rsi, rdx, rcx, r8, r9.
    pub fn function(at: *const u64) -> Regs {
        Regs { at, args: [5, 6, 7, 8, 4, 3], ret: 9 }
    }

    /// The system-call stubs' (`probes/syscalls.rs`): arguments in rdi, rsi, rdx, r10, r8, r9.
    pub fn syscall(at: *const u64) -> Regs {
        // Element by element: the array whole would be copied with vector registers.
        let s = SYSCALL_ARG_SLOTS;
        Regs { at, args: [s[0], s[1], s[2], s[3], s[4], s[5]], ret: 8 }
    }

    /// Six values at `at`, one per argument.
    fn values(at: *const u64) -> Regs {
        Regs { at, args: [0, 1, 2, 3, 4, 5], ret: 0 }
    }

    unsafe fn get(self, slot: usize) -> u64 {
        // SAFETY: the stub saved every slot named here.
        unsafe { read_volatile(self.at.add(slot)) }
    }
}

/// Where the probes of system call `nr` are: (entry list, return list), 0 for none.
pub(super) unsafe fn syscall_hooks(v: *const RuntimeVars, nr: u64) -> (u32, u32) {
    // SAFETY: the table has a word per number below `SYSCALLS`.
    unsafe {
        let table = (*v).script_syscalls;
        if table == 0 || nr >= script::SYSCALLS as u64 || read_volatile(&(*v).script_off) != 0 {
            return (0, 0);
        }
        let word = read_volatile((table + 8 * nr) as *const u64);
        (word as u32, (word >> 32) as u32)
    }
}

/// Where a function's probes are: (entry list, exit list), 0 for none.
pub(super) unsafe fn hooks(v: *const RuntimeVars, index: u64) -> (u32, u32) {
    // SAFETY: the hook table has a word per counter of this module.
    unsafe {
        let table = (*v).script_hooks;
        if table == 0 || index >= (*v).counter_count || read_volatile(&(*v).script_off) != 0 {
            return (0, 0);
        }
        let word = read_volatile((table + 8 * index) as *const u64);
        (word as u32, (word >> 32) as u32)
    }
}

/// Sets up the module's script at init, if its image has one.
pub(super) unsafe fn enable(v: *mut RuntimeVars, d: &crate::abi::ModuleDescriptor, clock: (u64, u64), auxv: &crate::loader::Auxv) {
    // SAFETY: the descriptor's script offset points into its own image (checked by magic).
    unsafe {
        (*v).ns_per_tick_q32 = if (*v).tsc_hz == 0 { 0 } else { (1_000_000_000u64 << 32) / (*v).tsc_hz };
        (*v).clock_tsc = clock.0;
        (*v).clock_ns = clock.1;
        if d.script_offset == 0 {
            return;
        }
        let s = (d as *const _ as u64).wrapping_add(d.script_offset as u64);
        if (*(s as *const ScriptImage)).magic != script::SCRIPT_IMAGE_MAGIC || u64::from((*(s as *const ScriptImage)).counter_count) != d.counter_count {
            return;
        }
        if (*(s as *const ScriptImage)).flags & script::HANDLER != 0 {
            start_handler(s as *const ScriptImage);
        }
        (*v).script = s;
        if (*(s as *const ScriptImage)).py_codes != 0 {
            (*v).py_runtime = crate::loader::python_runtime(auxv).unwrap_or(0) as u64;
        }
        (*v).script_hooks = s.wrapping_add((*(s as *const ScriptImage)).hooks as u64);
        let locks = (*(s as *const ScriptImage)).locks;
        if locks != 0 {
            (*v).script_locks = s.wrapping_add(locks as u64);
        }
        let threads = (*(s as *const ScriptImage)).threads;
        if threads != 0 {
            (*v).script_threads = s.wrapping_add(threads as u64);
        }

        let syscalls = (*(s as *const ScriptImage)).syscalls;
        if syscalls != 0 {
            (*v).script_syscalls = s.wrapping_add(syscalls as u64);
        }
    }
}

/// Once the runtime is ready: starts the `profile:` points' samples, if the script has any,
/// and makes the calling thread's chunk (a thread takes samples once it has one; others make
/// theirs at their start or first system call).
pub(super) unsafe fn start_profile(v: *mut RuntimeVars) {
    // SAFETY: a non-zero `script` is this module's script image.
    unsafe {
        let s = read_volatile(&(*v).script) as *const ScriptImage;
        if s.is_null() || (*s).profile_ns == 0 {
            return;
        }
        profile::start(v, (*s).profile_ns);
        let _ = Thread::current(v);
    }
}

/// A C handler's data gets the addresses it holds (the linker's relative relocations), then
/// its `lopi_init` runs, before any of its probes can.
unsafe fn start_handler(s: *const ScriptImage) {
    // SAFETY: the image builder keeps `reloc_count` (slot, target) pairs inside the handler's
    // data, which lies in the image's writable part; `handler_init` is the handler's code.
    unsafe {
        let data = (s as u64).wrapping_add((*s).handler_data as u64);
        let relocs = (s as u64).wrapping_add((*s).relocs as u64) as *const [u64; 2];
        for i in 0..(*s).reloc_count as usize {
            let [slot, target] = *relocs.add(i);
            write_volatile(data.wrapping_add(slot) as *mut u64, data.wrapping_add(target));
        }
        if (*s).handler_init != 0 {
            let init: extern "sysv64" fn() = core::mem::transmute((s as u64).wrapping_add((*s).handler_init as u64));
            init();
        }
    }
}

/// From the entry stub's fast path, before the call's frame opens: runs the entry probes of
/// list `list` (from the hook word the stub read). `chunk` is the thread's, which the fast path
/// checked and holds busy.
pub(super) unsafe extern "C" fn script_enter(index: u64, rsp: u64, regs: *const u64, chunk: usize, list: u32) {
    let regs = Regs::function(regs);
    let v = crate::base::vars::vars();
    // SAFETY: the fast path checked the thread's chunk and holds it busy.
    unsafe {
        if read_volatile(&(*v).script_off) == 0 {
            let t = Thread { h: chunk as *mut _, base: chunk };
            run(&t, v, list, index, regs, rsp, (*t.h).depth, Side::Entry);
        }
    }
}

/// From the exit stub's fast path, once the call's frame is closed: runs the return probes of
/// list `list` with the call's `ticks`; `word` is what the exit probe pushed, `chunk` the
/// thread's.
pub(super) unsafe extern "C" fn script_exit(word: u32, ticks: u64, rsp: u64, regs: *const u64, chunk: usize, list: u32) {
    let regs = Regs::function(regs);
    let v = crate::base::vars::vars();
    let index = u64::from(word & crate::abi::exit_word::INDEX);
    // SAFETY: as `script_enter`.
    unsafe {
        if read_volatile(&(*v).script_off) == 0 {
            let t = Thread { h: chunk as *mut _, base: chunk };
            run_return(&t, v, list, index, word & crate::abi::exit_word::TAIL != 0, regs, rsp, (*t.h).depth, ticks);
        }
    }
}

/// Which side of a call probes run at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// Arguments in the saved registers.
    Entry,
    /// The call's ticks; the return value in the saved `rax`.
    Return(u64),
    /// A lock event: its arguments, result and elapsed ticks.
    Event(u64),
    /// A `profile:` sample of the thread interrupted at `pc` with frame pointer `fp`.
    Sample { pc: u64, fp: u64 },
}

/// List `event` of the event lists at `lists` (a `ScriptImage::locks` or `threads` table; 0:
/// none), 0 when there is none or the script has ended.
unsafe fn event_list(v: *const RuntimeVars, lists: u64, event: usize) -> u32 {
    // SAFETY: a non-zero `lists` is the script's table of that kind, one word per event.
    unsafe {
        if lists == 0 || read_volatile(&(*v).script_off) != 0 {
            return 0;
        }
        *(lists as *const u32).add(event)
    }
}

/// Runs the probes of lock event `event` (`script::lock_event`) of the lock function with
/// counter `index`, whose call's frame key is `key`: `lock`, `arg1` and `arg2` are its first
/// three arguments, `ret` its result, `ticks` the wait (acquired) or the hold (release).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_lock(t: &Thread, v: *const RuntimeVars, event: usize, index: u64, lock: u64, arg1: u64, arg2: u64, ret: u64, key: u64, ticks: Option<u64>) {
    // SAFETY: the caller holds the thread busy.
    unsafe {
        let list = event_list(v, read_volatile(&(*v).script_locks), event);
        if list == 0 {
            return;
        }
        // One volatile store each: an array literal would be built in vector registers.
        let mut saved = core::mem::MaybeUninit::<[u64; 5]>::uninit();
        let at = saved.as_mut_ptr() as *mut u64;
        write_volatile(at, lock);
        write_volatile(at.add(1), arg1);
        write_volatile(at.add(2), arg2);
        write_volatile(at.add(3), 0);
        write_volatile(at.add(4), ret);
        // A lock function has three arguments: the others read 0.
        let regs = Regs { at, args: [0, 1, 2, 3, 3, 3], ret: 4 };
        let side = match ticks {
            Some(ticks) => Side::Event(ticks),
            None => Side::Entry,
        };
        run(t, v, list, index, regs, key, (*t.h).depth, side);
    }
}

/// Runs the probes of thread event `event` (`script::THREAD_START` or `THREAD_EXIT`) on the
/// thread `t`, which the caller holds busy.
pub(super) unsafe fn run_thread(t: &Thread, v: *const RuntimeVars, event: usize) {
    // SAFETY: forwarded.
    unsafe { run_event(t, v, event, Side::Entry) }
}

/// Runs the `profile:` probes on the thread `t` (held busy by the caller), interrupted at `pc`
/// with frame pointer `fp`.
pub(super) unsafe fn run_profile(t: &Thread, v: *const RuntimeVars, pc: u64, fp: u64) {
    // SAFETY: forwarded.
    unsafe { run_event(t, v, script::PROFILE, Side::Sample { pc, fp }) }
}

/// Runs the probes of thread event `event` on the thread `t`, which the caller holds busy.
/// Inlined: a `Side` passed in memory would be copied in a vector register.
#[inline(always)]
unsafe fn run_event(t: &Thread, v: *const RuntimeVars, event: usize, side: Side) {
    // SAFETY: the caller holds the thread busy.
    unsafe {
        let list = event_list(v, read_volatile(&(*v).script_threads), event);
        if list == 0 {
            return;
        }
        let mut none = core::mem::MaybeUninit::<[u64; 2]>::uninit();
        let at = none.as_mut_ptr() as *mut u64;
        write_volatile(at, 0);
        write_volatile(at.add(1), 0);
        // No arguments, no result: every slot reads a zero (not all the same slot: a run of
        // equal words is what the compiler fills with vector stores).
        let regs = Regs { at, args: [0, 1, 1, 1, 1, 1], ret: 1 };
        run(t, v, list, u64::MAX, regs, 0, (*t.h).depth, side);
    }
}

/// Counts a `profile:` sample the thread `t` could not take (it was inside a probe).
pub(super) unsafe fn missed_sample(t: &Thread, v: *const RuntimeVars) {
    // SAFETY: only the thread's area's counter is touched, as a probe's would be.
    unsafe {
        let slot = (t.base + SCRIPT_AREA as usize) as *const u64;
        let a = read_volatile(slot);
        if a > 1 && (*(a as *const ScriptArea)).script_id == (*((*v).script as *const ScriptImage)).id {
            let area = a as *mut ScriptArea;
            write_volatile(&raw mut (*area).missed_samples, read_volatile(&(*area).missed_samples) + 1);
        }
    }
}

/// Runs a function's return probes, unless it leaves by a tail call: its return value is
/// then the function's it jumps to, and its call goes on there, so such returns are counted
/// (and reported), not run with values that are not the function's.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn run_return(t: &Thread, v: *const RuntimeVars, list: u32, index: u64, tail: bool, regs: Regs, rsp: u64, below: u32, ticks: u64) {
    // SAFETY: forwarded; the area is this thread's.
    unsafe {
        if !tail {
            run(t, v, list, index, regs, rsp, below, Side::Return(ticks));
        } else if let Some(area) = area(t, v, (*v).script as *const ScriptImage) {
            (*area).tail_returns += 1;
        }
    }
}

/// Runs the probes of list `list` for the function (or system-call site) with counter
/// `index`: `regs` are the registers the stub saved, `call_rsp` where the call's return
/// address is (0: none, a system call). The caller holds the thread busy.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn run(t: &Thread, v: *const RuntimeVars, list: u32, index: u64, regs: Regs, call_rsp: u64, below: u32, side: Side) {
    // SAFETY: forwarded.
    unsafe { run_call(t, v, list, index, regs, call_rsp, below, side, 0) }
}

/// [`run`] for system call `syscall` - 1 (0: a function's probes).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn run_call(t: &Thread, v: *const RuntimeVars, list: u32, index: u64, regs: Regs, call_rsp: u64, below: u32, side: Side, syscall: u64) {
    // SAFETY: the script image is this module's; `regs` points at the stub's saved registers;
    // the area is this thread's.
    unsafe {
        let s = (*v).script as *const ScriptImage;
        if (*s).flags & script::HANDLER != 0 {
            run_handler(t, v, list, index, regs, below, side, syscall);
            return;
        }
        let Some(area) = area(t, v, s) else { return };
        let mut ctx = core::mem::MaybeUninit::<ScriptCtx>::uninit();
        let c = ctx.as_mut_ptr();
        fill(c, v, regs, side, false, index, (area as u64).wrapping_add(script::SCALAR_SLOTS as u64));
        write_volatile(&mut (*c).nr, syscall.wrapping_sub(1));
        let mut env = core::mem::MaybeUninit::<Env>::uninit();
        let e = env.as_mut_ptr();
        write_env(e, s, t, index, below, side, call_rsp, area, syscall);
        write_volatile(&mut (*c).runtime, e as u64);
        let ctx = ctx.assume_init_mut();
        if call_probes(s, list, ctx) {
            (*area).exit = 1;
            write_volatile(&mut (*(v as *mut RuntimeVars)).script_off, 1);
            emit(area, s, record::EXIT, 0, 0, |_| (value_none(), 0));
        }
        if ctx.faults != 0 {
            (*area).faults = (*area).faults.wrapping_add(ctx.faults);
        }
    }
}

/// [`run_call`] for a C handler: it keeps its state in its own data (no area), and gets the
/// function's or call's name, address and number; a system call's return callback keeps the
/// call's argument registers, which the kernel preserved. Apart, so that scripts pay nothing
/// for it.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn run_handler(t: &Thread, v: *const RuntimeVars, list: u32, index: u64, regs: Regs, below: u32, side: Side, syscall: u64) {
    // SAFETY: as `run_call`.
    unsafe {
        let s = (*v).script as *const ScriptImage;
        let mut ctx = core::mem::MaybeUninit::<ScriptCtx>::uninit();
        let c = ctx.as_mut_ptr();
        fill(c, v, regs, side, syscall != 0, index, 0);
        let (name, addr) = handler_names(s, index, syscall);
        write_volatile(&mut (*c).name, name);
        write_volatile(&mut (*c).addr, addr);
        write_volatile(&mut (*c).nr, syscall.wrapping_sub(1));
        // No area and no call.
        let mut env = core::mem::MaybeUninit::<Env>::uninit();
        let e = env.as_mut_ptr();
        write_env(e, s, t, index, below, side, 0, core::ptr::null_mut(), syscall);
        write_volatile(&mut (*c).runtime, e as u64);
        call_probes(s, list, ctx.assume_init_mut());
    }
}

/// Fills the probes' environment at `e`: the call or site (`call_rsp`, `syscall`), the thread,
/// the area, and a sample's instruction and frame pointer. Field by field, with volatile
/// stores: adjacent zeros would go out in a vector register.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn write_env(e: *mut Env, s: *const ScriptImage, t: &Thread, index: u64, below: u32, side: Side, call_rsp: u64, area: *mut ScriptArea, syscall: u64) {
    let (pc, fp) = match side {
        Side::Sample { pc, fp } => (pc, fp),
        _ => (0, 0),
    };
    // SAFETY: `e` is the caller's uninitialised Env, each field written once.
    unsafe {
        write_volatile(&raw mut (*e).s, s);
        write_volatile(&raw mut (*e).call_rsp, call_rsp);
        write_volatile(&raw mut (*e).area, area);
        write_volatile(&raw mut (*e).syscall, syscall);
        write_volatile(&raw mut (*e).h, t.h as *const _);
        write_volatile(&raw mut (*e).index, index);
        write_volatile(&raw mut (*e).thread, t.base);
        write_volatile(&raw mut (*e).below, below);
        write_volatile(&raw mut (*e).returned, !matches!(side, Side::Entry | Side::Sample { .. }));
        write_volatile(&raw mut (*e).sample.0, pc);
        write_volatile(&raw mut (*e).sample.1, fp);
    }
}

/// The context's registers, times and identities for `side`; arguments at a return only with
/// `args_at_return`. Field by field, with volatile accesses: a copy the compiler merged would
/// use vector registers, which hold the program's live values here.
#[inline(always)]
unsafe fn fill(c: *mut ScriptCtx, v: *const RuntimeVars, regs: Regs, side: Side, args_at_return: bool, index: u64, scalars: u64) {
    // SAFETY: `c` is the caller's context; `regs` the stub's saved registers.
    unsafe {
        // A return probe of a script reads no argument (the checker sees to it), an entry
        // probe no result; a lock event has both.
        let (args, ret, ticks) = match side {
            Side::Entry => (true, false, 0),
            Side::Return(ticks) => (args_at_return, true, ticks),
            Side::Event(ticks) => (true, true, ticks),
            Side::Sample { .. } => (true, false, 0),
        };
        for (i, &slot) in regs.args.iter().enumerate() {
            write_volatile(&mut (*c).args[i], if args { regs.get(slot) } else { 0 });
        }
        write_volatile(&mut (*c).retval, if ret { regs.get(regs.ret) } else { 0 });
        write_volatile(&mut (*c).elapsed_ns, ((u128::from(ticks) * u128::from((*v).ns_per_tick_q32)) >> 32) as u64);
        write_volatile(&mut (*c).func, index);
        write_volatile(&mut (*c).probe, 0);
        write_volatile(&mut (*c).faults, 0);
        write_volatile(&mut (*c).exit, 0);
        write_volatile(&mut (*c).scalars, scalars);
    }
}

/// Calls the probes of list `list` with `ctx`; true when one called `exit()` (the rest of the
/// list then does not run).
#[inline(always)]
unsafe fn call_probes(s: *const ScriptImage, list: u32, ctx: &mut ScriptCtx) -> bool {
    // SAFETY: the image builder keeps lists inside `lists_len` and probes below `probe_count`,
    // each a function of the image's code.
    unsafe {
        let base = s as u64;
        let lists = base.wrapping_add((*s).lists as u64) as *const u32;
        let code = base.wrapping_add((*s).code as u64);
        let probe_code = base.wrapping_add((*s).probe_code as u64) as *const u64;
        let mut at = list as usize;
        while at + 1 < (*s).lists_len as usize {
            let probe = *lists.add(at);
            if probe == u32::MAX || probe >= (*s).probe_count {
                break;
            }
            ctx.probe = u64::from(*lists.add(at + 1));
            let f: extern "sysv64" fn(*mut ScriptCtx) = core::mem::transmute(code.wrapping_add(*probe_code.add(probe as usize)));
            f(ctx);
            if ctx.exit != 0 {
                return true;
            }
            at += 2;
        }
        false
    }
}

/// The thread's script area, made on first use; `None` when it could not be made (then
/// never tried again) or belongs to another script.
unsafe fn area(t: &Thread, v: *const RuntimeVars, s: *const ScriptImage) -> Option<*mut ScriptArea> {
    // SAFETY: the header page's `SCRIPT_AREA` word is this thread's; a non-zero value above 1
    // is an area this thread mapped.
    unsafe {
        let slot = (t.base + SCRIPT_AREA as usize) as *mut u64;
        match *slot {
            0 => {}
            1 => return None,
            a => return ((*(a as *const ScriptArea)).script_id == (*s).id).then_some(a as *mut ScriptArea),
        }
        *slot = 1;
        let (m, _) = append(v, script::SCRIPT_AREA_MAGIC, (*s).area_len)?;
        let area = m as *mut ScriptArea;
        (*area).pid = (*t.h).pid;
        (*area).tid = (*t.h).tid;
        (*area).script_id = (*s).id;
        let shapes = (s as u64).wrapping_add((*s).tables as u64) as *const TableShape;
        for i in 0..(*s).map_count as usize {
            let shape = *shapes.add(i);
            let table = table_of(area, shape);
            script_map::init(table, shape.key_size, shape.slot_size, shape.max_entries);
        }
        *slot = m as u64;
        Some(area)
    }
}

/// A C handler's `name` and `addr` of counter `index`'s probe, for system call `syscall` - 1
/// (0: a function's): the name's NUL-terminated text (the builder ends every string with a
/// NUL) and the function's or the site's address in the process.
unsafe fn handler_names(s: *const ScriptImage, index: u64, syscall: u64) -> (u64, u64) {
    // SAFETY: as `function` and `string`; the call names follow the system-call table.
    unsafe {
        let Some(f) = function(s, index) else { return (0, 0) };
        let addr = (s as u64).wrapping_add(f.addr as u64);
        let (name, len) = match syscall {
            0 => (f.name, f.name_len),
            nr if (*s).syscalls != 0 && nr <= script::SYSCALLS as u64 => {
                let names = (s as u64).wrapping_add((*s).syscalls as u64 + 8 * script::SYSCALLS as u64) as *const [u32; 2];
                let name = *names.add(nr as usize - 1);
                (name[0], name[1])
            }
            _ => return (0, addr),
        };
        let (text, _) = string(s, name, len);
        (text as u64, addr)
    }
}
