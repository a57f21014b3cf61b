//! Cold fragments that `.eh_frame` alone takes for functions. GCC moves unlikely code of a
//! function into a `.cold` part with its own FDE; when the function had no frame where it
//! jumped out, the CFA at the part's start is `rsp+8`, as at a function entry, and a stripped
//! file has no `.cold` symbol to tell them apart.
//!
//! The rule: a function found only from an FDE (no symbol) is a fragment of function F when
//! - nothing calls it or takes its address (direct calls; `lea` and other rip-relative
//!   operands; absolute constants in non-PIC code; symbols, relocations, data words, the entry
//!   point, see [`ElfModule::referenced_from_data`]);
//! - the code before it ends right at its start, or it starts a code section (compilers pad
//!   function entries to an alignment; `.cold` sections are not aligned, and the linker puts
//!   them first in `.text`), and at a 16-byte boundary at least one conditional jump enters it
//!   (a tail call's `jmp` alone is not enough there);
//! - every direct jump into it comes from F or from F's fragments.
//!
//! A real function that only F reaches, by tail jumps, unaligned and right after other code
//! (cold functions, `-Os` builds) looks the same and is merged too: its calls count as F's, and
//! its time is F's.
use crate::targets::Targets;
use lopi_elf::{ElfModule, FunctionSource, Svma};
use std::collections::{BTreeSet, HashSet};

/// A stretch of code with a known start.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Function,
    Fragment,
    /// FDE-only function that may be a fragment.
    Candidate,
}

struct Region {
    start: u64,
    end: u64,
    kind: Kind,
    /// The code before it ends right at its start, or it starts its section: no alignment
    /// padding in between.
    adjacent: bool,
}

/// Up to two distinct roots reaching a region (two are enough to say "not one"); `None`
/// stands for code outside every known region.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Roots([Option<Option<usize>>; 2]);

impl Roots {
    /// Adds `root`; true when the set changed.
    fn add(&mut self, root: Option<usize>) -> bool {
        match self.0 {
            [None, _] => self.0[0] = Some(root),
            [Some(a), None] if a != root => self.0[1] = Some(root),
            _ => return false,
        }
        true
    }

    /// The single known function reaching the region, if exactly one does.
    fn single(&self) -> Option<usize> {
        match self.0 {
            [Some(Some(f)), None] => Some(f),
            _ => None,
        }
    }
}

/// Moves the candidates that are fragments from `module.functions` to `module.fragments`;
/// returns their addresses.
pub(crate) fn recognise(module: &mut ElfModule<'_>, targets: &Targets) -> Vec<u64> {
    let candidates: BTreeSet<u64> =
        module.functions.iter().filter(|f| f.source == FunctionSource::EhFrame).map(|f| f.addr.0).collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let mut taken = module.referenced_from_data(&candidates);
    taken.extend(candidates.iter().filter(|a| targets.calls.contains(a) || targets.referenced.contains(a)));

    let regions = regions(module, &candidates);
    let region_of = |addr: u64| {
        let i = regions.partition_point(|r| r.start <= addr).checked_sub(1)?;
        (addr < regions[i].end).then_some(i)
    };
    // Jumps into fragments and candidates, by the region they come from (`None`: unknown code).
    let mut edges: Vec<(Option<usize>, usize)> = Vec::new();
    let mut conditional = vec![false; regions.len()];
    for jump in &targets.jumps {
        let Some(to) = region_of(jump.to).filter(|&r| regions[r].kind != Kind::Function) else { continue };
        let from = region_of(jump.from);
        if from != Some(to) {
            edges.push((from, to));
            conditional[to] |= jump.conditional;
        }
    }
    edges.sort_unstable();
    edges.dedup();

    // Compilers align function entries, with padding; `.cold` parts follow the code before
    // them directly (their sections are not aligned), and are entered by the unlikely side of
    // a conditional jump: at a 16-byte boundary, where a function may also follow code
    // directly, a part reached only by `jmp` (a tail call's shape) stays a function.
    let mut is_function: Vec<bool> = regions
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let aligned_tail = r.start % 16 == 0 && !conditional[i];
            r.kind == Kind::Function || (r.kind == Kind::Candidate && (taken.contains(&r.start) || !r.adjacent || aligned_tail))
        })
        .collect();
    // Each round may turn candidates into functions, which then root what they reach.
    loop {
        let roots = propagate(&edges, &is_function, regions.len());
        let mut changed = false;
        for (i, r) in regions.iter().enumerate() {
            if r.kind == Kind::Candidate && !is_function[i] && roots[i].single().is_none() {
                is_function[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let moved: Vec<u64> =
        regions.iter().zip(&is_function).filter(|(r, &f)| r.kind == Kind::Candidate && !f).map(|(r, _)| r.start).collect();
    move_to_fragments(module, &moved);
    moved
}

/// Moves the functions at `starts` to the fragments (what [`recognise`] found, applied again
/// to a module parsed anew). Addresses that name no function are ignored.
pub(crate) fn move_to_fragments(module: &mut ElfModule<'_>, starts: &[u64]) {
    let moved: HashSet<u64> = starts.iter().copied().collect();
    let mut fragments = Vec::with_capacity(moved.len());
    module.functions.retain(|f| {
        let keep = !moved.contains(&f.addr.0);
        if !keep {
            fragments.push((f.addr, f.size));
        }
        keep
    });
    module.fragments.extend(fragments);
    module.fragments.sort_unstable_by_key(|f| f.0);
}

/// Every function, fragment and candidate, by start; a region ends at its size or at the
/// next start, whichever comes first (as the planner bounds functions).
fn regions(module: &ElfModule<'_>, candidates: &BTreeSet<u64>) -> Vec<Region> {
    let mut starts: Vec<(u64, u64, Kind)> = module
        .functions
        .iter()
        .map(|f| (f.addr.0, f.size, if candidates.contains(&f.addr.0) { Kind::Candidate } else { Kind::Function }))
        .chain(module.fragments.iter().map(|&(Svma(a), n)| (a, n, Kind::Fragment)))
        .collect();
    starts.sort_unstable_by_key(|s| s.0);
    starts.dedup_by_key(|s| s.0);
    (0..starts.len())
        .map(|i| {
            let (start, size, kind) = starts[i];
            let next = starts.get(i + 1).map_or(u64::MAX, |s| s.0);
            let end = if size == 0 { next } else { (start + size).min(next) };
            let after_code = i.checked_sub(1).is_some_and(|p| starts[p].1 != 0 && starts[p].0 + starts[p].1 == start);
            let adjacent = after_code || module.code_sections.iter().any(|s| s.addr.0 == start);
            Region { start, end, kind, adjacent }
        })
        .collect()
}

/// Which functions reach each non-function region through jumps that pass only through
/// non-function regions.
fn propagate(edges: &[(Option<usize>, usize)], is_function: &[bool], n: usize) -> Vec<Roots> {
    let mut roots = vec![Roots::default(); n];
    let mut successors: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut work = Vec::new();
    for &(from, to) in edges {
        if is_function[to] {
            continue;
        }
        match from {
            Some(f) if !is_function[f] => successors[f].push(to),
            root => {
                if roots[to].add(root) {
                    work.push(to);
                }
            }
        }
    }
    while let Some(r) = work.pop() {
        let mine = roots[r];
        for &s in &successors[r] {
            let mut changed = false;
            for root in mine.0.iter().flatten() {
                changed |= roots[s].add(*root);
            }
            if changed {
                work.push(s);
            }
        }
    }
    roots
}
