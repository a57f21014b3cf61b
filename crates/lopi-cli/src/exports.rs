//! `lopi flamegraph` and `lopi export`: a data file's timed profile in other tools' formats.
use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use crate::names::Namer;
use crate::otlp::ResourceArgs;
use lopi_trace::{DataFile, LockProfile, Timing, Weight};
use std::path::Path;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum WeightArg {
    /// Self time.
    Time,
    /// Calls.
    Calls,
}

impl From<WeightArg> for Weight {
    fn from(w: WeightArg) -> Weight {
        match w {
            WeightArg::Time => Weight::SelfTime,
            WeightArg::Calls => Weight::Calls,
        }
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum ExportFormat {
    /// pprof's profile.proto (go tool pprof, Speedscope, Grafana Pyroscope).
    Pprof,
    /// Chrome's trace-event JSON (Perfetto, chrome://tracing); needs a record made with --trace.
    Chrome,
    /// Folded stacks, one call path a line (flamegraph.pl, inferno, Speedscope).
    Folded,
    /// An OTLP profiles request (protobuf), as `lopi push` sends it: OpenTelemetry Collector.
    Otlp,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum ProfileArg {
    /// Calls and self time per call path.
    Cpu,
    /// Lock acquisitions: contentions, delay (wait), hold time, acquisitions.
    Mutex,
    /// Every wait: lock acquisitions, semaphore, condition and barrier waits, joins.
    Block,
}

pub(crate) fn flamegraph(data: &Path, output: &Path, weight: WeightArg, title: Option<String>) -> Result<()> {
    let timing = load(data, output)?;
    let title = title.unwrap_or_else(|| {
        let what = match weight {
            WeightArg::Time => "self time",
            WeightArg::Calls => "calls",
        };
        format!("{} ({what})", data.display())
    });
    let svg = lopi_trace::flamegraph_svg(&timing, weight.into(), &title)?;
    let stacks = lopi_trace::folded(&timing, weight.into()).lines().count();
    write(output, &svg, &format!("{stacks} stacks"))
}

/// `lopi export`'s options besides the data file and the output.
pub(crate) struct ExportOptions {
    pub(crate) format: ExportFormat,
    pub(crate) weight: Option<WeightArg>,
    pub(crate) profile: ProfileArg,
    pub(crate) resource: ResourceArgs,
}

pub(crate) fn export(data: &Path, output: &Path, options: ExportOptions) -> Result<()> {
    let ExportOptions { format, weight, profile, resource } = options;
    if weight.is_some() && format != ExportFormat::Folded {
        bail!("--weight applies to --format folded only");
    }
    if profile != ProfileArg::Cpu && format != ExportFormat::Pprof {
        bail!("--profile applies to --format pprof only");
    }
    if resource.given() && format != ExportFormat::Otlp {
        bail!("--service and --label apply to --format otlp only");
    }
    check_output(data, output)?;
    let file = crate::files::read_data(data)?;
    let mut namer = Namer::new(&file.maps);
    let no_locks = || anyhow::anyhow!("{} has no lock waits for this profile: record the program with --probe locks (lopi run or attach)", data.display());
    let which = match profile {
        ProfileArg::Cpu => {
            // OTLP takes a record of counts alone too: its calls.
            let timing = match format {
                ExportFormat::Otlp => named_timing(&file, &mut namer).unwrap_or_default(),
                _ => timing_of(data, &file, &mut namer)?,
            };
            let otlp = OtlpSource { data, file: &file, namer: &mut namer, resource: &resource };
            let (bytes, summary) = render(&timing, format, weight.unwrap_or(WeightArg::Time), otlp)
                .map_err(|e| match e.downcast_ref::<lopi_trace::ExportError>() {
                    Some(lopi_trace::ExportError::NoTraceEvents) => anyhow::anyhow!("{} has no trace events: record the program with --trace (lopi run, rewrite or attach)", data.display()),
                    _ => e,
                })?;
            return write(output, &bytes, &summary);
        }
        ProfileArg::Mutex => LockProfile::Mutex,
        ProfileArg::Block => LockProfile::Block,
    };
    // Lock waits are lock frames in the threads' trees: without trees, there are none.
    let timing = timing_of(data, &file, &mut namer).map_err(|_| no_locks())?;
    let mut site = |pid, ret| lopi_trace::SiteFrame { name: namer.site(pid, ret), place: namer.place(pid, ret).map(|p| (p.path, p.vaddr)) };
    let Some(bytes) = lopi_trace::lock_pprof(&file, &timing, which, &mut site) else {
        return Err(no_locks());
    };
    let locks = timing.functions.iter().filter(|f| f.lock.is_some()).count();
    write(output, &bytes, &format!("{locks} lock operations, {} threads", timing.threads.len()))
}

/// What the OTLP export reads besides the timed profile.
struct OtlpSource<'a> {
    data: &'a Path,
    file: &'a DataFile,
    namer: &'a mut Namer,
    resource: &'a ResourceArgs,
}

/// The file's bytes and what they hold, for the summary line.
fn render(timing: &Timing, format: ExportFormat, weight: WeightArg, otlp: OtlpSource) -> Result<(Vec<u8>, String)> {
    Ok(match format {
        ExportFormat::Pprof => {
            let summary = format!("{} functions, {} threads", timing.functions.len(), timing.threads.len());
            (lopi_trace::pprof(timing), summary)
        }
        ExportFormat::Chrome => {
            let trace = lopi_trace::chrome_trace(timing)?;
            let events = trace.trace_events.len();
            (serde_json::to_vec(&trace)?, format!("{events} events"))
        }
        ExportFormat::Folded => {
            let text = lopi_trace::folded(timing, weight.into());
            let stacks = text.lines().count();
            (text.into_bytes(), format!("{stacks} stacks"))
        }
        ExportFormat::Otlp => {
            let encoded = crate::otlp::encode(otlp.data, otlp.file, timing, otlp.namer, otlp.resource)?;
            (encoded.bytes, encoded.summary)
        }
    })
}

fn load(data: &Path, output: &Path) -> Result<Timing> {
    check_output(data, output)?;
    let file = crate::files::read_data(data)?;
    timing_of(data, &file, &mut Namer::new(&file.maps))
}

/// Checked before any work: the output replaces whatever file it names.
fn check_output(data: &Path, output: &Path) -> Result<()> {
    if crate::rewrite::same_file(data, output) {
        bail!("refusing to overwrite the input {}; choose another -o", data.display());
    }
    Ok(())
}

/// The timed profile, its lock calls named after their locks (`pthread_mutex_lock(hold_lock)`,
/// `pthread_create(worker_main)`).
fn timing_of(data: &Path, file: &DataFile, namer: &mut Namer) -> Result<Timing> {
    let Some(timing) = named_timing(file, namer) else {
        bail!("{} has no timing data: record the program with --probe entry,exit (lopi run, rewrite or attach)", data.display());
    };
    Ok(timing)
}

/// [`timing_of`], `None` when the file has no timing data.
pub(crate) fn named_timing(file: &DataFile, namer: &mut Namer) -> Option<Timing> {
    let mut timing = Timing::from_data(file)?;
    if timing.functions.iter().any(|f| f.lock.is_some()) {
        let names = crate::locks::lock_names(file, namer);
        for f in &mut timing.functions {
            let Some(l) = f.lock else { continue };
            let object = match l.op {
                lopi_rt_abi::lock_name::Op::ThreadCreate => Some(namer.describe(l.pid, l.addr)),
                op if op.kind() == lopi_rt_abi::lock_name::Kind::Thread => None,
                _ => names.get(&(l.pid, l.addr)).cloned(),
            };
            let function = lopi_trace::lock_function_name(l.op);
            f.name = object.map_or(function.clone(), |o| format!("{function}({o})"));
        }
    }
    Some(timing)
}

fn write(output: &Path, bytes: &[u8], summary: &str) -> Result<()> {
    lopi_rewrite::write_atomically(output, bytes, 0o644).with_context(|| format!("writing {}", output.display()))?;
    eprintln!("lopi: wrote {} ({summary})", output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lopi_trace::{ContextNode, EventKind, ThreadProfile, TimedFunction, TraceEvent};

    /// One thread that calls `main` once, for 1 µs, traced.
    fn timing() -> Timing {
        let node = |parent, function, calls, ns| ContextNode {
            parent,
            function,
            calls,
            total_ns: ns,
            self_ns: ns,
            max_ns: ns,
            merged: false,
            syscall: None,
            open: 0,
        };
        let event = |ns, kind| TraceEvent { ns, node: 1, kind };
        Timing {
            functions: vec![TimedFunction { name: "main".into(), module: "/bin/prog".into(), addr: 0x1000, syscall: None, lock: None }],
            threads: vec![ThreadProfile {
                pid: 7,
                tid: 7,
                nodes: vec![node(0, None, 0, 0.0), node(0, Some(0), 1, 1000.0)],
                events: vec![event(0.0, EventKind::Enter), event(1000.0, EventKind::Exit)],
                ..Default::default()
            }],
            probe_cost: Default::default(),
            syscall_sites: Vec::new(),
        }
    }

    #[test]
    fn renders_each_format() {
        let t = timing();
        let (file, mut namer, resource) = (DataFile::default(), Namer::new(&[]), ResourceArgs::default());
        let mut render = |format, weight| {
            let otlp = OtlpSource { data: Path::new("run.lopi"), file: &file, namer: &mut namer, resource: &resource };
            render(&t, format, weight, otlp)
        };
        let (bytes, summary) = render(ExportFormat::Folded, WeightArg::Time).expect("folded");
        assert_eq!((bytes.as_slice(), summary.as_str()), (&b"main 1000\n"[..], "1 stacks"));
        let (bytes, summary) = render(ExportFormat::Folded, WeightArg::Calls).expect("folded");
        assert_eq!((bytes.as_slice(), summary.as_str()), (&b"main 1\n"[..], "1 stacks"));
        let (bytes, summary) = render(ExportFormat::Chrome, WeightArg::Time).expect("chrome");
        let trace: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(trace["traceEvents"].as_array().map(Vec::len), Some(4));
        assert_eq!(summary, "4 events");
        let (bytes, summary) = render(ExportFormat::Pprof, WeightArg::Time).expect("pprof");
        assert!(!bytes.is_empty());
        assert_eq!(summary, "1 functions, 1 threads");
        let (bytes, summary) = render(ExportFormat::Otlp, WeightArg::Time).expect("otlp");
        let request = <lopi_trace::otlp::proto::ExportProfilesServiceRequest as prost::Message>::decode(bytes.as_slice()).expect("OTLP");
        assert_eq!(request.resource_profiles.len(), 1);
        assert_eq!(summary, "1 processes, 2 profiles, 2 samples");
    }

    #[test]
    fn data_without_timing_is_an_error() {
        let err = timing_of(Path::new("run.lopi"), &DataFile::default(), &mut Namer::new(&[])).expect_err("no timing");
        assert_eq!(err.to_string(), "run.lopi has no timing data: record the program with --probe entry,exit (lopi run, rewrite or attach)");
    }

    #[test]
    fn weight_is_for_folded_only() {
        let options = |format, weight, resource| ExportOptions { format, weight, profile: ProfileArg::Cpu, resource };
        let err = export(Path::new("run.lopi"), Path::new("out.pb"), options(ExportFormat::Pprof, Some(WeightArg::Calls), ResourceArgs::default()))
            .expect_err("weight with pprof");
        assert_eq!(err.to_string(), "--weight applies to --format folded only");
        let labelled = ResourceArgs { service: None, labels: vec![("env".into(), "prod".into())] };
        let err = export(Path::new("run.lopi"), Path::new("out.pb"), options(ExportFormat::Pprof, None, labelled)).expect_err("label with pprof");
        assert_eq!(err.to_string(), "--service and --label apply to --format otlp only");
    }
}
