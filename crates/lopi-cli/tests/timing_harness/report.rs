//! A run's report (`lopi report --format json`) and what the tests read of it.

use serde_json::Value as Json;
use std::collections::BTreeMap;

pub struct Report {
    pub json: Json,
}

impl Report {
    pub fn functions(&self) -> &[Json] {
        self.json["functions"].as_array().map(Vec::as_slice).unwrap_or_default()
    }

    pub fn func(&self, name: &str) -> Option<&Json> {
        self.functions().iter().find(|f| f["name"] == name)
    }

    pub fn calls(&self, name: &str) -> Option<u64> {
        let hits: Vec<&Json> = self.functions().iter().filter(|f| f["name"] == name).collect();
        (!hits.is_empty()).then(|| hits.iter().map(|f| f["calls"].as_u64().unwrap_or(u64::MAX)).sum())
    }

    /// A time field of a timed function (NaN when absent or null).
    pub fn num(&self, name: &str, field: &str) -> f64 {
        self.func(name).and_then(|f| f[field].as_f64()).unwrap_or(f64::NAN)
    }

    /// (caller, callee) -> (calls, total_ns).
    pub fn edges(&self) -> BTreeMap<(Option<String>, String), (u64, f64)> {
        let mut m = BTreeMap::new();
        for e in self.json["edges"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let key = (
                e["caller"].as_str().map(String::from),
                e["callee"].as_str().unwrap_or("?").to_string(),
            );
            let v: &mut (u64, f64) = m.entry(key).or_default();
            v.0 += e["calls"].as_u64().unwrap_or(0);
            v.1 += e["total_ns"].as_f64().unwrap_or(f64::NAN);
        }
        m
    }

    pub fn edge(&self, caller: Option<&str>, callee: &str) -> (u64, f64) {
        self.edges()
            .get(&(caller.map(String::from), callee.to_string()))
            .copied()
            .unwrap_or((0, 0.0))
    }

    /// Calls of `callee` in the calling-context trees (all its edges).
    pub fn tree_calls(&self, callee: &str) -> u64 {
        self.edges().iter().filter(|((_, c), _)| c == callee).map(|(_, (n, _))| n).sum()
    }

    pub fn threads(&self) -> Vec<&Json> {
        self.json["timing"]["threads"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default()
    }

    /// Functions the budget switched to counting, one entry per switch (each thread's).
    pub fn switched(&self) -> Vec<&str> {
        self.threads().into_iter().flat_map(|t| t["switches"].as_array().into_iter().flatten()).filter_map(|s| s["function"].as_str()).collect()
    }

    /// True when the threads' time was sampled (`--time sampled`).
    pub fn sampled(&self) -> bool {
        self.threads().iter().any(|t| !t["sampling"].is_null())
    }

    pub fn thread_sum(&self, field: &str) -> u64 {
        self.threads().iter().map(|t| t[field].as_u64().unwrap_or(u64::MAX / 1024)).sum()
    }
}
