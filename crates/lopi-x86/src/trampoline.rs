//! The counting trampoline: count one function entry, then run the moved instructions.
//!
//! Counting is exact without a `lock` on the hot path: each CPU has its own counter block
//! and the increment runs inside a restartable sequence (Linux rseq, registered for every
//! thread by glibc >= 2.35). If the thread is preempted, migrated or signalled between
//! reading its CPU number and the increment, the kernel restarts the sequence at the abort
//! handler, so two threads never increment the same counter at once. Until the runtime
//! has set the rseq variables (before the module's init, or without rseq) the trampoline
//! takes the locked path: `lock inc` on a shared counter.
//!
//! ```text
//! top:    mov [rsp-16],r11        ; spills: at a function entry the red zone is free
//!         mov r11,[rseq_offset]   ; 0 = not ready
//!         test r11,r11 ; jz locked
//!         mov [rsp-8],rax
//! start:  lea rax,[cs] ; mov fs:[r11+8],rax      ; arm rseq_cs
//!         mov eax,fs:[r11+4]      ; cpu_id
//!         cmp eax,[cpu_count] ; jae out
//!         imul eax,eax,stride ; add rax,[percpu_base]
//!         inc qword [rax+8*index] ; commit
//! end:    mov qword fs:[r11+8],0  ; disarm (the descriptor may be unmapped later)
//!         mov rax,[rsp-8] ; mov r11,[rsp-16] ; jmp body
//! out:    mov qword fs:[r11+8],0 ; mov rax,[rsp-8]
//! locked: lock inc qword [shared] ; mov r11,[rsp-16]
//! body:   <moved instructions> ; jmp resume
//!         .long RSEQ_SIG
//! abort:  mov rax,[rsp-8] ; mov r11,[rsp-16] ; jmp top
//! ```
//! The section starts at the arming instruction: a signal handler whose own probe
//! disarms on exit can then only interrupt before arming (the sequence re-arms) or inside
//! the section (the kernel restarts it), never leave it running unprotected.
//!
//! Every register is preserved: with interprocedural register allocation (GCC's
//! `-fipa-ra`, on at -O2) a caller may keep values in call-clobbered registers such as r11
//! across a call to a function it knows does not touch them. Only the arithmetic flags
//! change; compilers never keep flags live across a call.
use crate::RelocError;
use iced_x86::{BlockEncoder, BlockEncoderOptions, Code, Instruction, InstructionBlock, MemoryOperand, Register};

/// glibc's rseq signature on x86 (sysdeps/unix/sysv/linux/x86/bits/rseq.h): the kernel
/// checks that the four bytes before an abort handler hold it.
pub const RSEQ_SIG: u32 = 0x5305_3053;

/// Addresses the counting code uses, as absolute addresses of the final image.
#[derive(Clone, Copy, Debug)]
pub struct CounterAccess {
    /// This function's counter in the shared (locked) block.
    pub shared: u64,
    /// `i64`: fs-relative offset of the thread's rseq area; 0 until the runtime is ready.
    pub rseq_offset_var: u64,
    /// `u32`: number of per-CPU blocks.
    pub cpu_count_var: u64,
    /// `u64`: address of per-CPU block 0.
    pub percpu_base_var: u64,
    /// Bytes between per-CPU blocks.
    pub stride: u32,
    /// This function's counter index.
    pub index: u32,
    /// This site's `struct rseq_cs` (32 bytes, 32-byte aligned).
    pub cs: u64,
}

/// The critical section of one trampoline, for its `struct rseq_cs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RseqSection {
    pub start: u64,
    pub post_commit_offset: u64,
    pub abort: u64,
}

/// How a moved instruction leaves its function: where an exit probe goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExitKind {
    /// `ret`: the probe runs right before it.
    Return,
    /// An unconditional jump to another function (a tail call): the probe runs before it.
    TailJump,
    /// A conditional jump to another function: the probe runs on the taken path only.
    ConditionalTailJump,
}

/// Instructions moved into a trampoline, keeping their original IPs so that branches
/// among them follow the copy.
pub struct Body<'a> {
    pub insns: &'a [Instruction],
    /// Original IPs of the instructions that leave the function.
    pub exits: &'a [(u64, ExitKind)],
    /// Where execution continues if the last instruction falls through.
    pub resume: Option<u64>,
}

/// The timing probes of a module and one timed function.
#[derive(Clone, Copy, Debug)]
pub struct TimedEntry {
    pub enter_stub: u64,
    pub exit_stub: u64,
    /// The function's counter index: the entry stub's name for the function, and where it
    /// counts a call it cannot time.
    pub counter: u32,
}

/// Encoded trampoline.
pub struct Trampoline {
    pub bytes: Vec<u8>,
    pub section: RseqSection,
}

// Labels are instruction IPs no real code has (as iced's CodeAssembler does it).
const TOP: u64 = 1;
const START: u64 = 2;
const END: u64 = 3;
const OUT: u64 = 4;
const LOCKED: u64 = 5;
const ABORT: u64 = 6;
/// Labels for the exit paths of conditional tail jumps, upwards from here.
const FIRST_EXIT_PATH: u64 = 16;

fn at(mut insn: Instruction, label: u64) -> Instruction {
    insn.set_ip(label);
    insn
}

fn rip(addr: u64) -> MemoryOperand {
    MemoryOperand::with_base_displ(Register::RIP, addr as i64)
}

fn fs(displ: i64) -> MemoryOperand {
    MemoryOperand::new(Register::R11, Register::None, 1, displ, 1, false, Register::FS)
}

/// Spill slots below the stack pointer (the red zone, unused at a function entry).
fn spill(reg: Register) -> MemoryOperand {
    MemoryOperand::with_base_displ(Register::RSP, if reg == Register::RAX { -8 } else { -16 })
}

/// The body's instructions with exit probes inserted, then a jump to `resume` if the body
/// can fall through. A `call` to the exit stub takes over the exit instruction's IP, so that
/// branches to the exit run the probe too.
fn body_with_exits(body: &Body<'_>, exit_stub: Option<u64>) -> Result<Vec<Instruction>, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let mut out = Vec::with_capacity(body.insns.len() + 4);
    let mut exit_paths = Vec::new();
    for insn in body.insns {
        let kind = body.exits.iter().find(|(ip, _)| *ip == insn.ip() && *ip != 0).map(|&(_, k)| k);
        match (kind, exit_stub) {
            (Some(ExitKind::Return | ExitKind::TailJump), Some(stub)) => {
                out.push(at(Instruction::with_branch(Code::Call_rel32_64, stub).map_err(err)?, insn.ip()));
                // The exit itself no longer needs its label; it names no IP-relative data.
                out.push(at(*insn, 0));
            }
            (Some(ExitKind::ConditionalTailJump), Some(_)) => {
                let label = FIRST_EXIT_PATH + exit_paths.len() as u64;
                let mut taken = *insn;
                taken.set_near_branch64(label);
                out.push(taken);
                exit_paths.push((label, insn.near_branch_target()));
            }
            _ => out.push(*insn),
        }
    }
    if let Some(resume) = body.resume {
        out.push(Instruction::with_branch(Code::Jmp_rel32_64, resume).map_err(err)?);
    }
    if let Some(stub) = exit_stub {
        for (label, target) in exit_paths {
            out.push(at(Instruction::with_branch(Code::Call_rel32_64, stub).map_err(err)?, label));
            out.push(Instruction::with_branch(Code::Jmp_rel32_64, target).map_err(err)?);
        }
    }
    Ok(out)
}

/// Builds an exit-site trampoline at `ip`: the moved instructions with exit probes.
pub fn exit_trampoline(body: &Body<'_>, exit_stub: u64, ip: u64) -> Result<Vec<u8>, RelocError> {
    let insns = body_with_exits(body, Some(exit_stub))?;
    let block = InstructionBlock::new(&insns, ip);
    let result = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE).map_err(|e| RelocError::Encode(e.to_string()))?;
    Ok(result.code_buffer)
}

/// Builds a timed function's trampoline at `ip`: the entry probe (which also counts the
/// call), then the body with exit probes.
///
/// ```text
///         push <counter index>     ; the stub returns with `ret 8`
///         call enter_stub
///         <moved instructions, `call exit_stub` before each exit> ; jmp resume
/// ```
pub fn timed_trampoline(t: &TimedEntry, body: &Body<'_>, ip: u64) -> Result<Vec<u8>, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let index = i32::try_from(t.counter).map_err(|_| RelocError::Encode("counter index beyond 2^31".into()))?;
    let mut insns = vec![
        Instruction::with1(Code::Pushq_imm32, index).map_err(err)?,
        Instruction::with_branch(Code::Call_rel32_64, t.enter_stub).map_err(err)?,
    ];
    insns.extend(body_with_exits(body, Some(t.exit_stub))?);
    let block = InstructionBlock::new(&insns, ip);
    let result = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE).map_err(err)?;
    Ok(result.code_buffer)
}

/// Builds the trampoline at `ip`: the counting code, then the body.
pub fn counting_trampoline(c: &CounterAccess, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let body_ip = body.insns.first().map(Instruction::ip).ok_or_else(|| RelocError::Encode("empty body".into()))?;
    let mut inc_locked = Instruction::with1(Code::Inc_rm64, rip(c.shared)).map_err(err)?;
    inc_locked.set_has_lock_prefix(true);
    let disarm = Instruction::with2(Code::Mov_rm64_imm32, fs(8), 0u32).map_err(err)?;
    let save = |reg| Instruction::with2(Code::Mov_rm64_r64, spill(reg), reg).map_err(err);
    let restore = |reg| Instruction::with2(Code::Mov_r64_rm64, reg, spill(reg)).map_err(err);
    let mut insns = vec![
        at(save(Register::R11)?, TOP),
        Instruction::with2(Code::Mov_r64_rm64, Register::R11, rip(c.rseq_offset_var)).map_err(err)?,
        Instruction::with2(Code::Test_rm64_r64, Register::R11, Register::R11).map_err(err)?,
        Instruction::with_branch(Code::Je_rel32_64, LOCKED).map_err(err)?,
        save(Register::RAX)?,
        at(Instruction::with2(Code::Lea_r64_m, Register::RAX, rip(c.cs)).map_err(err)?, START),
        Instruction::with2(Code::Mov_rm64_r64, fs(8), Register::RAX).map_err(err)?,
        Instruction::with2(Code::Mov_r32_rm32, Register::EAX, fs(4)).map_err(err)?,
        Instruction::with2(Code::Cmp_r32_rm32, Register::EAX, rip(c.cpu_count_var)).map_err(err)?,
        Instruction::with_branch(Code::Jae_rel32_64, OUT).map_err(err)?,
        Instruction::with3(Code::Imul_r32_rm32_imm32, Register::EAX, Register::EAX, c.stride).map_err(err)?,
        Instruction::with2(Code::Add_r64_rm64, Register::RAX, rip(c.percpu_base_var)).map_err(err)?,
        Instruction::with1(Code::Inc_rm64, MemoryOperand::with_base_displ(Register::RAX, 8 * i64::from(c.index))).map_err(err)?,
        at(disarm, END),
        restore(Register::RAX)?,
        restore(Register::R11)?,
        Instruction::with_branch(Code::Jmp_rel32_64, body_ip).map_err(err)?,
        at(disarm, OUT),
        restore(Register::RAX)?,
        at(inc_locked, LOCKED),
        restore(Register::R11)?,
    ];
    insns.extend(body_with_exits(body, None)?);
    insns.push(Instruction::with_declare_dword(&[RSEQ_SIG]).map_err(err)?);
    insns.push(at(restore(Register::RAX)?, ABORT));
    insns.push(restore(Register::R11)?);
    insns.push(Instruction::with_branch(Code::Jmp_rel32_64, TOP).map_err(err)?);

    let index_of = |label: u64| insns.iter().position(|i| i.ip() == label).expect("label is in the block");
    let (start, end, abort) = (index_of(START), index_of(END), index_of(ABORT));
    let block = InstructionBlock::new(&insns, ip);
    let result = BlockEncoder::encode(64, block, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS).map_err(err)?;
    let offset = |i: usize| u64::from(result.new_instruction_offsets[i]);
    Ok(Trampoline {
        section: RseqSection {
            start: ip + offset(start),
            post_commit_offset: offset(end) - offset(start),
            abort: ip + offset(abort),
        },
        bytes: result.code_buffer,
    })
}
