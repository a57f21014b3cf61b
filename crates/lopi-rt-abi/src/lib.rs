//! Layouts shared by the host side (rewriter, report) and the injected runtime.
//!
//! Everything here is `#[repr(C)]`, little-endian, and versioned by its magic. The runtime
//! includes this file by path (it is built without Cargo), so it must stay `no_std` and free
//! of dependencies.
#![no_std]
#![forbid(unsafe_code)]

/// Page granularity of every region in the data file and in the rewritten image.
pub const PAGE_SIZE: u64 = 4096;

/// First bytes of a data file; the rest of the first page is reserved.
pub const DATA_MAGIC: [u8; 8] = *b"LOPIDAT7";

/// What every data file magic starts with, of any version.
pub const DATA_MAGIC_PREFIX: [u8; 7] = *b"LOPIDAT";

/// First bytes of a module record inside a data file. A record whose magic is still zero
/// was being written when its process died and is ignored by readers.
pub const RECORD_MAGIC: [u8; 8] = *b"LOPIREC2";

/// First bytes of the module descriptor the rewriter places in the image.
pub const DESCRIPTOR_MAGIC: [u8; 8] = *b"LOPIMOD6";

/// What every descriptor magic starts with, of any version: a file holding it was rewritten.
pub const DESCRIPTOR_MAGIC_PREFIX: [u8; 7] = *b"LOPIMOD";

/// Environment variable naming the data file; `%p` in it is replaced by the pid.
pub const OUTPUT_ENV: &str = "LOPI_OUTPUT";
/// The TSC's rate (ticks a second) as the live installer measured it: the runtime then takes
/// it instead of calibrating its own (3 ms per module, in every process of a followed tree).
pub const TSC_HZ_ENV: &str = "LOPI_TSC_HZ";

/// `lopi_rt_init`'s result when the output exists but is not a data file (not an errno).
pub const INIT_NOT_A_DATA_FILE: i64 = -100_000;

/// Suffix of data files named after the program when `LOPI_OUTPUT` is unset.
pub const DATA_SUFFIX: &str = ".lopi";

/// Describes one rewritten module to its runtime. Lives in a read-only segment of the
/// rewritten image. Offsets are relative to the descriptor's own address so that the
/// descriptor is position independent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModuleDescriptor {
    pub magic: [u8; 8],
    /// Offset of the module metadata (JSON, see `lopi-trace`) from the descriptor.
    pub meta_offset: i64,
    pub meta_len: u64,
    /// Offset of the page-aligned counter array from the descriptor.
    pub counters_offset: i64,
    /// Bytes reserved for counters, a multiple of `PAGE_SIZE`.
    pub counters_len: u64,
    /// Number of 8-byte counters in use.
    pub counter_count: u64,
    /// Address of this descriptor in the file's address space, so that the runtime can
    /// compute the module's load bias.
    pub svma: u64,
    /// Offset of the runtime variables the trampolines read (see `lopi_patch::RuntimeVars`).
    pub vars_offset: i64,
    /// Offset of the `struct rseq_cs` table, one 32-byte entry per counter, holding file
    /// addresses that the runtime rebases.
    pub rseq_table_offset: i64,
    /// Bytes between per-CPU counter blocks, a multiple of `PAGE_SIZE`.
    pub stride: u64,
    /// `PROBE_*` bits: what the trampolines record besides counts.
    pub probes: u64,
    /// Perturbation budget in parts per million (0: none) unless `LOPI_BUDGET` says otherwise.
    pub budget_ppm: u64,
    /// Offset of the module's probe script (`script::ScriptImage`) from the descriptor; 0: none.
    pub script_offset: i64,
    /// Offset of the table of code the budget's switches change ([`switches`]) from the
    /// descriptor; 0: none.
    pub switches_offset: i64,
    /// Sampled time (`--time sampled`): samples per second of each thread's CPU time; 0:
    /// exact time (the TSC at every entry and exit).
    pub sample_hz: u64,
}

/// Size of `ModuleDescriptor` in bytes.
pub const DESCRIPTOR_LEN: usize = 120;

/// [`ModuleDescriptor::probes`]: exit probes and timing (calling-context trees per thread).
pub const PROBE_TIMING: u64 = 1;
/// [`ModuleDescriptor::probes`]: also an entry/exit event trace per thread.
pub const PROBE_TRACE: u64 = 2;
/// [`ModuleDescriptor::probes`]: the module is an executable, never unloaded, so its runtime
/// may register process-lifetime hooks (fork handlers).
pub const MODULE_EXECUTABLE: u64 = 4;
/// [`ModuleDescriptor::probes`]: the module has lock probes: its runtime records the process's
/// memory map at start-up (a [`MAPS_MAGIC`] record), by which readers name locks and call
/// sites in modules that have no probes.
pub const PROBE_LOCKS: u64 = 8;
/// [`ModuleDescriptor::probes`]: with `PROBE_TRACE`, each system call is logged in the trace
/// with its arguments and result ([`syscall_log`]).
pub const PROBE_SYSCALL_LOG: u64 = 16;
/// [`ModuleDescriptor::probes`]: with system-call probes, calls made from code no probe covers
/// are caught with Syscall User Dispatch ([`dispatch`]) and recorded at the module's last
/// counter, the dispatch point's.
pub const PROBE_SYSCALL_DISPATCH: u64 = 32;

/// First bytes of a memory-map record: the magic, the record's length (a multiple of
/// `PAGE_SIZE`), the pid (`u32`, then 4 bytes of padding), the text's length (`u64`), then
/// the text of `/proc/PID/maps` as the process saw it.
pub const MAPS_MAGIC: [u8; 8] = *b"LOPIMAPS";
pub const MAPS_HEADER_LEN: u64 = 32;

/// First bytes of a record of the CPU times of a process's threads that an `exit_group` ended
/// (they make no system call of their own to end with): the magic, the record's length (a
/// multiple of `PAGE_SIZE`), the pid (`u32`), the number of entries (`u32`), 8 bytes of
/// padding, then [`CPUS_ENTRY_LEN`]-byte entries: tid (`u32`), `THREAD_END_*` flags (`u32`),
/// user, system and run-queue ns (`u64` each). The kernel counts another thread's CPU time
/// in clock ticks: the total is exact (`schedstat`), its split into user and system is not.
pub const CPUS_MAGIC: [u8; 8] = *b"LOPICPUS";
pub const CPUS_HEADER_LEN: u64 = 32;
pub const CPUS_ENTRY_LEN: u64 = 32;

/// First bytes of a record of threads' names at the end of a process's recording (the kernel
/// forgets a thread's name when it ends, and a thread renamed where no probe saw it, `prctl`
/// under `--probe locks`, would keep the name its chunk read): an `exit_group` probe writes
/// one for the threads the call ends, `lopi attach` one for every thread when it detaches.
/// The magic, the record's length (a multiple of `PAGE_SIZE`), the pid (`u32`), the number of
/// entries (`u32`), 8 bytes of padding, then [`NAMES_ENTRY_LEN`]-byte entries: tid (`u32`), 4
/// bytes of padding, the name (`comm`, NUL-padded, 16 bytes).
pub const NAMES_MAGIC: [u8; 8] = *b"LOPINAME";
pub const NAMES_HEADER_LEN: u64 = 32;
pub const NAMES_ENTRY_LEN: u64 = 24;

/// First bytes of a parallelism profile, which `lopi run` appends when its program ends (it
/// samples the threads' states from outside): the magic, the record's length (a multiple of
/// `PAGE_SIZE`), the pid (`u32`), the number of counts (`u32`), the sampling interval in ns
/// (`u64`), then the counts (`u64` each): samples that found 0, 1, 2, ... threads ready to run
/// (running or runnable).
pub const PARALLELISM_MAGIC: [u8; 8] = *b"LOPIPAR1";
pub const PARALLELISM_HEADER_LEN: u64 = 32;

/// First bytes of a record `lopi run` or `lopi attach` appends when a process's recording
/// ended where no probe saw it (the process ended, or lopi detached): the magic, the record's
/// length (a multiple of `PAGE_SIZE`), the pid (`u32`), how it ended (`u32`: [`END_EXITED`] or
/// [`END_DETACHED`]), the TSC then (`u64`); then the `munmap` calls lopi made in the process
/// to take its mappings out at a detach (its own calls, as [`own_calls`] counts the others):
/// how many (`u64`) and their TSC ticks (`u64`). Calls still open in the process's threads are
/// closed there.
pub const END_MAGIC: [u8; 8] = *b"LOPIEND1";
pub const END_HEADER_LEN: u64 = 48;
/// The process had ended (exited or was killed) when lopi saw it.
pub const END_EXITED: u32 = 1;
/// lopi took its probes out.
pub const END_DETACHED: u32 = 2;

/// First bytes of a record `lopi run` appends for each process of a followed tree when it
/// ends: the magic, the record's length (a multiple of `PAGE_SIZE`), the pid (`u32`), its
/// parent's (`u32`, 0 for the program lopi launched), its wait status (`i32`, as `waitpid`
/// gives it), the programs it executed (`u32`), the TSC when it started (`u64`) and when it
/// ended (`u64`), the number of start-up entries (`u32`), the command line's length (`u32`),
/// the start-up log's length in bytes (`u32`, 0 without `--log`), 4 bytes of padding; then
/// [`PROCESS_CALL_LEN`]-byte start-up entries, system calls made before the probes went live
/// in a program it executed (the dynamic loader's, library constructors'), counted by lopi
/// through ptrace: number (`u32`), 4 bytes of padding, calls (`u64`); then the command line
/// of its last program, arguments separated by NUL bytes; then, at the next multiple of
/// [`PROCESS_LOG_ALIGN`] from the record's start, the start-up log (`lopi run --log`): those
/// calls, each program's `execve` first when no probe saw it, logged by lopi through ptrace
/// and encoded as a thread's trace encodes its logged calls (an [`EVENT_SYSCALL`] event, its
/// payload's slots: [`syscall_log`]).
pub const PROCESS_MAGIC: [u8; 8] = *b"LOPIPROC";
pub const PROCESS_HEADER_LEN: u64 = 64;
pub const PROCESS_CALL_LEN: u64 = 16;
pub const PROCESS_LOG_ALIGN: u64 = syscall_log::SLOT_LEN as u64;

/// Header of one module record in a data file. Followed, in the same page, by the
/// executable's path (`exe_len` bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    pub magic: [u8; 8],
    /// Whole record length, header page included, a multiple of `PAGE_SIZE`.
    pub record_len: u64,
    pub pid: u32,
    pub exe_len: u32,
    /// Runtime address minus file address of the module.
    pub load_bias: u64,
    /// Offsets are from the start of the record.
    pub meta_offset: u64,
    pub meta_len: u64,
    pub counters_offset: u64,
    pub counters_len: u64,
    pub counter_count: u64,
    /// Per-CPU counter blocks (`cpu_count` of them, `stride` bytes apart) from the start
    /// of the record; `cpu_count` is 0 when the process had no rseq.
    pub percpu_offset: u64,
    pub cpu_count: u32,
    pub stride: u32,
    /// TSC ticks per second, by which the runtime's own system calls ([`own_calls`]) are
    /// timed: the rate timing calibrates, else one measured across the module's init; 0 when
    /// unknown.
    pub tsc_hz: u64,
}

/// Size of `RecordHeader` in bytes; the executable path starts right after it.
pub const RECORD_HEADER_LEN: usize = 96;

/// Longest executable path stored in a record header page.
pub const MAX_EXE_LEN: usize = PAGE_SIZE as usize - RECORD_HEADER_LEN;

const _: () = assert!(core::mem::size_of::<RecordHeader>() == RECORD_HEADER_LEN);
const _: () = assert!(core::mem::size_of::<ModuleDescriptor>() == DESCRIPTOR_LEN);

impl RecordHeader {
    /// Encodes the header as it is stored on disk.
    pub fn to_bytes(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut out = [0u8; RECORD_HEADER_LEN];
        out[0..8].copy_from_slice(&self.magic);
        out[8..16].copy_from_slice(&self.record_len.to_le_bytes());
        out[16..20].copy_from_slice(&self.pid.to_le_bytes());
        out[20..24].copy_from_slice(&self.exe_len.to_le_bytes());
        out[24..32].copy_from_slice(&self.load_bias.to_le_bytes());
        out[32..40].copy_from_slice(&self.meta_offset.to_le_bytes());
        out[40..48].copy_from_slice(&self.meta_len.to_le_bytes());
        out[48..56].copy_from_slice(&self.counters_offset.to_le_bytes());
        out[56..64].copy_from_slice(&self.counters_len.to_le_bytes());
        out[64..72].copy_from_slice(&self.counter_count.to_le_bytes());
        out[72..80].copy_from_slice(&self.percpu_offset.to_le_bytes());
        out[80..84].copy_from_slice(&self.cpu_count.to_le_bytes());
        out[84..88].copy_from_slice(&self.stride.to_le_bytes());
        out[88..96].copy_from_slice(&self.tsc_hz.to_le_bytes());
        out
    }

    /// Decodes a header; `None` when `bytes` is too short.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let b = bytes.get(..RECORD_HEADER_LEN)?;
        let u64_at = |at: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(v)
        };
        let u32_at = |at: usize| {
            let mut v = [0u8; 4];
            v.copy_from_slice(&b[at..at + 4]);
            u32::from_le_bytes(v)
        };
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[0..8]);
        Some(Self {
            magic,
            record_len: u64_at(8),
            pid: u32_at(16),
            exe_len: u32_at(20),
            load_bias: u64_at(24),
            meta_offset: u64_at(32),
            meta_len: u64_at(40),
            counters_offset: u64_at(48),
            counters_len: u64_at(56),
            counter_count: u64_at(64),
            percpu_offset: u64_at(72),
            cpu_count: u32_at(80),
            stride: u32_at(84),
            tsc_hz: u64_at(88),
        })
    }
}

impl ModuleDescriptor {
    /// Encodes the descriptor as the rewriter stores it in the image.
    pub fn to_bytes(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut out = [0u8; DESCRIPTOR_LEN];
        out[0..8].copy_from_slice(&self.magic);
        out[8..16].copy_from_slice(&self.meta_offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.meta_len.to_le_bytes());
        out[24..32].copy_from_slice(&self.counters_offset.to_le_bytes());
        out[32..40].copy_from_slice(&self.counters_len.to_le_bytes());
        out[40..48].copy_from_slice(&self.counter_count.to_le_bytes());
        out[48..56].copy_from_slice(&self.svma.to_le_bytes());
        out[56..64].copy_from_slice(&self.vars_offset.to_le_bytes());
        out[64..72].copy_from_slice(&self.rseq_table_offset.to_le_bytes());
        out[72..80].copy_from_slice(&self.stride.to_le_bytes());
        out[80..88].copy_from_slice(&self.probes.to_le_bytes());
        out[88..96].copy_from_slice(&self.budget_ppm.to_le_bytes());
        out[96..104].copy_from_slice(&self.script_offset.to_le_bytes());
        out[104..112].copy_from_slice(&self.switches_offset.to_le_bytes());
        out[112..120].copy_from_slice(&self.sample_hz.to_le_bytes());
        out
    }
}

/// Rounds `n` up to a whole number of pages.
pub const fn page_align(n: u64) -> u64 {
    (n + PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// Bytes of a module's counters region (and of each per-CPU block): `counters` counters, then
/// the runtime's own system calls ([`own_calls`]) at its end, right before the runtime
/// variables.
pub const fn counters_len(counters: u64) -> u64 {
    page_align(counters * 8 + own_calls::LEN)
}

/// The system calls lopi's runtime makes itself inside the program (registering, thread
/// chunks, calibration, the application kernel's proxies; never the program's own): a table
/// at the end of the module's counters region (`counters_len - LEN` from its start, `LEN`
/// bytes before the runtime variables), which the runtime maps onto the data file with the
/// counters, so that every thread and forked process adds to it with `lock add`. Entry `nr`
/// (the system call's number, the last entry for any number from `SLOTS - 1` up): calls
/// (`u64`), then the TSC ticks they took (`u64`). A live installer adds the calls it injects
/// before the module's init there too.
pub mod own_calls {
    pub const SLOTS: u64 = 512;
    pub const ENTRY_LEN: u64 = 16;
    pub const LEN: u64 = SLOTS * ENTRY_LEN;

    /// Offset of system call `nr`'s entry in the table.
    pub const fn entry(nr: u64) -> u64 {
        (if nr < SLOTS { nr } else { SLOTS - 1 }) * ENTRY_LEN
    }
}

/// The runtime variables of one module: a page in the module's RW segment that the
/// trampolines read and the runtime fills in at init. Zero until then, which every reader
/// takes as "not ready". The data file's path (NUL-terminated) fills the following page.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RuntimeVars {
    /// fs-relative offset of the thread's rseq area; 0 until per-CPU counting is ready.
    pub rseq_offset: i64,
    /// Address of per-CPU counter block 0.
    pub percpu_base: u64,
    /// Number of per-CPU blocks.
    pub cpu_count: u32,
    /// Offset of glibc's kernel thread id from the thread pointer (0 = unknown): a thread
    /// whose id differs from its chunk's is a new thread on a reused descriptor, or a child.
    pub tid_offset: u32,
    /// Address of a wipe-on-fork page holding the current pid; 0 while timing is off.
    pub pid_page: u64,
    /// TSC ticks per second, measured at init.
    pub tsc_hz: u64,
    /// Probe ticks inside a timed call's own interval, measured at init.
    pub probe_inner_ticks: u64,
    /// Ticks a timed call's probes add to its caller, measured at init.
    pub probe_pair_ticks: u64,
    /// Pid of the process whose records describe this address space.
    pub space_pid: u32,
    /// Most nodes a thread's calling-context tree may grow to (a power of two).
    pub node_limit: u32,
    /// Most frames a thread's shadow stack may grow to.
    pub stack_limit: u32,
    /// Perturbation budget in parts per million of each thread's CPU time (0: none): the
    /// probes switch the shortest frequently called functions to counting to stay within it.
    pub budget_ppm: u32,
    /// Trace events per thread (0 without `PROBE_TRACE`).
    pub trace_cap: u64,
    /// Private buffer where the fork handler copies the forking thread's open calls.
    pub fork_snapshot: u64,
    /// Counters of this module (the functions whose slots are in this module's table).
    pub counter_count: u64,
    /// As `probe_inner_ticks` and `probe_pair_ticks`, for a system call's probes.
    pub syscall_inner_ticks: u64,
    pub syscall_pair_ticks: u64,
    /// The kernel the system-call probes emulate (`whatif::*`; 0: none), from `LOPI_WHATIF`.
    pub whatif: u32,
    /// The CPU the application kernel's proxies run on.
    pub kernel_cpu: u32,
    /// Address of the emulated kernel's lock words ([`whatif::LOCKS`] in the data file's
    /// first page, mapped shared), and of this process's table of file descriptor kinds.
    pub kernel_locks: u64,
    pub fd_kinds: u64,
    /// The thread id of the thread taking a coverage probe out (see [`retire`]), 0 when none;
    /// a probe that finds it held leaves that to its next run.
    pub retire_lock: u32,
    /// Non-zero once this process may not change its code (`mprotect` refused): probes then
    /// stay and only mark.
    pub retire_off: u32,
    /// Address of the module's probe script (`script::ScriptImage`), and of its hook table
    /// (a `u64` per counter, non-zero for a function with script probes, which the entry and
    /// exit stubs then leave to their slow paths); 0 without a script.
    pub script: u64,
    pub script_hooks: u64,
    /// Address of the script's table of system-call probes (`script::SYSCALLS` words), 0
    /// without any: the system-call stubs then leave every call to their slow paths.
    pub script_syscalls: u64,
    /// Non-zero once a script probe of this process called `exit()`: no script runs again.
    pub script_off: u64,
    /// Address of the script's lock-event lists (`script::LOCK_EVENTS` u32), 0 without any:
    /// the lock stubs then leave every call to their slow paths.
    pub script_locks: u64,
    /// Address of the script's thread-event lists (`script::THREAD_EVENTS` u32), 0 without any.
    pub script_threads: u64,
    /// Nanoseconds per TSC tick, times 2^32; and a TSC reading with the `CLOCK_MONOTONIC`
    /// time it was taken at, by which a script's `nsecs` is worked out from the TSC.
    pub ns_per_tick_q32: u64,
    pub clock_tsc: u64,
    pub clock_ns: u64,
    /// Address of the module's table of code the budget's switches change ([`switches`]); 0:
    /// none.
    pub switches: u64,
    /// Ticks an entry probe adds when its caller's one-entry child cache misses and the stub
    /// finds the call's node in the hash table, measured at init: the stub stops the thread's
    /// clock for them (they are not in `probe_pair_ticks`).
    pub probe_lookup_ticks: u64,
    /// Sampled time: samples per second of each thread's CPU time (0: exact time), from the
    /// descriptor; and the TSC ticks a sample stands for.
    pub sample_hz: u64,
    pub sample_ticks: u64,
    /// Non-zero when this module's runtime installed the [`SAMPLE_SIGNAL`] handler; the action it
    /// replaced (the kernel's `struct sigaction`), which a detach puts back.
    pub sample_handler_installed: u64,
    pub sample_old_action: [u64; 4],
    /// `pystack`: CPython 3.11's `_PyRuntime` in the process (0: none found).
    pub py_runtime: u64,
    /// `profile:` points: the process's timer id plus 1 when this module's runtime made it and
    /// installed the `SIGPROF` handler (0: it did not), and the action it replaced, which a
    /// detach puts back after deleting the timer.
    pub profile_timer: u64,
    pub profile_old_action: [u64; 4],
    /// Non-zero when the system-call probes log each call in the trace (`PROBE_SYSCALL_LOG`).
    pub syscall_log: u64,
    /// Syscall User Dispatch ([`dispatch`]): the variables of the module whose runtime's
    /// `SIGSYS` handler the process has (0: calls from unprobed code are not caught), and the
    /// range of its runtime, whose calls the kernel lets through.
    pub dispatch_owner: u64,
    pub dispatch_start: u64,
    pub dispatch_len: u64,
    /// In the owner's variables: the `SIGSYS` action the program asked for (the kernel's
    /// `struct sigaction`), to which signals that are not Syscall User Dispatch's go.
    pub sigsys_program_action: [u64; 4],
    /// In the owner's variables: bit `n - 1` set when the program's handler of signal `n`
    /// blocks `SIGSYS` while it runs (the kernel's copy of its mask does not).
    pub sigsys_in_masks: u64,
    /// In the owner's variables: the handler the program gave each signal (`n - 1`), which the
    /// kernel's action replaces with the runtime's wrapper: a signal that comes as a call
    /// returns, while the selector lets calls through, runs the program's handler with it
    /// blocking them. Two halves of 32: arrays longer than 32 have no `Default`.
    pub program_handlers: [[u64; 32]; 2],
    /// In the owner's variables: the process's stubs that make a caught call the handler
    /// cannot make (`dispatch::STUB_LEN` bytes each, mapped at first use; 0: none yet), and
    /// how many of their slots are taken.
    pub dispatch_stubs: u64,
    pub dispatch_stubs_taken: u64,
}

/// The signal of sampled time's per-thread timers: `SIGURG`, whose default action is to ignore
/// it, so that a program that resets every handler, or one a timer outlives, is not killed by
/// it (as by `SIGPROF`, which programs also take for themselves: coreutils' `sort` cleans up
/// and dies on it), and which few programs handle (out-of-band socket data).
pub const SAMPLE_SIGNAL: u32 = 23;

/// Emulated kernels (`lopi whatif`): the system-call probes take a lock around each call.
pub mod whatif {
    /// One lock for every system call of every process recording into the data file.
    pub const GIANT_LOCK: u32 = 1;
    /// One lock per subsystem ([`Class`]).
    pub const SUBSYSTEM_LOCKS: u32 = 2;
    /// An application kernel: each thread's system calls are made by a proxy thread on one
    /// CPU, which waits for work in `futex` (or spins: [`APP_KERNEL_SPIN`]).
    pub const APP_KERNEL: u32 = 3;
    pub const APP_KERNEL_SPIN: u32 = 4;
    /// Offset of the lock words in the data file's (otherwise reserved) first page: one
    /// `u32` (the holder's tid, 0 when free) per 64-byte line, [`LOCK_COUNT`] of them.
    pub const LOCKS: u64 = 2048;
    pub const LOCK_COUNT: u64 = 8;
    pub const LOCK_STRIDE: u64 = 64;
    /// Offset in that page of the application kernel's CPU, as 1 + its number (0: not chosen
    /// yet): the first module of the first process to start chooses it for all of them.
    pub const KERNEL_CPU: u64 = LOCKS + LOCK_COUNT * LOCK_STRIDE;

    /// The subsystems of `subsystem-locks`, after Paper I's coarse-grained step.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Class {
        FileSystem = 0,
        Network = 1,
        Memory = 2,
        Process = 3,
        Time = 4,
        Ipc = 5,
    }

    impl Class {
        pub const fn name(self) -> &'static str {
            match self {
                Class::FileSystem => "file system",
                Class::Network => "network",
                Class::Memory => "memory",
                Class::Process => "processes and signals",
                Class::Time => "time",
                Class::Ipc => "futex and IPC",
            }
        }
    }
}

/// Offsets into [`RuntimeVars`] that generated code uses.
pub mod vars {
    pub const RSEQ_OFFSET: u64 = 0;
    pub const PERCPU_BASE: u64 = 8;
    pub const CPU_COUNT: u64 = 16;
    /// Bytes the variables and the data file path take (two pages).
    pub const REGION_LEN: u64 = 2 * super::PAGE_SIZE;
    /// Offset of the NUL-terminated data file path.
    pub const PATH: u64 = super::PAGE_SIZE;
    /// Offset of the `struct rseq_cs` table (32 bytes per counter).
    pub const SLOTS: u64 = REGION_LEN;

    /// Offset of the mode words (`u32` per counter, see [`super::mode`]) of a module with
    /// `counters` counters: after the `rseq_cs` table.
    pub const fn modes_offset(counters: u64) -> u64 {
        SLOTS + super::page_align(counters * 32)
    }
}

/// The record a coverage probe's trampoline passes to the runtime's retire stub, which puts
/// the site's original code back once the probe has marked its block (it runs after that
/// only on threads already on their way through the trampoline).
pub mod retire {
    /// `u8`: bytes of original code the site's patch covers.
    pub const LEN: usize = 0;
    /// `u8`: bytes of the jump at the start of the patch (5, or 2 for a short jump to a
    /// bounce); they lie within one cache line, so that one store replaces them.
    pub const JUMP_LEN: usize = 1;
    /// The original bytes, `LEN` of them.
    pub const ORIGINAL: usize = 2;
    /// Most bytes a patch covers.
    pub const MAX_LEN: usize = 64;
}

/// The table of code a function's switch to counting changes (the perturbation budget): a
/// `u32` per counter, the offset of the function's record from the table (0: none). A record
/// is a `u32` count of swaps, each then: the offset (`i64`) of its code from the table, its
/// length (`u8`), the length of its jump (`u8`: the bytes one atomic store replaces, after
/// the rest), and its new bytes. Swaps are made in their order.
pub mod switches {
    pub const SWAP_HEADER_LEN: usize = 10;
}

/// What a timed function's exit probe pushes for the exit stub: its counter index, with
/// [`exit_word::TAIL`] when the exit is a tail call; [`exit_word::SHARED`] (and maybe `TAIL`)
/// at a site several functions share.
pub mod exit_word {
    pub const INDEX: u32 = (1 << 30) - 1;
    /// The function leaves by jumping to another: its caller gets that one's return value.
    pub const TAIL: u32 = 1 << 30;
    /// No one function: the exit is matched by its stack pointer. Also the sign bit, so that
    /// the word is negative as the probe pushes it.
    pub const SHARED: u32 = 1 << 31 | INDEX;
}

/// A timed function's mode word.
pub mod mode {
    /// Timed: its trampoline calls the entry and exit probes.
    pub const TIMED: u32 = 0;
    /// Switched to counting by the perturbation budget: its trampoline counts it per CPU as a
    /// counting trampoline does, and its exit probes are skipped.
    pub const COUNTING: u32 = 1;
}

const _: () = assert!(core::mem::size_of::<RuntimeVars>() == 936);

#[path = "lock_name.rs"]
pub mod lock_name;
#[path = "script.rs"]
pub mod script;
#[path = "python.rs"]
pub mod python;
#[path = "script_map.rs"]
pub mod script_map;
#[path = "syscall_name.rs"]
pub mod syscall_name;
#[path = "dispatch.rs"]
pub mod dispatch;

pub mod syscall_log;
#[path = "thread.rs"]
mod thread;
pub use thread::*;
#[path = "budget.rs"]
mod budget;
pub use budget::*;
#[path = "tree.rs"]
mod tree;
pub use tree::*;
#[path = "fields.rs"]
mod fields;
