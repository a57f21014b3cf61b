//! A trace session's output: the threads' output rings printed while the program runs, the
//! probes lopi runs itself (`begin`, `interval:`, `end`, through lopi-script's `host`), and
//! the maps merged over every thread's table and those probes' own.
use super::Symbols;
use anyhow::{anyhow, Context, Result};
use lopi_image::script::{AreaLayout, ScriptSpec};
use lopi_rt_abi::script::{record, CLEARS_DONE, CLEAR_REQUESTS, RING_TAIL, SCALAR_SLOTS};
use lopi_rt_abi::script_map;
use lopi_script::host::{self, Host};
use lopi_script::lower::CountedMap;
use lopi_script::ir::{Builtin, ConvKind, FormatId, MapId, Piece, Point, StrId, Type};
use lopi_script::output::{self, Arg, MergedMap};
use lopi_trace::script_areas::{self, AreaView, OutputRecord};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::FileExt;

/// When the probes lopi runs itself run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Begin,
    Running,
    Ended,
}

pub struct Session<'s> {
    pub spec: &'s ScriptSpec,
    pub area: AreaLayout,
    pub data: std::fs::File,
    /// lopi runs the program (it hands ring space back and asks threads to clear); false when
    /// it reads a record afterwards (`lopi report --script`), which it never changes.
    live: bool,
    pub symbols: &'s Symbols,
    pub out: Box<dyn Write>,
    pub json: bool,
    /// Per area (its file offset): how far its ring was read.
    tails: HashMap<u64, u64>,
    /// The tables `begin` wrote (merged before the threads') and those `interval:` and `end`
    /// write (merged after), a `script_map` table per map each.
    host: [Vec<Vec<u8>>; 2],
    phase: Phase,
    /// The last clear generation asked of the threads per map (0: none).
    clears: Vec<u32>,
    /// Once the program has ended, what host probes took away from the threads' tables:
    /// whole maps cleared, and deleted keys, left out when merging (the record stays as it is).
    cleared: Vec<bool>,
    deleted: Vec<std::collections::HashSet<Vec<u8>>>,
    /// A probe called `exit()`: nothing more runs or is printed but the maps.
    pub exited: bool,
    /// Faults of the probes lopi ran.
    faults: u64,
    /// The pid of the process lopi started or attached to (`cpid`; 0 when it reads a record).
    pub cpid: u32,
}

/// A read-only view of the data file as it is now.
#[allow(unsafe_code)]
fn map(data: &std::fs::File) -> Result<Option<memmap2::Mmap>> {
    if data.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: read-only and private to this process; the program appends and writes its areas
    // meanwhile, and every byte read is checked (script_areas trusts nothing).
    Ok(Some(unsafe { memmap2::Mmap::map(data) }.context("mapping the data file")?))
}

impl<'s> Session<'s> {
    pub fn new(spec: &'s ScriptSpec, data: std::fs::File, live: bool, symbols: &'s Symbols, out: Box<dyn Write>, json: bool) -> Session<'s> {
        let area = lopi_image::script::area_layout(spec);
        let tables = || -> Vec<Vec<u8>> {
            area.tables
                .iter()
                .map(|t| {
                    let mut table = vec![0; script_map::table_size(t.key_size as usize, t.slot_size as usize, t.max_entries)];
                    script_map::init(&mut table, t.key_size, t.slot_size, t.max_entries);
                    table
                })
                .collect()
        };
        let host = [tables(), tables()];
        let maps = spec.program.maps.len();
        Session {
            spec,
            area,
            data,
            live,
            symbols,
            out,
            json,
            tails: HashMap::new(),
            host,
            phase: Phase::Begin,
            clears: vec![0; maps],
            cleared: vec![false; maps],
            deleted: vec![Default::default(); maps],
            exited: false,
            faults: 0,
            cpid: 0,
        }
    }

    /// Runs the probes of the points `which` picks (`begin`, due `interval:`s, `end`).
    pub fn run_host(&mut self, phase: Phase, which: impl Fn(&Point) -> bool) -> Result<()> {
        self.phase = phase;
        let program = &self.spec.program;
        for probe in &program.probes {
            for point in probe.points.iter().filter(|p| which(p)) {
                if self.exited {
                    return Ok(());
                }
                let bytes = map(&self.data)?;
                let mut env = Env { session: self, bytes: bytes.as_deref().unwrap_or_default(), error: None };
                let faults = host::run(program, probe, &point.to_string(), &mut env);
                if let Some(e) = env.error.take() {
                    return Err(e);
                }
                self.faults += faults;
            }
        }
        self.out.flush()?;
        Ok(())
    }

    /// Prints the records written since the last poll, in time order across threads, and
    /// hands the rings' space back.
    pub fn poll(&mut self) -> Result<()> {
        let Some(bytes) = map(&self.data)? else { return Ok(()) };
        let mut records: Vec<OutputRecord> = Vec::new();
        for area in script_areas::areas(&bytes, self.spec.id) {
            let tail = self.tails.get(&area.offset).copied().unwrap_or(area.header.ring_tail);
            let (new_tail, mut taken) = area.records(self.area.ring_offset, self.area.ring_len, tail);
            if new_tail != tail {
                if self.live {
                    self.data.write_all_at(&new_tail.to_le_bytes(), area.offset + RING_TAIL as u64).context("handing a ring's space back")?;
                }
                self.tails.insert(area.offset, new_tail);
            }
            records.append(&mut taken);
        }
        records.sort_by_key(|r| r.tsc);
        // Named once for the records of this poll that print stacks.
        let prints = records.iter().any(|r| matches!(r.kind, record::PRINT_MAP | record::PRINT_VALUE));
        let names = self.frame_names(if prints { &bytes } else { &[] });
        for r in records {
            match r.kind {
                record::PRINTF => {
                    let text = self.printf_record(&r)?;
                    self.out.write_all(&text)?;
                }
                record::PRINT_MAP => {
                    let word = |at: usize| r.payload.get(at..at + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
                    let text = self.map_text(&bytes, &names, MapId(r.what as usize), word(0) as u32, word(8) as u32)?;
                    self.out.write_all(text.as_bytes())?;
                }
                record::PRINT_VALUE => {
                    let ty = match r.what {
                        0 => Type::Int,
                        1 => Type::Str,
                        2 => Type::Stack,
                        3 => Type::Uint,
                        _ => Type::Usym,
                    };
                    let text = self.value_text(&names, ty, &r.payload);
                    self.out.write_all(text.as_bytes())?;
                }
                record::JOIN => {
                    let args: Vec<&[u8]> = r.payload.split(|&b| b == 0).filter(|a| !a.is_empty()).collect();
                    self.out.write_all(&output::join(&self.spec.program, StrId(r.what as usize), &args))?;
                }
                record::EXIT => {
                    self.exited = true;
                    break;
                }
                _ => {}
            }
        }
        self.out.flush()?;
        Ok(())
    }

    fn printf_record(&self, r: &OutputRecord) -> Result<Vec<u8>> {
        let program = &self.spec.program;
        let Some(format) = program.formats.get(r.what as usize) else { return Ok(Vec::new()) };
        let mut args = Vec::new();
        let mut at = 0;
        for piece in &format.pieces {
            let Piece::Conv(conv) = piece else { continue };
            let word = || r.payload.get(at..at + 8).map_or(0, |w| i64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
            let (arg, len) = match conv.kind {
                ConvKind::Str => (Arg::Str(r.payload.get(at..at + program.str_size).unwrap_or_default().to_vec()), program.str_size),
                ConvKind::Sym => (Arg::Str(self.symbols.symbol(word() as u64).into_bytes()), 8),
                _ => (Arg::Int(word()), 8),
            };
            args.push(arg);
            at += len.next_multiple_of(8);
        }
        output::printf(program, format, &args).map_err(|e| anyhow!("printf: {e}"))
    }

    fn value_text(&self, names: &FrameNames<'_>, ty: Type, bytes: &[u8]) -> String {
        let word = |at: usize| bytes.get(at..at + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        match ty {
            Type::Int => format!("{}\n", word(0) as i64),
            Type::Uint => format!("{}\n", word(0)),
            Type::Usym => format!("{}\n", self.symbols.symbol(word(0))),
            Type::Str => format!("{}\n", String::from_utf8_lossy(bytes.split(|&b| b == 0).next().unwrap_or_default())),
            Type::Stack => {
                let frames = (word(0) as usize).min(lopi_rt_abi::script::STACK_FRAMES);
                let mut text = String::from("\n");
                for i in 0..frames {
                    text += &format!("        {}\n", names.name(word(8 + 8 * i)));
                }
                text + "\n"
            }
        }
    }

    /// A table of an area, unless it still holds what a clear asked since took away.
    fn live_table<'a>(&self, area: &AreaView<'a>, map: usize) -> &'a [u8] {
        let shape = &self.area.tables[map];
        let len = script_map::table_size(shape.key_size as usize, shape.slot_size as usize, shape.max_entries);
        if area.u32_at(CLEAR_REQUESTS + 4 * map) != area.u32_at(CLEARS_DONE + 4 * map) {
            return &[];
        }
        area.table(shape, len)
    }

    /// The tables of map `map` in merge order: `begin`'s, every thread's, then the later host
    /// probes'.
    fn tables<'a>(&'a self, bytes: &'a [u8], map: usize) -> Vec<&'a [u8]> {
        let areas = script_areas::areas(bytes, self.spec.id);
        let mut tables = vec![self.host[0][map].as_slice()];
        if !self.cleared[map] {
            tables.extend(areas.iter().map(|a| self.live_table(a, map)));
        }
        tables.push(self.host[1][map].as_slice());
        tables
    }

    /// The live entries of map `map` in merge order, less the keys host probes deleted from
    /// the threads' tables after the program ended.
    fn entries<'a>(&'a self, bytes: &'a [u8], map: usize) -> Vec<(&'a [u8], &'a [u8])> {
        let tables = self.tables(bytes, map);
        let last = tables.len() - 1;
        tables
            .iter()
            .enumerate()
            .flat_map(|(i, t)| script_map::entries(t).filter(move |(key, _)| i == 0 || i == last || !self.deleted[map].contains(*key)))
            .collect()
    }

    fn merged<'p>(&'p self, bytes: &[u8]) -> Result<Vec<MergedMap<'p>>> {
        let program = &self.spec.program;
        (0..program.maps.len()).map(|i| self.merged_map(bytes, i)).collect()
    }

    fn merged_map<'p>(&'p self, bytes: &[u8], map: usize) -> Result<MergedMap<'p>> {
        let program = &self.spec.program;
        let m = &program.maps[map];
        let merged = match self.spec.counted.iter().find(|c| c.map.0 == map) {
            Some(counted) => {
                let entries = counted_entries(self.spec, counted, &self.symbols.aliases, bytes);
                output::merge(m, program.str_size, entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
            }
            None => output::merge(m, program.str_size, self.entries(bytes, map)),
        };
        merged.map_err(|e| anyhow!("reading map @{}: {e}", m.name))
    }

    /// What `print(@m, top, div)` prints: the map as text, or with `--format json` a line of its
    /// own in the form of the maps at the end (`{"maps": {"@m": ...}}`).
    fn map_text(&self, bytes: &[u8], names: &FrameNames<'_>, map: MapId, top: u32, div: u32) -> Result<String> {
        let merged = output::limited(&self.merged_map(bytes, map.0)?, top, div);
        let symbolize = |a: u64| names.name(a);
        Ok(if self.json { output::json(&[merged], &symbolize) + "\n" } else { output::text_map(&merged, &symbolize) })
    }

    /// What names the frames of stacks: the program's symbols, and for `pystack`'s frames the
    /// names the threads' tables give their code objects (in `bytes`, the data file).
    fn frame_names(&self, bytes: &[u8]) -> FrameNames<'s> {
        let python = match self.area.py_codes {
            0 => HashMap::new(),
            at => script_areas::areas(bytes, self.spec.id).iter().flat_map(|a| a.python_names(at)).collect(),
        };
        FrameNames { symbols: self.symbols, python }
    }

    /// Prints every map as it is now.
    pub fn print_maps(&mut self) -> Result<()> {
        let Some(bytes) = map(&self.data)? else { return Ok(()) };
        let maps = self.merged(&bytes)?;
        let names = self.frame_names(&bytes);
        let symbolize = |a: u64| names.name(a);
        let text = if self.json { output::json(&maps, &symbolize) + "\n" } else { output::text(&maps, &symbolize) };
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        Ok(())
    }

    /// Says on stderr what was lost: map updates refused by full maps, output records
    /// dropped by full rings, returns through tail calls, and faults of the script.
    pub fn report_losses(&self) {
        let Ok(Some(bytes)) = map(&self.data) else { return };
        let areas = script_areas::areas(&bytes, self.spec.id);
        let (faults, ring_drops, tail_returns) =
            areas.iter().fold((self.faults, 0, 0), |(f, d, r), a| (f + a.header.faults, d + a.header.ring_drops, r + a.header.tail_returns));
        let missed: u64 = areas.iter().map(|a| a.header.missed_samples).sum();
        if missed > 0 {
            eprintln!("lopi: {missed} profile: samples not taken: the thread was inside one of lopi's probes then");
        }
        for (i, (map, shape)) in self.spec.program.maps.iter().zip(&self.area.tables).enumerate() {
            let drops: u64 = self.tables(&bytes, i).iter().map(|t| script_map::drops(t)).sum();
            if drops > 0 {
                eprintln!("lopi: @{}: {drops} updates dropped: the map was full ({} keys per thread; --max-entries raises it)", map.name, shape.max_entries);
            }
        }
        if ring_drops > 0 {
            eprintln!("lopi: {ring_drops} printf/print records dropped: a thread's output ring was full");
        }
        if tail_returns > 0 {
            eprintln!("lopi: {tail_returns} returns not seen by :return probes: the function left by a tail call (its return value is the function's it jumped to; not followed yet)");
        }
        if faults > 0 {
            eprintln!("lopi: {faults} faults in the script's probes (unreadable memory, division by zero): those reads gave empty values");
        }
    }
}

/// The (key, slot) entries of a map only counting probes fill: each function's calls, as the
/// record counts them (counters, and call-tree nodes of timed functions), times the probes
/// covering it; keyed by the function's name, or summed.
fn counted_entries(spec: &ScriptSpec, counted: &CountedMap, aliases: &HashMap<String, Vec<String>>, bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let Ok(data) = lopi_trace::DataFile::parse(bytes) else { return Vec::new() };
    let profile = lopi_trace::Profile::from_data(&data);
    let str_size = spec.program.str_size;
    let weight = |name: &str| {
        let mut names = vec![name];
        names.extend(aliases.get(name).into_iter().flatten().map(String::as_str));
        counted.weight(&names)
    };
    let calls = profile.functions.iter().map(|f| (f.name.as_str(), f.calls.saturating_mul(weight(&f.name)))).filter(|&(_, n)| n > 0);
    if !counted.by_func {
        let total: u64 = calls.map(|(_, n)| n).fold(0, u64::wrapping_add);
        return if total > 0 { vec![(Vec::new(), total.to_le_bytes().to_vec())] } else { Vec::new() };
    }
    calls
        .map(|(name, n)| {
            let mut key = vec![0; str_size];
            let len = name.len().min(str_size);
            key[..len].copy_from_slice(&name.as_bytes()[..len]);
            (key, n.to_le_bytes().to_vec())
        })
        .collect()
}

/// A host probe's view of the session, with the data file as it was when the probe began.
struct Env<'e, 's> {
    session: &'e mut Session<'s>,
    bytes: &'e [u8],
    error: Option<anyhow::Error>,
}

impl Env<'_, '_> {
    fn keep(&mut self, result: Result<()>) {
        if let Err(e) = result {
            self.error.get_or_insert(e);
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let result = self.session.out.write_all(bytes).map_err(anyhow::Error::from);
        self.keep(result);
    }
}

impl Host for Env<'_, '_> {
    fn int_builtin(&mut self, builtin: Builtin) -> i64 {
        match builtin {
            Builtin::Pid | Builtin::Tid => i64::from(std::process::id()),
            Builtin::Uid => i64::from(nix::unistd::getuid().as_raw()),
            Builtin::Gid => i64::from(nix::unistd::getgid().as_raw()),
            Builtin::Cpid => i64::from(self.session.cpid),
            Builtin::Cpu => nix::sched::sched_getcpu().map_or(0, |c| c as i64),
            Builtin::Nsecs => monotonic_ns() as i64,
            // A record read afterwards (`lopi report --script`) has no start of its own.
            Builtin::SinceStart if self.session.spec.start_ns == 0 => 0,
            Builtin::SinceStart => monotonic_ns().saturating_sub(self.session.spec.start_ns) as i64,
            _ => 0,
        }
    }

    fn comm(&mut self) -> Vec<u8> {
        b"lopi".to_vec()
    }

    fn value(&mut self, map: MapId, key: &[u8]) -> Option<Vec<u8>> {
        self.session.entries(self.bytes, map.0).into_iter().rev().find(|(k, _)| *k == key).map(|(_, slot)| slot.to_vec())
    }

    fn slot(&mut self, map: MapId, key: &[u8]) -> Option<&mut [u8]> {
        let which = usize::from(self.session.phase != Phase::Begin);
        script_map::slot(&mut self.session.host[which][map.0], key)
    }

    fn delete(&mut self, map: MapId, key: &[u8]) {
        for tables in &mut self.session.host {
            script_map::delete(&mut tables[map.0], key);
        }
        // The threads' tables only once the program has ended: while it runs they are theirs.
        if self.session.phase == Phase::Ended {
            self.session.deleted[map.0].insert(key.to_vec());
        }
    }

    fn clear(&mut self, map: MapId) {
        for tables in &mut self.session.host {
            script_map::clear(&mut tables[map.0]);
        }
        match self.session.phase {
            Phase::Ended => self.session.cleared[map.0] = true,
            _ if !self.session.live => {}
            _ => {
                // Each thread clears its own table on its next use of the map; until then the
                // reader skips it.
                let generation = self.session.clears[map.0].wrapping_add(1).max(1);
                self.session.clears[map.0] = generation;
                // The request first, then the slot cache (the thread sets the cache, then checks
                // the request): two writes to the page the thread maps, one after the other.
                for area in script_areas::areas(self.bytes, self.session.spec.id) {
                    let request = area.offset + (CLEAR_REQUESTS + 4 * map.0) as u64;
                    let cache = area.offset + (SCALAR_SLOTS + 8 * map.0) as u64;
                    let result = self
                        .session
                        .data
                        .write_all_at(&generation.to_le_bytes(), request)
                        .and_then(|()| self.session.data.write_all_at(&0u64.to_le_bytes(), cache))
                        .context("asking a thread to clear a map");
                    self.keep(result);
                }
            }
        }
    }

    fn printf(&mut self, format: FormatId, args: &[Arg]) {
        let program = &self.session.spec.program;
        match output::printf(program, program.format(format), args) {
            Ok(text) => self.write(&text),
            Err(e) => self.keep(Err(anyhow!("printf: {e}"))),
        }
    }

    fn print_map(&mut self, map: MapId, top: u32, div: u32) {
        let names = self.session.frame_names(self.bytes);
        let text = self.session.map_text(self.bytes, &names, map, top, div);
        match text {
            Ok(text) => self.write(text.as_bytes()),
            Err(e) => self.keep(Err(e)),
        }
    }

    fn print_value(&mut self, ty: Type, bytes: &[u8]) {
        let names = self.session.frame_names(self.bytes);
        let text = self.session.value_text(&names, ty, bytes);
        self.write(text.as_bytes());
    }

    fn symbol(&mut self, addr: u64) -> Vec<u8> {
        self.session.symbols.symbol(addr).into_bytes()
    }

    fn join(&mut self, sep: StrId, args: &[&[u8]]) {
        let line = output::join(&self.session.spec.program, sep, args);
        self.write(&line);
    }

    fn exit(&mut self) {
        self.session.exited = true;
    }
}

/// CLOCK_MONOTONIC now, in ns.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| (t.tv_sec() * 1_000_000_000 + t.tv_nsec()) as u64)
}

/// Names of a stack's frames: see [`Session::frame_names`].
struct FrameNames<'s> {
    symbols: &'s Symbols,
    python: HashMap<u64, String>,
}

impl FrameNames<'_> {
    fn name(&self, frame: u64) -> String {
        use lopi_rt_abi::python::PY_FRAME;
        match frame & PY_FRAME {
            0 => self.symbols.name(frame),
            _ => {
                let code = frame & !PY_FRAME;
                self.python.get(&code).cloned().unwrap_or_else(|| format!("<python code {code:#x}>"))
            }
        }
    }
}
