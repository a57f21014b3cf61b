//! Finding every glibc thread descriptor of a process, including those of exited threads
//! that glibc keeps for reuse, the way a debugger's libthread_db does: through the layout
//! descriptors glibc exports for it (`_thread_db_*`) and ld.so's `_rtld_global`.
//!
//! The timing runtime keeps each thread's chunk pointer in the thread's TCB (`fs:0x38`). A
//! thread that exits leaves its descriptor in glibc's stack cache with that word set, and
//! a thread created later on the same descriptor would follow it into a chunk lopi has
//! unmapped. So removal clears the word in every descriptor, live or cached.
use crate::procfs::{Mapping, Memory};
use object::{Object, ObjectSymbol};

/// TCB words lopi owns: the chunk pointer (`fs:0x38`) and the fork snapshot (`fs:0x40`).
pub const LOPI_TCB_WORDS: u64 = 0x38;

/// Bounds a corrupt or racing list walk.
const MAX_DESCRIPTORS: usize = 100_000;

/// Zeroes lopi's TCB words in every thread descriptor glibc knows (running threads, threads
/// with user stacks, and cached descriptors of exited threads). Returns how many, or why
/// they could not be found (then the caller must keep the chunks mapped).
pub fn clear_thread_words(pid: i32, mem: &Memory, maps: &[Mapping]) -> Result<usize, String> {
    let libc = loaded(pid, maps, "libc.so.6").ok_or("libc.so.6 is not loaded")?;
    let ldso = loaded(pid, maps, "ld-linux-x86-64.so.2").ok_or("ld-linux-x86-64.so.2 is not loaded")?;
    let field = |name: &str| -> Result<u64, String> {
        let at = libc.symbol(name).ok_or_else(|| format!("libc.so.6 has no {name}"))?;
        // {size in bits, count, offset}, as libthread_db reads it.
        let d = mem.read(at, 12).map_err(|e| format!("reading {name}: {e}"))?;
        Ok(u64::from(u32::from_le_bytes([d[8], d[9], d[10], d[11]])))
    };
    let list_in_pthread = field("_thread_db_pthread_list")?;
    let used = field("_thread_db_rtld_global__dl_stack_used")?;
    let user = field("_thread_db_rtld_global__dl_stack_user")?;
    // struct rtld_global: list_t _dl_stack_used, _dl_stack_user, _dl_stack_cache, in order.
    if user != used + 16 {
        return Err(format!("unexpected _rtld_global layout (stack lists at {used} and {user})"));
    }
    let rtld_global = ldso.symbol("_rtld_global").ok_or("ld.so has no _rtld_global")?;
    let mut cleared = 0;
    for list in [used, user, user + 16] {
        let head = rtld_global + list;
        let mut node = mem.read_u64(head).map_err(|e| format!("reading a thread list: {e}"))?;
        let mut seen = 0;
        while node != head {
            seen += 1;
            if seen > MAX_DESCRIPTORS || node == 0 {
                return Err("a thread list does not end".into());
            }
            let pd = node.wrapping_sub(list_in_pthread);
            // tcbhead_t.self: every x86-64 glibc descriptor points at itself.
            if mem.read_u64(pd + 0x10).ok() != Some(pd) {
                return Err(format!("{pd:#x} is not a thread descriptor"));
            }
            mem.write(pd + LOPI_TCB_WORDS, &[0; 16]).map_err(|e| format!("clearing a thread descriptor: {e}"))?;
            cleared += 1;
            node = mem.read_u64(node).map_err(|e| format!("reading a thread list: {e}"))?;
        }
    }
    Ok(cleared)
}

/// A loaded module's dynamic symbols at their run-time addresses.
pub(crate) struct Loaded {
    bias: u64,
    symbols: Vec<(String, u64)>,
}

impl Loaded {
    pub(crate) fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols.iter().find(|(n, _)| n == name).map(|(_, a)| a.wrapping_add(self.bias))
    }
}

pub(crate) fn loaded(pid: i32, maps: &[Mapping], file_name: &str) -> Option<Loaded> {
    let first = maps.iter().find(|m| m.offset == 0 && m.path.rsplit('/').next() == Some(file_name))?;
    let data = std::fs::read(format!("/proc/{pid}/root{}", first.path)).or_else(|_| std::fs::read(&first.path)).ok()?;
    let file = object::File::parse(&*data).ok()?;
    // Shared objects are linked at 0: the bias is where offset 0 is mapped.
    let lowest = file.segments().map(|s| object::ObjectSegment::address(&s)).min().unwrap_or(0) & !0xfff;
    let symbols = file.dynamic_symbols().filter_map(|s| Some((s.name().ok()?.to_string(), s.address()))).collect();
    Some(Loaded { bias: first.start.wrapping_sub(lowest), symbols })
}
