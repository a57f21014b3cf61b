//! Probe scripts (`lopi trace`): the entry and exit slow paths run a function's compiled
//! probes here, and the compiled code calls the helpers below (`lopi_rt_abi::script`) through
//! the jump table `lopi_script_helpers`, whose entries the image builder hands the code
//! generator.
//!
//! A thread's maps and output live in its script area, appended to the data file on its
//! first script probe: one `script_map` table per map (this thread's only, so no lock), and
//! a ring of output records the host prints from while the program runs.
use super::thread::{append, Thread};
use super::{rdtsc, thread_word};
use crate::abi::script::{self, record, FunctionName, RecordHead, ScriptArea, ScriptCtx, ScriptImage, TableShape};
use crate::abi::{script_map, RuntimeVars, SCRIPT_AREA};
use crate::sys;
use core::arch::global_asm;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{fence, Ordering};

// One `jmp` per helper, 8 bytes apart, in `script::Helpers` order.
global_asm!(
    ".globl lopi_script_helpers",
    ".p2align 3",
    "lopi_script_helpers:",
    "jmp {builtin}", ".p2align 3",
    "jmp {builtin_str}", ".p2align 3",
    "jmp {map_slot}", ".p2align 3",
    "jmp {map_lookup}", ".p2align 3",
    "jmp {map_delete}", ".p2align 3",
    "jmp {map_clear}", ".p2align 3",
    "jmp {read_str}", ".p2align 3",
    "jmp {ustack}", ".p2align 3",
    "jmp {printf}", ".p2align 3",
    "jmp {print_map}", ".p2align 3",
    "jmp {print_value}", ".p2align 3",
    builtin = sym builtin,
    builtin_str = sym builtin_str,
    map_slot = sym map_slot,
    map_lookup = sym map_lookup,
    map_delete = sym map_delete,
    map_clear = sym map_clear,
    read_str = sym read_str,
    ustack = sym ustack,
    printf = sym printf,
    print_map = sym print_map,
    print_value = sym print_value,
);

/// Where a stub saved the registers a probe reads: `u64` slots above the `rbp` it passes.
#[derive(Clone, Copy)]
pub(super) struct Regs {
    at: *const u64,
    /// Slots of the six arguments, and of `rax` (the return value).
    args: [usize; 6],
    ret: usize,
}

impl Regs {
    /// The entry and exit stubs' (`stubs.rs`): arguments in rdi, rsi, rdx, rcx, r8, r9.
    pub fn function(at: *const u64) -> Regs {
        Regs { at, args: [5, 6, 7, 8, 4, 3], ret: 9 }
    }

    /// The system-call stubs' (`syscalls.rs`): arguments in rdi, rsi, rdx, r10, r8, r9.
    pub fn syscall(at: *const u64) -> Regs {
        Regs { at, args: [5, 6, 7, 2, 4, 3], ret: 8 }
    }

    unsafe fn get(self, slot: usize) -> u64 {
        // SAFETY: the stub saved every slot named here.
        unsafe { read_volatile(self.at.add(slot)) }
    }
}

/// What the helpers find through `ScriptCtx::runtime`. In C order, the fields callers often
/// pass as constants (no call, no system call, no counter) each between two that vary: the
/// compiler would store adjacent constants with a vector register.
#[repr(C)]
struct Env {
    s: *const ScriptImage,
    /// Stack pointer at the call's entry (its return address; 0: none).
    call_rsp: u64,
    area: *mut ScriptArea,
    /// A system call's number plus 1 (0: a function's probe).
    syscall: u64,
    h: *const crate::abi::ThreadHeader,
    /// Counter index of the probed function.
    index: u64,
    thread: usize,
    /// Frames below the call.
    below: u32,
    /// Whether the system call returned.
    returned: bool,
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
pub(super) unsafe fn enable(v: *mut RuntimeVars, d: &crate::abi::ModuleDescriptor, clock: (u64, u64)) {
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
    let v = super::vars();
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
    let v = super::vars();
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
}

/// Runs the probes of lock event `event` (`script::lock_event`) of the lock function with
/// counter `index`, whose call's frame key is `key`: `lock`, `arg1` and `arg2` are its first
/// three arguments, `ret` its result, `ticks` the wait (acquired) or the hold (release).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_lock(t: &Thread, v: *const RuntimeVars, event: usize, index: u64, lock: u64, arg1: u64, arg2: u64, ret: u64, key: u64, ticks: Option<u64>) {
    // SAFETY: `script_locks` holds `LOCK_EVENTS` lists of this module's script; the caller holds
    // the thread busy.
    unsafe {
        let lists = read_volatile(&(*v).script_locks) as *const u32;
        if lists.is_null() || read_volatile(&(*v).script_off) != 0 {
            return;
        }
        let list = *lists.add(event);
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
    // SAFETY: `script_threads` holds `THREAD_EVENTS` lists of this module's script.
    unsafe {
        let lists = read_volatile(&(*v).script_threads) as *const u32;
        if lists.is_null() || read_volatile(&(*v).script_off) != 0 {
            return;
        }
        let list = *lists.add(event);
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
        run(t, v, list, u64::MAX, regs, 0, (*t.h).depth, Side::Entry);
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
        let env = Env { s, call_rsp, area, syscall, h: t.h, index, thread: t.base, below, returned: !matches!(side, Side::Entry) };
        write_volatile(&mut (*c).runtime, &env as *const Env as u64);
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
        // No area and no call: field by field, or the two zeros go out in a vector register.
        let mut env = core::mem::MaybeUninit::<Env>::uninit();
        let e = env.as_mut_ptr();
        write_volatile(&raw mut (*e).s, s);
        write_volatile(&raw mut (*e).call_rsp, 0);
        write_volatile(&raw mut (*e).area, core::ptr::null_mut());
        write_volatile(&raw mut (*e).syscall, syscall);
        write_volatile(&raw mut (*e).h, t.h as *const _);
        write_volatile(&raw mut (*e).index, index);
        write_volatile(&raw mut (*e).thread, t.base);
        write_volatile(&raw mut (*e).below, below);
        write_volatile(&raw mut (*e).returned, !matches!(side, Side::Entry));
        write_volatile(&mut (*c).runtime, e as u64);
        call_probes(s, list, ctx.assume_init_mut());
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

/// A map's table in `area`.
unsafe fn table_of<'a>(area: *mut ScriptArea, shape: TableShape) -> &'a mut [u8] {
    let len = script_map::table_size(shape.key_size as usize, shape.slot_size as usize, shape.max_entries);
    // SAFETY: the image builder laid the tables out inside the area.
    unsafe { core::slice::from_raw_parts_mut((area as *mut u8).add(shape.offset as usize), len) }
}

/// The context's environment.
unsafe fn env<'a>(ctx: *mut ScriptCtx) -> &'a Env {
    // SAFETY: `run` set `runtime` to an Env that outlives the probe function.
    unsafe { &*((*ctx).runtime as *const Env) }
}

/// The table of map `map`, if the script has it; cleared first if the host asked for that
/// since this thread last used it.
unsafe fn table<'a>(ctx: *mut ScriptCtx, map: u64) -> Option<&'a mut [u8]> {
    // SAFETY: as `env`; the shapes table has `map_count` entries, at most `MAX_MAPS`, and the
    // area has a clear request and a done word for each.
    unsafe {
        let e = env(ctx);
        if map >= u64::from((*e.s).map_count) || map >= script::MAX_MAPS as u64 {
            return None;
        }
        let shape = *((e.s as u64).wrapping_add((*e.s).tables as u64) as *const TableShape).add(map as usize);
        let table = table_of(e.area, shape);
        if !cleared_as_asked(e.area, map) {
            script_map::clear(table);
            write_volatile(scalar_slot(e.area, map), 0);
            write_volatile(clears_done(e.area, map), read_volatile(clear_request(e.area, map)));
        }
        Some(table)
    }
}

fn clear_request(area: *mut ScriptArea, map: u64) -> *mut u32 {
    (area as usize + script::CLEAR_REQUESTS + 4 * map as usize) as *mut u32
}

fn clears_done(area: *mut ScriptArea, map: u64) -> *mut u32 {
    (area as usize + script::CLEARS_DONE + 4 * map as usize) as *mut u32
}

fn scalar_slot(area: *mut ScriptArea, map: u64) -> *mut u64 {
    (area as usize + script::SCALAR_SLOTS + 8 * map as usize) as *mut u64
}

/// Whether the thread has made every clear of map `map` the host asked for.
unsafe fn cleared_as_asked(area: *mut ScriptArea, map: u64) -> bool {
    // SAFETY: both words are in the area's header part (map < MAX_MAPS).
    unsafe { read_volatile(clear_request(area, map)) == read_volatile(clears_done(area, map)) }
}

/// A string of the script image: (address, length).
unsafe fn string(s: *const ScriptImage, offset: u32, len: u32) -> (*const u8, usize) {
    // SAFETY: the image builder keeps every (offset, length) inside `strings`.
    unsafe {
        let end = (u64::from(offset) + u64::from(len)).min((*s).strings_len);
        let start = u64::from(offset).min(end);
        ((s as u64).wrapping_add((*s).strings as u64).wrapping_add(start) as *const u8, (end - start) as usize)
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

unsafe fn function(s: *const ScriptImage, index: u64) -> Option<FunctionName> {
    // SAFETY: a `FunctionName` per counter.
    unsafe { (index < u64::from((*s).counter_count)).then(|| *((s as u64).wrapping_add((*s).functions as u64) as *const FunctionName).add(index as usize)) }
}

extern "sysv64" fn builtin(ctx: *mut ScriptCtx, which: u64) -> u64 {
    // SAFETY: see `env`; the thread header is this thread's.
    unsafe {
        let e = env(ctx);
        let v = super::vars();
        match which {
            0 => u64::from((*e.h).pid),
            1 => u64::from((*e.h).tid),
            2 => match (*v).rseq_offset {
                0 => {
                    let mut cpu = 0u32;
                    sys::call3(sys::GETCPU, &mut cpu as *mut u32 as usize, 0, 0);
                    u64::from(cpu)
                }
                // `struct rseq`'s `cpu_id` follows `cpu_id_start`.
                offset => u64::from(thread_word((offset + 4) as u32)),
            },
            3 => {
                let ticks = rdtsc().wrapping_sub((*v).clock_tsc);
                (*v).clock_ns.wrapping_add(((u128::from(ticks) * u128::from((*v).ns_per_tick_q32)) >> 32) as u64)
            }
            _ => 0,
        }
    }
}

extern "sysv64" fn builtin_str(ctx: *mut ScriptCtx, which: u64, dst: *mut u8, cap: u64) -> u64 {
    // SAFETY: see `env`; `dst` has `cap` bytes (the generated code's buffer).
    unsafe {
        let e = env(ctx);
        let (src, len) = match which {
            0 => {
                let comm = &(*e.h).comm;
                (comm.as_ptr(), comm.iter().position(|&b| b == 0).unwrap_or(comm.len()))
            }
            1 => match function(e.s, (*ctx).func) {
                Some(f) => string(e.s, f.name, f.name_len),
                None => (dst as *const u8, 0),
            },
            // A system call's probe names the call it fired for.
            2 if e.syscall != 0 && (*e.s).syscalls != 0 && e.syscall <= script::SYSCALLS as u64 => {
                let names = (e.s as u64).wrapping_add((*e.s).syscalls as u64 + 8 * script::SYSCALLS as u64) as *const [u32; 2];
                let name = *names.add(e.syscall as usize - 1);
                let (name, name_len) = string(e.s, name[0], name[1]);
                let suffix: &[u8] = if e.returned { b":return" } else { b"" };
                let mut n = 0;
                for (src, len) in [(b"syscall:".as_ptr(), 8), (name, name_len), (suffix.as_ptr(), suffix.len())] {
                    let len = len.min(cap as usize - n);
                    super::thread::copy(dst as usize + n, src as usize, len);
                    n += len;
                }
                return n as u64;
            }
            2 if (*ctx).probe < u64::from((*e.s).point_count) => {
                let point = *((e.s as u64).wrapping_add((*e.s).points as u64) as *const [u32; 2]).add((*ctx).probe as usize);
                string(e.s, point[0], point[1])
            }
            _ => (dst as *const u8, 0),
        };
        let n = len.min(cap as usize);
        super::thread::copy(dst as usize, src as usize, n);
        n as u64
    }
}

extern "sysv64" fn map_slot(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *mut u8 {
    // SAFETY: `key` has `key_len` bytes (the generated code's buffer).
    unsafe {
        let Some(table) = table(ctx, map) else { return core::ptr::null_mut() };
        let key = core::slice::from_raw_parts(key, key_len as usize);
        let copy = |dst: &mut [u8], src: &[u8]| super::thread::copy(dst.as_mut_ptr() as usize, src.as_ptr() as usize, dst.len().min(src.len()));
        let zero = |dst: &mut [u8]| fill_zero(dst.as_mut_ptr(), dst.len());
        let slot = script_map::slot_with(table, key, copy, zero).map_or(core::ptr::null_mut(), |s| s.as_mut_ptr());
        if key_len == 0 && !slot.is_null() {
            // Cached for the generated code; undone if a clear request came in meanwhile (the
            // host asks, then zeroes the cache).
            let area = env(ctx).area;
            write_volatile(scalar_slot(area, map), slot as u64);
            fence(Ordering::SeqCst);
            if !cleared_as_asked(area, map) {
                write_volatile(scalar_slot(area, map), 0);
            }
        }
        slot
    }
}

extern "sysv64" fn map_lookup(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *const u8 {
    // SAFETY: as `map_slot`.
    unsafe {
        let Some(table) = table(ctx, map) else { return core::ptr::null() };
        let key = core::slice::from_raw_parts(key, key_len as usize);
        script_map::lookup(table, key).map_or(core::ptr::null(), |s| s.as_ptr())
    }
}

extern "sysv64" fn map_delete(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) {
    // SAFETY: as `map_slot`.
    unsafe {
        if let Some(table) = table(ctx, map) {
            script_map::delete(table, core::slice::from_raw_parts(key, key_len as usize));
        }
    }
}

extern "sysv64" fn map_clear(ctx: *mut ScriptCtx, map: u64) {
    // SAFETY: as `map_slot`.
    unsafe {
        if let Some(table) = table(ctx, map) {
            script_map::clear(table);
        }
    }
}

/// Copies the traced program's bytes with `process_vm_readv` on itself, which fails instead
/// of faulting on a bad address; the part before the next page is read on its own, so that a
/// string that ends before an unmapped page is still read.
extern "sysv64" fn read_str(ctx: *mut ScriptCtx, dst: *mut u8, src: u64, max: u64) -> u64 {
    // SAFETY: `dst` has `max` bytes; iovecs are on this stack.
    unsafe {
        let e = env(ctx);
        let first = (4096 - src % 4096).min(max);
        let local = [dst as u64, max];
        let remote = [src, first, src.wrapping_add(first), max - first];
        let iovecs = if first == max { 1 } else { 2 };
        let got = sys::call6(sys::PROCESS_VM_READV, (*e.h).pid as usize, local.as_ptr() as usize, 1, remote.as_ptr() as usize, iovecs, 0);
        if got <= 0 {
            (*ctx).faults += 1;
            return 0;
        }
        let got = (got as usize).min(max as usize);
        let bytes = core::slice::from_raw_parts_mut(dst, max as usize);
        let len = bytes.iter().take(got).position(|&b| b == 0).unwrap_or(got);
        fill_zero(dst.add(len), max as usize - len);
        len as u64
    }
}

/// The probed function's address, the return address of its call, then those of the calls
/// below it on the shadow stack (probed functions only), innermost first.
extern "sysv64" fn ustack(ctx: *mut ScriptCtx, dst: *mut u64, depth: u64) -> u64 {
    // SAFETY: `dst` has room for `depth` frames (at most `STACK_FRAMES`); frames below
    // `below` are this thread's open calls, whose stack pointers hold return addresses.
    unsafe {
        let e = env(ctx);
        let depth = depth.min(script::STACK_FRAMES as u64) as usize;
        let t = Thread { h: e.h as *mut _, base: e.thread };
        // A system-call site has no function of its own and its frame's key is no return address.
        let own = function(e.s, e.index).filter(|f| f.name_len != 0).map(|f| (e.s as u64).wrapping_add(f.addr as u64));
        let returns_to = (e.call_rsp != 0).then(|| *(e.call_rsp as *const u64));
        let callers = (0..e.below).rev().map(|i| *((*t.frame(i)).rsp as *const u64));
        let mut n = 0;
        for addr in own.into_iter().chain(returns_to).chain(callers).take(depth) {
            *dst.add(n) = addr;
            n += 1;
        }
        n as u64
    }
}

extern "sysv64" fn printf(ctx: *mut ScriptCtx, format: u64, args: *const u64) {
    // SAFETY: `args` has a word per conversion of the format, the format table an entry per
    // format; a string argument's word is the address of `str_size` bytes.
    unsafe {
        let e = env(ctx);
        let s = e.s;
        if format >= u64::from((*s).format_count) {
            return;
        }
        let f = *((s as u64).wrapping_add((*s).formats as u64) as *const script::FormatArgs).add(format as usize);
        let str_size = (*s).str_size as usize;
        let count = (f.count as usize).min(script::MAX_PRINTF_ARGS);
        let part = |i: usize| {
            let word = args.add(i);
            if f.strings >> i & 1 != 0 { (*word as *const u8, str_size) } else { (word as *const u8, 8) }
        };
        emit(e.area, s, record::PRINTF, format as u32, count, part);
    }
}

extern "sysv64" fn print_map(ctx: *mut ScriptCtx, map: u64) {
    // SAFETY: see `env`.
    unsafe {
        let e = env(ctx);
        emit(e.area, e.s, record::PRINT_MAP, map as u32, 0, |_| (value_none(), 0));
    }
}

extern "sysv64" fn print_value(ctx: *mut ScriptCtx, ty: u64, value: *const u8) {
    // SAFETY: `value` has the type's bytes.
    unsafe {
        let e = env(ctx);
        let len = match ty {
            0 => 8,
            1 => (*e.s).str_size as usize,
            _ => core::mem::size_of::<script::StackValue>(),
        };
        emit(e.area, e.s, record::PRINT_VALUE, ty as u32, 1, |_| (value, len));
    }
}

/// Zeroes `len` bytes. Not `memset`, for the reason `thread::copy` is not `memcpy`.
unsafe fn fill_zero(dst: *mut u8, len: usize) {
    // SAFETY: the caller's range is mapped.
    unsafe { core::arch::asm!("rep stosb", inout("rcx") len => _, inout("rdi") dst => _, in("al") 0u8, options(nostack, preserves_flags)) };
}

/// A part of no bytes.
fn value_none() -> *const u8 {
    core::ptr::null()
}

/// Appends a record of `count` parts, `part(i)` giving each one's bytes (padded to 8 in the
/// record), to the area's ring, or counts a drop.
unsafe fn emit(area: *mut ScriptArea, s: *const ScriptImage, kind: u16, what: u32, count: usize, part: impl Fn(usize) -> (*const u8, usize)) {
    // SAFETY: the ring lies inside the area; only this thread writes it.
    unsafe {
        let ring = (area as *mut u8).add((*s).ring_offset as usize);
        let ring_len = (*s).ring_len;
        let payload: u64 = (0..count).map(|i| (part(i).1 as u64 + 7) & !7).sum();
        let need = script::RECORD_HEAD_LEN as u64 + payload;
        let head = (*area).ring_head;
        let tail = read_volatile(&(*area).ring_tail);
        let to_end = ring_len - head % ring_len;
        let pad = if need > to_end { to_end } else { 0 };
        if need > ring_len || head.wrapping_add(pad + need).wrapping_sub(tail) > ring_len {
            (*area).ring_drops += 1;
            return;
        }
        if pad != 0 {
            write_volatile(ring.add((head % ring_len) as usize) as *mut [u32; 2], [pad as u32, u32::from(record::PAD)]);
        }
        let at = ring.add(((head + pad) % ring_len) as usize);
        let record = at as *mut RecordHead;
        write_volatile(&mut (*record).len, need as u32);
        write_volatile(&mut (*record).kind, kind);
        write_volatile(&mut (*record).what, what);
        write_volatile(&mut (*record).tsc, rdtsc());
        let mut to = at.add(script::RECORD_HEAD_LEN);
        for i in 0..count {
            let (from, len) = part(i);
            super::thread::copy(to as usize, from as usize, len);
            to = to.add((len + 7) & !7);
        }
        fence(Ordering::Release);
        write_volatile(&mut (*area).ring_head, head + pad + need);
    }
}
