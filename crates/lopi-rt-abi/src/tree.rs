//! A thread chunk's regions after its header page: the calling-context tree (nodes and their
//! hash table), the shadow stack of calls in progress, and the trace; and where each lies.
use super::fields::Fields;
use super::PAGE_SIZE;

/// Node of a thread's calling-context tree: one call path.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ContextNode {
    pub parent: u32,
    /// With `cache_func`: the child this node's last call of a function went to, so that
    /// repeated calls skip the hash table. Merged nodes are never cached nor cache owners.
    pub cache_child: u32,
    /// Runtime address of the function's counter (the function's name in the tree); 0 for
    /// the root and the merged-paths node.
    pub func: u64,
    /// Calls on this path that ended.
    pub calls: u64,
    /// Sum of the calls' durations.
    pub ticks: u64,
    pub max_ticks: u64,
    pub cache_func: u64,
    /// (A lock call's node caches its hold node, and a hold node the site node its holds were
    /// last released from: siblings, found again without the hash table by the lock stubs.)
    /// Durations of calls made directly from calls on this path whose own paths were merged,
    /// less the probe time inside each (their probes' cost to this path is taken out of its
    /// clock instead).
    pub merged_ticks: u64,
    /// A merged node: the durations of its calls made while no other call of the same
    /// function was open (its inclusive time). A path node: its calls that ended without their
    /// exit probe (left by `longjmp` or an exception), whose probes cost about half as much.
    pub aux: u64,
}

pub const CONTEXT_NODE_LEN: usize = 64;
const _: () = assert!(core::mem::size_of::<ContextNode>() == CONTEXT_NODE_LEN);
/// `log2(CONTEXT_NODE_LEN)`: the entry stub turns a node's offset back into its index.
pub const CONTEXT_NODE_SHIFT: u32 = CONTEXT_NODE_LEN.trailing_zeros();
const _: () = assert!(1 << CONTEXT_NODE_SHIFT == CONTEXT_NODE_LEN);

/// The slot of a (parent, function) pair in a thread's node hash table (`2 * node_cap` u32
/// slots, linear probing): the runtime's lookups and the entry stub's both start there.
pub const NODE_HASH_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
pub fn node_slot(parent: u32, func: u64, mask: usize) -> usize {
    ((func ^ (u64::from(parent) << 32)).wrapping_mul(NODE_HASH_MUL) >> 32) as usize & mask
}

/// Parent of every merged node: call paths that did not fit under the tree's limit are
/// timed per function under it.
pub const MERGED_NODE: u32 = 1;
/// Nodes of a new chunk: the root and [`MERGED_NODE`].
pub const FIRST_FREE_NODE: u32 = 2;

/// A shadow stack frame: one timed call in progress.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Frame {
    /// Stack pointer at the call's entry (pointing at its return address): the exit with
    /// the same stack pointer ends it, and any probe above it proves it gone.
    pub rsp: u64,
    /// Its node ([`MERGED_NODE`] for an untimed call, whose entry then never finds a
    /// cached child: calls under it take the slow path).
    pub node: u32,
    /// `FRAME_*` bits; any bit sends its exit to the slow path.
    pub flags: u32,
    pub start_tsc: u64,
}

pub const FRAME_LEN: usize = 24;
const _: () = assert!(core::mem::size_of::<Frame>() == FRAME_LEN);

/// A call a forked child copied from its parent: counted there, so its end adds time only.
pub const FRAME_INHERITED: u32 = 1;
/// The call's node is a merged node.
pub const FRAME_MERGED: u32 = 2;
/// Another call of the same function was open below it (its time is already inside that one's).
pub const FRAME_NESTED: u32 = 4;
/// The call has no node at all (counted in the shared counter): its end records nothing.
pub const FRAME_UNTIMED: u32 = 8;
/// The call's start was not read (`start_tsc` holds the thread's `last_tsc` then): a lock
/// acquisition that found its lock free, whose wait is taken as nothing unless a probe runs
/// inside it (a `futex`: it waited after all), which then reads the start for it.
pub const FRAME_UNCLOCKED: u32 = 16;
/// An unclocked call whose start a probe inside it read.
pub const FRAME_CLOCKED_INSIDE: u32 = 32;

/// One trace event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Event {
    pub tsc: u64,
    pub node: u32,
    /// `EVENT_*`.
    pub kind: u32,
}

pub const EVENT_LEN: usize = 16;
const _: () = assert!(core::mem::size_of::<Event>() == EVENT_LEN);

pub const EVENT_ENTER: u32 = 0;
pub const EVENT_EXIT: u32 = 1;
pub const EVENT_UNWIND: u32 = 2;
/// A logged system call: `node` is the number of slots of its payload that follow
/// ([`crate::syscall_log`]).
pub const EVENT_SYSCALL: u32 = 3;

/// Bytes of the node array and hash table (2 slots per node) of a tree of `cap` nodes.
pub const fn tree_bytes(cap: u32) -> [u64; 2] {
    [super::page_align(cap as u64 * CONTEXT_NODE_LEN as u64), super::page_align(cap as u64 * 2 * 4)]
}

/// Byte layout of a new thread chunk: (nodes, hash, stack, trace, total) offsets from the
/// chunk start, each region page aligned. `None` on overflow.
pub const fn thread_chunk_layout(node_cap: u32, stack_cap: u32, trace_cap: u64) -> Option<[u64; 5]> {
    let [node_bytes, hash_bytes] = tree_bytes(node_cap);
    let nodes = PAGE_SIZE;
    let hash = nodes + node_bytes;
    let stack = hash + hash_bytes;
    let trace = stack + super::page_align(stack_cap as u64 * FRAME_LEN as u64);
    let Some(trace_bytes) = trace_cap.checked_mul(EVENT_LEN as u64) else { return None };
    if trace_bytes > 1 << 40 {
        return None;
    }
    Some([nodes, hash, stack, trace, trace + super::page_align(trace_bytes)])
}

impl ContextNode {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..CONTEXT_NODE_LEN)?);
        Some(Self {
            parent: f.u32(0),
            cache_child: f.u32(4),
            func: f.u64(8),
            calls: f.u64(16),
            ticks: f.u64(24),
            max_ticks: f.u64(32),
            cache_func: f.u64(40),
            merged_ticks: f.u64(48),
            aux: f.u64(56),
        })
    }
}

impl Frame {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..FRAME_LEN)?);
        Some(Self { rsp: f.u64(0), node: f.u32(8), flags: f.u32(12), start_tsc: f.u64(16) })
    }
}

impl Event {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let f = Fields(bytes.get(..EVENT_LEN)?);
        Some(Self { tsc: f.u64(0), node: f.u32(8), kind: f.u32(12) })
    }
}
