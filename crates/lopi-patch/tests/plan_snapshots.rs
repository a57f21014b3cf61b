//! Snapshots of the planner's plans: fixtures built at test time with the system's compiler,
//! planned for each probe kind and laid out as `lopi-image` would, each plan written as text
//! and compared with `tests/snapshots/NAME.txt`, so that a planner change shows as a diff.
//! Per function: its outcome, timing and counter, and each patch (entry, exit, `nop`, system
//! call), system-call site, block and instruction point at its offset from the function's
//! start; nothing that depends on where the trampolines go. `LOPI_UPDATE_SNAPSHOTS=1` writes
//! the snapshots anew (see `lopi-snapshot`).
use lopi_elf::{ElfModule, Svma};
use lopi_patch::blocks::implications;
use lopi_patch::{Action, Analysis, Filter, Layout, Measure, Outcome, PatchPlan, Place, PointError, ProbePoint, Probes, Selection, Stubs, TimingOutcome};
use lopi_snapshot::{Places, Snapshot};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// A probe kind the planner offers, as `--probe` asks for it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Count,
    /// Entries and exits, with a perturbation budget (so each timed function's switches show).
    Time,
    Syscall,
    Locks,
    Block,
    Coverage,
    /// Whether each function ran: a marking probe at its entry.
    EntryMark,
    /// A script's instruction points at the starts of `main`'s blocks (and one byte into it),
    /// and `main`'s counted entry running its probes.
    Points,
}

use Kind::*;

const ALL: &[Kind] = &[Count, Time, Syscall, Locks, Block, Coverage, EntryMark, Points];

impl Kind {
    fn probes(self) -> Probes {
        let none = Probes::NONE;
        match self {
            Count | Points => Probes::COUNT,
            Time => Probes::TIME,
            Syscall => none.with(Place::Syscalls, Measure::Time),
            Locks => none.with(Place::LockFunctions, Measure::Time),
            Block => none.with(Place::Blocks, Measure::Count),
            Coverage => none.with(Place::Blocks, Measure::Mark),
            EntryMark => none.with(Place::Entries, Measure::Mark),
        }
    }

    fn title(self) -> String {
        let extra = match self {
            Time => " (with a budget)",
            Points => " (script points in main)",
            _ => "",
        };
        format!("--probe {}{extra}", self.probes().name())
    }
}

/// Builds `fixtures/SOURCE` with `flags`, plans it for each of `kinds` and checks the result
/// against snapshot NAME.
fn check(name: &str, source: &str, flags: &[&str], kinds: &[Kind]) {
    let exe = lopi_snapshot::build(&scratch(), name, source, flags);
    let data = std::fs::read(&exe).expect("reading the built fixture");
    let title = format!("plans of fixtures/{source} built with {}", flags.join(" "));
    // The compiler's code, and libc6-dev's start files (`_start`) linked in.
    let tools = vec![lopi_snapshot::version_line(lopi_snapshot::compiler_of(source)), lopi_snapshot::version_line("ldd")];
    check_file(name, &title, tools, &data, kinds);
}

fn check_file(name: &str, title: &str, made_with: Vec<String>, data: &[u8], kinds: &[Kind]) {
    let body: String = kinds.iter().map(|&kind| section(data, kind)).collect::<Vec<_>>().join("\n");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    Snapshot { dir: &dir, name, title, made_with }.check(&body);
}

fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-snapshots");
    std::fs::create_dir_all(&dir).expect("creating the scratch directory");
    dir
}

/// One kind's plan, as text.
fn section(data: &[u8], kind: Kind) -> String {
    let mut module = ElfModule::parse(data).expect("the fixture parses");
    let analysis = lopi_patch::analyse(&mut module);
    let mut selection = lopi_patch::select(&module, &analysis, &Filter::default(), kind.probes());
    let refused = if kind == Points { add_points(&module, &analysis, &mut selection) } else { Vec::new() };
    let layout = layout(&module, &selection, kind == Time);
    let plan = selection.lay_out(&module, layout);
    format!("== {}\n{}", kind.title(), render(&module, &plan, &refused))
}

/// Where `lopi_image::build` would put the counters, stubs and trampolines: after the module
/// (only whether the trampolines are in `jmp rel32` range of the code matters here, and they
/// are, as in an image; no address of them is shown).
fn layout(module: &ElfModule<'_>, selection: &Selection, budget: bool) -> Layout {
    let base = lopi_rt_abi::page_align(module.end_of_image().0);
    let stub = |k: u64| Svma(base + 0x10_0000 + 0x100 * k);
    let stubs = (selection.has_timing() || selection.has_syscalls() || selection.has_points()).then(|| Stubs {
        enter: stub(0),
        exit: stub(1),
        syscall_enter: stub(2),
        syscall_exit: stub(3),
        lock_enter: stub(4),
        lock_exit: stub(5),
        point: stub(6),
    });
    Layout {
        trampolines: Svma(base + 0x20_0000),
        counters: Svma(base),
        vars: Svma(base + 0x4_0000),
        rseq_table: Svma(base + 0x5_0000),
        modes: Svma(base + 0x8_0000),
        stride: 0x4_0000,
        stubs,
        budget,
        retire_stub: Some(stub(7)),
        dispatch: false,
    }
}

/// Asks for a probe at each start of `main`'s blocks but its entry, and one byte into `main`,
/// one at a time, and for `main`'s entry to run its probes; returns the refusals: address and
/// why.
fn add_points(module: &ElfModule<'_>, analysis: &Analysis, selection: &mut Selection) -> Vec<(u64, String)> {
    let Some(main) = module.functions.iter().position(|f| f.name == "main") else { return Vec::new() };
    let only_main = Filter { include: vec![glob::Pattern::new("main").expect("a glob")], exclude: Vec::new() };
    let graph = lopi_patch::select(module, analysis, &only_main, Probes::NONE.with(Place::Blocks, Measure::Count));
    let entry = module.functions[main].addr.0;
    let starts = graph.blocks.iter().flat_map(|f| f.blocks.iter().flatten().map(|(b, _)| b.start)).filter(|&s| s != entry);
    let mut refused = Vec::new();
    for at in std::iter::once(entry + 1).chain(starts) {
        if let Err(e) = selection.add_points(module, analysis, &[at]) {
            refused.push((at, point_error(&e)));
        }
    }
    selection.probe_entries([main]);
    refused
}

/// A point's refusal without its addresses (which the line gives relative to its function).
fn point_error(e: &PointError) -> String {
    match e {
        PointError::NoFunction(_) => "no-function".into(),
        PointError::ColdFragment(_) => "cold-fragment".into(),
        PointError::NotAnInstruction(..) => "not-an-instruction".into(),
        PointError::NoGraph(_, r) => format!("no-graph {}", r.key()),
        PointError::Shared(_) => "shared".into(),
        PointError::Skipped(_, r) => r.key().into(),
    }
}

/// What one code patch is, as far as the plan tells: the planner's sites are private, so a
/// patch is an entry's or a block's by its address, a `nop` by its byte, a system-call site's
/// when it covers a `syscall` probed by a site of its own, and otherwise an exit's (their
/// number is shown beside `PatchPlan::exit_sites`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    Entry,
    Block,
    Bounce,
    Nop,
    Syscall,
    Exit,
}

fn render(module: &ElfModule<'_>, plan: &PatchPlan, refused: &[(u64, String)]) -> String {
    let functions = &module.functions;
    let places = Places::new(functions.iter().map(|f| f.addr.0).collect());
    let owner = |addr: u64| places.owner(addr).map(|(f, _)| f);
    // Lines per function in address order (then by kind), each led by its offset.
    let mut lines: BTreeMap<usize, Vec<(u64, u8, String)>> = BTreeMap::new();
    let mut strays: Vec<String> = Vec::new();
    let mut add = |at: u64, rank: u8, text: String| match owner(at) {
        Some(f) => lines.entry(f).or_default().push((at, rank, format!("{} {text}", places.rel(f, at)))),
        None => strays.push(format!("{at:#x} {text}")),
    };

    let entries: HashSet<u64> = plan.probes.iter().filter_map(|p| if let ProbePoint::Entry { patch_at, .. } = p.point { Some(patch_at.0) } else { None }).collect();
    let blocks: HashSet<u64> = plan.probes.iter().filter_map(|p| if let ProbePoint::Block { patch_at, .. } = p.point { Some(patch_at.0) } else { None }).collect();
    let probed_syscalls: Vec<u64> = plan.syscalls.iter().filter(|s| matches!(s.outcome, Outcome::Probed(_))).map(|s| s.at.0).collect();
    let bounces: HashSet<u64> = plan.code_patches.iter().filter_map(|p| bounce_of(p.at.0, &p.bytes)).collect();
    let mut exits = 0;
    for p in &plan.code_patches {
        let at = p.at.0;
        let end = at + p.bytes.len() as u64;
        let kind = if entries.contains(&at) {
            PatchKind::Entry
        } else if blocks.contains(&at) {
            PatchKind::Block
        } else if bounces.contains(&at) {
            PatchKind::Bounce
        } else if p.bytes == [0x90] {
            PatchKind::Nop
        } else if probed_syscalls.iter().any(|&s| (at..end).contains(&s)) {
            PatchKind::Syscall
        } else {
            PatchKind::Exit
        };
        let name = match kind {
            // Shown with their function's entry, their block, or the jump that reaches them.
            PatchKind::Block | PatchKind::Bounce => continue,
            PatchKind::Entry => "patch entry",
            PatchKind::Nop => "patch nop",
            PatchKind::Syscall => "patch syscall-site",
            PatchKind::Exit => {
                exits += 1;
                "patch exit"
            }
        };
        let jump = jump_text(&places, owner(at), at, &p.bytes);
        add(at, 1, format!("{name} {jump}"));
    }

    let syscall_counters: HashMap<u64, u32> = plan.probes.iter().filter_map(|p| if let ProbePoint::Syscall { at, .. } = p.point { Some((at.0, p.counter)) } else { None }).collect();
    for s in &plan.syscalls {
        let nr = s.nr.map_or("?".to_string(), |n| n.to_string());
        let counter = syscall_counters.get(&s.at.0).map_or(String::new(), |c| format!(" #{c}"));
        let outcome = match s.outcome {
            Outcome::Probed(t) => format!("probed {}{counter}", t.name()),
            Outcome::Moved => format!("moved{counter}"),
            Outcome::Skipped(r) => format!("skipped {}", r.key()),
            Outcome::NotSelected => "not selected".to_string(),
        };
        add(s.at.0, 2, format!("syscall nr {nr}: {outcome}"));
    }

    // Blocks' probes by start: (patch address, counter, action).
    let block_probes: HashMap<u64, (u64, u32, Action)> = plan
        .probes
        .iter()
        .filter_map(|p| match p.point {
            ProbePoint::Block { start, patch_at, .. } if p.action != Action::Probe => Some((start.0, (patch_at.0, p.counter, p.action))),
            _ => None,
        })
        .collect();
    for fb in &plan.blocks {
        let f = fb.function;
        let list = match &fb.blocks {
            Ok(list) => list,
            Err(reason) => {
                add(fb.entry, 3, format!("blocks unknown: {}", reason.key()));
                continue;
            }
        };
        let implied = implications(fb);
        for (b, outcome) in list {
            let what = match outcome {
                Outcome::Probed(t) => match block_probes.get(&b.start) {
                    Some(&(patch_at, counter, block_action)) => {
                        let action = if block_action == Action::Mark { "mark" } else { "count" };
                        let at = if patch_at == b.start { String::new() } else { format!(", patch at {}", places.rel(f, patch_at)) };
                        let bounce = plan.code_patches.iter().find(|c| c.at.0 == patch_at).and_then(|c| bounce_of(c.at.0, &c.bytes));
                        let bounce = bounce.map_or(String::new(), |to| format!(", bounce at {}", places.rel(f, to)));
                        format!("probed {} #{counter} {action}{at}{bounce}", t.name())
                    }
                    None => format!("{} (no probe in the plan)", t.name()),
                },
                Outcome::Skipped(r) => {
                    let by = implied.get(&b.start).filter(|i| !i.by.is_empty());
                    let by = by.map_or(String::new(), |i| format!(", implied by {}", i.by.iter().map(|&a| places.rel(f, a)).collect::<Vec<_>>().join(" ")));
                    format!("skipped {}{by}", r.key())
                }
                Outcome::Moved => "moved".to_string(),
                Outcome::NotSelected => "not selected".to_string(),
            };
            let end = places.rel(f, b.end);
            add(b.start, 3, format!("block ..{end} {} insns: {what}", b.instructions));
        }
    }

    for p in plan.probes.iter().filter(|p| p.action == Action::Probe) {
        if let ProbePoint::Block { patch_at, tactic, .. } = p.point {
            add(patch_at.0, 4, format!("point #{} {}", p.counter, tactic.name()));
        }
    }
    for (at, why) in refused {
        add(*at, 4, format!("point refused: {why}"));
    }

    for sp in &plan.switch_patches {
        let Some(f) = plan.probes.get(sp.counter as usize).and_then(|p| p.entry_of()) else { continue };
        let swaps: Vec<String> = sp.swaps().map(|s| format!("{}:{}", places.rel(f, s.at.0), s.bytes.len())).collect();
        add(functions[f].addr.0, 5, format!("switch swaps (offset:bytes) {}", swaps.join(" ")));
    }

    let probed: HashMap<usize, &lopi_patch::Probe> = plan.probes.iter().filter_map(|p| Some((p.entry_of()?, p))).collect();
    let mut out = counters_line(plan, exits);
    for (f, function) in functions.iter().enumerate() {
        let mut head = Vec::new();
        match plan.outcomes[f] {
            Outcome::Probed(t) => head.push(format!("probed {}", t.name())),
            Outcome::Moved => head.push("moved".into()),
            Outcome::Skipped(r) => head.push(format!("skipped {}", r.key())),
            Outcome::NotSelected => {}
        }
        match plan.timing[f] {
            TimingOutcome::Off => {}
            TimingOutcome::Timed => head.push("timed".into()),
            TimingOutcome::Untimed(r) => head.push(format!("untimed {}", r.key())),
        }
        if let Some(p) = probed.get(&f) {
            head.push(format!("#{} {}", p.counter, action(p.action)));
        }
        let mut body = lines.remove(&f).unwrap_or_default();
        if head.is_empty() && body.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{}:{}{}", function.name, if head.is_empty() { "" } else { " " }, head.join(", "));
        body.sort();
        for (_, _, line) in body {
            let _ = writeln!(out, "  {line}");
        }
    }
    for line in strays {
        let _ = writeln!(out, "before every function: {line}");
    }
    out
}

/// The counter ranges, in counter order, and the exit sites: as the plan counts them, and the
/// patches taken for theirs (two sites at one address make one patch).
fn counters_line(plan: &PatchPlan, exit_patches: usize) -> String {
    let f = plan.probes.iter().filter(|p| matches!(p.point, ProbePoint::Entry { .. })).count();
    let s = f + plan.probes.iter().filter(|p| matches!(p.point, ProbePoint::Syscall { .. })).count();
    let b = plan.probes.len();
    format!("counters: functions #0..{f}, system calls #{f}..{s}, blocks and points #{s}..{b}; exit sites {} ({exit_patches} patches); patches {}\n", plan.exit_sites, plan.code_patches.len())
}

fn action(a: Action) -> String {
    match a {
        Action::Count => "count".into(),
        Action::Time => "time".into(),
        Action::Lock(op) => format!("lock {}", lopi_rt_abi::lock_name::Op::from_u8(op).map_or("?", |o| o.name())),
        Action::Mark => "mark".into(),
        Action::Probe => "probe".into(),
    }
}

/// Where a `jmp rel8` at `at` lands (its bounce).
fn bounce_of(at: u64, bytes: &[u8]) -> Option<u64> {
    match bytes {
        [0xeb, rel, ..] => Some((at + 2).wrapping_add(*rel as i8 as u64)),
        _ => None,
    }
}

/// A patch's jump: `jmp32 5` or `jmp8 2 bounce +0x2e` (length covered, with its int3 filler).
fn jump_text(places: &Places, owner: Option<usize>, at: u64, bytes: &[u8]) -> String {
    match (bounce_of(at, bytes), owner) {
        (Some(to), Some(f)) => format!("jmp8 {} bounce {}", bytes.len(), places.rel(f, to)),
        (Some(to), None) => format!("jmp8 {} bounce {to:#x}", bytes.len()),
        (None, _) if bytes.first() == Some(&0xe9) => format!("jmp32 {}", bytes.len()),
        (None, _) => format!("bytes {}", bytes.len()),
    }
}

/// The compiler configurations: -O0 and -O2, position independent.
const O0: &[&str] = &["-O0", "-fPIE", "-pie"];
const O2: &[&str] = &["-O2", "-fPIE", "-pie"];

/// One test per snapshot: `test_name: (NAME, SOURCE, FLAGS, KINDS)`.
macro_rules! snapshots {
    ($($test:ident: ($name:literal, $source:literal, $flags:expr, $kinds:expr)),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check($name, $source, $flags, $kinds);
            }
        )*
    };
}

snapshots! {
    tiny_o0: ("tiny-O0", "tiny.c", O0, ALL),
    tiny_o2: ("tiny-O2", "tiny.c", O2, ALL),
    tailcall_o2: ("tailcall-O2", "tailcall.c", O2, ALL),
    jumptable_o2: ("jumptable-O2", "jumptable.c", O2, ALL),
    jumptable_o3_cet: ("jumptable-O3-cet", "jumptable.c", &["-O3", "-fPIE", "-pie", "-fcf-protection=full"], ALL),
    recursion_o0: ("recursion-O0", "recursion.c", O0, ALL),
    recursion_o2: ("recursion-O2", "recursion.c", O2, ALL),
    own_address_o2: ("own_address-O2", "own_address.c", O2, ALL),
    syscalls_redzone_o2: ("syscalls-redzone-O2", "syscalls/redzone.c", O2, &[Count, Time, Syscall, Points]),
    locks_mutex_hold_o2: ("locks-mutex_hold-O2", "locks/mutex_hold.c", O2, &[Count, Time, Locks]),
    exceptions_o2: ("exceptions-O2", "exceptions.cpp", O2, ALL),
}

/// The system's libc, whose lock functions `--probe locks` probes: its snapshot depends on the
/// C library's build, not the compiler.
#[test]
fn libc_locks() {
    let path = lopi_snapshot::system_libc();
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    check_file("libc-locks", "the plan of the system's libc.so.6 for its lock functions", vec![lopi_snapshot::version_line("ldd")], &data, &[Locks]);
}
