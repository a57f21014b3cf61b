//! Which functions ran (`--probe entry:mark`): per module file, every function whose entry
//! had a marking probe, and whether any process that recorded it ran it.
use crate::{DataFile, MetaAction, Missing, View};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FunctionRan {
    pub name: String,
    /// File address and size of the function.
    pub addr: u64,
    pub size: u64,
    pub ran: bool,
}

/// The marked functions of one module file, in address order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModuleFunctions {
    /// The original file (the record's source).
    pub source: String,
    pub functions: Vec<FunctionRan>,
}

/// Every module with marked function entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FunctionsRan {
    pub modules: Vec<ModuleFunctions>,
}

impl FunctionsRan {
    pub fn from_data(data: &DataFile) -> FunctionsRan {
        let mut by_source: BTreeMap<&str, BTreeMap<u64, FunctionRan>> = BTreeMap::new();
        for r in &data.records {
            for (counter, f, _) in r.meta.functions().filter(|&(_, _, a)| a == MetaAction::Mark) {
                let entry = by_source.entry(r.meta.source.as_str()).or_default();
                let function = entry.entry(f.addr).or_insert_with(|| FunctionRan { name: f.name.clone(), addr: f.addr, size: f.size, ran: false });
                function.ran |= r.count(counter) > 0;
            }
        }
        let modules = by_source.into_iter().map(|(source, functions)| ModuleFunctions { source: source.to_string(), functions: functions.into_values().collect() }).collect();
        FunctionsRan { modules }
    }
}

impl View for FunctionsRan {
    fn read(data: &DataFile) -> Result<Self, Missing> {
        let ran = FunctionsRan::from_data(data);
        if ran.modules.is_empty() {
            return Err(Missing { what: "function marks", record: "--probe entry:mark (lopi run, rewrite or attach)" });
        }
        Ok(ran)
    }
}
