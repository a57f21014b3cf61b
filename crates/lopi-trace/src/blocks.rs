//! Basic-block counts (`--probe block`): per module file, every block of the probed functions
//! with its executions summed over the processes that recorded it, or why it had no probe.
use crate::{DataFile, MetaAction};
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
    /// For a block without a probe: probed blocks any of which, had it run, implies it ran;
    /// and probed blocks each of which ran if it did.
    pub implied_by: Vec<u64>,
    pub needs: Vec<u64>,
    /// It ran exactly when one of `implied_by` did.
    pub exactly: bool,
}

/// The blocks of one module file, in address order.
#[derive(Clone, Debug, Default)]
pub struct ModuleBlocks {
    /// The original file (the record's source).
    pub source: String,
    /// Counts are marks: 1 once a block ran (`--probe coverage`).
    pub marks: bool,
    pub blocks: Vec<BlockCount>,
}

impl ModuleBlocks {
    /// Whether each block ran: counted; or, without a probe, implied by a counted block that ran,
    /// or ruled out by one it needs that did not (`None`: nobody knows).
    pub fn covered(&self) -> Vec<Option<bool>> {
        let ran: std::collections::HashMap<u64, bool> = self.blocks.iter().filter_map(|b| b.count.map(|n| (b.addr, n > 0))).collect();
        self.blocks
            .iter()
            .map(|b| match b.count {
                Some(n) => Some(n > 0),
                None if b.implied_by.iter().any(|a| ran.get(a) == Some(&true)) => Some(true),
                None if b.needs.iter().any(|a| ran.get(a) == Some(&false)) => Some(false),
                None if b.exactly => Some(false),
                None => None,
            })
            .collect()
    }

    /// Every module with probed blocks in `data`, by source path.
    pub fn from_data(data: &DataFile) -> Vec<ModuleBlocks> {
        let mut by_source: BTreeMap<&str, (bool, BTreeMap<u64, BlockCount>)> = BTreeMap::new();
        for r in data.records.iter().filter(|r| r.meta.blocks().any(|(_, _, a)| a != MetaAction::Probe) || !r.meta.unprobed_blocks.is_empty()) {
            let (marks, blocks) = by_source.entry(r.meta.source.as_str()).or_default();
            *marks |= r.meta.blocks().any(|(_, _, a)| a == MetaAction::Mark);
            // An instruction's point (a script's `addr:`) is not a block's counter.
            for (counter, b, _) in r.meta.blocks().filter(|&(_, _, a)| a != MetaAction::Probe) {
                let n = r.count(counter);
                let entry = blocks.entry(b.addr).or_insert_with(|| BlockCount { addr: b.addr, end: b.end, function: b.function.clone(), count: Some(0), unprobed: None, implied_by: Vec::new(), needs: Vec::new(), exactly: false });
                entry.count = Some(entry.count.unwrap_or(0).saturating_add(n));
            }
            for b in &r.meta.unprobed_blocks {
                blocks.entry(b.addr).or_insert_with(|| BlockCount { addr: b.addr, end: b.end, function: b.function.clone(), count: None, unprobed: Some(b.reason.clone()), implied_by: b.implied_by.clone(), needs: b.needs.clone(), exactly: b.exactly });
            }
        }
        by_source
            .into_iter()
            .map(|(source, (marks, blocks))| ModuleBlocks { source: source.to_string(), marks, blocks: blocks.into_values().collect() })
            .collect()
    }
}
