//! Basic-block counts (`--probe block`): per module file, every block of the probed functions
//! with its executions summed over the processes that recorded it, or why it had no probe.
use crate::DataFile;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockCount {
    /// File addresses of the block's first instruction and of the end of its last.
    pub addr: u64,
    pub end: u64,
    pub function: String,
    /// Executions; `None` for a block without a probe.
    pub count: Option<u64>,
    /// Why it had none.
    pub unprobed: Option<String>,
}

/// The blocks of one module file, in address order.
#[derive(Clone, Debug, Default)]
pub struct ModuleBlocks {
    /// The original file (the record's source).
    pub source: String,
    pub blocks: Vec<BlockCount>,
}

impl ModuleBlocks {
    /// Every module with probed blocks in `data`, by source path.
    pub fn from_data(data: &DataFile) -> Vec<ModuleBlocks> {
        let mut by_source: BTreeMap<&str, BTreeMap<u64, BlockCount>> = BTreeMap::new();
        for r in data.records.iter().filter(|r| !r.meta.blocks.is_empty() || !r.meta.unprobed_blocks.is_empty()) {
            let blocks = by_source.entry(r.meta.source.as_str()).or_default();
            for (b, &n) in r.meta.blocks.iter().zip(&r.block_counts) {
                let entry = blocks.entry(b.addr).or_insert_with(|| BlockCount { addr: b.addr, end: b.end, function: b.function.clone(), count: Some(0), unprobed: None });
                entry.count = Some(entry.count.unwrap_or(0).saturating_add(n));
            }
            for b in &r.meta.unprobed_blocks {
                blocks.entry(b.addr).or_insert_with(|| BlockCount { addr: b.addr, end: b.end, function: b.function.clone(), count: None, unprobed: Some(b.reason.clone()) });
            }
        }
        by_source.into_iter().map(|(source, blocks)| ModuleBlocks { source: source.to_string(), blocks: blocks.into_values().collect() }).collect()
    }
}
