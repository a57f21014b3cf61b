//! pprof profiles (`profile.proto`, not gzipped: pprof reads raw protobuf too) of a
//! [`Timing`]: the CPU-style profile of timed calls, and the lock profiles (`--probe locks`)
//! in Go's mutex and block profile layout.
use crate::export::{path, whole_ns, MERGED_PATHS, UNKNOWN_FUNCTION};
use crate::timing::{ContextNode, Timing};
use prost::Message;
use std::collections::HashMap;

/// A pprof profile (`profile.proto`, not gzipped: pprof reads raw protobuf too): one sample
/// per call path per thread, valued `[calls, self time in ns]` and labelled with its pid and
/// tid (and `open`, the calls of it still open at the end, when there are any), and one
/// location per function at its file address. With sampled time (every thread's), values are
/// `[calls, samples, cpu in ns]`, as pprof's CPU profiles, with the sampling period. The
/// profile has no duration: [`Timing`] does not know how long the program ran.
pub fn pprof(t: &Timing) -> Vec<u8> {
    cpu_profile(t).encode_to_vec()
}

/// [`pprof`]'s profile, not yet encoded: the OTLP export translates it.
pub(crate) fn cpu_profile(t: &Timing) -> proto::Profile {
    let mut builder = PprofBuilder::new(t);
    let calls = builder.value_type("calls", "count");
    // Sampled when every thread's time was (a mixed record keeps exact time's layout).
    let periods: Option<Vec<f64>> = t.threads.iter().map(|th| th.sampling.as_ref().map(|s| s.period_ns)).collect();
    let period_ns = periods.and_then(|p| p.first().copied());
    let sampled = period_ns.map(|p| (builder.value_type("samples", "count"), p));
    let time = if sampled.is_some() { builder.value_type("cpu", "nanoseconds") } else { builder.value_type("time", "nanoseconds") };
    let (pid_key, tid_key, open_key) = (builder.strings.intern("pid"), builder.strings.intern("tid"), builder.strings.intern("open"));
    let label = |key, num: u64| proto::Label { key, num: i64::try_from(num).unwrap_or(i64::MAX) };
    let mut samples = Vec::new();
    for thread in &t.threads {
        for (index, node) in thread.nodes.iter().enumerate().skip(1) {
            let self_ns = whole_ns(node.self_ns);
            if node.calls == 0 && self_ns == 0 {
                continue;
            }
            // pprof wants the leaf first.
            let location_id = path(thread, index).iter().map(|&i| builder.location(&thread.nodes[i])).collect();
            let mut labels = vec![label(pid_key, thread.pid.into()), label(tid_key, thread.tid.into())];
            if node.open > 0 {
                labels.push(label(open_key, node.open));
            }
            let calls = i64::try_from(node.calls).unwrap_or(i64::MAX);
            let value = match sampled {
                Some((_, period)) => vec![calls, (node.self_ns / period).round() as i64, self_ns],
                None => vec![calls, self_ns],
            };
            samples.push(proto::Sample { location_id, value, label: labels });
        }
    }
    let (sample_type, period) = match sampled {
        Some((count, period)) => (vec![calls, count, time], period.round() as i64),
        // Every call is measured, none sampled.
        None => (vec![calls, time], 1),
    };
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: builder.mappings,
        location: builder.locations,
        function: builder.functions,
        string_table: builder.strings.strings,
        period_type: Some(time),
        period,
        default_sample_type: time.r#type,
    }
}

/// The tables of a pprof profile: strings, a mapping per module, and a function and location
/// per frame.
pub(crate) struct PprofBuilder<'t> {
    timing: &'t Timing,
    pub(crate) strings: StringTable,
    pub(crate) mappings: Vec<proto::Mapping>,
    pub(crate) functions: Vec<proto::Function>,
    pub(crate) locations: Vec<proto::Location>,
    /// Locations of frames that are not in [`Timing::functions`], by frame name (and, for a
    /// call site, its module and address).
    other_frames: HashMap<(String, String, u64), u64>,
}

impl<'t> PprofBuilder<'t> {
    /// Function and location `i + 1` are `t.functions[i]`.
    fn new(t: &'t Timing) -> Self {
        let mut builder = PprofBuilder {
            timing: t,
            strings: StringTable::default(),
            mappings: Vec::new(),
            functions: Vec::new(),
            locations: Vec::new(),
            other_frames: HashMap::new(),
        };
        for f in &t.functions {
            let filename = builder.strings.intern(&f.module);
            let mapping = builder.mapping(filename, f.addr);
            builder.add_frame(&f.name, filename, f.addr, mapping);
        }
        builder
    }

    /// The id of the module named `filename`, its address span widened to `address`. Without
    /// mappings pprof complains that it has no binary; `has_functions` keeps it from
    /// symbolizing the file addresses again.
    fn mapping(&mut self, filename: i64, address: u64) -> u64 {
        let end = address.saturating_add(1);
        if let Some(m) = self.mappings.iter_mut().find(|m| m.filename == filename) {
            m.memory_start = m.memory_start.min(address);
            m.memory_limit = m.memory_limit.max(end);
            return m.id;
        }
        let id = self.mappings.len() as u64 + 1;
        let mapping = proto::Mapping { id, memory_start: address, memory_limit: end, filename, has_functions: true };
        self.mappings.push(mapping);
        id
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType { r#type: self.strings.intern(kind), unit: self.strings.intern(unit) }
    }

    fn add_frame(&mut self, name: &str, filename: i64, address: u64, mapping_id: u64) -> u64 {
        let id = self.functions.len() as u64 + 1;
        let name = self.strings.intern(name);
        self.functions.push(proto::Function { id, name, system_name: name, filename });
        let line = vec![proto::Line { function_id: id }];
        self.locations.push(proto::Location { id, mapping_id, address, line });
        id
    }

    fn location(&mut self, node: &ContextNode) -> u64 {
        match node.function {
            Some(f) if (f as usize) < self.timing.functions.len() => u64::from(f) + 1,
            _ => {
                let name = if node.function.is_none() { MERGED_PATHS } else { UNKNOWN_FUNCTION };
                self.named_frame(name)
            }
        }
    }

    /// The location of a frame known only by its name.
    fn named_frame(&mut self, name: &str) -> u64 {
        self.other_frame(name, None)
    }

    /// The location of a frame not in [`Timing::functions`]: by its name, at `place` (a
    /// module's path and an address in its file) when it is known.
    fn other_frame(&mut self, name: &str, place: Option<(&str, u64)>) -> u64 {
        let key = (name.to_string(), place.map_or(String::new(), |p| p.0.to_string()), place.map_or(0, |p| p.1));
        if let Some(&id) = self.other_frames.get(&key) {
            return id;
        }
        let id = match place {
            Some((module, address)) => {
                let filename = self.strings.intern(module);
                let mapping = self.mapping(filename, address);
                self.add_frame(name, filename, address, mapping)
            }
            None => self.add_frame(name, 0, 0, 0),
        };
        self.other_frames.insert(key, id);
        id
    }
}

/// pprof's string table: index 0 is always "".
pub(crate) struct StringTable {
    strings: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for StringTable {
    fn default() -> Self {
        StringTable { strings: vec![String::new()], index: HashMap::from([(String::new(), 0)]) }
    }
}

impl StringTable {
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The parts of pprof's `profile.proto` (package `perftools.profiles`) that lopi fills in,
/// with the same field numbers; fields left out stay at their defaults.
pub(crate) mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// A call site's frame in a lock profile, for a call made where no timed path is: its name (its
/// function, or `file+0xADDRESS`) and, when its module is known, the module's path and the
/// site's address in that file.
pub struct SiteFrame {
    pub name: String,
    pub place: Option<(String, u64)>,
}

/// Which lock profile to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockProfile {
    /// Go's mutex profile: acquisitions of mutexes, rwlocks and spinlocks, and their holds.
    Mutex,
    /// Go's block profile: every wait (those acquisitions, semaphore, condition-variable and
    /// barrier waits, joins).
    Block,
}

/// A lock profile in Go's layout (`go tool pprof` reads it as it reads Go's own): sample types
/// `contentions/count` and `delay/nanoseconds` as Go has them, then lopi's `hold/nanoseconds`
/// and `acquisitions/count`. Go charges a mutex's delay to the stack that *released* it (the
/// holder that made others wait); lopi charges it to the *waiting* call path, with the lock
/// itself as the leaf frame (`pthread_mutex_lock(hold_lock)`), and a hold to the path that
/// acquired it. One sample per thread, call path and lock operation, labelled with pid and
/// tid, and with `open`, the waits or holds of it still going on when the thread's recording
/// ended (counted with their time up to then), when there are any. A condition wait's relock
/// of its mutex counts as an acquisition (and hold) of that mutex by `pthread_mutex_lock`. A
/// call made from a function with no timed path (no entry and exit probes there) is under the
/// frame `site` gives for its process and return address (its function, or its module and
/// address there). `None` when nothing was recorded.
pub fn lock_pprof(data: &crate::DataFile, t: &Timing, which: LockProfile, site: &mut dyn FnMut(u32, u64) -> SiteFrame) -> Option<Vec<u8>> {
    lock_profile(data, t, which, site).map(|p| p.encode_to_vec())
}

/// [`lock_pprof`]'s profile, not yet encoded: the OTLP export translates it.
pub(crate) fn lock_profile(data: &crate::DataFile, t: &Timing, which: LockProfile, site: &mut dyn FnMut(u32, u64) -> SiteFrame) -> Option<proto::Profile> {
    use lopi_rt_abi::lock_name::{self, Op, Outcome, Role};
    let mut builder = PprofBuilder::new(t);
    let types = [
        builder.value_type("contentions", "count"),
        builder.value_type("delay", "nanoseconds"),
        builder.value_type("hold", "nanoseconds"),
        builder.value_type("acquisitions", "count"),
    ];
    let (pid_key, tid_key, open_key) = (builder.strings.intern("pid"), builder.strings.intern("tid"), builder.strings.intern("open"));
    let label = |key, num: u64| proto::Label { key, num: i64::try_from(num).unwrap_or(i64::MAX) };
    let lock_function: HashMap<(u32, Op, u64), u64> =
        t.functions.iter().enumerate().filter_map(|(i, f)| f.lock.map(|l| ((l.pid, l.op, l.addr), i as u64 + 1))).collect();
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut samples = Vec::new();
    // Timing keeps the chunks that have a clock, in order, with their node indices.
    let chunks = data.threads.iter().filter(|c| c.header.tsc_hz != 0);
    for (chunk, thread) in chunks.zip(&t.threads) {
        let h = &chunk.header;
        if (h.pid, h.tid) != (thread.pid, thread.tid) || chunk.nodes.len() != thread.nodes.len() {
            continue;
        }
        let ns = |ticks: u64| whole_ns(ticks as f64 * 1e9 / h.tsc_hz as f64);
        let open_by_node = chunk.open_by_node();
        for (i, n) in chunk.nodes.iter().enumerate() {
            let Some(l) = lock_name::decode(n.func) else { continue };
            let open = open_by_node.get(&(i as u32)).copied().unwrap_or(0);
            let wanted = match l.op.role() {
                Role::Acquire { .. } => true,
                Role::Wait { .. } => which == LockProfile::Block,
                _ => which == LockProfile::Block && l.op == Op::ThreadJoin,
            };
            if !wanted || l.outcome == Outcome::Started {
                continue;
            }
            let value = match (l.op, l.outcome) {
                (_, Outcome::Hold) => [0, 0, ns(n.ticks), 0],
                (Op::CondRelock, _) => [0, 0, 0, count(n.calls)],
                (_, outcome) => [
                    if outcome == Outcome::Contended { count(n.calls) } else { 0 },
                    ns(n.ticks),
                    0,
                    // A wait still open at the end has acquired nothing.
                    if outcome.acquired() || outcome == Outcome::Serial { count(n.calls - open) } else { 0 },
                ],
            };
            let op = if l.op == Op::CondRelock { Op::MutexLock } else { l.op };
            let Some(&leaf) = lock_function.get(&(h.space_pid, op, l.addr)) else { continue };
            if value.iter().all(|&v| v == 0) {
                continue;
            }
            // Under the site node (the call's return address), under the caller's path.
            let site_node = chunk.nodes.get(n.parent as usize);
            let caller = site_node.map_or(0, |s| s.parent as usize);
            let mut location_id = vec![leaf];
            let ret = site_node.and_then(|s| lock_name::decode_site(s.func));
            if let Some(frame) = ret.filter(|_| caller == 0).map(|ret| site(h.pid, ret)) {
                location_id.push(builder.other_frame(&frame.name, frame.place.as_ref().map(|(m, a)| (m.as_str(), *a))));
            }
            location_id.extend(path(thread, caller).iter().map(|&i| builder.location(&thread.nodes[i])));
            let mut labels = vec![label(pid_key, thread.pid.into()), label(tid_key, thread.tid.into())];
            if open > 0 {
                labels.push(label(open_key, open));
            }
            samples.push(proto::Sample { location_id, value: value.to_vec(), label: labels });
        }
    }
    if samples.is_empty() {
        return None;
    }
    Some(proto::Profile {
        sample_type: types.to_vec(),
        sample: samples,
        mapping: builder.mappings,
        location: builder.locations,
        function: builder.functions,
        string_table: builder.strings.strings,
        // Every call is measured, none sampled.
        period_type: Some(types[0]),
        period: 1,
        default_sample_type: types[1].r#type,
    })
}
