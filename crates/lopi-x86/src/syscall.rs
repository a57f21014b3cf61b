//! The system-call probe: a moved `syscall` instruction, wrapped in calls to the runtime's
//! syscall stubs, which time it in the thread's calling-context tree.
//!
//! ```text
//!         lea rsp,[rsp-128]        ; past the red zone: the site is inside a function
//!         push <site counter>      ; the stubs return with `ret 8`
//!         call syscall_enter_stub
//!         lea rsp,[rsp+128]
//!         jrcxz done               ; the enter stub made the call already (rax: its result)
//!        (mov byte fs:[0x4c],0)    ; with dispatch: the selector lets this call through
//!         syscall                  ; a restart (rip - 2) re-enters the kernel right here
//!        (mov byte fs:[0x4c],1)    ; and blocks the program's calls again
//! done:   lea rsp,[rsp-128]
//!         push <site counter>
//!         call syscall_exit_stub
//!         lea rsp,[rsp+128]
//! ```
//! `lea` and `jrcxz` change no flags. The stubs preserve every register but `rcx` and `r11`,
//! which the `syscall` instruction itself clobbers, and the flags; the enter stub leaves `rcx`
//! non-zero unless it has made the call itself (an emulated kernel that runs system calls on
//! another thread: `lopi whatif --kernel app-kernel`).
//!
//! With Syscall User Dispatch (`lopi_rt_abi::dispatch`), the kernel raises `SIGSYS` for the
//! program's calls from anywhere but the runtime while the thread's selector blocks them: the
//! trampoline lets its own call through. The store after it is the signature by which the
//! runtime's handler knows a site's call that a signal made it miss.
//!
//! Both calls run on the stack the thread has at that point: in the child of a `clone` with a
//! new stack, the exit probe runs on the child's stack, 128 bytes below its top.
use crate::RED_ZONE;
use iced_x86::{Code, Instruction, InstructionInfoFactory, MemoryOperand, OpAccess, Register};

/// The runtime's syscall stubs, and the moved `syscall` instructions to probe.
#[derive(Clone, Copy, Debug)]
pub struct SyscallProbes<'a> {
    pub enter_stub: u64,
    pub exit_stub: u64,
    /// Original IP of each probed `syscall` instruction, with its site's counter index.
    pub sites: &'a [(u64, u32)],
    /// Syscall User Dispatch is on: set the thread's selector around the `syscall`.
    pub dispatch: bool,
}

impl SyscallProbes<'_> {
    pub(crate) fn counter_at(&self, ip: u64) -> Option<u32> {
        self.sites.iter().find(|&&(at, _)| at == ip).map(|&(_, c)| c)
    }
}


/// `lea rsp, [rsp-128]; push counter; call stub; lea rsp, [rsp+128]`: a stub called below the
/// red zone with a counter index (it returns with `ret 8`).
pub(crate) fn stub_call(stub: u64, counter: u32) -> Result<[Instruction; 4], iced_x86::IcedError> {
    let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    Ok([
        Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-RED_ZONE))?,
        Instruction::with1(Code::Pushq_imm32, counter as i32)?,
        Instruction::with_branch(Code::Call_rel32_64, stub)?,
        Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(RED_ZONE))?,
    ])
}

/// The probed `syscall`: its first instruction takes the syscall's IP (branches to the
/// syscall among the moved code run the probe); the `syscall` itself gets `label`, so that
/// its place in the encoded trampoline can be found, and the exit probe `done`.
pub(crate) fn wrapped(syscall: &Instruction, probes: &SyscallProbes<'_>, counter: u32, label: u64, done: u64) -> Result<Vec<Instruction>, iced_x86::IcedError> {
    let mut out = Vec::with_capacity(10);
    out.extend(stub_call(probes.enter_stub, counter)?);
    out[0].set_ip(syscall.ip());
    out.push(Instruction::with_branch(Code::Jrcxz_rel8_64, done)?);
    if probes.dispatch {
        out.push(selector(lopi_rt_abi::dispatch::ALLOW)?);
    }
    let mut moved = *syscall;
    moved.set_ip(label);
    out.push(moved);
    if probes.dispatch {
        out.push(selector(lopi_rt_abi::dispatch::BLOCK)?);
    }
    let exit = stub_call(probes.exit_stub, counter)?;
    out.push(at(exit[0], done));
    out.extend(&exit[1..]);
    Ok(out)
}

/// `mov byte ptr fs:[SELECTOR], value`: the thread's Syscall User Dispatch selector.
fn selector(value: u8) -> Result<Instruction, iced_x86::IcedError> {
    let tcb = MemoryOperand::new(Register::None, Register::None, 1, i64::from(lopi_rt_abi::dispatch::SELECTOR), 4, false, Register::FS);
    Instruction::with2(Code::Mov_rm8_imm8, tcb, u32::from(value))
}

fn at(mut insn: Instruction, ip: u64) -> Instruction {
    insn.set_ip(ip);
    insn
}

/// Is this the `syscall` instruction?
pub fn is_syscall(insn: &Instruction) -> bool {
    insn.code() == Code::Syscall
}

/// What `insn` does to `rax`: `None` if it does not write it, `Some(Some(n))` if it sets it
/// to the constant `n` (`mov eax, n`: a system call number), `Some(None)` otherwise.
pub fn sets_rax(insn: &Instruction) -> Option<Option<u32>> {
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(insn);
    let writes = info.used_registers().iter().any(|r| {
        r.register().full_register() == Register::RAX && matches!(r.access(), OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite)
    });
    if !writes {
        return None;
    }
    Some(match insn.code() {
        Code::Mov_r32_imm32 | Code::Mov_rm32_imm32 | Code::Mov_rm64_imm32 | Code::Mov_r64_imm64 if insn.op0_register().full_register() == Register::RAX => {
            u32::try_from(insn.immediate(1)).ok()
        }
        _ => None,
    })
}
