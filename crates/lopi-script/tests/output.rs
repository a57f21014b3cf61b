//! The output side of scripts: per-thread maps merged, keys decoded, the text bpftrace would
//! print, the JSON of `--format json`, and `printf` against C's. Slots and keys are built from
//! the layouts of `codegen::abi` (`output/slots.rs`), so the printer reads what the generated
//! code writes.
mod common;
#[path = "output/json.rs"]
mod json;
#[path = "output/merge.rs"]
mod merge;
#[path = "output/printf.rs"]
mod printf;
#[path = "output/slots.rs"]
mod slots;
#[path = "output/text.rs"]
mod text;
