//! Any bytes through parse, plan and rewrite: errors are fine, panics are bugs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut module) = lopi_elf::ElfModule::parse(data) else { return };
    let timing = data.len() % 2 == 0;
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &lopi_patch::Filter::default(), timing);
    let names = lopi_rewrite::ModuleNames { module: "m".into(), source: "s".into() };
    let _ = lopi_rewrite::rewrite(&module, selection, &names, lopi_rewrite::Recording { trace: timing });
});
