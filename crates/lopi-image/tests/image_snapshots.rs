//! Snapshots of probe images: fixtures built at test time with the system's compiler, planned
//! and built into an image as `lopi rewrite` places it (after the module), each image's
//! layout written as text and compared with `tests/snapshots/NAME.txt`: its regions and what
//! they hold at offsets from the image's start, the descriptor, the counters of each probe
//! kind and the metadata's entries. The runtime blob's length is written `BLOB`, so that a
//! change of the runtime alone does not show here. `LOPI_UPDATE_SNAPSHOTS=1` writes the
//! snapshots anew (see `lopi-snapshot`).
use lopi_elf::ElfModule;
use lopi_image::{ModuleNames, ProbeImage, Recording, Request};
use lopi_patch::{Filter, Measure, Place, Probes};
use lopi_rt_abi::{ModuleDescriptor, DESCRIPTOR_LEN};
use lopi_snapshot::{Places, Snapshot};
use lopi_trace::{MetaAction, MetaPoint, ModuleMeta};
use std::fmt::Write;
use std::mem::offset_of;
use std::path::Path;

/// Bytes the static installer's entry code takes, and its header room: any fixed numbers do.
const ENTRY_ROOM: usize = 64;
const HEADER_ROOM: usize = 0x200;

/// Builds `fixtures/SOURCE` with `flags`, plans it for `probes` and builds its image with a
/// budget of `budget_ppm`; checks the image's layout against snapshot NAME.
fn check(name: &str, source: &str, flags: &[&str], probes: Probes, budget_ppm: u32) {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image-snapshots");
    std::fs::create_dir_all(&scratch).expect("creating the scratch directory");
    let exe = lopi_snapshot::build(&scratch, name, source, flags);
    let data = std::fs::read(&exe).expect("reading the built fixture");
    let budget = if budget_ppm > 0 { format!(", a budget of {budget_ppm} ppm") } else { String::new() };
    let title = format!("the probe image of fixtures/{source} built with {}, for --probe {}{budget}", flags.join(" "), probes.name());
    // The compiler's code, and libc6-dev's start files (`_start`) linked in.
    let made_with = vec![lopi_snapshot::version_line(lopi_snapshot::compiler_of(source)), lopi_snapshot::version_line("ldd")];
    check_file(name, source, &title, made_with, &data, probes, budget_ppm);
}

fn check_file(name: &str, source: &str, title: &str, made_with: Vec<String>, data: &[u8], probes: Probes, budget_ppm: u32) {
    let mut module = ElfModule::parse(data).expect("the file parses");
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &Filter::default(), probes);
    let names = ModuleNames { module: name.to_string(), source: source.to_string() };
    let request = Request {
        names: &names,
        recording: Recording { trace: false, budget_ppm, sample_hz: 0, syscall_log: false, catch_unprobed: false },
        at: lopi_rt_abi::page_align(module.end_of_image().0),
        entry_room: ENTRY_ROOM,
        header_room: HEADER_ROOM,
        fork_handlers: true,
        script: None,
    };
    let image = lopi_image::build(&module, selection, &request).expect("the image builds");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    Snapshot { dir: &dir, name, title, made_with }.check(&render(&module, &image));
}

/// A field of the image's descriptor, read where `ModuleDescriptor` has it.
fn descriptor_field(image: &ProbeImage, offset: usize) -> u64 {
    let at = (image.descriptor - image.rw.start) as usize + offset;
    u64::from_le_bytes(image.bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn render(module: &ElfModule<'_>, image: &ProbeImage) -> String {
    let plan = &image.plan;
    let layout = &plan.layout;
    let base = image.rw.start;
    let blob = lopi_rt_blob::BLOB.len().next_multiple_of(16) as u64;
    let field = |offset: usize| descriptor_field(image, offset);
    let mut out = String::new();

    // RW: counters, variables, rseq table, modes (no address of it depends on the blob).
    let rw_len = image.rw.end - base;
    let _ = writeln!(out, "rw +0x0, {rw_len:#x} bytes");
    let _ = writeln!(out, "  counters +{:#x}, {:#x} bytes, stride {:#x}", layout.counters.0 - base, field(offset_of!(ModuleDescriptor, counters_len)), layout.stride);
    let _ = writeln!(out, "  variables +{:#x}", layout.vars.0 - base);
    let used = plan.rseq_sections.iter().filter(|s| s.start != 0).count();
    let _ = writeln!(out, "  rseq table +{:#x}, {} entries ({used} with a critical section)", layout.rseq_table.0 - base, plan.rseq_sections.len());
    let _ = writeln!(out, "  modes +{:#x}", layout.modes.0 - base);

    // RX: the blob, the installer's entry code, the trampolines, from the region's start.
    let rx = image.rx.start;
    let _ = writeln!(out, "rx +{:#x}, BLOB+{:#x} bytes", rx - base, image.rx.end - rx - blob);
    let _ = writeln!(out, "  runtime blob +0x0, BLOB bytes");
    let _ = writeln!(out, "  entry code BLOB+{:#x}, {ENTRY_ROOM} bytes", image.entry_code - rx - blob);
    let stubs = if layout.stubs.is_some() { "with the runtime's stubs" } else { "without stubs" };
    let _ = writeln!(out, "  trampolines BLOB+{:#x}, {:#x} bytes, {stubs}", layout.trampolines.0 - rx - blob, plan.trampoline_code.len());

    // R: header room, descriptor, metadata, switch table, from the region's start.
    let r = image.r.start;
    let desc = image.descriptor;
    let meta_at = desc.wrapping_add(field(offset_of!(ModuleDescriptor, meta_offset)));
    let meta_len = field(offset_of!(ModuleDescriptor, meta_len));
    let _ = writeln!(out, "r after rx, page-aligned, {:#x} bytes", image.r.end - r);
    let _ = writeln!(out, "  header room +0x0, {HEADER_ROOM:#x} bytes");
    let _ = writeln!(out, "  descriptor +{:#x}, {DESCRIPTOR_LEN} bytes", desc - r);
    let _ = writeln!(out, "  metadata +{:#x}, {meta_len} bytes", meta_at - r);
    let switches = field(offset_of!(ModuleDescriptor, switches_offset));
    if switches != 0 {
        let at = desc.wrapping_add(switches);
        let _ = writeln!(out, "  switch table +{:#x}, {} bytes, {} functions", at - r, image.r.end - at, plan.switch_patches.len());
    }

    // The descriptor's other fields, and the counters of each probe kind in counter order.
    let count = field(offset_of!(ModuleDescriptor, counter_count));
    let probes = field(offset_of!(ModuleDescriptor, probes));
    let flags = [(lopi_rt_abi::PROBE_TIMING, "timing"), (lopi_rt_abi::PROBE_TRACE, "trace"), (lopi_rt_abi::MODULE_EXECUTABLE, "executable"), (lopi_rt_abi::PROBE_LOCKS, "locks")];
    let named: Vec<&str> = flags.iter().filter(|(bit, _)| probes & bit != 0).map(|(_, n)| *n).collect();
    let script = field(offset_of!(ModuleDescriptor, script_offset));
    let _ = writeln!(
        out,
        "descriptor: {count} counters, probes {probes:#x} ({}), budget {} ppm, samples {} Hz, {}",
        if named.is_empty() { "counts only".to_string() } else { named.join(" ") },
        field(offset_of!(ModuleDescriptor, budget_ppm)),
        field(offset_of!(ModuleDescriptor, sample_hz)),
        if script == 0 { "no script" } else { "a script" }
    );
    let f = plan.probes.iter().filter(|p| matches!(p.point, lopi_patch::ProbePoint::Entry { .. })).count();
    let s = f + plan.probes.iter().filter(|p| matches!(p.point, lopi_patch::ProbePoint::Syscall { .. })).count();
    let _ = writeln!(out, "counters: functions #0..{f}, system calls #{f}..{s}, blocks #{s}..{}", plan.probes.len());

    // The metadata the runtime and the readers find through the descriptor.
    let at = (meta_at - base) as usize;
    let meta = ModuleMeta::from_json(&image.bytes[at..at + meta_len as usize]).expect("the metadata reads");
    let places = Places::new(module.functions.iter().map(|f| f.addr.0).collect());
    let place = |addr: u64| match places.owner(addr) {
        Some((i, _)) => format!("{}{}", module.functions[i].name, places.rel(i, addr)),
        None => format!("{addr:#x}"),
    };
    // The function an entry names, when its address lies in another.
    let named = |addr: u64, name: &str| if place(addr).starts_with(&format!("{name}+")) { String::new() } else { format!(" (in {name:?})") };
    let marks = meta.probes.iter().any(|p| p.action == MetaAction::Mark);
    let _ = writeln!(out, "metadata: version {}, module {}, source {}, block marks {marks}", meta.version, meta.module, meta.source);
    for (i, p) in meta.probes.iter().enumerate() {
        let _ = match &p.point {
            MetaPoint::Entry(m) => {
                let at = if place(m.addr) == format!("{}+0x0", m.name) { String::new() } else { format!(" at {}", place(m.addr)) };
                writeln!(out, "  #{i} function {}{at}, {:#x} bytes{}", m.name, m.size, if p.action.timed() { ", timed" } else { "" })
            }
            MetaPoint::Syscall(m) => {
                let nr = m.nr.map_or("?".to_string(), |n| n.to_string());
                writeln!(out, "  #{i} system call {nr} at {}{}", place(m.addr), named(m.addr, &m.function))
            }
            MetaPoint::Block(m) => {
                let what = if p.action == MetaAction::Probe { "point" } else { "block" };
                writeln!(out, "  #{i} {what} {}..{}{}", place(m.addr), place(m.end), named(m.addr, &m.function))
            }
        };
    }
    for m in &meta.unprobed_blocks {
        let list = |v: &[u64]| v.iter().map(|&a| place(a)).collect::<Vec<_>>().join(" ");
        let exactly = if m.exactly { ", exactly" } else { "" };
        let _ = writeln!(out, "  unprobed block {}..{}: {}; implied by [{}], needs [{}]{exactly}", place(m.addr), place(m.end), m.reason, list(&m.implied_by), list(&m.needs));
    }
    out
}

const O2: &[&str] = &["-O2", "-fPIE", "-pie"];

#[test]
fn tiny_count() {
    check("tiny-O2-count", "tiny.c", O2, Probes::COUNT, 0);
}

#[test]
fn tiny_time_with_a_budget() {
    check("tiny-O2-time-budget", "tiny.c", O2, Probes::TIME, 50_000);
}

#[test]
fn redzone_entries_exits_syscalls_blocks() {
    let probes = Probes::TIME.with(Place::Syscalls, Measure::Time).with(Place::Blocks, Measure::Count);
    check("syscalls-redzone-O2-all", "syscalls/redzone.c", O2, probes, 0);
}

#[test]
fn jumptable_coverage() {
    let probes = Probes::NONE.with(Place::Blocks, Measure::Mark);
    check("jumptable-O3-cet-coverage", "jumptable.c", &["-O3", "-fPIE", "-pie", "-fcf-protection=full"], probes, 0);
}

/// The system's libc, whose lock functions `--probe locks` probes: its snapshot depends on the
/// C library's build, not the compiler.
#[test]
fn libc_locks() {
    let path = lopi_snapshot::system_libc();
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let probes = Probes::NONE.with(Place::LockFunctions, Measure::Time);
    check_file("libc-locks", "libc.so.6", "the probe image of the system's libc.so.6 for --probe locks", vec![lopi_snapshot::version_line("ldd")], &data, probes, 0);
}
