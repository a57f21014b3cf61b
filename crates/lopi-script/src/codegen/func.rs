//! One probe function, and the primitives the expression and statement generators share.
//!
//! ```text
//!         push rbx                ; the only callee-saved register used: it holds ctx
//!         sub rsp, FRAME          ; page by page past 4 KiB, touching each page
//!         mov rbx, rdi
//!         cld
//!         <zero the locals>
//!         <predicate> ; jz exit
//!         <body>
//! exit:   add rsp, FRAME
//!         pop rbx
//!         ret
//! ```
//! Registers: `rbx` holds ctx; `rax` an expression's value (an `int`, or the address of a
//! `str` or `stack`); `rcx` and `rdx` an operator's operands; everything else only between two
//! instructions or as a helper's argument. No value lives in a register across a call: what
//! must survive one is spilled to the frame.
use super::abi::Helpers;
use super::frame::Frame;
use super::CodegenError;
use crate::ir::{Probe, Program, StrId};
use iced_x86::code_asm::*;
use iced_x86::{Code, Instruction, Register};

pub(super) type Result<T = ()> = std::result::Result<T, CodegenError>;

/// Frames past this need their pages touched in order as the stack grows, as with
/// `-fstack-clash-protection`, so that a thread short of stack faults on its guard page
/// instead of writing past it.
const PAGE: usize = 4096;

/// The helpers, by the field of [`Helpers`] that holds their address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Helper {
    Builtin,
    BuiltinStr,
    MapSlot,
    MapLookup,
    MapDelete,
    MapClear,
    ReadStr,
    Ustack,
    Pystack,
    Printf,
    PrintMap,
    PrintValue,
    Join,
}

impl Helper {
    pub fn address(self, helpers: &Helpers) -> u64 {
        match self {
            Helper::Builtin => helpers.builtin,
            Helper::BuiltinStr => helpers.builtin_str,
            Helper::MapSlot => helpers.map_slot,
            Helper::MapLookup => helpers.map_lookup,
            Helper::MapDelete => helpers.map_delete,
            Helper::MapClear => helpers.map_clear,
            Helper::ReadStr => helpers.read_str,
            Helper::Ustack => helpers.ustack,
            Helper::Pystack => helpers.pystack,
            Helper::Printf => helpers.printf,
            Helper::PrintMap => helpers.print_map,
            Helper::PrintValue => helpers.print_value,
            Helper::Join => helpers.join,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Helper::Builtin => "builtin",
            Helper::BuiltinStr => "builtin_str",
            Helper::MapSlot => "map_slot",
            Helper::MapLookup => "map_lookup",
            Helper::MapDelete => "map_delete",
            Helper::MapClear => "map_clear",
            Helper::ReadStr => "read_str",
            Helper::Ustack => "ustack",
            Helper::Pystack => "pystack",
            Helper::Printf => "printf",
            Helper::PrintMap => "print_map",
            Helper::PrintValue => "print_value",
            Helper::Join => "join",
        }
    }
}

/// What the functions of one code block share: the helpers, which of them are called, and the
/// string constants, placed after the functions.
pub(super) struct Shared {
    pub helpers: Helpers,
    pub used: Vec<Helper>,
    literals: Vec<(StrId, CodeLabel)>,
}

impl Shared {
    pub fn new(helpers: Helpers) -> Shared {
        Shared { helpers, used: Vec::new(), literals: Vec::new() }
    }

    /// The label of string constant `id`, emitted by [`Shared::emit_literals`].
    fn literal(&mut self, asm: &mut CodeAssembler, id: StrId) -> CodeLabel {
        if let Some(&(_, label)) = self.literals.iter().find(|(s, _)| *s == id) {
            return label;
        }
        let label = asm.create_label();
        self.literals.push((id, label));
        label
    }

    /// Each constant used, as a `str` value: cut or NUL-padded to `str_size` bytes, so that it
    /// is read, compared and copied like any other. At least one byte, for its label.
    pub fn emit_literals(&mut self, asm: &mut CodeAssembler, program: &Program) -> Result {
        for (id, mut label) in std::mem::take(&mut self.literals) {
            let mut bytes = program.string(id).to_vec();
            bytes.resize(program.str_size.max(1), 0);
            asm.set_label(&mut label)?;
            asm.db(&bytes)?;
        }
        Ok(())
    }
}

/// The generator of one probe function.
pub(super) struct Gen<'a> {
    pub asm: &'a mut CodeAssembler,
    pub shared: &'a mut Shared,
    pub program: &'a Program,
    pub frame: Frame,
    /// The epilogue.
    pub exit: CodeLabel,
    /// Bytes the prologue reserves.
    frame_size: usize,
}

/// Emits the function of `probe` with a frame of `frame_size` bytes, and returns the frame size
/// the function needs: known only once its body is generated, so the caller generates each
/// function twice, the first time into a scratch assembler.
pub(super) fn function(asm: &mut CodeAssembler, shared: &mut Shared, program: &Program, probe: &Probe, frame_size: usize) -> Result<usize> {
    let exit = asm.create_label();
    let frame = Frame::new(probe, program.str_size);
    let mut gen = Gen { asm, shared, program, frame, exit, frame_size };
    gen.prologue()?;
    if let Some(predicate) = &probe.predicate {
        gen.int(predicate)?;
        gen.asm.test(rax, rax)?;
        gen.asm.jz(gen.exit)?;
    }
    gen.stmts(&probe.body)?;
    gen.epilogue()?;
    Ok(gen.frame.size())
}

impl Gen<'_> {
    fn prologue(&mut self) -> Result {
        self.asm.push(rbx)?;
        let mut left = self.frame_size;
        while left > PAGE {
            self.asm.sub(rsp, PAGE as i32)?;
            self.asm.or(qword_ptr(rsp), 0)?;
            left -= PAGE;
        }
        self.asm.sub(rsp, disp(left)?)?;
        self.asm.mov(rbx, rdi)?;
        // The ABI says the direction flag is clear at a call; the string instructions below rely
        // on it, and clearing it costs one byte.
        self.asm.cld()?;
        let locals = self.frame.locals_size();
        if locals > 0 {
            self.zero(0, locals)?;
        }
        Ok(())
    }

    fn epilogue(&mut self) -> Result {
        let mut exit = self.exit;
        self.bind(&mut exit)?;
        self.asm.add(rsp, disp(self.frame_size)?)?;
        self.asm.pop(rbx)?;
        self.asm.ret()?;
        Ok(())
    }

    /// Places `label` here. A zero-length instruction carries it, so that labels may follow
    /// each other (the assembler allows one per instruction).
    pub fn bind(&mut self, label: &mut CodeLabel) -> Result {
        self.asm.set_label(label)?;
        self.asm.zero_bytes()?;
        Ok(())
    }

    /// Calls `helper` with ctx as its first argument; the others are already in place.
    pub fn call(&mut self, helper: Helper) -> Result {
        if !self.shared.used.contains(&helper) {
            self.shared.used.push(helper);
        }
        self.asm.mov(rdi, rbx)?;
        self.asm.call(helper.address(&self.shared.helpers))?;
        Ok(())
    }

    /// The frame's qword at `offset`.
    pub fn frame_qword(&self, offset: usize) -> Result<AsmMemoryOperand> {
        Ok(qword_ptr(rsp + disp(offset)?))
    }

    /// `reg = rsp + offset`.
    pub fn frame_addr(&mut self, reg: AsmRegister64, offset: usize) -> Result {
        self.asm.lea(reg, ptr(rsp + disp(offset)?))?;
        Ok(())
    }

    /// `reg = value`, in the shortest encoding.
    pub fn imm(&mut self, reg: AsmRegister64, value: i64) -> Result {
        let code = if u32::try_from(value).is_ok() {
            Instruction::with2(Code::Mov_r32_imm32, gpr32(reg), value as u32)?
        } else if i32::try_from(value).is_ok() {
            Instruction::with2(Code::Mov_rm64_imm32, Register::from(reg), value as i32)?
        } else {
            Instruction::with2(Code::Mov_r64_imm64, Register::from(reg), value)?
        };
        self.asm.add_instruction(code)?;
        Ok(())
    }

    /// `rax = address of string constant id`.
    pub fn literal(&mut self, id: StrId) -> Result {
        let label = self.shared.literal(self.asm, id);
        self.asm.lea(rax, ptr(label))?;
        Ok(())
    }

    /// Copies `bytes` from `rsi` to `rdi` (both advance). Up to [`UNROLL`] bytes in words,
    /// moved one by one through `r11` (which nothing else uses): a `rep` string instruction
    /// takes longer to start than such a copy takes.
    pub fn copy(&mut self, bytes: usize) -> Result {
        if bytes.is_multiple_of(8) && bytes <= UNROLL {
            for at in (0..bytes).step_by(8) {
                self.asm.mov(r11, qword_ptr(rsi + at as i32))?;
                self.asm.mov(qword_ptr(rdi + at as i32), r11)?;
            }
            self.asm.lea(rsi, ptr(rsi + bytes as i32))?;
            self.asm.lea(rdi, ptr(rdi + bytes as i32))?;
        } else if bytes.is_multiple_of(8) {
            self.imm(rcx, count(bytes / 8)?)?;
            self.asm.rep().movsq()?;
        } else {
            self.imm(rcx, count(bytes)?)?;
            self.asm.rep().movsb()?;
        }
        Ok(())
    }

    /// Copies `bytes` from the address in `rax` to the frame at `offset`.
    pub fn copy_to_frame(&mut self, offset: usize, bytes: usize) -> Result {
        self.asm.mov(rsi, rax)?;
        self.frame_addr(rdi, offset)?;
        self.copy(bytes)
    }

    /// Zeroes `bytes` of the frame at `offset`.
    pub fn zero(&mut self, offset: usize, bytes: usize) -> Result {
        self.frame_addr(rdi, offset)?;
        self.zero_at_rdi(bytes)
    }

    /// Zeroes `bytes` from `rdi` on (`rdi` advances); in words up to [`UNROLL`] bytes.
    pub fn zero_at_rdi(&mut self, bytes: usize) -> Result {
        if bytes.is_multiple_of(8) && bytes <= UNROLL {
            for at in (0..bytes).step_by(8) {
                self.asm.mov(qword_ptr(rdi + at as i32), 0)?;
            }
            self.asm.lea(rdi, ptr(rdi + bytes as i32))?;
            return Ok(());
        }
        self.asm.xor(eax, eax)?;
        if bytes.is_multiple_of(8) {
            self.imm(rcx, count(bytes / 8)?)?;
            self.asm.rep().stosq()?;
        } else {
            self.imm(rcx, count(bytes)?)?;
            self.asm.rep().stosb()?;
        }
        Ok(())
    }
}

/// Most bytes copied or zeroed word by word rather than by a `rep` instruction.
const UNROLL: usize = 128;

/// A frame offset as a displacement.
fn disp(offset: usize) -> Result<i32> {
    i32::try_from(offset).map_err(|_| CodegenError::TooLarge { bytes: offset })
}

/// A byte or word count as an immediate.
fn count(n: usize) -> Result<i64> {
    i64::try_from(n).map_err(|_| CodegenError::TooLarge { bytes: n })
}

/// The 32-bit half of a 64-bit register: writing it clears the upper half.
fn gpr32(reg: AsmRegister64) -> Register {
    Register::from(reg).full_register32()
}
