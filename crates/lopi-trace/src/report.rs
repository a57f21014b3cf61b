//! Aggregation of records into per-function totals.
use crate::DataFile;
use serde::Serialize;
use std::collections::BTreeMap;

/// Calls of one function, summed over processes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FunctionCount {
    pub name: String,
    pub module: String,
    #[serde(serialize_with = "hex")]
    pub addr: u64,
    pub calls: u64,
}

fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// What `lopi report` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub program: String,
    pub pids: Vec<u32>,
    pub modules: Vec<String>,
    /// Sorted by calls, most first; then by module and address.
    pub functions: Vec<FunctionCount>,
    pub total_calls: u64,
    /// A process died while registering a module; its counts are missing.
    pub incomplete: bool,
}

impl Profile {
    pub fn from_data(data: &DataFile) -> Profile {
        let mut totals: BTreeMap<(String, u64), FunctionCount> = BTreeMap::new();
        let mut pids = Vec::new();
        let mut modules = Vec::new();
        for record in &data.records {
            if !pids.contains(&record.pid) {
                pids.push(record.pid);
            }
            if !modules.contains(&record.meta.module) {
                modules.push(record.meta.module.clone());
            }
            for (f, &calls) in record.meta.functions.iter().zip(&record.counts) {
                let entry = totals.entry((record.meta.module.clone(), f.addr)).or_insert_with(|| FunctionCount {
                    name: f.name.clone(),
                    module: record.meta.module.clone(),
                    addr: f.addr,
                    calls: 0,
                });
                entry.calls = entry.calls.saturating_add(calls);
            }
        }
        let mut functions: Vec<FunctionCount> = totals.into_values().collect();
        functions.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| (&a.module, a.addr).cmp(&(&b.module, b.addr))));
        Profile {
            program: data.records.first().map(|r| r.exe.clone()).unwrap_or_default(),
            pids,
            modules,
            total_calls: functions.iter().map(|f| f.calls).fold(0u64, u64::saturating_add),
            functions,
            incomplete: data.truncated,
        }
    }
}
