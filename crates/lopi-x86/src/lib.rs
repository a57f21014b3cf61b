//! Instruction-level knowledge: what an instruction does to control flow, which addresses it
//! names, and how to move it elsewhere. Knows nothing about ELF.
#![forbid(unsafe_code)]

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, MemoryOperand, Mnemonic, OpKind, Register};

pub use iced_x86::Instruction as Insn;
pub use syscall::{is_syscall, sets_rax, SyscallProbes};
pub use trampoline::{
    counting_trampoline, flags_dead, marking_trampoline, point_trampoline, timing_trampoline, Counted, Retire, Timed, Body, CounterAccess, ExitKind, ExitProbe, RseqSection,
    TimedEntry, Trampoline, RSEQ_SIG,
};

mod syscall;
mod trampoline;

/// Length of `jmp rel32`.
pub const JMP32_LEN: usize = 5;
/// Length of `jmp rel8`.
pub const JMP8_LEN: usize = 2;
/// Red zone size of the x86-64 System V ABI: below the stack pointer, data a function keeps.
pub(crate) const RED_ZONE: i64 = 128;

/// Why instructions could not be moved.
#[derive(Debug, thiserror::Error)]
pub enum RelocError {
    #[error("cannot re-encode at the new address: {0}")]
    Encode(String),
}

/// How an instruction leaves or continues the current block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Falls through to the next instruction.
    Next,
    Call,
    IndirectCall,
    Return,
    Jump,
    ConditionalJump,
    IndirectJump,
    /// Never continues (ud2, hlt, int3).
    Stop,
    /// System call or interrupt: continues, but is not plain data flow.
    Interrupt,
}

impl Flow {
    /// True when execution never continues at the next instruction.
    pub fn is_terminal(self) -> bool {
        matches!(self, Flow::Return | Flow::Jump | Flow::IndirectJump | Flow::Stop)
    }
}

pub fn flow(insn: &Instruction) -> Flow {
    // iced classifies `syscall` as a call; for us it is an ordinary instruction that traps.
    if matches!(insn.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) {
        return Flow::Interrupt;
    }
    // iced's `hlt` goes on; in user mode it faults (`_start` ends in one).
    if insn.mnemonic() == Mnemonic::Hlt {
        return Flow::Stop;
    }
    match insn.flow_control() {
        FlowControl::Next => Flow::Next,
        FlowControl::Call => Flow::Call,
        FlowControl::IndirectCall => Flow::IndirectCall,
        FlowControl::Return => Flow::Return,
        FlowControl::UnconditionalBranch => Flow::Jump,
        FlowControl::ConditionalBranch | FlowControl::XbeginXabortXend => Flow::ConditionalJump,
        FlowControl::IndirectBranch => Flow::IndirectJump,
        FlowControl::Interrupt if insn.mnemonic() == Mnemonic::Int3 => Flow::Stop,
        FlowControl::Interrupt => Flow::Interrupt,
        FlowControl::Exception => Flow::Stop,
    }
}

/// Decodes 64-bit code starting at `ip`; stops at the first invalid encoding.
pub fn decode(bytes: &[u8], ip: u64) -> impl Iterator<Item = Instruction> + '_ {
    Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).into_iter().take_while(|i| !i.is_invalid())
}

/// Decodes one instruction at the start of `bytes`.
pub fn decode_one(bytes: &[u8], ip: u64) -> Option<Instruction> {
    let insn = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
    (!insn.is_invalid()).then_some(insn)
}

/// `endbr64`: CET's indirect-branch landing pad, which must stay at the function entry.
pub fn is_endbr64(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa])
}

/// Target of a direct jump, call, conditional jump or loop.
pub fn branch_target(insn: &Instruction) -> Option<u64> {
    match insn.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => Some(insn.near_branch_target()),
        _ => None,
    }
}

/// Absolute address named by a RIP-relative memory operand (e.g. `lea rax,[rip+x]`).
pub fn rip_relative_address(insn: &Instruction) -> Option<u64> {
    insn.is_ip_rel_memory_operand().then(|| insn.ip_rel_memory_address())
}

/// True for `lea reg, [rip+disp]`: the usual way code takes the address of a label
/// (computed goto, jump table base).
pub fn is_lea(insn: &Instruction) -> bool {
    insn.mnemonic() == Mnemonic::Lea
}

/// For `jmp [reg*8 + disp32]` / `mov reg, [reg*8 + disp32]` with no base register: the
/// absolute table address of a non-PIC jump table.
pub fn absolute_table_base(insn: &Instruction) -> Option<u64> {
    for op in 0..insn.op_count() {
        if insn.op_kind(op) == OpKind::Memory
            && insn.memory_base() == Register::None
            && insn.memory_index() != Register::None
            && insn.memory_index_scale() == 8
        {
            return Some(insn.memory_displacement64());
        }
    }
    None
}

/// Constants of `insn` wide enough to be absolute addresses in a non-PIC file: 32/64-bit
/// immediates (`mov $f, %edi`, `push $f`) and the displacement of a memory operand with no
/// base register (`mov f(,%rax,8), %rdx`). Rip-relative operands are not among them.
pub fn absolute_constants(insn: &Instruction) -> impl Iterator<Item = u64> + '_ {
    (0..insn.op_count()).filter_map(move |op| match insn.op_kind(op) {
        OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 => Some(insn.immediate(op)),
        OpKind::Memory if insn.memory_base() == Register::None => Some(insn.memory_displacement64()),
        _ => None,
    })
}

/// True when every byte is alignment padding: `int3`, or nop encodings.
pub fn is_padding(bytes: &[u8], ip: u64) -> bool {
    if bytes.iter().all(|&b| b == 0xcc) {
        return true;
    }
    let mut done = 0;
    for insn in decode(bytes, ip) {
        if !is_filler(&insn) {
            return false;
        }
        done += insn.len();
    }
    done == bytes.len()
}

/// A `nop` (of any length) or `int3`: what compilers pad code with.
pub fn is_filler(insn: &Instruction) -> bool {
    matches!(insn.mnemonic(), Mnemonic::Nop | Mnemonic::Int3)
}

/// Instructions that do what `call` (at its original address) does, from anywhere: push the
/// call's original return address, then jump to its target. The callee returns into the
/// original code, so unwinders and backtraces see the real caller. Uses only the stack slot
/// the call itself would write and the one below it, which no code keeps live across a call,
/// and changes no flags. `None` for calls whose target depends on `rsp` or that cannot be
/// re-expressed as a jump.
pub fn emulate_call(call: &Instruction) -> Option<Vec<Instruction>> {
    let jump = match call.code() {
        Code::Call_rel32_64 => Instruction::with_branch(Code::Jmp_rel32_64, call.near_branch_target()).ok()?,
        Code::Call_rm64 => {
            let mut j = *call;
            if call.op0_kind() == OpKind::Memory && (call.memory_base() == Register::RSP || call.memory_index() == Register::RSP) {
                return None;
            }
            if call.op0_kind() == OpKind::Register && call.op0_register() == Register::RSP {
                return None;
            }
            j.set_code(Code::Jmp_rm64);
            // The call's address now names the emulation's first instruction.
            j.set_ip(0);
            j
        }
        _ => return None,
    };
    let return_address = call.next_ip();
    let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    // The first instruction takes the call's address: a branch to the call (the trampoline's
    // jump to its moved code, when the call comes first) lands on the emulation.
    let mut first = Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-8)).ok()?;
    first.set_ip(call.ip());
    Some(vec![
        first,
        Instruction::with1(Code::Push_r64, Register::RAX).ok()?,
        Instruction::with2(Code::Lea_r64_m, Register::RAX, MemoryOperand::with_base_displ(Register::RIP, return_address as i64)).ok()?,
        Instruction::with2(Code::Mov_rm64_r64, rsp(8), Register::RAX).ok()?,
        Instruction::with1(Code::Pop_r64, Register::RAX).ok()?,
        jump,
    ])
}

/// Bytes of `jmp rel32` at `from` to `to`, if in range.
pub fn jmp32_bytes(from: u64, to: u64) -> Option<[u8; 5]> {
    let rel = to.wrapping_sub(from.wrapping_add(5)) as i64;
    let rel = i32::try_from(rel).ok()?;
    let r = rel.to_le_bytes();
    Some([0xe9, r[0], r[1], r[2], r[3]])
}

/// Bytes of `jmp rel8` at `from` to `to`, if in range.
pub fn jmp8_bytes(from: u64, to: u64) -> Option<[u8; 2]> {
    let rel = to.wrapping_sub(from.wrapping_add(2)) as i64;
    let rel = i8::try_from(rel).ok()?;
    Some([0xeb, rel as u8])
}

#[cfg(test)]
mod tests;
