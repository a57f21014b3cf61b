//! The entry and exit probes' slow paths, called by their stubs (`entry_exit_stubs.rs`) with
//! every call-clobbered register saved.
use crate::abi;
use crate::base::vars::{counter, switched, vars};
use crate::timing::script;
use crate::timing::thread::calls::{begin_entry, begin_exit, enter, pause_excess};
use core::ptr::write_volatile;

/// Entry probe: `index` is the function's counter index (the counter's address is its name
/// in context trees), `rsp` the stack pointer at its entry, `regs` the registers the stub
/// saved. The function's script probes run before its frame opens, so that their time is
/// not the call's.
pub(super) unsafe extern "C" fn probe_enter(index: u64, rsp: u64, regs: *const u64) {
    let v = vars();
    let counter = counter(index);
    // SAFETY: see `begin_entry`.
    unsafe {
        let Some((t, began)) = begin_entry(v, counter, rsp) else { return };
        let (list, _) = script::hooks(v, index);
        if list != 0 {
            script::run(&t, v, list, index, script::Regs::function(regs), rsp, (*t.h).depth, script::Side::Entry);
        }
        enter(&t, v, counter, counter, rsp, began);
        write_volatile(&mut (*t.h).busy, 0);
    }
}

/// Exit probe: `rsp` is the stack pointer at the `ret` (or tail jump), `tsc` the TSC the stub
/// read first, `word` what the probe pushed (`abi::exit_word`: the exiting function's counter
/// index, or a site shared by several functions; a tail call marked), `regs` the registers the
/// stub saved. The function's script probes run once its frame is closed, with the call's time.
pub(super) unsafe extern "C" fn probe_exit(rsp: u64, tsc: u64, word: u32, regs: *const u64) {
    let v = vars();
    // SAFETY: see `begin_exit`.
    unsafe {
        let Some((t, now)) = begin_exit(v, rsp, tsc) else { return };
        let h = t.h;
        let depth = (*h).depth;
        let shared = word & abi::exit_word::SHARED == abi::exit_word::SHARED;
        let mut index = u64::from(word & abi::exit_word::INDEX);
        if depth > 0 && (*t.frame(depth - 1)).rsp == rsp {
            let top = *t.frame(depth - 1);
            if shared {
                // The frame's node names the function.
                index = (*t.node(top.node)).func.wrapping_sub(counter(0)) / 8;
            }
            let elapsed = if top.flags & (abi::FRAME_UNTIMED | abi::FRAME_UNCLOCKED) == 0 { now.saturating_sub(top.start_tsc) } else { 0 };
            t.close_top(now, abi::EVENT_EXIT);
            let (_, list) = script::hooks(v, index);
            if list != 0 {
                script::run_return(&t, v, list, index, word & abi::exit_word::TAIL != 0, script::Regs::function(regs), rsp, depth - 1, elapsed);
            }
        } else if switched(v, index) {
            // Its function was switched to counting as this call began: its trampoline
            // counted the entry, and no frame was made.
        } else if depth == 0 {
            // Every open frame is newer than this call: it began before timing started
            // (an attach, or code run before the module's init).
            (*h).early_exits += 1;
        } else {
            t.note_unmatched(if shared { 0 } else { counter(index) });
        }
        (*h).last_tsc = now;
        let check = tsc >= (*h).next_check_tsc;
        if check {
            crate::timing::budget::check(&t, v, tsc);
        }
        pause_excess(&t, tsc, check);
        write_volatile(&mut (*h).busy, 0);
    }
}
