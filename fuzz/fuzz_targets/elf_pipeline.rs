//! Any bytes through parse, plan and rewrite: errors are fine, panics are bugs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(module) = lopi_elf::ElfModule::parse(data) else { return };
    let timing = data.len() % 2 == 0;
    let selection = lopi_patch::select(&module, &lopi_patch::Filter::default(), timing);
    let names = lopi_rewrite::ModuleNames { module: "m".into(), source: "s".into() };
    let _ = lopi_rewrite::rewrite(&module, selection, &names, lopi_rewrite::Recording { trace: timing });
});
