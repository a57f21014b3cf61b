//! What the planner knows of the module's functions besides their list: where each ends, the
//! names it answers to, and where code starts.
use lopi_elf::ElfModule;

/// Where each function ends: at its size, or at the next known start of code.
pub(crate) fn function_ends(module: &ElfModule<'_>) -> Vec<u64> {
    let starts = code_starts(module, std::iter::empty());
    module
        .functions
        .iter()
        .map(|function| {
            let next_start = starts.get(starts.partition_point(|&s| s <= function.addr.0)).copied().unwrap_or(u64::MAX);
            match function.size {
                0 => next_start,
                n => (function.addr.0 + n).min(next_start),
            }
        })
        .collect()
}

/// A function's name and aliases, as the filter and the lock table match them.
pub(crate) fn names_of(f: &lopi_elf::Function) -> Vec<&str> {
    std::iter::once(f.name.as_str()).chain(f.aliases.iter().map(String::as_str)).collect()
}

/// Known starts of code: every function and fragment, and `more`; sorted, each once.
pub(crate) fn code_starts(module: &ElfModule<'_>, more: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut s: Vec<u64> = module.functions.iter().map(|f| f.addr.0).chain(module.fragments.iter().map(|f| f.0 .0)).chain(more).collect();
    s.sort_unstable();
    s.dedup();
    s
}
