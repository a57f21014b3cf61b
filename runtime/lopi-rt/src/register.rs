//! The module's record in the data file: its metadata and counters, which the counters' pages
//! are then mapped onto, and per-CPU counting where the process has rseq.
use crate::abi::{self, ModuleDescriptor, RecordHeader, PAGE_SIZE};
use crate::base::buf::Buf;
use crate::base::own_calls;
use crate::base::sys::{self, pwrite_all};
use crate::loader::{glibc_rseq_offset, Auxv};

/// `register`'s result when the output exists but is not ours (not an errno value).
pub const NOT_A_DATA_FILE: isize = abi::INIT_NOT_A_DATA_FILE as isize;

/// What a module's record is made of.
pub(crate) struct Module<'a> {
    /// The descriptor's address.
    pub(crate) base: usize,
    pub(crate) counters: *const u8,
    pub(crate) meta: *const u8,
    pub(crate) pid: u64,
    pub(crate) exe: &'a [u8],
}

/// Appends this module's record to the locked data file and maps the counters onto it; the
/// record's TSC rate is `rate()` when its header is written.
pub(crate) fn register(fd: usize, d: &ModuleDescriptor, module: Module<'_>, auxv: &Auxv, rate: impl FnOnce() -> u64) -> isize {
    let Module { base, counters, meta, pid, exe } = module;
    // SAFETY: lseek on our own fd.
    let size = unsafe { sys::call3(sys::LSEEK, fd, 0, sys::SEEK_END) };
    if size < 0 {
        return size;
    }
    let mut size = size as u64;
    if size == 0 {
        let magic = abi::DATA_MAGIC;
        let r = pwrite_all(fd, magic.as_ptr(), magic.len(), 0);
        if r < 0 {
            return r;
        }
        size = PAGE_SIZE;
    } else {
        let mut magic = [0u8; 8];
        // SAFETY: pread64 (17) into an 8-byte buffer.
        let n = unsafe { sys::call6(17, fd, magic.as_mut_ptr() as usize, 8, 0, 0, 0) };
        if n != 8 || magic != abi::DATA_MAGIC || size % PAGE_SIZE != 0 {
            return NOT_A_DATA_FILE; // never overwrite someone else's file
        }
    }
    let meta_offset = PAGE_SIZE;
    let counters_offset = meta_offset + abi::page_align(d.meta_len);
    let record = size;
    // New bytes read as zero, so the record stays invalid (zero magic) until its header is
    // written last; the file is grown below, before anything is mapped.
    let r = pwrite_all(fd, meta, d.meta_len as usize, record + meta_offset);
    if r < 0 {
        return r;
    }
    // Counts made before this point (ifunc resolvers, other modules' constructors) are
    // carried over; no other thread can run this module's code before its init finishes.
    // The runtime's own calls at the region's end are added once it is the file's (below).
    let r = pwrite_all(fd, counters, (d.counters_len - abi::own_calls::LEN) as usize, record + counters_offset);
    if r < 0 {
        return r;
    }
    // Per-CPU blocks follow the shared counters; the file stays sparse where no CPU counts.
    let percpu = cpu_blocks(d, auxv);
    let percpu_offset = counters_offset + d.counters_len;
    let record_len = percpu_offset + u64::from(percpu.cpus) * d.stride;
    // SAFETY: growing our own file (sparse zeros).
    let r = unsafe { sys::call3(sys::FTRUNCATE, fd, (record + record_len) as usize, 0) };
    if r < 0 {
        return r;
    }
    // SAFETY: the counter pages belong to the module's own RW segment, are page aligned and
    // hold nothing but counters and the runtime's own calls, which are carried over;
    // replacing them in place keeps every probe's RIP-relative address valid.
    let m = own_calls::carried_over(|| unsafe {
        sys::call6(
            sys::MMAP,
            counters as usize,
            d.counters_len as usize,
            sys::PROT_READ_WRITE,
            sys::MAP_SHARED_FIXED,
            fd,
            (record + counters_offset) as usize,
        )
    });
    if m < 0 {
        return m;
    }
    if percpu.cpus > 0 {
        // SAFETY: a new shared mapping of the per-CPU blocks, anywhere in the address space.
        let blocks = unsafe {
            sys::call6(
                sys::MMAP,
                0,
                (u64::from(percpu.cpus) * d.stride) as usize,
                sys::PROT_READ_WRITE,
                sys::MAP_SHARED,
                fd,
                (record + percpu_offset) as usize,
            )
        };
        if blocks > 0 {
            // SAFETY: `base` is the descriptor's address; its offsets name this module's RW segment.
            unsafe { enable_percpu(d, base, blocks as u64, percpu.cpus, percpu.rseq_offset) };
        }
    }
    let exe_len = if exe.len() > abi::MAX_EXE_LEN { abi::MAX_EXE_LEN } else { exe.len() };
    let header = RecordHeader {
        magic: abi::RECORD_MAGIC,
        record_len,
        pid: pid as u32,
        exe_len: exe_len as u32,
        load_bias: (base as u64).wrapping_sub(d.svma),
        meta_offset,
        meta_len: d.meta_len,
        counters_offset,
        counters_len: d.counters_len,
        counter_count: d.counter_count,
        percpu_offset,
        cpu_count: percpu.cpus,
        stride: d.stride as u32,
        tsc_hz: rate(),
    };
    let r = pwrite_all(fd, exe.as_ptr(), exe_len, record + abi::RECORD_HEADER_LEN as u64);
    if r < 0 {
        return r;
    }
    let bytes = header.to_bytes();
    pwrite_all(fd, bytes.as_ptr(), bytes.len(), record)
}

/// Per-CPU counting, if the process has rseq: how many CPU blocks, and where the thread's
/// rseq area is relative to the thread pointer.
struct PerCpu {
    cpus: u32,
    rseq_offset: i64,
}

fn cpu_blocks(d: &ModuleDescriptor, auxv: &Auxv) -> PerCpu {
    let none = PerCpu { cpus: 0, rseq_offset: 0 };
    let Some(rseq_offset) = glibc_rseq_offset(auxv) else { return none };
    let cpus = possible_cpus();
    // The trampoline computes cpu * stride in 32 bits.
    if cpus == 0 || u64::from(cpus) * d.stride > i32::MAX as u64 {
        return none;
    }
    PerCpu { cpus, rseq_offset }
}

/// Rebases the module's `struct rseq_cs` table and publishes the variables the trampolines
/// read. The rseq offset goes last: until it is non-zero, trampolines use the shared,
/// locked counters.
///
/// # Safety
/// `base` is the descriptor's runtime address; its offsets name this module's RW segment.
unsafe fn enable_percpu(d: &ModuleDescriptor, base: usize, percpu_base: u64, cpus: u32, rseq_offset: i64) {
    let bias = (base as u64).wrapping_sub(d.svma);
    let table = base.wrapping_add(d.rseq_table_offset as usize) as *mut u64;
    let vars = base.wrapping_add(d.vars_offset as usize) as *mut u64;
    // SAFETY: the table has counter_count 32-byte entries {u32,u32,start,len,abort}; the
    // variables page holds {rseq_offset i64, percpu_base u64, cpu_count u32}.
    unsafe {
        for i in 0..d.counter_count as usize {
            let entry = table.add(i * 4);
            if *entry.add(1) == 0 {
                continue; // a timed function: its entry stub counts, no critical section
            }
            *entry.add(1) = (*entry.add(1)).wrapping_add(bias);
            *entry.add(3) = (*entry.add(3)).wrapping_add(bias);
        }
        *vars.add(1) = percpu_base;
        *(vars.add(2) as *mut u32) = cpus;
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        core::ptr::write_volatile(vars as *mut i64, rseq_offset);
    }
}

/// Number of possible CPU ids, from `/sys/devices/system/cpu/possible` ("0-3", "0,2-5").
fn possible_cpus() -> u32 {
    let mut text = Buf::<256>::new();
    let path = b"/sys/devices/system/cpu/possible\0";
    // SAFETY: NUL-terminated path; read into our buffer.
    let fd = unsafe { sys::call3(sys::OPEN, path.as_ptr() as usize, sys::O_RDONLY | sys::O_CLOEXEC, 0) };
    if fd < 0 {
        return 0;
    }
    // SAFETY: read at most `cap` bytes.
    text.fill_with(|buf, cap| unsafe { sys::call3(sys::READ, fd as usize, buf as usize, cap) });
    // SAFETY: our descriptor.
    unsafe { sys::call3(sys::CLOSE, fd as usize, 0, 0) };
    let mut last = 0u32;
    let mut current: Option<u32> = None;
    for &c in text.as_bytes() {
        if c.is_ascii_digit() {
            current = Some(current.unwrap_or(0).saturating_mul(10).saturating_add(u32::from(c - b'0')));
        } else if let Some(n) = current.take() {
            last = last.max(n);
        }
    }
    if let Some(n) = current {
        last = last.max(n);
    }
    if text.as_bytes().is_empty() { 0 } else { last.saturating_add(1) }
}
