//! What the runtime finds in the process it was loaded into: the auxiliary vector, and the
//! symbols that ld.so, libc and the vDSO export (glibc's rseq area and thread id, its fork
//! handlers, the vDSO's clock).
use crate::base::buf::Buf;
use crate::base::clock::VdsoClock;
use crate::base::sys;

/// glibc's `__rseq_offset`, if glibc registered an rseq area for every thread
/// (`__rseq_size` non-zero). Both are exported by ld.so (GLIBC_2.35), which we find through
/// `AT_BASE` and read through its dynamic symbol table, already mapped.
pub(crate) fn glibc_rseq_offset(auxv: &Auxv) -> Option<i64> {
    let ldso = auxv.base?;
    // SAFETY: AT_BASE is the load address of the mapped dynamic loader.
    let [offset, size] = unsafe { dynamic_symbols(ldso, elf_dynamic(ldso)?, [b"__rseq_offset\0", b"__rseq_size\0"]) };
    // SAFETY: the symbols are ld.so's variables, mapped and initialised before any init runs.
    let (offset, size) = unsafe { (*(offset? as *const i64), *(size? as *const u32)) };
    // __rseq_size is 0 when glibc did not register rseq; 2.35-2.39 report 20 (the
    // original ABI's fields). We use cpu_id (offset 4) and rseq_cs (offset 8).
    (size >= 16 && offset != 0).then_some(offset)
}

/// Offset of the kernel thread id in glibc's thread descriptor, from the thread pointer:
/// libc exports it for libthread_db as `_thread_db_pthread_tid` = {bits, count, offset}.
pub(crate) fn glibc_tid_offset(auxv: &Auxv) -> Option<u32> {
    let [desc] = libc_symbols(auxv, [b"_thread_db_pthread_tid\0"])?;
    let desc = desc? as *const u32;
    // SAFETY: the symbol is libc's read-only descriptor of three u32.
    let (bits, count, offset) = unsafe { (*desc, *desc.add(1), *desc.add(2)) };
    (bits == 32 && count == 1 && offset != 0 && offset < 4096 * 4).then_some(offset)
}

/// Addresses of libc's dynamic symbols `names`; libc is found through ld.so's `_r_debug`
/// link map. `None` when libc is not loaded.
pub(crate) fn libc_symbols<const N: usize>(auxv: &Auxv, names: [&[u8]; N]) -> Option<[Option<usize>; N]> {
    // SAFETY: a loaded object's base and dynamic table.
    find_object(auxv, |base, name, dynamic| {
        // SAFETY: the link map's name is NUL-terminated.
        (!name.is_null() && unsafe { contains(name, b"/libc.so.6") }).then(|| unsafe { dynamic_symbols(base, dynamic, names) })
    })
}

/// CPython 3.11's `_PyRuntime`, in whichever loaded object defines it with a `Py_Version` of
/// 3.11 (the executable, or libpython).
pub(crate) fn python_runtime(auxv: &Auxv) -> Option<usize> {
    find_object(auxv, |base, _, dynamic| {
        // SAFETY: a loaded object's base and dynamic table; `Py_Version` is a u32 constant.
        let [runtime, version] = unsafe { dynamic_symbols(base, dynamic, [b"_PyRuntime\0", b"Py_Version\0"]) };
        let version = unsafe { *(version? as *const u32) };
        (u64::from(version >> 16) == crate::abi::python::PY_VERSION_MAJOR_MINOR).then_some(runtime).flatten()
    })
}

/// The first answer of `f(base, name, dynamic)` over the loaded objects, in ld.so's order.
fn find_object<T>(auxv: &Auxv, mut f: impl FnMut(usize, *const u8, usize) -> Option<T>) -> Option<T> {
    let ldso = auxv.base?;
    // SAFETY: ld.so is mapped at AT_BASE; `_r_debug` is its `struct r_debug`
    // {int version; struct link_map *r_map; ...}, whose link maps
    // {l_addr, l_name, l_ld, l_next, ...} describe every loaded object.
    unsafe {
        let [r_debug] = dynamic_symbols(ldso, elf_dynamic(ldso)?, [b"_r_debug\0"]);
        let mut map = *((r_debug? + 8) as *const usize);
        let mut hops = 0;
        while map != 0 && hops < 4096 {
            let base = *(map as *const usize);
            let name = *((map + 8) as *const *const u8);
            let dynamic = *((map + 16) as *const usize);
            if dynamic != 0 {
                if let Some(found) = f(base, name, dynamic) {
                    return Some(found);
                }
            }
            map = *((map + 24) as *const usize);
            hops += 1;
        }
        None
    }
}

/// The vDSO's `clock_gettime` (`AT_SYSINFO_EHDR`), which reads `CLOCK_MONOTONIC` without a
/// system call: the calibration reads the clock thousands of times, once per probed module.
pub(crate) fn vdso_clock_gettime(auxv: &Auxv) -> Option<VdsoClock> {
    let vdso = auxv.vdso?;
    // SAFETY: the kernel maps the vDSO, a whole ELF object, at AT_SYSINFO_EHDR.
    let [f] = unsafe { dynamic_symbols(vdso, elf_dynamic(vdso)?, [b"__vdso_clock_gettime\0"]) };
    // SAFETY: the symbol is the vDSO's clock_gettime(clockid_t, struct timespec *), which
    // uses no vector or x87 register (the kernel builds the vDSO without them).
    f.map(|addr| unsafe { core::mem::transmute::<usize, VdsoClock>(addr) })
}

/// Address of the `PT_DYNAMIC` table of the ELF object mapped at `base`.
fn elf_dynamic(base: usize) -> Option<usize> {
    // SAFETY: `base` is a mapped ELF object (the caller's claim); reads stay in its headers.
    unsafe {
        let header = base as *const u8;
        if *(header as *const u32) != 0x464c_457f {
            return None;
        }
        let phoff = *(header.add(0x20) as *const u64) as usize;
        let phnum = *(header.add(0x38) as *const u16) as usize;
        for i in 0..phnum {
            let ph = header.add(phoff + i * 56);
            if *(ph as *const u32) == 2 {
                return Some(base + *(ph.add(16) as *const u64) as usize);
            }
        }
        None
    }
}

/// Addresses of dynamic symbols of the object loaded at `base` with dynamic table `dynamic`.
///
/// # Safety
/// `base` and `dynamic` must describe a mapped, loaded ELF object.
unsafe fn dynamic_symbols<const N: usize>(base: usize, dynamic: usize, names: [&[u8]; N]) -> [Option<usize>; N] {
    let mut found = [None; N];
    // SAFETY: the caller's contract; every read stays within the object's dynamic section,
    // symbol table and string table.
    unsafe {
        let (mut symtab, mut strtab, mut strsz) = (0usize, 0usize, 0usize);
        let mut entry = dynamic as *const u64;
        while *entry != 0 {
            let value = *entry.add(1) as usize;
            // ld.so relocates some of its own dynamic entries in place; others stay relative.
            let addr = if value < base { value + base } else { value };
            match *entry {
                5 => strtab = addr,
                6 => symtab = addr,
                10 => strsz = value,
                _ => {}
            }
            entry = entry.add(2);
        }
        if symtab == 0 || strtab <= symtab {
            return found;
        }
        let count = ((strtab - symtab) / 24).min(65536);
        for i in 1..count {
            let sym = (symtab + i * 24) as *const u8;
            let name = *(sym as *const u32) as usize;
            let value = *(sym.add(8) as *const u64) as usize;
            if name >= strsz || value == 0 {
                continue;
            }
            let s = (strtab + name) as *const u8;
            for (slot, want) in found.iter_mut().zip(names) {
                if cstr_eq(s, want) {
                    *slot = Some(base + value);
                }
            }
        }
    }
    found
}

/// True when the NUL-terminated `s` contains `needle`.
///
/// # Safety
/// `s` must be NUL-terminated.
unsafe fn contains(s: *const u8, needle: &[u8]) -> bool {
    let mut i = 0;
    // SAFETY: stops at the terminator; `cstr_eq` stops at the first difference.
    unsafe {
        while *s.add(i) != 0 {
            if cstr_eq(s.add(i), needle) {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// # Safety
/// `s` must be readable up to its NUL or up to `want.len()` bytes.
unsafe fn cstr_eq(s: *const u8, want: &[u8]) -> bool {
    for (i, &c) in want.iter().enumerate() {
        // SAFETY: stops at the first difference, which includes s's terminator.
        if unsafe { *s.add(i) } != c {
            return false;
        }
    }
    true
}

/// The entries of the process's auxiliary vector the runtime uses, read once per init.
pub(crate) struct Auxv {
    /// `AT_BASE`: where the dynamic loader is loaded.
    base: Option<usize>,
    /// `AT_SYSINFO_EHDR`: where the vDSO is.
    vdso: Option<usize>,
}

impl Auxv {
    /// From `/proc/self/auxv` (a library's init has no pointer to the vector itself).
    pub(crate) fn read() -> Auxv {
        let mut auxv = Auxv { base: None, vdso: None };
        let mut raw = Buf::<4096>::new();
        let path = b"/proc/self/auxv\0";
        // SAFETY: NUL-terminated path.
        let fd = unsafe { sys::call3(sys::OPEN, path.as_ptr() as usize, sys::O_RDONLY | sys::O_CLOEXEC, 0) };
        if fd < 0 {
            return auxv;
        }
        // SAFETY: read at most `cap` bytes into our buffer.
        raw.fill_with(|buf, cap| unsafe { sys::call3(sys::READ, fd as usize, buf as usize, cap) });
        // SAFETY: our descriptor.
        unsafe { sys::call3(sys::CLOSE, fd as usize, 0, 0) };
        let bytes = raw.as_bytes();
        let word = |at: usize| {
            let mut v = 0u64;
            for k in (0..8).rev() {
                v = (v << 8) | u64::from(bytes.get(at + k).copied().unwrap_or(0));
            }
            v
        };
        let mut i = 0;
        while i + 16 <= bytes.len() {
            match (word(i), word(i + 8) as usize) {
                (0, _) => break,
                (7, v) => auxv.base = Some(v),
                (33, v) => auxv.vdso = Some(v),
                _ => {}
            }
            i += 16;
        }
        auxv
    }
}
