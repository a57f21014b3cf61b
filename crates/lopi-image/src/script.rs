//! A probe script in the image (`lopi trace`): the compiled probes in RX, and in R the
//! `lopi_rt_abi::script::ScriptImage` the runtime runs them by — which probes run at each
//! function's entry and exits (its hooks), the names `func` and `probe` give, the printf
//! formats' argument types, and the layout of a thread's script area.
use lopi_rt_abi::page_align;
use lopi_rt_abi::script::{self as abi, FormatArgs, FunctionName, ScriptImage, TableShape};
use lopi_script::codegen::{self, abi::Helpers};
use lopi_script::ir::{ConvKind, LockEvent, Piece, Point, Program};

/// A checked script to compile into an image.
#[derive(Debug)]
pub struct ScriptSpec {
    pub program: Program,
    /// Identity of the script and its options, which the data file's areas carry.
    pub id: u64,
    /// What the module's metadata keeps of it: a reader checks the text again into the same
    /// program.
    pub meta: lopi_trace::MetaScript,
    /// Maps that only count calls: their probes are out of `program`, the calls are counted
    /// by plain counting probes, and the host fills the maps from the counts.
    pub counted: Vec<lopi_script::lower::CountedMap>,
    /// A C handler, whose callbacks are the program's probes.
    pub handler: Option<crate::handler::Handler>,
    /// Where each `addr:` and `func:NAME+OFF` point is (the main executable's addresses), by
    /// the point's index in the program's order.
    pub point_addrs: std::collections::BTreeMap<usize, u64>,
    /// The markers each `usdt:` point probes, by point index.
    pub markers: std::collections::BTreeMap<usize, Vec<MarkerSite>>,
    /// When the trace began (CLOCK_MONOTONIC ns), which bpftrace's `elapsed` counts from; 0: when
    /// each module's runtime starts (a rewritten program).
    pub start_ns: u64,
}

/// A USDT marker a `usdt:` point probes: its module, its `nop`, and where its arguments are
/// there (a [`abi::site_arg::IMAGE`] base's value is a module address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerSite {
    /// `None` for the main executable, else the library as the modules to probe name it.
    pub library: Option<String>,
    pub addr: u64,
    pub args: Vec<abi::SiteArg>,
}

impl ScriptSpec {
    /// Whether some point is a function's entry or return.
    pub fn probes_functions(&self) -> bool {
        self.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, Point::FuncEntry { .. } | Point::FuncReturn { .. }))
    }

    /// Whether a `func:` entry point names `f` of the module the points call `library`
    /// (`None`: the main executable).
    pub fn names_entry(&self, library: Option<&str>, f: &lopi_elf::Function) -> bool {
        let named = |glob: &str| std::iter::once(&f.name).chain(&f.aliases).any(|n| lopi_script::glob_match(glob, n));
        self.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, Point::FuncEntry { lib, glob } if lib.as_deref() == library && named(glob)))
    }

    /// Whether some point is made by libc's code: a system call, a lock event or a thread's
    /// start or end (which a rewritten file, probing itself only, never sees).
    pub fn probes_libc(&self) -> bool {
        self.probes_system_calls() || self.probes_locks() || self.probes_threads()
    }

    /// `probes` with what its points need: functions' entries and exits timed, system calls
    /// probed (for system-call and thread points), locks probed.
    pub fn add_probes(&self, probes: lopi_patch::Probes) -> lopi_patch::Probes {
        use lopi_patch::{Measure, Place, Probes};
        let asked = [
            (self.probes_functions(), Place::Entries),
            (self.probes_system_calls() || self.probes_threads(), Place::Syscalls),
            (self.probes_locks(), Place::LockFunctions),
        ];
        asked.into_iter().filter(|&(needed, _)| needed).fold(probes, |set, (_, place)| set.union(Probes::NONE.with(place, Measure::Time)))
    }

    /// The addresses of its instruction points (USDT markers too) in the module the points
    /// call `library` (`None`: the main executable), each once.
    pub fn instruction_points(&self, library: Option<&str>) -> Vec<u64> {
        let markers = self.markers.values().flatten().filter(|m| m.library.as_deref() == library).map(|m| m.addr);
        let addrs = self.point_addrs.values().copied().filter(|_| library.is_none());
        let mut out: Vec<u64> = addrs.chain(markers).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The period of its `profile:` points (0: none; they all have the first's).
    pub fn profile_ns(&self) -> u64 {
        self.program.probes.iter().flat_map(|p| &p.points).find_map(|p| if let Point::Profile { ns } = p { Some(*ns) } else { None }).unwrap_or(0)
    }

    /// Whether some point is a thread event (a sample is one): the script then goes wherever
    /// system calls are probed (a thread starts and ends by them).
    pub fn probes_threads(&self) -> bool {
        self.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, Point::ThreadStart | Point::ThreadExit | Point::Profile { .. }))
    }

    /// Whether some point is a lock event: the script then goes wherever locks are probed.
    pub fn probes_locks(&self) -> bool {
        self.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, Point::Lock(_)))
    }

    /// Whether some point is a system call's: the script then goes wherever system calls are
    /// probed.
    pub fn probes_system_calls(&self) -> bool {
        self.program.probes.iter().flat_map(|p| &p.points).any(|p| matches!(p, Point::SyscallEntry { .. } | Point::SyscallReturn { .. }))
    }

    /// `program` checked from `source` with `max_entries` (if given), less its probes that
    /// only count calls; `id` from the text and the options that shape the areas.
    pub fn new(mut program: Program, source: &str, max_entries: Option<u32>, ring_len: u64) -> ScriptSpec {
        let counted = lopi_script::lower::counted_maps(&mut program);
        let ring_len = ring_len.next_multiple_of(8).max(4096);
        let mut id = 0xcbf2_9ce4_8422_2325u64;
        let options = format!("{source}\0{}\0{ring_len}\0{:?}", program.str_size, program.maps.iter().map(|m| m.max_entries).collect::<Vec<_>>());
        for b in options.bytes() {
            id = (id ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        ScriptSpec { program, id, meta: lopi_trace::MetaScript { source: source.to_string(), max_entries, ring_len }, counted, handler: None, point_addrs: Default::default(), markers: Default::default(), start_ns: 0 }
    }

    /// A C handler's: its callbacks run at every timed function's entry and return and every
    /// probed system call, in every module it goes into.
    pub fn handler(handler: crate::handler::Handler) -> ScriptSpec {
        let meta = lopi_trace::MetaScript { source: String::new(), max_entries: None, ring_len: 0 };
        ScriptSpec { program: handler.program(), id: handler.id, meta, counted: Vec::new(), handler: Some(handler), point_addrs: Default::default(), markers: Default::default(), start_ns: 0 }
    }
}

/// Where each map's table lies in a thread's area, and where the output ring is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AreaLayout {
    pub tables: Vec<TableShape>,
    /// `pystack`'s table of code objects' names (0: none).
    pub py_codes: u64,
    pub ring_offset: u64,
    pub ring_len: u64,
    pub len: u64,
}

/// Most keys of a map: a map without keys has one.
pub fn max_entries(program: &Program, map: usize) -> u32 {
    let m = &program.maps[map];
    if m.keys.is_empty() { 1 } else { m.max_entries }
}

/// The area a thread of `spec`'s program gets.
pub fn area_layout(spec: &ScriptSpec) -> AreaLayout {
    let program = &spec.program;
    let mut at = abi::AREA_TABLES as u64;
    let tables = (0..program.maps.len())
        .map(|i| {
            let map = &program.maps[i];
            let key_size = codegen::abi::key_size(map, program.str_size) as u32;
            let slot_size = codegen::abi::slot_size(map.value, program.str_size) as u32;
            let max_entries = max_entries(program, i);
            let shape = TableShape { key_size, slot_size, max_entries, _pad: 0, offset: at };
            at = (at + lopi_rt_abi::script_map::table_size(key_size as usize, slot_size as usize, max_entries) as u64).next_multiple_of(8);
            shape
        })
        .collect();
    let py_codes = match program.needs().pystack {
        true => {
            let offset = at.next_multiple_of(64);
            at = offset + (lopi_rt_abi::python::PY_CODES * lopi_rt_abi::python::PY_CODE_NAME_LEN) as u64;
            offset
        }
        false => 0,
    };
    let ring_offset = at.next_multiple_of(64);
    AreaLayout { tables, py_codes, ring_offset, ring_len: spec.meta.ring_len, len: page_align(ring_offset + spec.meta.ring_len) }
}

/// The function a counter counts: its name, other names (aliases, which points may use too)
/// and module address.
#[derive(Clone, Copy)]
pub struct Counted<'a> {
    pub name: &'a str,
    pub aliases: &'a [String],
    pub addr: u64,
    /// Its calls reach the stubs (entry and exit probes).
    pub timed: bool,
    /// Its entry runs its counter's probes: it is timed, or counted with its entry probed
    /// ([`lopi_patch::Selection::probe_entries`]).
    pub entry: bool,
    /// An instruction's probe at this address (`addr:`, `func:NAME+OFF`), not a function's.
    pub site: Option<u64>,
}

impl Counted<'_> {
    /// Whether `glob` matches one of its names.
    pub fn named(&self, glob: &str) -> bool {
        std::iter::once(self.name).chain(self.aliases.iter().map(String::as_str)).any(|n| lopi_script::glob_match(glob, n))
    }
}

/// The points of every probe, in the program's order: (probe index, point).
fn points(program: &Program) -> impl Iterator<Item = (usize, &Point)> {
    program.probes.iter().enumerate().flat_map(|(i, p)| p.points.iter().map(move |point| (i, point)))
}

/// (probe, point) pairs a probe site runs, in order.
pub type HookList = Vec<(u32, u32)>;

/// Per counter, the (probe, point) pairs its entry and its exits run, in the module the
/// script's points name `library` (`None`: the main executable; `any_module`: whichever).
pub fn hooks(spec: &ScriptSpec, library: Option<&str>, counted: &[Counted<'_>]) -> Vec<(HookList, HookList)> {
    let (program, any_module) = (&spec.program, spec.handler.is_some());
    counted
        .iter()
        .map(|c| {
            let (mut entry, mut exit) = (Vec::new(), Vec::new());
            for (n, (probe, point)) in points(program).enumerate() {
                match point {
                    Point::FuncEntry { lib, glob } if (any_module || lib.as_deref() == library) && c.entry && c.named(glob) => entry.push((probe as u32, n as u32)),
                    Point::FuncReturn { lib, glob } if (any_module || lib.as_deref() == library) && c.timed && c.named(glob) => exit.push((probe as u32, n as u32)),
                    Point::Addr(_) | Point::FuncOffset { .. } if library.is_none() && c.site.is_some() && spec.point_addrs.get(&n) == c.site.as_ref() => entry.push((probe as u32, n as u32)),
                    Point::Usdt { .. } if c.site.is_some_and(|at| spec.markers.get(&n).is_some_and(|m| m.iter().any(|s| s.addr == at && s.library.as_deref() == library))) => entry.push((probe as u32, n as u32)),
                    _ => {}
                }
            }
            (entry, exit)
        })
        .collect()
}

/// Per system-call number, the (probe, point) pairs its entry and its return run.
pub fn syscall_hooks(program: &Program) -> Vec<(HookList, HookList)> {
    (0..abi::SYSCALLS as u64)
        .map(|nr| {
            let name = lopi_trace::syscall_name(nr);
            let (mut entry, mut exit) = (Vec::new(), Vec::new());
            for (n, (probe, point)) in points(program).enumerate() {
                match point {
                    Point::SyscallEntry { glob, .. } if lopi_script::glob_match(glob, &name) => entry.push((probe as u32, n as u32)),
                    Point::SyscallReturn { glob, .. } if lopi_script::glob_match(glob, &name) => exit.push((probe as u32, n as u32)),
                    _ => {}
                }
            }
            (entry, exit)
        })
        .collect()
}

/// The compiled probes, to be placed at `at` with the runtime blob at `blob`; a C handler's
/// are its callbacks, in its text (placed apart).
pub fn compile(spec: &ScriptSpec, at: u64, blob: u64) -> Result<codegen::Compiled, codegen::CodegenError> {
    if let Some(h) = &spec.handler {
        return Ok(codegen::Compiled { code: Vec::new(), probes: h.probe_offsets() });
    }
    let helper = |i: u64| blob.wrapping_add(lopi_rt_blob::SCRIPT_HELPERS_OFFSET as u64 + 8 * i);
    let helpers = Helpers {
        builtin: helper(0),
        builtin_str: helper(1),
        map_slot: helper(2),
        map_lookup: helper(3),
        map_delete: helper(4),
        map_clear: helper(5),
        read_str: helper(6),
        ustack: helper(7),
        printf: helper(8),
        print_map: helper(9),
        print_value: helper(10),
        pystack: helper(11),
        join: helper(12),
    };
    codegen::compile(&spec.program, &helpers, at)
}

/// The R-region bytes of the script in the module its points name `library`: a `ScriptImage`
/// at `at` (8-aligned) and its tables, for code placed at `code` (and a C handler's data at
/// `handler_data`).
pub fn descriptor(spec: &ScriptSpec, library: Option<&str>, compiled: &codegen::Compiled, counted: &[Counted<'_>], at: u64, code: u64, handler_data: u64) -> Vec<u8> {
    let program = &spec.program;
    let area = area_layout(spec);
    let mut strings: Vec<u8> = Vec::new();
    let mut intern = |text: &[u8]| {
        let offset = strings.len() as u32;
        strings.extend_from_slice(text);
        // C handlers read names as C strings.
        strings.push(0);
        [offset, text.len() as u32]
    };
    let functions: Vec<FunctionName> = counted
        .iter()
        .map(|c| {
            let [name, name_len] = intern(c.name.as_bytes());
            FunctionName { name, name_len, addr: c.addr.wrapping_sub(at) as i64 }
        })
        .collect();
    let point_names: Vec<[u32; 2]> = points(program).map(|(_, p)| intern(p.to_string().as_bytes())).collect();
    let syscall_names: Vec<[u32; 2]> = match spec.handler.is_some() && spec.probes_system_calls() {
        true => (0..abi::SYSCALLS as u64).map(|nr| intern(lopi_trace::syscall_name(nr).as_bytes())).collect(),
        false => Vec::new(),
    };
    let formats: Vec<FormatArgs> = program
        .formats
        .iter()
        .map(|f| {
            let convs: Vec<ConvKind> = f.pieces.iter().filter_map(|p| if let Piece::Conv(c) = p { Some(c.kind) } else { None }).collect();
            let strings = convs.iter().enumerate().fold(0u64, |m, (i, k)| if *k == ConvKind::Str && i < 64 { m | 1 << i } else { m });
            FormatArgs { count: convs.len().min(abi::MAX_PRINTF_ARGS) as u32, _pad: 0, strings }
        })
        .collect();
    let mut lists: Vec<u32> = vec![u32::MAX];
    let mut add_list = |pairs: &[(u32, u32)]| -> u32 {
        if pairs.is_empty() {
            return 0;
        }
        let start = lists.len() as u32;
        lists.extend(pairs.iter().flat_map(|&(probe, point)| [probe, point]));
        lists.push(u32::MAX);
        start
    };
    let hooks: Vec<u64> = hooks(spec, library, counted).iter().map(|(entry, exit)| u64::from(add_list(entry)) | u64::from(add_list(exit)) << 32).collect();
    // A list of its probes per event point (`ScriptImage::locks`, `threads`); none when the
    // script names none of them.
    // A `profile:` event is every profile point, whatever its period.
    let same = |p: &Point, event: &Point| p == event || matches!((p, event), (Point::Profile { .. }, Point::Profile { .. }));
    let mut event_lists = |events: &[Point]| -> Vec<u32> {
        if !points(program).any(|(_, p)| events.iter().any(|e| same(p, e))) {
            return Vec::new();
        }
        events
            .iter()
            .map(|event| {
                let pairs: HookList = points(program).enumerate().filter(|(_, (_, p))| same(p, event)).map(|(n, (probe, _))| (probe as u32, n as u32)).collect();
                add_list(&pairs)
            })
            .collect()
    };
    let lock_lists = event_lists(&LockEvent::ALL.map(Point::Lock));
    let thread_lists = event_lists(&[Point::ThreadStart, Point::ThreadExit, Point::Profile { ns: 0 }]);
    let syscalls: Vec<u64> = match spec.probes_system_calls() {
        true => syscall_hooks(program).iter().map(|(entry, exit)| u64::from(add_list(entry)) | u64::from(add_list(exit)) << 32).collect(),
        false => Vec::new(),
    };

    // Header, then each table 8-aligned.
    let mut out = vec![0u8; abi::SCRIPT_IMAGE_LEN];
    let mut place = |bytes: &[u8]| -> i64 {
        let offset = out.len().next_multiple_of(8);
        out.resize(offset, 0);
        out.extend_from_slice(bytes);
        offset as i64
    };
    let words = |v: &[u64]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
    let formats_at = place(&formats.iter().flat_map(|f| [u64::from(f.count), f.strings]).flat_map(u64::to_le_bytes).collect::<Vec<u8>>());
    let hooks_at = place(&words(&hooks));
    // The call names follow their table, for C handlers' `name`.
    let syscalls_at = if syscalls.is_empty() { 0 } else { place(&words(&syscalls)) };
    if !syscall_names.is_empty() {
        place(&syscall_names.iter().flatten().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    }
    let lists_at = place(&lists.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    let functions_at = place(&functions.iter().flat_map(|f| [u64::from(f.name) | u64::from(f.name_len) << 32, f.addr as u64]).flat_map(u64::to_le_bytes).collect::<Vec<u8>>());
    let points_at = place(&point_names.iter().flatten().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    let tables_at = place(
        &area.tables.iter().flat_map(|t| [u64::from(t.key_size) | u64::from(t.slot_size) << 32, u64::from(t.max_entries), t.offset]).flat_map(u64::to_le_bytes).collect::<Vec<u8>>(),
    );
    let probe_code_at = place(&words(&compiled.probes));
    let mut place_lists = |lists: &[u32]| if lists.is_empty() { 0 } else { place(&lists.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()) };
    let threads_at = place_lists(&thread_lists);
    let locks_at = place_lists(&lock_lists);
    let (site_args, arg_specs) = site_args(spec, library, counted, at);
    let site_args_at = if arg_specs.is_empty() { 0 } else { place(&site_args.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()) };
    let arg_specs_at = if arg_specs.is_empty() { 0 } else { place(&arg_specs.iter().flat_map(|a| a.to_bytes()).collect::<Vec<u8>>()) };
    let relocs: Vec<u64> = spec.handler.iter().flat_map(|h| &h.relocs).flat_map(|&(slot, target)| [slot, target]).collect();
    let relocs_at = place(&words(&relocs));
    let strings_at = place(&strings);
    let header = ScriptImage {
        magic: abi::SCRIPT_IMAGE_MAGIC,
        id: spec.id,
        code: code.wrapping_sub(at) as i64,
        probe_code: probe_code_at,
        hooks: hooks_at,
        lists: lists_at,
        lists_len: lists.len() as u32,
        counter_count: counted.len() as u32,
        functions: functions_at,
        points: points_at,
        strings: strings_at,
        strings_len: strings.len() as u64,
        tables: tables_at,
        probe_count: program.probes.len() as u32,
        point_count: point_names.len() as u32,
        map_count: program.maps.len() as u32,
        str_size: program.str_size as u32,
        area_len: area.len,
        ring_offset: area.ring_offset,
        ring_len: area.ring_len,
        formats: formats_at,
        format_count: formats.len() as u32,
        flags: if spec.handler.is_some() { abi::HANDLER } else { 0 },
        syscalls: syscalls_at,
        handler_data: if spec.handler.is_some() { handler_data.wrapping_sub(at) as i64 } else { 0 },
        relocs: relocs_at,
        reloc_count: relocs.len() as u64 / 2,
        handler_init: match spec.handler.as_ref().and_then(|h| h.init) {
            Some(init) => code.wrapping_add(init).wrapping_sub(at) as i64,
            None => 0,
        },
        locks: locks_at,
        threads: threads_at,
        site_args: site_args_at,
        arg_specs: arg_specs_at,
        profile_ns: spec.profile_ns(),
        py_codes: area.py_codes,
        start_ns: spec.start_ns,
    };
    out[..abi::SCRIPT_IMAGE_LEN].copy_from_slice(&header.to_bytes());
    out
}

/// Per counter, where its marker's arguments start in the list that follows (0: the counter is
/// no marker's), each marker's ending with an `END`; both empty when no marker of the module
/// (`library`, as for [`hooks`]) is probed. A symbol's address becomes an offset from the
/// `ScriptImage` at `at`.
fn site_args(spec: &ScriptSpec, library: Option<&str>, counted: &[Counted<'_>], at: u64) -> (Vec<u32>, Vec<abi::SiteArg>) {
    let marker = |addr: u64| spec.markers.values().flatten().find(|m| m.addr == addr && m.library.as_deref() == library);
    if !counted.iter().any(|c| c.site.and_then(marker).is_some()) {
        return (Vec::new(), Vec::new());
    }
    // Index 0 is no list's.
    let mut specs = vec![abi::SiteArg::default()];
    let table = counted
        .iter()
        .map(|c| match c.site.and_then(marker) {
            Some(m) => {
                let first = specs.len() as u32;
                specs.extend(m.args.iter().map(|a| match a.base {
                    abi::site_arg::IMAGE => abi::SiteArg { value: a.value.wrapping_sub(at as i64), ..*a },
                    _ => *a,
                }));
                specs.push(abi::SiteArg::default());
                first
            }
            None => 0,
        })
        .collect();
    (table, specs)
}
