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
use crate::syscall::{wrapped, SyscallProbes};
use crate::RelocError;
use crate::RED_ZONE;
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
    /// Whether branches to the first moved instruction follow the copy too: a function moved
    /// whole runs its own loops there, past its entry probe. Otherwise they go back to the
    /// original code, where the site's jump runs the probe again (a loop back to a block's
    /// start is another run of the block).
    pub loops_in_copy: bool,
    /// Original IPs of the instructions that leave the function.
    pub exits: &'a [(u64, ExitKind)],
    /// Where execution continues if the last instruction falls through.
    pub resume: Option<u64>,
    /// Moved `syscall` instructions that get system-call probes.
    pub syscalls: Option<SyscallProbes<'a>>,
}

/// The timing probes of a module and one timed function.
#[derive(Clone, Copy, Debug)]
pub struct TimedEntry {
    pub enter_stub: u64,
    pub exit_stub: u64,
    /// The function's counter (its index is the stubs' name for the function), counted here
    /// once the function is switched to counting.
    pub counter: CounterAccess,
    /// The function's mode word (`u32`): 0 while timed.
    pub mode: u64,
    /// Or-ed into the counter index the entry pushes: a lock operation's number in bits
    /// 24..31 (`lopi_rt_abi::lock_name::OP_SHIFT`), 0 for a timed function.
    pub entry_tag: u32,
}

/// Encoded trampoline.
pub struct Trampoline {
    pub bytes: Vec<u8>,
    pub section: RseqSection,
    /// Where the counting code starts, in a trampoline that has it: a timed function the
    /// budget switched to counting may jump there straight from its entry.
    pub counting: Option<u64>,
    /// Each probed `syscall`'s original IP, with the address right after its moved copy
    /// (where a thread in that system call returns to).
    pub syscall_returns: Vec<(u64, u64)>,
}

// Labels are instruction IPs no real code has (as iced's CodeAssembler does it).
const TOP: u64 = 1;
const START: u64 = 2;
const END: u64 = 3;
const OUT: u64 = 4;
const LOCKED: u64 = 5;
const ABORT: u64 = 6;
/// Where a block probe's counting code ends: its flags and stack pointer restored.
const EPILOGUE: u64 = 7;
/// A coverage probe's retire record.
const RECORD: u64 = 8;
/// The body's first instruction, unless branches to its original address follow the copy.
const BODY: u64 = 9;
/// Labels for the exit paths of conditional tail jumps, upwards from here.
const FIRST_EXIT_PATH: u64 = 16;
/// Labels for the instructions exit probes skip to, upwards from here: kernel addresses, which
/// no moved instruction has.
const SKIP_LABELS: u64 = 0xffff_8000_0000_0000;
/// Labels of moved `syscall` instructions (`SYSCALL_LABELS + original IP`).
const SYSCALL_LABELS: u64 = 0xffff_c000_0000_0000;
/// Labels of their exit probes, where a call the enter probe made itself goes on.
const SYSCALL_DONE_LABELS: u64 = 0xffff_b000_0000_0000;

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
/// can fall through. The probe's first instruction takes over the exit instruction's IP, so
/// that branches to the exit run the probe too.
fn body_with_exits(body: &Body<'_>, exit: Option<ExitProbe>) -> Result<Vec<Instruction>, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let mut out = Vec::with_capacity(body.insns.len() + 4);
    let mut exit_paths = Vec::new();
    for insn in body.insns {
        let kind = body.exits.iter().find(|(ip, _)| *ip == insn.ip() && *ip != 0).map(|&(_, k)| k);
        if let Some((probes, counter)) = body.syscalls.and_then(|p| Some((p, p.counter_at(insn.ip()).filter(|_| crate::is_syscall(insn))?))) {
            out.extend(wrapped(insn, &probes, counter, SYSCALL_LABELS + insn.ip(), SYSCALL_DONE_LABELS + insn.ip()).map_err(err)?);
            continue;
        }
        match (kind, exit) {
            (Some(kind @ (ExitKind::Return | ExitKind::TailJump)), Some(probe)) => {
                let skip = SKIP_LABELS + out.len() as u64;
                let mut probe_insns = probe.instructions(kind, skip)?;
                probe_insns[0].set_ip(insn.ip());
                out.extend(probe_insns);
                // The exit itself keeps only the probe's skip label; it names no IP-relative data.
                out.push(at(*insn, skip));
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
    if let Some(probe) = exit {
        for (label, target) in exit_paths {
            let skip = SKIP_LABELS + out.len() as u64;
            let mut probe_insns = probe.instructions(ExitKind::ConditionalTailJump, skip)?;
            probe_insns[0].set_ip(label);
            out.extend(probe_insns);
            out.push(at(Instruction::with_branch(Code::Jmp_rel32_64, target).map_err(err)?, skip));
        }
    }
    if !body.loops_in_copy {
        let first = body_ip(body)?;
        if let Some(insn) = out.iter_mut().find(|i| i.ip() == first) {
            insn.set_ip(BODY);
        }
    }
    Ok(out)
}

/// An exit probe: `push <counter index of the exiting function>; call exit_stub` (the stub
/// returns with `ret 8`), skipped while the function's mode word is non-zero (the budget
/// switched it to counting). `counter` and `mode` are `None` for a site several functions
/// share: the probe then pushes `lopi_rt_abi::exit_word::SHARED`, always runs, and matches
/// the call by its stack pointer. With `mark_tail`, a tail call's probe says so
/// (`exit_word::TAIL`).
#[derive(Clone, Copy, Debug)]
pub struct ExitProbe {
    pub stub: u64,
    pub counter: Option<u32>,
    pub mode: Option<u64>,
    pub mark_tail: bool,
}

impl ExitProbe {
    /// The probe's instructions at an exit of `kind`; with a mode word, the last one is a
    /// `jne skip`.
    fn instructions(self, kind: ExitKind, skip: u64) -> Result<Vec<Instruction>, RelocError> {
        use lopi_rt_abi::exit_word;
        let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
        let word = match self.counter {
            Some(c) if c <= exit_word::INDEX => c,
            Some(_) => return Err(RelocError::Encode("counter index beyond 2^30".into())),
            None => exit_word::SHARED,
        };
        let tail = self.mark_tail && kind != ExitKind::Return;
        let index = (if tail { word | exit_word::TAIL } else { word }) as i32;
        let mut out = Vec::with_capacity(4);
        if let Some(mode) = self.mode {
            out.push(Instruction::with2(Code::Cmp_rm32_imm8, MemoryOperand::with_base_displ(Register::RIP, mode as i64), 0).map_err(err)?);
            out.push(Instruction::with_branch(Code::Jne_rel32_64, skip).map_err(err)?);
        }
        out.push(Instruction::with1(Code::Pushq_imm32, index).map_err(err)?);
        out.push(Instruction::with_branch(Code::Call_rel32_64, self.stub).map_err(err)?);
        Ok(out)
    }
}

/// Where a timing trampoline times, and what with.
#[derive(Clone, Copy, Debug)]
pub enum Timed<'a> {
    /// A timed function's entry (see [`TimedEntry`]); with `copy` (the whole function, a small
    /// leaf), a call the budget switched to counting runs a clean copy of it.
    Entry { entry: &'a TimedEntry, copy: Option<&'a [Instruction]> },
    /// An exit site of timed functions: the moved instructions with exit probes (and a moved
    /// `syscall` with its probes). Its `section` is empty (it counts nothing).
    Exit(ExitProbe),
    /// A system-call site: the moved instructions, the `syscall` among them wrapped in the
    /// system-call probes. Its `section` is empty (it counts nothing).
    Syscall,
}

/// Builds the timing trampoline at `ip` for a probe `at`.
pub fn timing_trampoline(at: Timed<'_>, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    match at {
        Timed::Entry { entry, copy } => timed_entry(entry, body, copy, ip),
        Timed::Exit(probe) => encode_without_section(&body_with_exits(body, Some(probe))?, body.insns, ip),
        Timed::Syscall => encode_without_section(&body_with_exits(body, None)?, body.insns, ip),
    }
}

/// Encodes `insns` at `ip` with iced's `BlockEncoder`, each RIP-relative memory operand that
/// names one of the `moved` instructions keeping the address it names. `BlockEncoder` moves a
/// reference to an instruction of the block along with that instruction, which is right for
/// branches and for lopi's own data in the block (a coverage probe's retire record) but not
/// for the program's data: a function that takes its own address among its moved
/// instructions (CPython's `subtype_traverse` starts `push r15; lea rax, [rip - 9]` and
/// compares types' `tp_traverse` with it) must get its own address, not its trampoline's, or
/// it loops. Such an operand is encoded against a stand-in address no instruction has, then
/// its displacement is put back.
fn encode_block(insns: &[Instruction], moved: &[Instruction], ip: u64) -> Result<iced_x86::BlockEncoderResult, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let labels: std::collections::HashSet<u64> = insns.iter().map(|i| i.ip()).collect();
    let moved: std::collections::HashSet<u64> = moved.iter().map(|i| i.ip()).collect();
    let mut block = insns.to_vec();
    let mut kept = Vec::new();
    for (k, insn) in block.iter_mut().enumerate() {
        if insn.is_ip_rel_memory_operand() && moved.contains(&insn.ip_rel_memory_address()) && labels.contains(&insn.ip_rel_memory_address()) {
            let target = insn.ip_rel_memory_address();
            let shift = (1..).find(|d| !labels.contains(&target.wrapping_add(*d))).expect("a finite block leaves an address free");
            insn.set_memory_displacement64(target.wrapping_add(shift));
            kept.push((k, shift));
        }
    }
    let options = BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS | BlockEncoderOptions::RETURN_CONSTANT_OFFSETS;
    let mut result = BlockEncoder::encode(64, InstructionBlock::new(&block, ip), options).map_err(err)?;
    for (k, shift) in kept {
        let offsets = &result.constant_offsets[k];
        if offsets.displacement_size() != 4 {
            return Err(RelocError::Encode("a RIP-relative operand without a 32-bit displacement".into()));
        }
        let at = result.new_instruction_offsets[k] as usize + offsets.displacement_offset();
        let bytes: &mut [u8; 4] = (&mut result.code_buffer[at..at + 4]).try_into().expect("four bytes");
        *bytes = (i32::from_le_bytes(*bytes).wrapping_sub(shift as i32)).to_le_bytes();
    }
    Ok(result)
}

fn encode_without_section(insns: &[Instruction], moved: &[Instruction], ip: u64) -> Result<Trampoline, RelocError> {
    let result = encode_block(insns, moved, ip)?;
    Ok(Trampoline {
        section: RseqSection { start: 0, post_commit_offset: 0, abort: 0 },
        counting: None,
        syscall_returns: syscall_returns(insns, &result.new_instruction_offsets, ip),
        bytes: result.code_buffer,
    })
}

/// Where each probed `syscall` returns to in the encoded trampoline at `ip`.
fn syscall_returns(insns: &[Instruction], offsets: &[u32], ip: u64) -> Vec<(u64, u64)> {
    insns
        .iter()
        .zip(offsets)
        .filter(|(i, _)| i.ip() >= SYSCALL_LABELS)
        .map(|(i, &offset)| (i.ip() - SYSCALL_LABELS, ip + u64::from(offset) + i.len() as u64))
        .collect()
}

/// A timed function's trampoline at `ip`: the entry probe, then the body with exit
/// probes; once the budget switched the function to counting (its mode word is non-zero),
/// the entry counts as a counting trampoline does and the exit probes are skipped. With
/// `copy` (the whole function, a small leaf), a switched call runs a clean copy of it placed
/// after the trampoline instead of the probed original.
///
/// ```text
///         cmp dword [mode],0 ; jne top
///         push <counter index>     ; the stub returns with `ret 8`
///         call enter_stub
/// body:   <moved instructions, each exit preceded by
///          `cmp dword [mode],0; jne skip; push <counter index>; call exit_stub; skip:`>
///         jmp resume
/// top:    <counting code, see the module docs> ; jmp body
/// ```
fn timed_entry(t: &TimedEntry, body: &Body<'_>, copy: Option<&[Instruction]>, ip: u64) -> Result<Trampoline, RelocError> {
    let Some(copy) = copy else { return timed_code(t, body, None, ip) };
    // The copy follows the trampoline, whose length depends (through the jump's encoding) on
    // where the copy is: place it until that settles.
    let mut copy_at = ip + 0x1000;
    for _ in 0..4 {
        let mut trampoline = timed_code(t, body, Some(copy_at), ip)?;
        let at = (ip + trampoline.bytes.len() as u64).next_multiple_of(16);
        if at == copy_at {
            let encoded = encode_block(copy, copy, copy_at)?;
            trampoline.bytes.resize((copy_at - ip) as usize, 0xcc);
            trampoline.bytes.extend(encoded.code_buffer);
            return Ok(trampoline);
        }
        copy_at = at;
    }
    Err(RelocError::Encode("the trampoline's length does not settle".into()))
}

/// The timed trampoline; once switched, the counting code continues in the body, or in a
/// clean copy of the whole function at `copy_at` (a small leaf: its exits then cost nothing).
fn timed_code(t: &TimedEntry, body: &Body<'_>, copy_at: Option<u64>, ip: u64) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    if t.entry_tag != 0 && t.counter.index >= 1 << 24 {
        return Err(RelocError::Encode("a lock function's counter index beyond 2^24".into()));
    }
    let index = i32::try_from(t.counter.index | t.entry_tag).map_err(|_| RelocError::Encode("counter index beyond 2^31".into()))?;
    let counted = copy_at.unwrap_or(body_label(body)?);
    let mut insns = vec![
        Instruction::with2(Code::Cmp_rm32_imm8, rip(t.mode), 0).map_err(err)?,
        Instruction::with_branch(Code::Jne_rel32_64, TOP).map_err(err)?,
        Instruction::with1(Code::Pushq_imm32, index).map_err(err)?,
        Instruction::with_branch(Code::Call_rel32_64, t.enter_stub).map_err(err)?,
    ];
    let exit = ExitProbe { stub: t.exit_stub, counter: Some(t.counter.index), mode: Some(t.mode), mark_tail: true };
    insns.extend(body_with_exits(body, Some(exit))?);
    insns.extend(counting_code(&t.counter, counted)?);
    insns.push(Instruction::with_branch(Code::Jmp_rel32_64, counted).map_err(err)?);
    insns.extend(abort_code()?);
    encode_with_section(&insns, body.insns, ip)
}

/// Where a counting trampoline counts, and what runs there before it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// A function's entry: the red zone is free and the flags are dead.
    Entry,
    /// A function's entry whose script probes run first, through the runtime's point stub at
    /// `stub`, with the function's counter index.
    ProbedEntry { stub: u64, counter: u32 },
    /// A basic block's start inside a function: below the red zone, with the flags saved
    /// unless `flags_dead`.
    Block { flags_dead: bool },
}

/// Builds the counting trampoline at `ip` for a probe `at`: the counting code, then the body.
pub fn counting_trampoline(c: &CounterAccess, at: Counted, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    match at {
        Counted::Entry => entry_counting(c, body, ip),
        Counted::ProbedEntry { stub, counter } => probed_entry_counting(stub, counter, c, body, ip),
        Counted::Block { flags_dead } => block_counting(c, body, flags_dead, ip),
    }
}

/// The counting code, then the body.
fn entry_counting(c: &CounterAccess, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    let mut insns = counting_code(c, body_label(body)?)?;
    insns.extend(body_with_exits(body, None)?);
    insns.extend(abort_code()?);
    encode_with_section(&insns, body.insns, ip)
}

/// What a coverage probe needs to take itself out once it has marked its block (see the
/// runtime's `retire.rs`).
#[derive(Clone, Copy, Debug)]
pub struct Retire<'a> {
    /// The runtime's `lopi_retire_stub`.
    pub stub: u64,
    /// Where the site's patch starts.
    pub site: u64,
    /// Bytes of the jump at its start (5, or 2 for a short jump to a bounce).
    pub jump_len: u8,
    /// The original bytes the patch covers.
    pub original: &'a [u8],
}

/// A trampoline that marks that the code ran, storing 1 into the byte at `mark`, then runs the
/// body: no register, no flag and no stack touched. With `retire`, it calls the runtime to put
/// the original code back over its site in between (below the red zone, `rdi` and `rsi` saved;
/// the stub saves the rest), passing its record, which follows the code.
pub fn marking_trampoline(mark: u64, retire: Option<&Retire<'_>>, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let mut insns = vec![Instruction::with2(Code::Mov_rm8_imm8, rip(mark), 1u32).map_err(err)?];
    if let Some(r) = retire {
        let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
        insns.extend([
            Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-RED_ZONE)).map_err(err)?,
            Instruction::with1(Code::Push_r64, Register::RDI).map_err(err)?,
            Instruction::with1(Code::Push_r64, Register::RSI).map_err(err)?,
            Instruction::with2(Code::Lea_r64_m, Register::RDI, rip(RECORD)).map_err(err)?,
            // The site is the first moved instruction's IP, which the encoder would take for
            // the moved copy: address the byte before it.
            Instruction::with2(Code::Lea_r64_m, Register::RSI, rip(r.site - 1)).map_err(err)?,
            Instruction::with2(Code::Lea_r64_m, Register::RSI, MemoryOperand::with_base_displ(Register::RSI, 1)).map_err(err)?,
            Instruction::with_branch(Code::Call_rel32_64, r.stub).map_err(err)?,
            Instruction::with1(Code::Pop_r64, Register::RSI).map_err(err)?,
            Instruction::with1(Code::Pop_r64, Register::RDI).map_err(err)?,
            Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(RED_ZONE)).map_err(err)?,
        ]);
    }
    insns.extend(body_with_exits(body, None)?);
    if let Some(r) = retire {
        let len = u8::try_from(r.original.len()).map_err(|_| RelocError::Encode("a patch of over 255 bytes".into()))?;
        let record: Vec<u8> = [len, r.jump_len].into_iter().chain(r.original.iter().copied()).collect();
        for (i, chunk) in record.chunks(16).enumerate() {
            let bytes = Instruction::with_declare_byte(chunk).map_err(err)?;
            insns.push(if i == 0 { at(bytes, RECORD) } else { bytes });
        }
    }
    encode_without_section(&insns, body.insns, ip)
}

/// The same for a probe inside a function (a basic block's start), where the red zone may hold
/// the function's data and the flags may be live: the counting code runs 128 bytes lower, with
/// the flags saved unless `flags_dead` (the body sets them all before it reads any).
fn block_counting(c: &CounterAccess, body: &Body<'_>, flags_dead: bool, ip: u64) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    let mut insns = vec![Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-RED_ZONE)).map_err(err)?];
    if !flags_dead {
        insns.push(Instruction::with(Code::Pushfq));
    }
    insns.extend(counting_code(c, EPILOGUE)?);
    let mut epilogue = Vec::new();
    if !flags_dead {
        epilogue.push(Instruction::with(Code::Popfq));
    }
    epilogue.push(Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(RED_ZONE)).map_err(err)?);
    epilogue[0].set_ip(EPILOGUE);
    insns.extend(epilogue);
    insns.extend(body_with_exits(body, None)?);
    insns.extend(abort_code()?);
    encode_with_section(&insns, body.insns, ip)
}

/// A counted function entry that runs a script's entry probes (the function is not timed:
/// its exits cannot all be probed): the runtime's point stub, called below the red zone with
/// the function's counter, then the counting code and the moved instructions.
fn probed_entry_counting(stub: u64, counter: u32, c: &CounterAccess, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let mut insns = crate::syscall::stub_call(stub, counter).map_err(err)?.to_vec();
    insns.extend(counting_code(c, body_label(body)?)?);
    insns.extend(body_with_exits(body, None)?);
    insns.extend(abort_code()?);
    encode_with_section(&insns, body.insns, ip)
}

/// A probe at any instruction: the runtime's point stub, called below the red zone with the
/// site's counter, saves every register and the flags and runs the probes hooked there; then
/// the moved instructions.
pub fn point_trampoline(stub: u64, counter: u32, body: &Body<'_>, ip: u64) -> Result<Trampoline, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let mut insns = crate::syscall::stub_call(stub, counter).map_err(err)?.to_vec();
    insns.extend(body_with_exits(body, None)?);
    encode_without_section(&insns, body.insns, ip)
}

/// True when `insns`, run in order from their start, set every status flag before they read
/// any: the flags are dead where they begin.
pub fn flags_dead(insns: &[Instruction]) -> bool {
    let status = iced_x86::RflagsBits::OF | iced_x86::RflagsBits::SF | iced_x86::RflagsBits::ZF | iced_x86::RflagsBits::AF | iced_x86::RflagsBits::CF | iced_x86::RflagsBits::PF;
    let mut set = 0;
    for insn in insns {
        if insn.rflags_read() & status & !set != 0 {
            return false;
        }
        set |= insn.rflags_modified() & status;
        if set == status {
            return true;
        }
        if crate::flow(insn) != crate::Flow::Next {
            return false;
        }
    }
    false
}

fn body_ip(body: &Body<'_>) -> Result<u64, RelocError> {
    body.insns.first().map(Instruction::ip).ok_or_else(|| RelocError::Encode("empty body".into()))
}

/// Where the counting code goes on into the body.
fn body_label(body: &Body<'_>) -> Result<u64, RelocError> {
    if body.loops_in_copy {
        body_ip(body)
    } else {
        Ok(BODY)
    }
}

/// The counting code from `top` to the locked path, which falls through to what follows.
fn counting_code(c: &CounterAccess, body_ip: u64) -> Result<Vec<Instruction>, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let mut inc_locked = Instruction::with1(Code::Inc_rm64, rip(c.shared)).map_err(err)?;
    inc_locked.set_has_lock_prefix(true);
    let disarm = Instruction::with2(Code::Mov_rm64_imm32, fs(8), 0u32).map_err(err)?;
    let save = |reg| Instruction::with2(Code::Mov_rm64_r64, spill(reg), reg).map_err(err);
    let restore = |reg| Instruction::with2(Code::Mov_r64_rm64, reg, spill(reg)).map_err(err);
    Ok(vec![
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
    ])
}

/// The rseq signature and the abort handler, which starts the counting code again.
fn abort_code() -> Result<Vec<Instruction>, RelocError> {
    let err = |e: iced_x86::IcedError| RelocError::Encode(e.to_string());
    let restore = |reg| Instruction::with2(Code::Mov_r64_rm64, reg, spill(reg)).map_err(err);
    Ok(vec![
        Instruction::with_declare_dword(&[RSEQ_SIG]).map_err(err)?,
        at(restore(Register::RAX)?, ABORT),
        restore(Register::R11)?,
        Instruction::with_branch(Code::Jmp_rel32_64, TOP).map_err(err)?,
    ])
}

/// Encodes a trampoline holding the counting code at `ip`, with its critical section.
fn encode_with_section(insns: &[Instruction], moved: &[Instruction], ip: u64) -> Result<Trampoline, RelocError> {
    let index_of = |label: u64| insns.iter().position(|i| i.ip() == label).expect("label is in the block");
    let (start, end, abort) = (index_of(START), index_of(END), index_of(ABORT));
    let result = encode_block(insns, moved, ip)?;
    let offset = |i: usize| u64::from(result.new_instruction_offsets[i]);
    Ok(Trampoline {
        section: RseqSection {
            start: ip + offset(start),
            post_commit_offset: offset(end) - offset(start),
            abort: ip + offset(abort),
        },
        counting: insns.iter().position(|i| i.ip() == TOP).map(|top| ip + offset(top)),
        syscall_returns: syscall_returns(insns, &result.new_instruction_offsets, ip),
        bytes: result.code_buffer,
    })
}
