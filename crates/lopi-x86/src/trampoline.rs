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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RseqSection {
    pub start: u64,
    pub post_commit_offset: u64,
    pub abort: u64,
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

/// Builds the trampoline at `ip`: the counting code, then `body` (moved instructions,
/// keeping their original IPs so branches among them follow the copy), then a jump to
/// `resume` if the body can fall through.
pub fn counting_trampoline(
    c: &CounterAccess,
    body: &[Instruction],
    resume: Option<u64>,
    ip: u64,
) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let body_ip = body.first().map(Instruction::ip).ok_or_else(|| RelocError::Encode("empty body".into()))?;
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
    insns.extend_from_slice(body);
    if let Some(resume) = resume {
        insns.push(Instruction::with_branch(Code::Jmp_rel32_64, resume).map_err(err)?);
    }
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
