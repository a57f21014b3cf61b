//! A module's selection, from the plan cache or planned with a progress bar (and cached).
use crate::progress;
use lopi_cache::{Lookup, ModuleFile, PlanCache};
use lopi_elf::ElfModule;
use lopi_patch::{Filter, Probes, Selection};

/// The planner's selection for `module`, read from `file`: from the plan cache when it holds
/// one for the same inputs, else planned (and cached); the module is analysed either way.
pub(crate) fn plan(
    file: &ModuleFile,
    debug: Option<&lopi_elf::DebugFile>,
    module: &mut ElfModule<'_>,
    filter: &Filter,
    probes: Probes,
    cache: Option<&PlanCache>,
    bar: &progress::Bar,
) -> (Selection, Lookup) {
    let key = file.id.map(|id| lopi_cache::plan_key(id, file, debug, filter, probes));
    lopi_cache::selection(cache, key.as_ref(), module, |module| {
        let analysis = lopi_patch::analyse_with(module, bar);
        let selection = lopi_patch::select_with(module, &analysis, filter, probes, bar);
        (analysis.fragments, selection)
    })
}
