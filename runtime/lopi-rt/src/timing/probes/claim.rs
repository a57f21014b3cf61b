//! What every probe stub begins with, written once: claiming the calling thread's chunk
//! (`claim_thread!`), and `stub_asm!`, a stub file's `global_asm!` with the operands the claim
//! uses. As every operand of the stubs, they are offsets taken from `lopi-rt-abi`.

/// Claims the chunk in register `$t` (loaded from `fs:0x38`), with the runtime variables in
/// `$v` and `$i` (32-bit: `$i32`) and `$w32` free: to label 9 (forward) when it is not this
/// thread's own chunk (none yet, a finished thread's on a reused descriptor, a forked parent's)
/// or a probe of it is running (a signal handler's); `busy` taken from there on (a handler's
/// probes then skip instead of changing the state this probe reads); to label 8 when the
/// thread traces, `busy` to give back.
macro_rules! claim_thread {
    ($t:literal, $v:literal, $i:literal, $i32:literal, $w32:literal) => {
        concat!(
            "cmp ", $t, ", 4095\n",
            "jbe 9f\n",
            "mov ", $i32, ", dword ptr [", $v, " + {v_tid}]\n",
            "test ", $i32, ", ", $i32, "\n",
            "jz 9f\n",
            "mov ", $w32, ", dword ptr fs:[", $i, "]\n",
            "cmp ", $w32, ", dword ptr [", $t, " + {t_tid}]\n",
            "jne 9f\n",
            "cmp dword ptr [", $t, " + {t_busy}], 0\n",
            "jne 9f\n",
            "mov dword ptr [", $t, " + {t_busy}], 1\n",
            "cmp qword ptr [", $t, " + {t_trace_cap}], 0\n",
            "jne 8f\n",
        )
    };
}

/// `global_asm!` of a probe stub file: its template strings (`claim_thread!` among them), then
/// after a `;` its own operands; the claim's operands are added here.
macro_rules! stub_asm {
    ($($template:expr),+ $(,)? ; $($operands:tt)*) => {
        core::arch::global_asm!(
            $($template),+,
            v_tid = const core::mem::offset_of!(crate::abi::RuntimeVars, tid_offset),
            t_tid = const core::mem::offset_of!(crate::abi::ThreadHeader, tid),
            t_busy = const core::mem::offset_of!(crate::abi::ThreadHeader, busy),
            t_trace_cap = const core::mem::offset_of!(crate::abi::ThreadHeader, trace_cap),
            $($operands)*
        );
    };
}
