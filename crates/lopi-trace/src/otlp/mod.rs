//! A data file as one OTLP `ExportProfilesServiceRequest` (the OpenTelemetry profiles signal,
//! `v1development`; messages in [`proto`]): a resource per recorded process, its profiles
//! side by side, one per sample type lopi has. The call paths and values are those of the
//! pprof exports (`pprof.rs`), translated: the calls and self time of every timed call path,
//! the system calls at its leaves, the lock waits and holds; and the calls lopi counted
//! without timing them (under `[untimed calls]`), so that each function's calls are those
//! `lopi report` gives.
mod dictionary;
pub mod proto;
mod window;

use crate::pprof::{self, proto as pprof_proto, LockProfile, SiteFrame};
use crate::{DataFile, MetaAction, Timing};
use dictionary::{Dictionary, BUILD_ID_GNU};
use proto::AnyValue;
use std::collections::{BTreeMap, HashMap};
pub use window::Windows;

/// The frame under which calls counted without their calling context are.
const UNTIMED_CALLS: &str = "[untimed calls]";
/// The root of the system calls a followed program made before its probes went live.
const STARTUP_CALLS: &str = "[before the probes]";

/// What the exporting side knows besides the data file.
#[derive(Clone, Debug, Default)]
pub struct OtlpContext {
    /// `service.name` of every process [default: its executable's name].
    pub service: Option<String>,
    /// `host.name`.
    pub host_name: Option<String>,
    /// Resource attributes of every process (`--label k=v`), after lopi's own: a key lopi
    /// sets too takes this value.
    pub labels: Vec<(String, String)>,
    /// GNU build-id (hex) of module files, by path.
    pub build_ids: HashMap<String, String>,
    /// Source file and line of a function's entry, by module path and address in the file.
    pub lines: HashMap<(String, u64), (String, u32)>,
    /// When the recording ended, in ns since the Unix epoch (0: unknown).
    pub end_unix_ns: u64,
}

/// A sample type, its values as one profile of each process.
struct Kind {
    name: &'static str,
    unit: &'static str,
    /// Sampled values (CPU time of `--time sampled`) have their sampling period.
    sampled: bool,
}

/// The sample types, in the order of a process's profiles; the constants below index it.
/// Self time measured at every entry and exit is wall-clock time; the lock profile's types
/// are Go's block profile's (`pprof.rs`), then lopi's hold time and acquisitions.
const KINDS: [Kind; 12] = [
    Kind { name: "calls", unit: "count", sampled: false },
    Kind { name: "wall", unit: "nanoseconds", sampled: false },
    Kind { name: "samples", unit: "count", sampled: true },
    Kind { name: "cpu", unit: "nanoseconds", sampled: true },
    Kind { name: "syscalls", unit: "count", sampled: false },
    Kind { name: "syscall_time", unit: "nanoseconds", sampled: false },
    Kind { name: "contentions", unit: "count", sampled: false },
    Kind { name: "delay", unit: "nanoseconds", sampled: false },
    Kind { name: "hold", unit: "nanoseconds", sampled: false },
    Kind { name: "acquisitions", unit: "count", sampled: false },
    Kind { name: "block_executions", unit: "count", sampled: false },
    Kind { name: "blocks_covered", unit: "count", sampled: false },
];
const CALLS: usize = 0;
const WALL: usize = 1;
const SAMPLES: usize = 2;
const CPU: usize = 3;
const SYSCALLS: usize = 4;
const SYSCALL_TIME: usize = 5;
const LOCKS: [usize; 4] = [6, 7, 8, 9];
const BLOCKS: usize = 10;
const COVERED: usize = 11;

/// Each process's samples, by kind.
#[derive(Default)]
struct Samples {
    by_pid: BTreeMap<u32, [Vec<proto::Sample>; KINDS.len()]>,
}

impl Samples {
    fn add(&mut self, pid: u32, kind: usize, stack_index: i32, attribute_indices: &[i32], value: i64) {
        if value != 0 {
            let sample = proto::Sample { stack_index, attribute_indices: attribute_indices.to_vec(), values: vec![value] };
            self.by_pid.entry(pid).or_default()[kind].push(sample);
        }
    }
}

/// The data file `data` (its timed profile `t`) as an OTLP request: a resource per process,
/// with the profiles of calls, wall-clock self time (`cpu` and `samples` with `--time
/// sampled`), system calls and their time (the samples whose leaf is a system call), and the
/// lock profile's contentions, delay, hold and acquisitions (`--probe locks`; `site` names a
/// lock call's site, as for [`crate::lock_pprof`]), and the basic blocks' executions (`--probe
/// block`, or `--probe coverage`'s blocks covered). Samples carry `thread.id` and
/// `thread.name` attributes, and `lopi.open_calls` for calls still open at the end.
pub fn request(data: &DataFile, t: &Timing, site: &mut dyn FnMut(u32, u64) -> SiteFrame, context: &OtlpContext) -> proto::ExportProfilesServiceRequest {
    let mut dict = Dictionary::new(context);
    let mut samples = Samples::default();
    let thread_names: HashMap<(u32, u32), &str> = t.threads.iter().map(|th| ((th.pid, th.tid), th.name.as_str())).collect();

    let cpu = pprof::cpu_profile(t);
    // The CPU profile's values, as pprof.rs lays them out.
    let period = period_ns(t);
    let cpu_kinds: &[usize] = if period.is_some() { &[CALLS, SAMPLES, CPU] } else { &[CALLS, WALL] };
    // Location `i + 1` of the pprof profile is `t.functions[i]`.
    let syscall_leaf = |id: Option<&u64>| id.and_then(|&id| t.functions.get((id as usize).wrapping_sub(1))).is_some_and(|f| f.syscall.is_some());
    translate(&cpu, cpu_kinds, &mut dict, &mut samples, &thread_names, |pid, s, stack, attributes, samples| {
        if syscall_leaf(s.location_id.first()) {
            // Calls first, time last.
            let (calls, time) = (s.value[0], s.value[s.value.len() - 1]);
            samples.add(pid, SYSCALLS, stack, attributes, calls);
            samples.add(pid, SYSCALL_TIME, stack, attributes, time);
        }
    });
    if let Some(locks) = pprof::lock_profile(data, t, LockProfile::Block, site) {
        translate(&locks, &LOCKS, &mut dict, &mut samples, &thread_names, |_, _, _, _, _| {});
    }
    untimed_calls(data, &mut dict, &mut samples);
    untimed_syscalls(data, &mut dict, &mut samples);
    block_counts(data, &mut dict, &mut samples);

    let resource_profiles = pids(data, t)
        .into_iter()
        .map(|pid| {
            let profiles = samples.by_pid.remove(&pid).unwrap_or_default();
            resource_profiles(data, pid, profiles, period, &mut dict, context)
        })
        .collect();
    proto::ExportProfilesServiceRequest { resource_profiles, dictionary: Some(dict.tables) }
}

/// A pprof profile's samples, value `i` as `kinds[i]`; `also` sees each sample with its
/// process, stack and attributes.
fn translate(
    p: &pprof_proto::Profile,
    kinds: &[usize],
    dict: &mut Dictionary,
    samples: &mut Samples,
    thread_names: &HashMap<(u32, u32), &str>,
    mut also: impl FnMut(u32, &pprof_proto::Sample, i32, &[i32], &mut Samples),
) {
    let locations = dict.locations_of(p);
    for s in &p.sample {
        let stack = dict.stack(s.location_id.iter().map(|id| locations.get(id).copied().unwrap_or(0)).collect());
        let pid = pid_of(p, s);
        let mut attributes = Vec::new();
        if let Some(tid) = label(p, s, "tid") {
            attributes.push(dict.attribute("thread.id", AnyValue::int(tid)));
            let name = u32::try_from(tid).ok().and_then(|tid| thread_names.get(&(pid, tid))).filter(|n| !n.is_empty());
            if let Some(name) = name {
                attributes.push(dict.attribute("thread.name", AnyValue::string(*name)));
            }
        }
        if let Some(open) = label(p, s, "open") {
            attributes.push(dict.attribute("lopi.open_calls", AnyValue::int(open)));
        }
        for (&kind, &value) in kinds.iter().zip(&s.value) {
            samples.add(pid, kind, stack, &attributes, value);
        }
        also(pid, s, stack, &attributes, samples);
    }
}

fn label(p: &pprof_proto::Profile, s: &pprof_proto::Sample, key: &str) -> Option<i64> {
    s.label.iter().find(|l| p.string_table.get(l.key as usize).is_some_and(|k| k == key)).map(|l| l.num)
}

fn pid_of(p: &pprof_proto::Profile, s: &pprof_proto::Sample) -> u32 {
    label(p, s, "pid").and_then(|pid| u32::try_from(pid).ok()).unwrap_or(0)
}

/// The calls counted without a calling context (functions counted only, and timed functions'
/// calls that could not be timed): each function under `[untimed calls]`.
fn untimed_calls(data: &DataFile, dict: &mut Dictionary, samples: &mut Samples) {
    let mut root = None;
    for record in &data.records {
        // A marked entry tells that its function ran, not how often (as `lopi report`).
        for (counter, f, _) in record.meta.functions().filter(|&(_, _, a)| a != MetaAction::Mark) {
            let calls = i64::try_from(record.count(counter)).unwrap_or(i64::MAX);
            if calls > 0 {
                let leaf = dict.location(&record.meta.module, f.addr, &f.name);
                let root = *root.get_or_insert_with(|| dict.location("", 0, UNTIMED_CALLS));
                let stack = dict.stack(vec![leaf, root]);
                samples.add(record.pid, CALLS, stack, &[], calls);
            }
        }
    }
}

/// The basic blocks' executions (`--probe block`), a sample per block that ran, at the block's
/// address in its function; with `--probe coverage`, which marks a block once it ran, a
/// `blocks_covered` sample of 1 per block that ran.
fn block_counts(data: &DataFile, dict: &mut Dictionary, samples: &mut Samples) {
    for record in &data.records {
        for (counter, b, action) in record.meta.blocks() {
            let kind = match action {
                MetaAction::Count => BLOCKS,
                MetaAction::Mark => COVERED,
                // An instruction point's counter (a script's `addr:`) is not a block's.
                _ => continue,
            };
            let count = i64::try_from(record.count(counter)).unwrap_or(i64::MAX);
            if count > 0 {
                let stack = dict.location(&record.meta.module, b.addr, &b.function);
                let stack = dict.stack(vec![stack]);
                samples.add(record.pid, kind, stack, &[], if kind == COVERED { 1 } else { count });
            }
        }
    }
}

/// The system calls counted without a calling context: at their sites (made before the
/// runtime was ready, inside a probe, by a vfork child), under `[untimed calls]`, and before a
/// followed program's probes went live, under `[before the probes]`; as `lopi report
/// --syscalls` counts them.
fn untimed_syscalls(data: &DataFile, dict: &mut Dictionary, samples: &mut Samples) {
    // Without system-call probes a record has no system-call view (start-up calls alone).
    if data.records.iter().all(|r| r.meta.syscalls().next().is_none()) {
        return;
    }
    let mut add = |pid: u32, root: &str, nr: u64, calls: u64| {
        let leaf = dict.location("", nr, &format!("[syscall] {}", crate::syscall_name(nr)));
        let root = dict.location("", 0, root);
        let stack = dict.stack(vec![leaf, root]);
        let calls = i64::try_from(calls).unwrap_or(i64::MAX);
        samples.add(pid, CALLS, stack, &[], calls);
        samples.add(pid, SYSCALLS, stack, &[], calls);
    };
    for call in crate::syscalls::uncontexted(data) {
        add(call.pid, if call.before_probes { STARTUP_CALLS } else { UNTIMED_CALLS }, call.nr, call.calls);
    }
}

/// The recorded processes, in the order the data file has them.
fn pids(data: &DataFile, t: &Timing) -> Vec<u32> {
    let mut pids = Vec::new();
    for pid in data.records.iter().map(|r| r.pid).chain(t.threads.iter().map(|th| th.pid)).chain(data.processes.iter().map(|p| p.pid)) {
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids
}

/// The sampling period when every thread's time was sampled (as [`crate::pprof`]).
fn period_ns(t: &Timing) -> Option<i64> {
    let periods: Option<Vec<f64>> = t.threads.iter().map(|th| th.sampling.as_ref().map(|s| s.period_ns)).collect();
    periods?.first().map(|p| p.round() as i64)
}

/// How long process `pid` was recorded, in ns: from its first thread's start to its end, when
/// lopi saw the end.
fn duration_ns(data: &DataFile, pid: u32) -> u64 {
    let chunks = || data.threads.iter().filter(|c| c.header.pid == pid && c.header.tsc_hz != 0);
    let Some(start) = chunks().map(|c| c.header.start_tsc).min() else { return 0 };
    let hz = chunks().map(|c| c.header.tsc_hz).next().unwrap_or(0);
    let thread_ends = chunks().map(|c| c.end.tsc);
    let end = data.ends.iter().filter(|e| e.pid == pid).map(|e| e.tsc).chain(thread_ends).max().unwrap_or(0);
    if hz == 0 || end <= start {
        return 0;
    }
    ((end - start) as u128 * 1_000_000_000 / u128::from(hz)) as u64
}

fn resource_profiles(
    data: &DataFile,
    pid: u32,
    by_kind: [Vec<proto::Sample>; KINDS.len()],
    period: Option<i64>,
    dict: &mut Dictionary,
    context: &OtlpContext,
) -> proto::ResourceProfiles {
    let duration_nano = duration_ns(data, pid);
    let time_unix_nano = context.end_unix_ns.saturating_sub(duration_nano);
    let profiles = KINDS
        .iter()
        .zip(by_kind)
        .filter(|(_, samples)| !samples.is_empty())
        .map(|(kind, samples)| {
            let sample_type = dict.value_type(kind.name, kind.unit);
            // Exact values are every call's: a period of one.
            let (period_type, period) = match period.filter(|_| kind.sampled) {
                Some(p) => (dict.value_type(KINDS[CPU].name, KINDS[CPU].unit), p),
                None => (sample_type, 1),
            };
            proto::Profile { sample_type: Some(sample_type), samples, time_unix_nano, duration_nano, period_type: Some(period_type), period, attribute_indices: Vec::new() }
        })
        .collect();
    let scope = proto::InstrumentationScope { name: "lopi".into(), version: env!("CARGO_PKG_VERSION").into() };
    proto::ResourceProfiles {
        resource: Some(proto::Resource { attributes: resource_attributes(data, pid, context) }),
        scope_profiles: vec![proto::ScopeProfiles { scope: Some(scope), profiles, schema_url: String::new() }],
        schema_url: String::new(),
    }
}

/// The process's attributes, by OpenTelemetry's semantic conventions, then the labels.
fn resource_attributes(data: &DataFile, pid: u32, context: &OtlpContext) -> Vec<proto::KeyValue> {
    let exe = data.records.iter().find(|r| r.pid == pid).or(data.records.first()).map_or("", |r| r.exe.as_str());
    let exe_name = exe.rsplit('/').next().unwrap_or(exe);
    let mut attributes: Vec<(String, AnyValue)> = Vec::new();
    let service = context.service.as_deref().unwrap_or(exe_name);
    attributes.push(("service.name".into(), AnyValue::string(service)));
    if let Some(host) = &context.host_name {
        attributes.push(("host.name".into(), AnyValue::string(host.as_str())));
    }
    attributes.push(("process.pid".into(), AnyValue::int(pid.into())));
    if !exe.is_empty() {
        attributes.push(("process.executable.name".into(), AnyValue::string(exe_name)));
        attributes.push(("process.executable.path".into(), AnyValue::string(exe)));
    }
    if let Some(id) = context.build_ids.get(exe) {
        attributes.push((BUILD_ID_GNU.into(), AnyValue::string(id.as_str())));
    }
    for (key, value) in &context.labels {
        attributes.retain(|(k, _)| k != key);
        attributes.push((key.clone(), AnyValue::string(value.as_str())));
    }
    attributes.into_iter().map(|(key, value)| proto::KeyValue { key, value: Some(value) }).collect()
}

#[cfg(test)]
mod tests;
