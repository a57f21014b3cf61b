//! Any bytes through parse, plan and rewrite: errors are fine, panics are bugs. Every other
//! input is also read as its own separate debug file (the same build-id), through the debug
//! symbol reader.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let debug = (data.len() % 3 == 0).then(|| lopi_elf::DebugFile::from_bytes(data, "self".into(), data.to_vec())).flatten();
    let Ok(mut module) = lopi_elf::ElfModule::parse_with_debug(data, debug.as_ref()) else { return };
    let timing = data.len() % 2 == 0;
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &lopi_patch::Filter::default(), timing);
    let names = lopi_rewrite::ModuleNames { module: "m".into(), source: "s".into() };
    let _ = lopi_rewrite::rewrite(&module, selection, &names, lopi_rewrite::Recording { trace: timing });
});
