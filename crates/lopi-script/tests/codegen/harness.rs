//! Runs generated probe code in this process.
//!
//! The code goes into an anonymous mapping made executable, after a page of glue generated
//! here too: one thunk per helper (the test's helpers may be more than 2 GiB away from the
//! mapping, the thunks are within `rel32` reach of the code) and a wrapper that calls a probe
//! function. The glue also checks the ABI on every run:
//! - each thunk counts calls made with a misaligned stack into [`Runtime::misaligned`];
//! - the wrapper loads marks into every callee-saved register and reports any the probe did
//!   not give back.
//!
//! The helpers are Rust functions over a [`Runtime`]: maps in a `HashMap` keyed by (map, key
//! bytes), a made-up traced memory for `read_str`, fixed builtins, and a record of every
//! call the generated code made.

use crate::common::{compile, script};
use iced_x86::code_asm::*;
use lopi_script::codegen::abi::*;
use lopi_script::codegen::{self, CodegenError, Compiled};
use lopi_script::ir::{ConvKind, Piece, Program};
use memmap2::{Mmap, MmapMut};
use std::collections::HashMap;
use std::mem::offset_of;

/// Bytes of the mapping: glue in the first page, code after it.
const MAPPING: usize = 1 << 20;
const GLUE: usize = 4096;
/// Bytes between thunks.
const THUNK: usize = 64;
/// What the `builtin` helper gives for the time since the trace began.
pub const SINCE_START: u64 = 5_000;
/// Helpers in the table (`Helpers`' fields).
const HELPERS: usize = 13;
/// What the wrapper puts in rbx, rbp, r12..r15 before the call.
const MARKS: [u64; 6] = [0x1111_2222_3333_4444, 0x5555_6666_7777_8888, 0x0123_4567_89ab_cdef, 0x7edc_ba98_7654_3210, 0x0f0f_f0f0_0f0f_f0f0, 0x3c3c_c3c3_5a5a_a5a5];

/// A value `printf` or `print` received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Uint(u64),
    /// Up to the first NUL.
    Str(Vec<u8>),
    /// The frames in use.
    Stack(Vec<u64>),
    /// `print(@m, top, div)`: the map's index, the top and the divisor.
    Map(u64, u64, u64),
}

pub fn s(text: &str) -> Value {
    Value::Str(text.as_bytes().to_vec())
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Printf {
    pub format: u64,
    pub args: Vec<Value>,
}

/// A part of a key, for [`Runtime::key`].
pub enum K<'a> {
    Int(i64),
    Str(&'a str),
    Stack(&'a [u64]),
}

/// The helpers' state: what the runtime would keep per thread. `#[repr(C)]` with `misaligned`
/// first, where the thunks count.
#[repr(C)]
pub struct Runtime {
    pub misaligned: u64,
    pub maps: HashMap<(u64, Vec<u8>), Box<[u8]>>,
    /// Live keys a map may hold; `map_slot` returns null past it.
    pub capacity: usize,
    pub drops: u64,
    /// The traced program's memory for `read_str`: (address, bytes).
    pub memory: Vec<(u64, Vec<u8>)>,
    /// What `ustack` walks; `ustack_claims` replaces the count it returns.
    pub frames: Vec<u64>,
    pub ustack_claims: Option<u64>,
    pub pid: u64,
    pub tid: u64,
    pub cpu: u64,
    pub nsecs: u64,
    pub comm: Vec<u8>,
    pub func: Vec<u8>,
    pub probe: Vec<u8>,
    /// Every helper call, by name (`builtin` with its number).
    pub calls: Vec<String>,
    pub printfs: Vec<Printf>,
    pub printed: Vec<Value>,
    /// Broken promises the helpers saw: wrong key lengths, strings not NUL-padded.
    pub errors: Vec<String>,
    names: Vec<String>,
    key_sizes: Vec<usize>,
    key_frames: Vec<Vec<u8>>,
    slot_sizes: Vec<usize>,
    formats: Vec<Vec<ConvKind>>,
    str_size: usize,
}

impl Runtime {
    pub fn new(program: &Program) -> Runtime {
        let size = program.str_size;
        let formats = program.formats.iter().map(|f| f.pieces.iter().filter_map(|p| match p {
            Piece::Conv(c) => Some(c.kind),
            Piece::Text(_) | Piece::Time(_) => None,
        }).collect()).collect();
        Runtime {
            misaligned: 0,
            maps: HashMap::new(),
            capacity: usize::MAX,
            drops: 0,
            memory: Vec::new(),
            frames: vec![0x40_1000, 0x40_2000, 0x40_3000],
            ustack_claims: None,
            pid: 4242,
            tid: 4243,
            cpu: 3,
            nsecs: 1_000_000_007,
            comm: b"sqlite3".to_vec(),
            func: b"foo".to_vec(),
            probe: b"func:foo".to_vec(),
            calls: Vec::new(),
            printfs: Vec::new(),
            printed: Vec::new(),
            errors: Vec::new(),
            names: program.maps.iter().map(|m| m.name.clone()).collect(),
            key_sizes: program.maps.iter().map(|m| key_size(m, size)).collect(),
            key_frames: program.maps.iter().map(|m| m.key_frames.clone()).collect(),
            slot_sizes: program.maps.iter().map(|m| slot_size(m.value, size)).collect(),
            formats,
            str_size: size,
        }
    }

    fn map_id(&self, name: &str) -> u64 {
        self.names.iter().position(|n| n == name).unwrap_or_else(|| panic!("no map @{name}")) as u64
    }

    /// A key of map `map` as the ABI encodes it.
    pub fn key(&self, map: u64, parts: &[K]) -> Vec<u8> {
        let mut key = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            match part {
                K::Int(v) => key.extend(v.to_le_bytes()),
                K::Str(text) => key.extend(self.str_bytes(text)),
                K::Stack(frames) => {
                    key.extend((frames.len() as u64).to_le_bytes());
                    let kept = self.key_frames[map as usize].get(i).map_or(STACK_FRAMES, |&n| usize::from(n));
                    (0..kept).for_each(|i| key.extend(frames.get(i).copied().unwrap_or(0).to_le_bytes()));
                }
            }
        }
        key
    }

    /// `text` as a `str` value: NUL-padded to `str_size`.
    pub fn str_bytes(&self, text: &str) -> Vec<u8> {
        let mut bytes = text.as_bytes().to_vec();
        bytes.resize(self.str_size, 0);
        bytes
    }

    /// The slot of `@name[parts]`, if present.
    pub fn slot(&self, name: &str, parts: &[K]) -> Option<&[u8]> {
        self.maps.get(&(self.map_id(name), self.key(self.map_id(name), parts))).map(|b| &b[..])
    }

    /// The `i64`s of that slot.
    pub fn words(&self, name: &str, parts: &[K]) -> Option<Vec<i64>> {
        self.slot(name, parts).map(|b| b.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect())
    }

    /// Keys present in map `name`.
    pub fn len(&self, name: &str) -> usize {
        let id = self.map_id(name);
        self.maps.keys().filter(|(m, _)| *m == id).count()
    }

    /// Records a `str` the code passed, or an error if its bytes after the text are not 0.
    fn text(&mut self, bytes: &[u8]) -> Value {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        if bytes[end..].iter().any(|&b| b != 0) {
            self.errors.push(format!("a str not NUL-padded: {bytes:?}"));
        }
        Value::Str(bytes[..end].to_vec())
    }

    fn check_key(&mut self, map: u64, len: u64) -> bool {
        let ok = self.key_sizes.get(map as usize) == Some(&(len as usize));
        if !ok {
            self.errors.push(format!("map {map}: a key of {len} bytes"));
        }
        ok
    }
}

fn runtime<'a>(ctx: *mut ScriptCtx) -> &'a mut Runtime {
    // SAFETY: the code passes on the ctx `Script::run` gave it, whose `runtime` is the address of
    // the `Runtime` that `run` borrows mutably for the whole call and does not touch meanwhile.
    unsafe { &mut *((*ctx).runtime as *mut Runtime) }
}

/// `len` bytes at `ptr`.
fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the generated code passes buffers of its frame (or its constants) of the length the
    // ABI gives; a wrong length would be the bug these tests look for, caught by the sizes checked.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

extern "sysv64" fn builtin(ctx: *mut ScriptCtx, which: u64) -> u64 {
    let rt = runtime(ctx);
    rt.calls.push(format!("builtin {which}"));
    match which {
        0 => rt.pid,
        1 => rt.tid,
        2 => rt.cpu,
        3 => rt.nsecs,
        4 => SINCE_START,
        5..=7 => 1000 + which,
        _ => {
            rt.errors.push(format!("builtin {which}"));
            0
        }
    }
}

extern "sysv64" fn builtin_str(ctx: *mut ScriptCtx, which: u64, dst: *mut u8, cap: u64) -> u64 {
    let rt = runtime(ctx);
    rt.calls.push(format!("builtin_str {which}"));
    let text = match which {
        0 => rt.comm.clone(),
        1 => rt.func.clone(),
        _ => rt.probe.clone(),
    };
    let n = text.len().min(cap as usize);
    // SAFETY: `dst` is a frame buffer of `cap` bytes (the code passes str_size for both).
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), dst, n) };
    n as u64
}

extern "sysv64" fn map_slot(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *mut u8 {
    let rt = runtime(ctx);
    rt.calls.push("map_slot".into());
    if !rt.check_key(map, key_len) {
        return std::ptr::null_mut();
    }
    let key = (map, bytes(key, key_len as usize).to_vec());
    if !rt.maps.contains_key(&key) && rt.len(&rt.names[map as usize].clone()) >= rt.capacity {
        rt.drops += 1;
        return std::ptr::null_mut();
    }
    let size = rt.slot_sizes[map as usize];
    rt.maps.entry(key).or_insert_with(|| vec![0; size].into_boxed_slice()).as_mut_ptr()
}

extern "sysv64" fn map_lookup(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) -> *const u8 {
    let rt = runtime(ctx);
    rt.calls.push("map_lookup".into());
    if !rt.check_key(map, key_len) {
        return std::ptr::null();
    }
    rt.maps.get(&(map, bytes(key, key_len as usize).to_vec())).map_or(std::ptr::null(), |slot| slot.as_ptr())
}

extern "sysv64" fn map_delete(ctx: *mut ScriptCtx, map: u64, key: *const u8, key_len: u64) {
    let rt = runtime(ctx);
    rt.calls.push("map_delete".into());
    if rt.check_key(map, key_len) {
        rt.maps.remove(&(map, bytes(key, key_len as usize).to_vec()));
    }
}

extern "sysv64" fn map_clear(ctx: *mut ScriptCtx, map: u64) {
    let rt = runtime(ctx);
    rt.calls.push("map_clear".into());
    rt.maps.retain(|(m, _), _| *m != map);
}

extern "sysv64" fn read_str(ctx: *mut ScriptCtx, dst: *mut u8, src: u64, max: u64) -> u64 {
    let rt = runtime(ctx);
    rt.calls.push("read_str".into());
    if max > rt.str_size as u64 {
        rt.errors.push(format!("read_str of {max} bytes"));
        return 0;
    }
    let Some(found) = rt.memory.iter().find_map(|(at, data)| src.checked_sub(*at).filter(|&off| off < data.len() as u64).map(|off| &data[off as usize..])) else {
        // SAFETY: ctx is the live context of this run.
        unsafe { (*ctx).faults += 1 };
        return 0;
    };
    let n = found.iter().take(max as usize).position(|&b| b == 0).unwrap_or(found.len().min(max as usize));
    // SAFETY: `dst` is a frame buffer of str_size bytes, and n <= max <= str_size.
    unsafe { std::ptr::copy_nonoverlapping(found.as_ptr(), dst, n) };
    n as u64
}

extern "sysv64" fn join(ctx: *mut ScriptCtx, array: u64, sep: u64) {
    runtime(ctx).calls.push(format!("join {array:#x} {sep}"));
}

extern "sysv64" fn ustack(ctx: *mut ScriptCtx, dst: *mut u64, depth: u64) -> u64 {
    let rt = runtime(ctx);
    rt.calls.push(format!("ustack {depth}"));
    let n = rt.frames.len().min(depth as usize);
    // SAFETY: `dst` has room for `depth` frames (a StackValue's, of STACK_FRAMES >= depth).
    unsafe { std::ptr::copy_nonoverlapping(rt.frames.as_ptr(), dst, n) };
    rt.ustack_claims.unwrap_or(n as u64)
}

/// Python frames: the frames `ustack` walks, tagged as the runtime tags code objects.
extern "sysv64" fn pystack(ctx: *mut ScriptCtx, dst: *mut u64, depth: u64) -> u64 {
    let rt = runtime(ctx);
    rt.calls.push(format!("pystack {depth}"));
    let n = rt.frames.len().min(depth as usize);
    for (i, frame) in rt.frames.iter().take(n).enumerate() {
        // SAFETY: `dst` has room for `depth` frames, and i < n <= depth.
        unsafe { *dst.add(i) = frame | lopi_rt_abi::python::PY_FRAME };
    }
    n as u64
}

extern "sysv64" fn printf(ctx: *mut ScriptCtx, format: u64, args: *const u64) {
    let rt = runtime(ctx);
    rt.calls.push("printf".into());
    let kinds = rt.formats[format as usize].clone();
    let mut values = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        // SAFETY: the array has one u64 per conversion of the format.
        let arg = unsafe { *args.add(i) };
        values.push(match kind {
            ConvKind::Str => {
                let text = bytes(arg as *const u8, rt.str_size).to_vec();
                rt.text(&text)
            }
            _ => Value::Int(arg as i64),
        });
    }
    rt.printfs.push(Printf { format, args: values });
}

extern "sysv64" fn print_map(ctx: *mut ScriptCtx, map: u64, top: u64, div: u64) {
    let rt = runtime(ctx);
    rt.calls.push("print_map".into());
    rt.printed.push(Value::Map(map, top, div));
}

extern "sysv64" fn print_value(ctx: *mut ScriptCtx, ty: u64, value: *const u8) {
    let rt = runtime(ctx);
    rt.calls.push("print_value".into());
    let printed = match ty {
        0 => Value::Int(i64::from_le_bytes(bytes(value, 8).try_into().unwrap())),
        3 | 4 => Value::Uint(u64::from_le_bytes(bytes(value, 8).try_into().unwrap())),
        1 => {
            let text = bytes(value, rt.str_size).to_vec();
            rt.text(&text)
        }
        _ => {
            let words: Vec<u64> = bytes(value, size_of::<StackValue>()).chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
            Value::Stack(words[1..=(words[0] as usize).min(STACK_FRAMES)].to_vec())
        }
    };
    rt.printed.push(printed);
}

/// The helpers' addresses, in the order of [`Helpers`]' fields.
fn helper_addresses() -> [u64; HELPERS] {
    let builtin_fn: BuiltinFn = builtin;
    let builtin_str_fn: BuiltinStrFn = builtin_str;
    let map_slot_fn: MapSlotFn = map_slot;
    let map_lookup_fn: MapLookupFn = map_lookup;
    let map_delete_fn: MapDeleteFn = map_delete;
    let map_clear_fn: MapClearFn = map_clear;
    let read_str_fn: ReadStrFn = read_str;
    let ustack_fn: UstackFn = ustack;
    let printf_fn: PrintfFn = printf;
    let print_map_fn: PrintMapFn = print_map;
    let print_value_fn: PrintValueFn = print_value;
    let pystack_fn: UstackFn = pystack;
    let join_fn: JoinFn = join;
    [
        builtin_fn as usize as u64,
        builtin_str_fn as usize as u64,
        map_slot_fn as usize as u64,
        map_lookup_fn as usize as u64,
        map_delete_fn as usize as u64,
        map_clear_fn as usize as u64,
        read_str_fn as usize as u64,
        ustack_fn as usize as u64,
        printf_fn as usize as u64,
        print_map_fn as usize as u64,
        print_value_fn as usize as u64,
        pystack_fn as usize as u64,
        join_fn as usize as u64,
    ]
}

fn helpers_at(thunks: &[u64; HELPERS]) -> Helpers {
    let [builtin, builtin_str, map_slot, map_lookup, map_delete, map_clear, read_str, ustack, printf, print_map, print_value, pystack, join] = *thunks;
    Helpers { builtin, builtin_str, map_slot, map_lookup, map_delete, map_clear, read_str, ustack, printf, print_map, print_value, pystack, join }
}

/// A thunk at `at`: jumps to `target`, unless the caller's stack was misaligned (rsp + 8 is
/// the caller's rsp, 16-byte aligned at a call): then it counts that and calls `target` on a
/// realigned stack, so that the test fails on the count rather than crashing in the helper.
/// r11 is free at a call, and no helper takes arguments on the stack.
fn thunk(at: u64, target: u64) -> Vec<u8> {
    let mut a = CodeAssembler::new(64).unwrap();
    let mut aligned = a.create_label();
    let mut address = a.create_label();
    a.lea(r11, ptr(rsp + 8)).unwrap();
    a.test(r11b, 15).unwrap();
    a.jz(aligned).unwrap();
    a.mov(r11, qword_ptr(rdi + offset_of!(ScriptCtx, runtime))).unwrap();
    a.inc(qword_ptr(r11 + offset_of!(Runtime, misaligned))).unwrap();
    // The caller's rsp was 8 off, so with the return address pushed it is aligned here.
    a.call(qword_ptr(address)).unwrap();
    a.ret().unwrap();
    a.set_label(&mut aligned).unwrap();
    a.jmp(qword_ptr(address)).unwrap();
    a.set_label(&mut address).unwrap();
    a.dq(&[target]).unwrap();
    a.assemble(at).unwrap()
}

/// `extern "sysv64" fn(ctx, probe) -> u64`: calls `probe(ctx)` with marks in the callee-saved
/// registers and returns the xor of each with its mark, or-ed: 0 when all were preserved.
fn wrapper(at: u64) -> Vec<u8> {
    let mut a = CodeAssembler::new(64).unwrap();
    let saved = [rbx, rbp, r12, r13, r14, r15];
    saved.iter().for_each(|&r| a.push(r).unwrap());
    a.sub(rsp, 8).unwrap();
    saved.iter().zip(MARKS).for_each(|(&r, mark)| a.mov(r, mark).unwrap());
    a.call(rsi).unwrap();
    a.xor(eax, eax).unwrap();
    for (&r, mark) in saved.iter().zip(MARKS) {
        a.mov(rcx, mark).unwrap();
        a.xor(rcx, r).unwrap();
        a.or(rax, rcx).unwrap();
    }
    a.add(rsp, 8).unwrap();
    saved.iter().rev().for_each(|&r| a.pop(r).unwrap());
    a.ret().unwrap();
    a.assemble(at).unwrap()
}

/// A program's code, mapped and ready to run.
pub struct Script {
    pub program: Program,
    pub compiled: Compiled,
    mapping: Mmap,
}

impl Script {
    /// Compiles `src` (panicking on errors) and maps its code.
    pub fn new(src: &str) -> Script {
        Script::of(compile(src)).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    /// The script of `common::SCRIPTS` called `name`.
    pub fn named(name: &str) -> Script {
        Script::new(script(name))
    }

    pub fn of(program: Program) -> Result<Script, CodegenError> {
        let mut mapping = MmapMut::map_anon(MAPPING).expect("an anonymous mapping");
        let base = mapping.as_ptr() as u64;
        let mut thunks = [0; HELPERS];
        for (i, target) in helper_addresses().into_iter().enumerate() {
            let at = i * THUNK;
            let bytes = thunk(base + at as u64, target);
            assert!(bytes.len() <= THUNK);
            mapping[at..at + bytes.len()].copy_from_slice(&bytes);
            thunks[i] = base + at as u64;
        }
        let wrapper_at = HELPERS * THUNK;
        let bytes = wrapper(base + wrapper_at as u64);
        mapping[wrapper_at..wrapper_at + bytes.len()].copy_from_slice(&bytes);
        let compiled = codegen::compile(&program, &helpers_at(&thunks), base + GLUE as u64)?;
        assert!(compiled.code.len() <= MAPPING - GLUE, "code too big for the test mapping");
        mapping[GLUE..GLUE + compiled.code.len()].copy_from_slice(&compiled.code);
        let mapping = mapping.make_exec().expect("an executable mapping");
        Ok(Script { program, compiled, mapping })
    }

    pub fn runtime(&self) -> Runtime {
        Runtime::new(&self.program)
    }

    /// Runs probe `probe` on `ctx`, and checks the ABI was kept.
    pub fn run(&self, probe: usize, ctx: &mut ScriptCtx, rt: &mut Runtime) {
        let base = self.mapping.as_ptr() as usize;
        let function = base + GLUE + self.compiled.probes[probe] as usize;
        ctx.runtime = rt as *mut Runtime as u64;
        // SAFETY: the wrapper was assembled above at this address for this signature.
        let wrapper: extern "sysv64" fn(*mut ScriptCtx, u64) -> u64 = unsafe { std::mem::transmute(base + HELPERS * THUNK) };
        let clobbered = wrapper(ctx, function as u64);
        ctx.runtime = 0;
        assert_eq!(clobbered, 0, "a callee-saved register was not preserved");
        assert_eq!(rt.misaligned, 0, "a helper was called with a misaligned stack");
        assert!(rt.errors.is_empty(), "{:?}", rt.errors);
    }

    /// Runs probe 0 on a context with these arguments and a fresh runtime.
    pub fn run_args(&self, args: [i64; 6]) -> (ScriptCtx, Runtime) {
        let mut ctx = ctx(args);
        let mut rt = self.runtime();
        self.run(0, &mut ctx, &mut rt);
        (ctx, rt)
    }
}

pub fn ctx(args: [i64; 6]) -> ScriptCtx {
    ScriptCtx { args: args.map(|a| a as u64), ..ScriptCtx::default() }
}

/// The one `printf("%d", ..)` value of a run.
pub fn printed_int(rt: &Runtime) -> i64 {
    match rt.printfs.as_slice() {
        [Printf { args, .. }] => match args.as_slice() {
            [Value::Int(v)] => *v,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// The value of `expr` over `args` (probe `func:foo`), and the faults it counted.
pub fn eval(expr: &str, args: [i64; 6]) -> (i64, u64) {
    let script = Script::new(&format!("func:foo {{ printf(\"%d\", {expr}); }}"));
    let (ctx, rt) = script.run_args(args);
    (printed_int(&rt), ctx.faults)
}
