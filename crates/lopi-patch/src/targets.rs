//! Every address control flow may reach other than by falling through: direct branch and
//! call targets, code addresses taken by `lea` (computed goto, function pointers), jump
//! table entries and C++ exception landing pads. A patch must not cover any of them except at
//! its first byte. The same sweep records who reaches what (calls, jumps between functions,
//! code addresses named by operands), from which `fragments` tells cold parts from functions.
use crate::{Progress, Stage};
use lopi_elf::{ElfModule, ModuleKind, Svma};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Known code starts in one section, in address order; decoding restarts at each so that
/// data or padding cannot desynchronise the sweep for long.
fn resync_points(module: &ElfModule<'_>, start: u64, end: u64) -> Vec<u64> {
    let mut points: Vec<u64> = module
        .functions
        .iter()
        .map(|f| f.addr.0)
        .chain(module.fragments.iter().map(|f| f.0 .0))
        .filter(|&a| a >= start && a < end)
        .collect();
    points.push(start);
    points.sort_unstable();
    points.dedup();
    points
}

/// Branch targets of a module.
#[derive(Default)]
pub struct Targets {
    /// Every address reached other than by falling through.
    pub all: BTreeSet<u64>,
    /// Targets of direct branches (not calls) from the same function: loop heads.
    pub loops: BTreeSet<u64>,
    /// Targets reached by indirect jumps: jump-table entries and `lea`-taken labels.
    pub indirect: BTreeSet<u64>,
    /// Targets of direct calls.
    pub calls: HashSet<u64>,
    /// Direct jumps that leave the stretch of code between two known starts.
    pub jumps: Vec<Jump>,
    /// Code addresses named by instruction operands other than as a branch target (`lea`
    /// and other rip-relative operands; absolute constants in non-PIC files).
    pub referenced: HashSet<u64>,
    /// `syscall` instructions, in address order.
    pub syscalls: Vec<u64>,
    /// Jump tables whose reading stopped at an entry in code outside the function and its
    /// known fragments: read again once fragments are known.
    tables: Vec<Table>,
}

/// A direct jump.
#[derive(Clone, Copy)]
pub struct Jump {
    pub from: u64,
    pub to: u64,
    pub conditional: bool,
}

/// A jump table at `table` read from the code between `lo` and `hi`, whose reading stopped at
/// an entry for `stop`. A relative table's entries are offsets from `base`.
#[derive(Clone, Copy)]
struct Table {
    table: u64,
    base: u64,
    relative: bool,
    lo: u64,
    hi: u64,
    stop: u64,
}

impl Targets {
    pub fn contains(&self, addr: &u64) -> bool {
        self.all.contains(addr)
    }

    pub fn range(&self, r: std::ops::Range<u64>) -> std::collections::btree_set::Range<'_, u64> {
        self.all.range(r)
    }
}

/// Linear sweep of every code section, resynchronised at known function starts, plus the
/// landing pads the unwinder jumps to. Progress counts code bytes.
pub fn collect(module: &ElfModule<'_>, progress: &dyn Progress) -> Targets {
    let mut found = Found::default();
    found.all.extend(module.landing_pads.iter().map(|p| p.0));
    let total: u64 = module.code_sections.iter().map(|s| s.size).sum();
    let mut swept = 0;
    for section in &module.code_sections {
        let Some(bytes) = module.bytes_from(section.addr) else { continue };
        let (start, end) = (section.addr.0, section.addr.0 + section.size.min(bytes.len() as u64));
        let points = resync_points(module, start, end);
        for (i, &from) in points.iter().enumerate() {
            let to = points.get(i + 1).copied().unwrap_or(end);
            let code = &bytes[(from - start) as usize..(to - start) as usize];
            sweep(module, code, from, to, &mut found);
            if i % 256 == 0 {
                progress.update(Stage::Targets, swept + (from - start), total);
            }
        }
        swept += section.size;
    }
    Targets {
        all: found.all.into_set(),
        loops: found.loops.into_set(),
        indirect: found.indirect.into_set(),
        calls: found.calls.into_set().into_iter().collect(),
        jumps: found.jumps,
        referenced: found.referenced.into_set().into_iter().collect(),
        syscalls: {
            let mut s = found.syscalls;
            s.sort_unstable();
            s.dedup();
            s
        },
        tables: found.tables,
    }
}

impl Targets {
    /// Reads again the tables that stopped at code now known to be a fragment, after fragments
    /// moved from the functions (more entries may be parts of their function).
    pub fn reread_tables(&mut self, module: &ElfModule<'_>) {
        let mut found = Found::default();
        for t in std::mem::take(&mut self.tables) {
            if !in_fragment(module, t.stop) {
                continue;
            }
            if t.relative {
                let starts = (t.base != t.table).then(|| instruction_starts(module, t.lo, t.hi));
                relative_jump_table(module, t.table, t.base, t.lo, t.hi, starts.as_deref(), &mut found);
            } else {
                absolute_jump_table(module, t.table, t.lo, t.hi, &mut found);
            }
        }
        self.all.extend(found.all.into_set());
        self.indirect.extend(found.indirect.into_set());
    }
}

/// Targets as found, with repeats: a big program names the same targets millions of times
/// (consecutive jump tables are read together), and sorting now and then is far cheaper
/// than inserting each into a tree.
#[derive(Default)]
struct Found {
    all: Addresses,
    loops: Addresses,
    indirect: Addresses,
    calls: Addresses,
    jumps: Vec<Jump>,
    referenced: Addresses,
    syscalls: Vec<u64>,
    tables: Vec<Table>,
    /// Runs of absolute table slots that hold labels: first slot -> end.
    labels: BTreeMap<u64, u64>,
}

impl Found {
    fn indirect(&mut self, target: u64) {
        self.all.push(target);
        self.indirect.push(target);
    }

    /// The end of a known run of label slots that `slot` is one of.
    fn labels_at(&self, slot: u64) -> Option<u64> {
        let (&start, &end) = self.labels.range(..=slot).next_back()?;
        (slot < end && (slot - start).is_multiple_of(8)).then_some(end)
    }

    fn add_labels(&mut self, from: Option<u64>, to: u64) {
        if let Some(from) = from.filter(|&f| f < to) {
            self.labels.insert(from, to);
        }
    }
}

/// Addresses, deduplicated whenever repeats have doubled the list.
#[derive(Default)]
struct Addresses {
    list: Vec<u64>,
    unique: usize,
}

impl Addresses {
    fn push(&mut self, addr: u64) {
        self.list.push(addr);
        if self.list.len() > 2 * self.unique + 4096 {
            self.list.sort_unstable();
            self.list.dedup();
            self.unique = self.list.len();
        }
    }

    fn extend(&mut self, addrs: impl Iterator<Item = u64>) {
        addrs.for_each(|a| self.push(a));
    }

    fn into_set(mut self) -> BTreeSet<u64> {
        self.list.sort_unstable();
        self.list.dedup();
        self.list.into_iter().collect()
    }
}

fn sweep(module: &ElfModule<'_>, code: &[u8], from: u64, to: u64, targets: &mut Found) {
    let non_pic = module.kind == ModuleKind::Executable;
    // Read-only data the code names (possible tables) and labels of this code it takes with
    // `lea` (possible bases of their entries).
    let mut data = Vec::new();
    let mut labels = Vec::new();
    let mut starts = Vec::new();
    let mut ip = from;
    while ip < to {
        let offset = (ip - from) as usize;
        let Some(insn) = lopi_x86::decode_one(&code[offset..], ip) else {
            ip += 1;
            continue;
        };
        starts.push(ip);
        if lopi_x86::is_syscall(&insn) {
            targets.syscalls.push(ip);
        }
        if let Some(t) = lopi_x86::branch_target(&insn) {
            targets.all.push(t);
            let flow = lopi_x86::flow(&insn);
            if flow == lopi_x86::Flow::Call {
                targets.calls.push(t);
            } else if (from..to).contains(&t) {
                targets.loops.push(t);
            } else {
                targets.jumps.push(Jump { from: ip, to: t, conditional: flow == lopi_x86::Flow::ConditionalJump });
            }
        }
        if non_pic {
            for c in lopi_x86::absolute_constants(&insn) {
                if module.code_section_of(Svma(c)).is_some() {
                    targets.referenced.push(c);
                }
            }
        }
        if let Some(addr) = lopi_x86::rip_relative_address(&insn) {
            let in_code = module.code_section_of(Svma(addr)).is_some();
            if in_code {
                targets.referenced.push(addr);
            }
            if lopi_x86::is_lea(&insn) && in_code {
                targets.indirect(addr);
                if (from..to).contains(&addr) || in_fragment(module, addr) {
                    labels.push(addr);
                }
            } else if module.is_readonly_data(Svma(addr)) {
                data.push(addr);
            }
        }
        if let Some(table) = lopi_x86::absolute_table_base(&insn) {
            absolute_jump_table(module, table, from, to, targets);
        }
        ip += insn.len() as u64;
    }
    data.sort_unstable();
    data.dedup();
    labels.sort_unstable();
    labels.dedup();
    for &table in &data {
        relative_jump_table(module, table, table, from, to, None, targets);
        for &base in &labels {
            relative_jump_table(module, table, base, from, to, Some(&starts), targets);
        }
    }
}

/// A PIC jump table: 32-bit offsets from `base`, which is the table's own address in GCC's
/// switch tables, and a label of the code in a computed goto through label differences
/// (`&&do_x - &&do_base`: glibc's vfprintf), whose base the code takes with a `lea`; every
/// such label is tried. Entries are read while they land inside the current function or a
/// fragment (a `.cold` part may hold some cases); over-reading only adds targets, which only
/// makes the planner more careful. With `starts` (the code's instruction starts, in order),
/// an entry in the code must also start an instruction: most data read from a label that is
/// not its base (or past a table's end) lands inside one, and a false target inside an
/// instruction costs the probe of its block.
fn relative_jump_table(module: &ElfModule<'_>, table: u64, base: u64, lo: u64, hi: u64, starts: Option<&[u64]>, targets: &mut Found) {
    let Some(bytes) = module.bytes_from(Svma(table)) else { return };
    for entry in bytes.chunks_exact(4).take(4096) {
        let rel = i32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]);
        let target = base.wrapping_add(rel as i64 as u64);
        let inside = (lo..hi).contains(&target) && starts.is_none_or(|s| s.binary_search(&target).is_ok());
        if !inside && !in_fragment(module, target) {
            if module.code_section_of(Svma(target)).is_some() {
                targets.tables.push(Table { table, base, relative: true, lo, hi, stop: target });
            }
            break;
        }
        targets.indirect(target);
    }
}

/// Non-PIC jump table or computed-goto label table: absolute 64-bit addresses. Entries are
/// read while they are code addresses other than function entries (labels: the function's
/// own, or in its `.cold` part, which a stripped file may not tell apart from a function);
/// the first entry must be in the current function or a fragment. Data after a table rarely
/// looks like code addresses, and a false target only makes the planner more careful.
///
/// Tables usually follow one another, so a read runs on through the next ones (cc1: 8 M
/// entries read for 5,000 tables). Slots already found to hold labels, which are taken
/// whatever the function, are skipped: the targets are the same, read once.
fn absolute_jump_table(module: &ElfModule<'_>, table: u64, lo: u64, hi: u64, targets: &mut Found) {
    let Some(bytes) = module.bytes_from(Svma(table)) else { return };
    let count = (bytes.len() / 8).min(4096);
    let slot = |i: usize| table.wrapping_add(8 * i as u64);
    let mut labels_from = None;
    let mut i = 0;
    while i < count {
        if let Some(end) = targets.labels_at(slot(i)).filter(|_| i > 0) {
            targets.add_labels(labels_from.take(), slot(i));
            i = (end.wrapping_sub(table) / 8) as usize;
            continue;
        }
        let target = u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
        if (lo..hi).contains(&target) || in_fragment(module, target) {
            targets.add_labels(labels_from.take(), slot(i));
        } else if i > 0 && module.code_section_of(Svma(target)).is_some() && !is_function_entry(module, target) {
            labels_from.get_or_insert(slot(i));
        } else {
            if module.code_section_of(Svma(target)).is_some() {
                targets.tables.push(Table { table, base: table, relative: false, lo, hi, stop: target });
            }
            break;
        }
        targets.indirect(target);
        i += 1;
    }
    targets.add_labels(labels_from, slot(i));
}

/// The instruction starts of the code between `lo` and `hi`, decoded as the sweep does.
fn instruction_starts(module: &ElfModule<'_>, lo: u64, hi: u64) -> Vec<u64> {
    let Some(bytes) = module.bytes_from(Svma(lo)) else { return Vec::new() };
    let code = &bytes[..bytes.len().min((hi - lo) as usize)];
    let mut starts = Vec::new();
    let mut offset = 0;
    while offset < code.len() {
        match lopi_x86::decode_one(&code[offset..], lo + offset as u64) {
            Some(insn) => {
                starts.push(lo + offset as u64);
                offset += insn.len();
            }
            None => offset += 1,
        }
    }
    starts
}

fn in_fragment(module: &ElfModule<'_>, addr: u64) -> bool {
    let i = module.fragments.partition_point(|f| f.0 .0 <= addr);
    i > 0 && addr < module.fragments[i - 1].0 .0 + module.fragments[i - 1].1
}

fn is_function_entry(module: &ElfModule<'_>, addr: u64) -> bool {
    module.functions.binary_search_by_key(&addr, |f| f.addr.0).is_ok()
}
