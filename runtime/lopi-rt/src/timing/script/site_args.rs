//! The arguments of an instruction point that are not the argument registers: a USDT marker's,
//! each where its specifier says (`-4@%eax`, `4@$5`, `8@-16(%rbp)`, `8@counter(%rip)`), read
//! from the registers the point stub saved, as they were at the marker's `nop`.
//!
//! A memory operand is read directly: the compiler wrote it as where the value is at that
//! instruction (an operand of the marker's `asm`), so it is memory the program reads there.
use super::Regs;
use crate::abi::script::{site_arg, ScriptImage, SiteArg};
use crate::abi::RuntimeVars;
use core::ptr::{read_unaligned, read_volatile, write_volatile};

/// Bytes from the point stub's `rbp` to the program's `rsp` at the instruction: sixteen saved
/// words, the return address, the counter, the red zone the trampoline stepped over.
const RSP_FROM_SAVED: u64 = 8 * 16 + 8 + 8 + 128;

/// The registers the point with counter `index` gives its probes: its arguments written to
/// `out` (six words) when its image says where they are, else the saved argument registers.
pub(crate) unsafe fn point_regs(v: *const RuntimeVars, index: u64, saved: *const u64, out: *mut u64) -> Regs {
    // SAFETY: the script image is this module's; the image builder keeps a `u32` per counter
    // at `site_args`, and each list it indexes inside `arg_specs`, ended by an `END`.
    unsafe {
        let s = (*v).script as *const ScriptImage;
        let table = (*s).site_args;
        if table == 0 || index >= u64::from((*s).counter_count) {
            return Regs::function(saved);
        }
        let first = read_volatile(((s as u64).wrapping_add(table as u64) as *const u32).add(index as usize));
        if first == 0 {
            return Regs::function(saved);
        }
        let mut spec = ((s as u64).wrapping_add((*s).arg_specs as u64) as *const SiteArg).add(first as usize);
        for i in 0..6 {
            let kind = read_volatile(&(*spec).kind);
            let value = if kind == site_arg::END { 0 } else { value(s, spec, saved) };
            write_volatile(out.add(i), value);
            if kind != site_arg::END {
                spec = spec.add(1);
            }
        }
        Regs::values(out)
    }
}

/// The value of one argument, extended to 64 bits as its specifier says.
unsafe fn value(s: *const ScriptImage, spec: *const SiteArg, saved: *const u64) -> u64 {
    // SAFETY: `spec` is one of the image's; `saved` the stub's sixteen words.
    unsafe {
        let (size, signed, base) = (read_volatile(&(*spec).size), read_volatile(&(*spec).signed) != 0, read_volatile(&(*spec).base));
        let constant = read_volatile(&(*spec).value) as u64;
        let raw = match read_volatile(&(*spec).kind) {
            site_arg::CONSTANT => constant,
            site_arg::REGISTER => register(saved, base) >> (8 * u32::from(read_volatile(&(*spec).high_byte) != 0)),
            site_arg::MEMORY => {
                let mut addr = constant;
                if base == site_arg::IMAGE {
                    addr = addr.wrapping_add(s as u64);
                } else if base != site_arg::NO_REG {
                    addr = addr.wrapping_add(register(saved, base));
                }
                let index = read_volatile(&(*spec).index);
                if index != site_arg::NO_REG {
                    addr = addr.wrapping_add(register(saved, index).wrapping_mul(u64::from(read_volatile(&(*spec).scale))));
                }
                // Only the operand's bytes: the next ones may be on an unmapped page.
                match size {
                    1 => u64::from(read_volatile(addr as *const u8)),
                    2 => u64::from(read_unaligned(addr as *const u16)),
                    4 => u64::from(read_unaligned(addr as *const u32)),
                    _ => read_unaligned(addr as *const u64),
                }
            }
            _ => 0,
        };
        match (size, signed) {
            (1, true) => raw as u8 as i8 as i64 as u64,
            (1, false) => raw as u8 as u64,
            (2, true) => raw as u16 as i16 as i64 as u64,
            (2, false) => raw as u16 as u64,
            (4, true) => raw as u32 as i32 as i64 as u64,
            (4, false) => raw as u32 as u64,
            _ => raw,
        }
    }
}

/// Register `number` (x86's encoding) as it was at the instruction.
unsafe fn register(saved: *const u64, number: u8) -> u64 {
    // The stub's slots (`probes/points.rs`): rbp 0, r11 1, r10 2, r9 3, r8 4, rdi 5, rsi 6,
    // rdx 7, rcx 8, rax 9, rbx 10, r12..r15 11..14.
    let slot = match number {
        0 => 9,
        1 => 8,
        2 => 7,
        3 => 10,
        site_arg::RSP => return (saved as u64).wrapping_add(RSP_FROM_SAVED),
        5 => 0,
        6 => 6,
        7 => 5,
        n @ 8..=11 => 12 - n as usize,
        n @ 12..=15 => n as usize - 1,
        _ => return 0,
    };
    // SAFETY: the stub saved every slot named here.
    unsafe { read_volatile(saved.add(slot)) }
}
