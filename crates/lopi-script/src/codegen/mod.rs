//! The code generator: x86-64 machine code for every probe of a checked [`Program`], one
//! System V function per probe, `extern "sysv64" fn(ctx: *mut abi::ScriptCtx)`. It evaluates
//! the predicate, then the body if the predicate is not 0.
//!
//! The code runs inside the traced program, so it must never crash it and always end: the IR
//! has no loops, and the only repeated instructions are `rep` string operations with counts
//! fixed here; no operation traps (`expr.rs` says how division avoids it); the only memory it
//! touches directly is ctx, its own stack frame, its string constants and the slots the helpers
//! return (everything else, the traced program's memory included, goes through a helper).
//!
//! It is position independent but for the `call rel32`s to the helpers, so it is generated
//! for the address it will run at. Locals (zeroed at entry) and temporaries live in the frame
//! (`frame.rs`). Strings are compared inline, with `repe cmpsb` over their `str_size` bytes:
//! bounded, and one helper fewer for the runtime.
pub mod abi;
mod agg;
mod expr;
mod frame;
mod func;
mod stmt;
mod value;

use crate::ir::Program;
use abi::Helpers;
use func::{Helper, Shared};
use iced_x86::code_asm::CodeAssembler;
use iced_x86::{BlockEncoderOptions, IcedError};

/// Bytes of stack one probe function may use: the traced thread's stack is not ours.
pub const MAX_FRAME: usize = 64 * 1024;

/// The code of a program's probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    /// To be placed at the address it was generated for.
    pub code: Vec<u8>,
    /// Offset in `code` of each probe's function, in [`Program::probes`] order.
    pub probes: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    #[error("probe {probe} needs a {bytes}-byte stack frame; at most {MAX_FRAME} bytes are allowed")]
    FrameTooLarge { probe: usize, bytes: usize },
    #[error("a value of {bytes} bytes does not fit the code's immediates")]
    TooLarge { bytes: usize },
    #[error("helper `{helper}` at {address:#x} is out of `call rel32` reach of the code at {at:#x}")]
    HelperOutOfReach { helper: &'static str, address: u64, at: u64 },
    /// The program breaks a rule the checker enforces: a bug of whoever built it.
    #[error("the program was not checked: {0}")]
    Unchecked(&'static str),
    #[error("encoding the code failed: {0}")]
    Encode(String),
}

impl From<IcedError> for CodegenError {
    fn from(error: IcedError) -> CodegenError {
        CodegenError::Encode(error.to_string())
    }
}

/// The code of every probe of `program`, to run at address `at` and call `helpers`.
pub fn compile(program: &Program, helpers: &Helpers, at: u64) -> Result<Compiled, CodegenError> {
    if program.str_size > MAX_FRAME {
        return Err(CodegenError::TooLarge { bytes: program.str_size });
    }
    let mut asm = CodeAssembler::new(64)?;
    let mut shared = Shared::new(*helpers);
    let mut labels = Vec::with_capacity(program.probes.len());
    for (index, probe) in program.probes.iter().enumerate() {
        let frame = func::function(&mut CodeAssembler::new(64)?, &mut Shared::new(*helpers), program, probe, 0)?;
        if frame > MAX_FRAME {
            return Err(CodegenError::FrameTooLarge { probe: index, bytes: frame });
        }
        let mut label = asm.create_label();
        asm.set_label(&mut label)?;
        asm.zero_bytes()?;
        func::function(&mut asm, &mut shared, program, probe, frame)?;
        labels.push(label);
    }
    shared.emit_literals(&mut asm, program)?;
    let assembled = asm.assemble_options(at, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let code = assembled.inner.code_buffer.clone();
    for &helper in &shared.used {
        check_reach(helper, helper.address(helpers), at, code.len())?;
    }
    let probes = labels.iter().map(|label| Ok(assembled.label_ip(label)? - at)).collect::<Result<_, CodegenError>>()?;
    Ok(Compiled { code, probes })
}

/// A `call rel32` anywhere in `len` bytes at `at` reaches `address`. (Out of reach, the
/// encoder would have called through a pointer instead: correct, but not what the caller
/// promised, and likely a sign of a wrong address.)
fn check_reach(helper: Helper, address: u64, at: u64, len: usize) -> Result<(), CodegenError> {
    let reach = |from: u64| i32::try_from(address.wrapping_sub(from) as i64).is_ok();
    if reach(at) && reach(at.wrapping_add(len as u64)) {
        return Ok(());
    }
    Err(CodegenError::HelperOutOfReach { helper: helper.name(), address, at })
}
