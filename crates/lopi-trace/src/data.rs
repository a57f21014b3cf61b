//! Data files: a header page, then page-aligned module records (one per module per process)
//! and thread chunks (one per timed thread), in the order processes appended them. See
//! `lopi-rt-abi` for the layouts and `runtime/lopi-rt` for the writer.
use crate::ModuleMeta;
use lopi_rt_abi::{
    own_calls,
    ContextNode, Event, Frame, HeldLock, RecordHeader, CPUS_ENTRY_LEN, CPUS_HEADER_LEN, CPUS_MAGIC, MAPS_HEADER_LEN, MAPS_MAGIC, PARALLELISM_HEADER_LEN, PARALLELISM_MAGIC, ThreadHeader, UnmatchedExit, CONTEXT_NODE_LEN, DATA_MAGIC,
    DATA_MAGIC_PREFIX, EVENT_LEN, EXTENSION_MAGIC, END_HEADER_LEN, END_MAGIC, NAMES_ENTRY_LEN, NAMES_HEADER_LEN, NAMES_MAGIC, FRAME_LEN, HELD_LOCK_LEN, HELD_SLOTS, HELD_TABLE, PAGE_SIZE, RECORD_HEADER_LEN, RECORD_MAGIC, BudgetEntry, BudgetModule, BudgetState, BUDGET_ENTRY_LEN, BUDGET_MODULES, BUDGET_MODULE_LEN, BUDGET_MODULE_SLOTS, BUDGET_STATE, BUDGET_STATE_LEN,
    ThreadEnd, KernelLockState, KERNEL_LOCK_STATE, KERNEL_LOCK_STATE_LEN, ProxyState, PROXY_STATE, PROXY_STATE_LEN, THREAD_END, THREAD_END_LEN, THREAD_MAGIC, UNMATCHED_EXIT_LEN, UNMATCHED_SLOTS, UNMATCHED_TABLE,
};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("not a lopi data file (bad magic)")]
    NotData,
    #[error("a data file of another lopi version ({0}); this lopi reads {1}")]
    OtherVersion(String, String),
}

/// A part of a data file that could not be read: the reader skipped it and read on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Its number among the file's records and chunks, from 1; 0 for the header page.
    pub item: usize,
    pub offset: u64,
    /// What it is ("module record", "thread chunk", ...; "record" when its magic is unknown).
    pub kind: &'static str,
    pub what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.item {
            0 => write!(f, "{}: {}", self.kind, self.what),
            n => write!(f, "{} {n} at offset {:#x}: {}", self.kind, self.offset, self.what),
        }
    }
}

/// One module's counts in one process.
#[derive(Clone, Debug)]
pub struct Record {
    pub pid: u32,
    pub exe: String,
    pub load_bias: u64,
    pub meta: ModuleMeta,
    /// Per probe of `meta.probes`, by counter: at a function's entry, calls counted in the
    /// counters (all of them for a counted function; for a timed one, those that got no timed
    /// frame); at a `syscall`, calls that got no timed frame (made before the runtime was
    /// ready, or inside a probe, or by a vfork child); at a block, its executions.
    pub counts: Vec<u64>,
    /// The system calls lopi's runtime made itself for this module, in every process sharing
    /// the record (not the program's): (number, calls, TSC ticks), by number.
    pub own_calls: Vec<(u64, u64, u64)>,
    /// The TSC rate the runtime measured (0: unknown).
    pub tsc_hz: u64,
}

impl Record {
    /// The count of the probe at `counter` (0 for a counter the record does not have).
    pub fn count(&self, counter: usize) -> u64 {
        self.counts.get(counter).copied().unwrap_or(0)
    }
}

/// One thread's timing state as its process left it.
#[derive(Clone, Debug)]
pub struct ThreadChunk {
    pub header: ThreadHeader,
    /// `nodes[0]` is the root, `nodes[1]` collects calls made once the tree was full.
    pub nodes: Vec<ContextNode>,
    /// Frames still open when the process stopped (main's, at least, after `exit`).
    pub open_frames: Vec<Frame>,
    /// The locks it held then (and the mutexes of its condition waits in progress).
    pub held: Vec<HeldLock>,
    /// When its recording ended; its open frames and holds are closed there, in `nodes`.
    pub ended: crate::open::Ended,
    /// Calls (frames and holds) that were still open then, closed at `ended`.
    pub open: Vec<crate::open::OpenCall>,
    pub events: Vec<Event>,
    /// The system calls it logged (`lopi run --log`), in order.
    pub syscalls: Vec<crate::LoggedCall>,
    /// Exits that matched no frame, by function.
    pub unmatched: Vec<UnmatchedExit>,
    /// Entries of the budget tables of functions this thread switched to counting (every
    /// module's), in order.
    pub switches: Vec<BudgetEntry>,
    pub budget: BudgetState,
    /// The budget's state of each module whose probes checked it.
    pub budget_modules: Vec<BudgetModule>,
    /// How the thread ended, if a probe saw it (`tsc` 0: not seen).
    pub end: ThreadEnd,
    /// Its waits for an emulated kernel's lock (`lopi whatif`).
    pub kernel_lock: KernelLockState,
    /// Its calls forwarded to its proxy in the emulated application kernel.
    pub proxy: ProxyState,
}

/// A process's memory map (`/proc/PID/maps`) when its lock probes started.
#[derive(Clone, Debug)]
pub struct ProcessMaps {
    pub pid: u32,
    pub text: String,
}

/// The CPU times of a thread that another thread's `exit_group` ended, recorded by that call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndedCpu {
    pub pid: u32,
    pub tid: u32,
    /// `THREAD_END_*` flags (and allowed CPUs) and times, as in a [`ThreadEnd`].
    pub end: ThreadEnd,
}

/// How a process's recording ended where no probe saw it, as lopi saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessEnd {
    pub pid: u32,
    /// `END_EXITED` or `END_DETACHED`.
    pub how: u32,
    pub tsc: u64,
    /// The `munmap` calls lopi made in the process at a detach, and their TSC ticks.
    pub unmaps: u64,
    pub unmap_ticks: u64,
}

/// A thread's name as its process's recording ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadName {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    /// As the chunk header keeps it (`comm`, NUL-padded).
    pub comm: [u8; 16],
}

/// A whole data file.
#[derive(Clone, Debug, Default)]
pub struct DataFile {
    pub records: Vec<Record>,
    pub threads: Vec<ThreadChunk>,
    pub maps: Vec<ProcessMaps>,
    pub ended_cpus: Vec<EndedCpu>,
    /// Ends of processes' recordings that `lopi run` or `lopi attach` saw (no probe did).
    pub ends: Vec<ProcessEnd>,
    /// Threads' names at their process's `exit_group` or at lopi's detach, in file order (a
    /// later one is newer); already in their chunks' headers.
    pub names: Vec<ThreadName>,
    /// Samples of how many threads were ready to run (`lopi run`'s parallelism profile).
    pub parallelism: Option<Parallelism>,
    /// The processes of a followed tree, in the order they ended.
    pub processes: Vec<crate::ProcessRun>,
    /// True when a record was left unfinished (its process died while registering: its
    /// header is still zeros).
    pub truncated: bool,
    /// What could not be read (truncated, overwritten, not what its header says), in file
    /// order; everything else was read.
    pub damage: Vec<Damage>,
}

/// Why an item of the file was not read.
enum Skip {
    /// Its header is still zeros: a writer died before finishing it.
    Unfinished,
    Damaged { kind: &'static str, what: String },
}

fn damaged(kind: &'static str, what: impl Into<String>) -> Skip {
    Skip::Damaged { kind, what: what.into() }
}

/// The magics of the items a data file holds after its header page.
const ITEM_MAGICS: [[u8; 8]; 10] = [
    RECORD_MAGIC,
    THREAD_MAGIC,
    MAPS_MAGIC,
    CPUS_MAGIC,
    NAMES_MAGIC,
    END_MAGIC,
    PARALLELISM_MAGIC,
    EXTENSION_MAGIC,
    lopi_rt_abi::script::SCRIPT_AREA_MAGIC,
    lopi_rt_abi::PROCESS_MAGIC,
];

/// The first page-aligned offset after `offset` where an item starts (items are appended
/// whole pages at a time), to read on past one that cannot be read.
pub(crate) fn next_item(bytes: &[u8], offset: u64) -> Option<u64> {
    let mut at = offset.checked_add(PAGE_SIZE)? / PAGE_SIZE * PAGE_SIZE;
    while let Some(page) = bytes.get(at as usize..) {
        if page.len() >= 8 && ITEM_MAGICS.iter().any(|m| page.starts_with(m)) {
            return Some(at);
        }
        at += PAGE_SIZE;
    }
    None
}

impl DataFile {
    /// Reads every whole item of `bytes`; an item that cannot be read is listed in `damage`
    /// and the reader goes on at the next item it finds. An error only when `bytes` is not a
    /// data file of this version at all.
    pub fn parse(bytes: &[u8]) -> Result<Self, DataError> {
        if bytes.len() < 8 || bytes[..8] != DATA_MAGIC {
            if bytes.len() >= 8 && bytes[..7] == DATA_MAGIC_PREFIX {
                let name = |m: &[u8]| String::from_utf8_lossy(m).into_owned();
                return Err(DataError::OtherVersion(name(&bytes[..8]), name(&DATA_MAGIC)));
            }
            return Err(DataError::NotData);
        }
        let mut out = DataFile::default();
        // A process that died right after creating the file leaves its magic alone; anything
        // else shorter than the header page was cut.
        if bytes.len() > 8 && (bytes.len() as u64) < PAGE_SIZE {
            let what = format!("truncated: {} of its {PAGE_SIZE} bytes", bytes.len());
            out.damage.push(Damage { item: 0, offset: 0, kind: "header page", what });
        }
        let mut offset = PAGE_SIZE;
        let mut item = 0;
        while offset < bytes.len() as u64 {
            item += 1;
            match out.read_item(bytes, offset) {
                Ok(len) => {
                    offset += len;
                    continue;
                }
                Err(Skip::Unfinished) => out.truncated = true,
                Err(Skip::Damaged { kind, what }) => out.damage.push(Damage { item, offset, kind, what }),
            }
            let Some(next) = next_item(bytes, offset) else { break };
            offset = next;
        }
        // The names threads had at the end, where a chunk read an older one.
        for n in &out.names {
            for chunk in out.threads.iter_mut().filter(|c| (c.header.pid, c.header.tid) == (n.pid, n.tid)) {
                chunk.header.comm = n.comm;
            }
        }
        crate::open::close(&mut out);
        Ok(out)
    }

    /// Reads the item at `offset` into `self`; returns its length.
    fn read_item(&mut self, bytes: &[u8], offset: u64) -> Result<u64, Skip> {
        let rest = &bytes[offset as usize..];
        if rest.starts_with(&THREAD_MAGIC) {
            let (chunk, len) = thread_chunk(bytes, offset).map_err(|what| damaged("thread chunk", what))?;
            self.threads.extend(chunk);
            return Ok(len);
        }
        let chunk = |kind: &'static str| chunk_len(rest).map_err(|what| damaged(kind, what));
        if rest.starts_with(&MAPS_MAGIC) {
            let len = chunk("memory map")?;
            self.maps.extend(maps(&rest[..len as usize]));
            return Ok(len);
        }
        if rest.starts_with(&CPUS_MAGIC) {
            let len = chunk("CPU-time record")?;
            self.ended_cpus.extend(ended_cpus(&rest[..len as usize]));
            return Ok(len);
        }
        if rest.starts_with(&NAMES_MAGIC) {
            let len = chunk("thread-name record")?;
            self.names.extend(thread_names(&rest[..len as usize]));
            return Ok(len);
        }
        if rest.starts_with(&END_MAGIC) {
            let len = chunk("process-end record")?;
            self.ends.extend(process_end(&rest[..len as usize]));
            return Ok(len);
        }
        if rest.starts_with(&lopi_rt_abi::PROCESS_MAGIC) {
            let len = chunk("process record")?;
            self.processes.extend(crate::processes::process_run(&rest[..len as usize]));
            return Ok(len);
        }
        if rest.starts_with(&PARALLELISM_MAGIC) {
            let len = chunk("parallelism profile")?;
            if let Some(p) = Parallelism::from_record(&rest[..len as usize]) {
                self.parallelism.get_or_insert_with(Parallelism::default).add(&p);
            }
            return Ok(len);
        }
        // A region some thread chunk grew into (read through that chunk's header), or a
        // thread's probe-script area (read by `script_areas`).
        if rest.starts_with(&EXTENSION_MAGIC) {
            return chunk("thread chunk extension");
        }
        if rest.starts_with(&lopi_rt_abi::script::SCRIPT_AREA_MAGIC) {
            return chunk("script area");
        }
        let magic = &rest[..rest.len().min(8)];
        if magic.iter().all(|&b| b == 0) {
            return Err(Skip::Unfinished);
        }
        if !RECORD_MAGIC.starts_with(magic) {
            let hex: String = magic.iter().map(|b| format!("{b:02x}")).collect();
            return Err(damaged("record", format!("bad magic {hex}: not a record lopi writes (overwritten?)")));
        }
        let (len, record) = module_record(rest).map_err(|what| damaged("module record", what))?;
        self.records.push(record);
        Ok(len)
    }
}

/// The module record at the start of `rest` and its length.
fn module_record(rest: &[u8]) -> Result<(u64, Record), String> {
    let header = RecordHeader::from_bytes(rest).ok_or_else(|| format!("truncated: the file ends {} bytes into its {RECORD_HEADER_LEN}-byte header", rest.len()))?;
    if header.record_len == 0 || header.record_len % PAGE_SIZE != 0 {
        return Err(format!("bad record length {:#x}", header.record_len));
    }
    if header.record_len > rest.len() as u64 {
        return Err(truncated(header.record_len, rest.len()));
    }
    let record = &rest[..header.record_len as usize];
    let slice = |at: u64, len: u64| {
        let end = at.checked_add(len)?;
        record.get(at as usize..usize::try_from(end).ok()?)
    };
    let exe = slice(RECORD_HEADER_LEN as u64, u64::from(header.exe_len)).ok_or("the program's path lies outside the record")?;
    let meta_bytes = slice(header.meta_offset, header.meta_len).ok_or("the metadata lies outside the record")?;
    let meta = ModuleMeta::from_json(meta_bytes)?;
    let count_bytes = header.counter_count.checked_mul(8).ok_or("bad counter count")?;
    let counters = slice(header.counters_offset, count_bytes).ok_or("the counters lie outside the record")?;
    if meta.probes.len() as u64 != header.counter_count {
        return Err("its metadata and counters disagree".into());
    }
    let mut counts: Vec<u64> = read_counts(counters);
    // Per-CPU blocks (see runtime/lopi-rt): a function's calls are the sum over all.
    for cpu in 0..u64::from(header.cpu_count) {
        let block = cpu
            .checked_mul(u64::from(header.stride))
            .and_then(|o| o.checked_add(header.percpu_offset))
            .and_then(|at| slice(at, count_bytes))
            .ok_or("a per-CPU block lies outside the record")?;
        for (total, n) in counts.iter_mut().zip(read_counts(block)) {
            *total = total.saturating_add(n);
        }
    }
    let own_table = header
        .counters_len
        .checked_sub(own_calls::LEN)
        .filter(|&at| at >= count_bytes)
        .and_then(|at| slice(header.counters_offset.checked_add(at)?, own_calls::LEN))
        .ok_or("the runtime's own calls lie outside its counters")?;
    let own_calls = read_counts(own_table)
        .chunks_exact(2)
        .enumerate()
        .filter(|(_, e)| e[0] != 0)
        .map(|(nr, e)| (nr as u64, e[0], e[1]))
        .collect();
    let record = Record {
        pid: header.pid,
        exe: String::from_utf8_lossy(exe).into_owned(),
        load_bias: header.load_bias,
        meta,
        counts,
        own_calls,
        tsc_hz: header.tsc_hz,
    };
    Ok((header.record_len, record))
}

/// What a reader says of an item of `len` bytes of which the file holds `have`.
fn truncated(len: u64, have: usize) -> String {
    format!("truncated: {len} bytes long, the file ends {have} bytes into it")
}

fn read_counts(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()
}

/// A memory-map record (`None` while its writer was filling it in).
fn maps(record: &[u8]) -> Option<ProcessMaps> {
    let pid = u32::from_le_bytes(record.get(16..20)?.try_into().ok()?);
    let len = usize::try_from(u64::from_le_bytes(record.get(24..32)?.try_into().ok()?)).ok()?;
    let start = MAPS_HEADER_LEN as usize;
    let text = record.get(start..start.checked_add(len)?)?;
    (pid != 0).then(|| ProcessMaps { pid, text: String::from_utf8_lossy(text).into_owned() })
}

/// A record of ended threads' CPU times (none while its writer was filling it in).
/// How many threads were ready to run (running or runnable), sampled at a fixed interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parallelism {
    pub interval_ns: u64,
    /// `counts[k]`: samples that found `k` threads ready.
    pub counts: Vec<u64>,
}

impl Parallelism {
    fn from_record(record: &[u8]) -> Option<Parallelism> {
        let u64_at = |at: usize| record.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        let count = u32::from_le_bytes(record.get(20..24)?.try_into().ok()?) as usize;
        let interval_ns = u64_at(24)?;
        let counts: Option<Vec<u64>> = (0..count).map(|k| u64_at(PARALLELISM_HEADER_LEN as usize + 8 * k)).collect();
        Some(Parallelism { interval_ns, counts: counts? })
    }

    fn add(&mut self, other: &Parallelism) {
        self.interval_ns = other.interval_ns;
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        self.counts.iter_mut().zip(&other.counts).for_each(|(a, b)| *a += b);
    }

    pub fn samples(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The record `lopi run` appends for process `pid`.
    pub fn to_record(&self, pid: u32) -> Vec<u8> {
        let len = (PARALLELISM_HEADER_LEN + 8 * self.counts.len() as u64).next_multiple_of(PAGE_SIZE);
        let mut out = Vec::with_capacity(len as usize);
        out.extend_from_slice(&PARALLELISM_MAGIC);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&pid.to_le_bytes());
        out.extend_from_slice(&(self.counts.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.interval_ns.to_le_bytes());
        self.counts.iter().for_each(|c| out.extend_from_slice(&c.to_le_bytes()));
        out.resize(len as usize, 0);
        out
    }
}

fn ended_cpus(record: &[u8]) -> Vec<EndedCpu> {
    let u32_at = |at: usize| record.get(at..at + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
    let u64_at = |at: usize| record.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (pid, count) = (u32_at(16), u32_at(20) as usize);
    if pid == 0 {
        return Vec::new();
    }
    (0..count)
        .map(|i| CPUS_HEADER_LEN as usize + i * CPUS_ENTRY_LEN as usize)
        .take_while(|&e| e + CPUS_ENTRY_LEN as usize <= record.len())
        .map(|e| EndedCpu {
            pid,
            tid: u32_at(e),
            end: ThreadEnd {
                flags: u32_at(e + 4),
                user_ns: u64_at(e + 8),
                system_ns: u64_at(e + 16),
                runq_wait_ns: u64_at(e + 24),
                ..ThreadEnd::default()
            },
        })
        .collect()
}

/// A record of threads' names (none while its writer was filling it in).
fn thread_names(record: &[u8]) -> Vec<ThreadName> {
    let u32_at = |at: usize| record.get(at..at + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
    let (pid, count) = (u32_at(16), u32_at(20) as usize);
    if pid == 0 {
        return Vec::new();
    }
    (0..count)
        .map(|i| NAMES_HEADER_LEN as usize + i * NAMES_ENTRY_LEN as usize)
        .map_while(|e| Some((u32_at(e), record.get(e + 8..e + 24)?)))
        .map(|(tid, bytes)| {
            let comm: [u8; 16] = bytes.try_into().unwrap_or([0; 16]);
            let len = comm.iter().position(|&b| b == 0).unwrap_or(16);
            ThreadName { pid, tid, name: String::from_utf8_lossy(&comm[..len]).into_owned(), comm }
        })
        .collect()
}

/// A process's end as lopi saw it (`None` while its writer was filling it in).
fn process_end(record: &[u8]) -> Option<ProcessEnd> {
    let header = record.get(..END_HEADER_LEN as usize)?;
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or([0; 4]));
    let pid = u32_at(16);
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]));
    let tsc = u64_at(24);
    (pid != 0 && tsc != 0).then_some(ProcessEnd { pid, how: u32_at(20), tsc, unmaps: u64_at(32), unmap_ticks: u64_at(40) })
}

/// The length of the chunk or extension at the start of `rest` (magic, then length).
fn chunk_len(rest: &[u8]) -> Result<u64, String> {
    let len_field = rest.get(8..16).ok_or_else(|| truncated(16, rest.len()))?;
    let len = u64::from_le_bytes(len_field.try_into().unwrap_or([0; 8]));
    if len < PAGE_SIZE || len % PAGE_SIZE != 0 {
        return Err(format!("bad length {len:#x}"));
    }
    if len > rest.len() as u64 {
        return Err(truncated(len, rest.len()));
    }
    Ok(len)
}

const OUTSIDE: &str = "a region its header names lies beyond the end of the file or chunk (truncated?)";

/// Decodes the thread chunk at `offset` of the file: the chunk (`None` while its process was
/// still setting it up) and its length. Its tree and stack may lie in extensions anywhere in
/// the file; its header says where.
fn thread_chunk(file: &[u8], offset: u64) -> Result<(Option<ThreadChunk>, u64), String> {
    let rest = &file[offset as usize..];
    let len = chunk_len(rest)?;
    let chunk = &rest[..len as usize];
    let header = ThreadHeader::from_bytes(chunk).ok_or("unreadable header")?;
    if header.node_count == 0 {
        return Ok((None, len));
    }
    let region = |bytes: &'_ [u8], at: u64, count: u64, size: usize| -> Result<Vec<u8>, &'static str> {
        let n = count.checked_mul(size as u64).ok_or(OUTSIDE)?;
        let end = at.checked_add(n).ok_or(OUTSIDE)?;
        let range = usize::try_from(at).map_err(|_| OUTSIDE)?..usize::try_from(end).map_err(|_| OUTSIDE)?;
        bytes.get(range).map(<[u8]>::to_vec).ok_or(OUTSIDE)
    };
    if header.node_count > header.node_cap
        || header.depth > header.stack_cap
        || header.trace_len > header.trace_cap
        || header.unmatched_len > UNMATCHED_SLOTS
    {
        return Err("its counts exceed its capacities".into());
    }
    let nodes: Vec<ContextNode> = region(file, header.nodes_file, u64::from(header.node_count), CONTEXT_NODE_LEN)?
        .chunks_exact(CONTEXT_NODE_LEN)
        .filter_map(ContextNode::from_bytes)
        .collect();
    // Nodes are created below a parent already on the stack, so parents come first.
    if nodes.iter().enumerate().skip(1).any(|(i, n)| n.parent as usize >= i) {
        return Err("its calling-context tree is out of order".into());
    }
    let node_ok = |n: u32| (n as usize) < nodes.len();
    let open_frames: Vec<Frame> = region(file, header.stack_file, u64::from(header.depth), FRAME_LEN)?
        .chunks_exact(FRAME_LEN)
        .filter_map(Frame::from_bytes)
        .collect();
    let (events, syscalls) = crate::syscall_log::split(&region(chunk, header.trace_offset, header.trace_len, EVENT_LEN)?).ok_or("a logged system call runs past its trace")?;
    if !open_frames.iter().all(|f| node_ok(f.node)) || !events.iter().all(|e| node_ok(e.node)) {
        return Err("a frame or event names no node of its tree".into());
    }
    let unmatched = region(chunk, UNMATCHED_TABLE, u64::from(header.unmatched_len), UNMATCHED_EXIT_LEN)?
        .chunks_exact(UNMATCHED_EXIT_LEN)
        .filter_map(UnmatchedExit::from_bytes)
        .collect();
    let budget = region(chunk, BUDGET_STATE, 1, BUDGET_STATE_LEN)?;
    let budget = BudgetState::from_bytes(&budget).unwrap_or_default();
    let budget_modules: Vec<BudgetModule> = region(chunk, BUDGET_MODULES, u64::from(budget.modules.min(BUDGET_MODULE_SLOTS)), BUDGET_MODULE_LEN)?
        .chunks_exact(BUDGET_MODULE_LEN)
        .filter_map(BudgetModule::from_bytes)
        .collect();
    let mut switches: Vec<BudgetEntry> = Vec::new();
    for m in budget_modules.iter().filter(|m| m.table_file != 0) {
        let table = region(file, m.table_file, m.entries, BUDGET_ENTRY_LEN)?;
        switches.extend(table.chunks_exact(BUDGET_ENTRY_LEN).filter_map(BudgetEntry::from_bytes).filter(|e| e.switched_tsc != 0));
    }
    switches.sort_by_key(|e| e.switched_tsc);
    let end = region(chunk, THREAD_END, 1, THREAD_END_LEN)?;
    let end = ThreadEnd::from_bytes(&end).unwrap_or_default();
    let kernel_lock = region(chunk, KERNEL_LOCK_STATE, 1, KERNEL_LOCK_STATE_LEN)?;
    let kernel_lock = KernelLockState::from_bytes(&kernel_lock).unwrap_or_default();
    let proxy = region(chunk, PROXY_STATE, 1, PROXY_STATE_LEN)?;
    let proxy = ProxyState::from_bytes(&proxy).unwrap_or_default();
    let held: Vec<HeldLock> = region(chunk, HELD_TABLE, u64::from(header.held_len.min(HELD_SLOTS)), HELD_LOCK_LEN)?
        .chunks_exact(HELD_LOCK_LEN)
        .filter_map(HeldLock::from_bytes)
        .collect();
    let (ended, open) = Default::default();
    Ok((Some(ThreadChunk { header, nodes, open_frames, held, ended, open, events, syscalls, unmatched, switches, budget, budget_modules, end, kernel_lock, proxy }), len))
}
