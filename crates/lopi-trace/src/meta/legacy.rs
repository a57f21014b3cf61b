//! Version 2 of the metadata (data files of lopi before the one probe list): three lists in
//! counter order one after another, functions, then `syscall` sites, then blocks; a block's
//! `point` and the module's `block_marks` said what the block probes did.
use super::{MetaAction, MetaBlock, MetaFunction, MetaPoint, MetaProbe, MetaScript, MetaSyscall, MetaUnprobedBlock, ModuleMeta, META_VERSION};
use serde::Deserialize;

#[derive(Deserialize)]
pub(super) struct ModuleMetaV2 {
    module: String,
    source: String,
    functions: Vec<FunctionV2>,
    #[serde(default)]
    counters: u64,
    #[serde(default)]
    syscalls: Vec<MetaSyscall>,
    #[serde(default)]
    blocks: Vec<BlockV2>,
    #[serde(default)]
    unprobed_blocks: Vec<MetaUnprobedBlock>,
    #[serde(default)]
    block_marks: bool,
    #[serde(default)]
    script: Option<MetaScript>,
}

#[derive(Deserialize)]
struct FunctionV2 {
    name: String,
    addr: u64,
    size: u64,
    #[serde(default)]
    timed: bool,
}

#[derive(Deserialize)]
struct BlockV2 {
    addr: u64,
    end: u64,
    function: String,
    #[serde(default)]
    point: bool,
}

impl From<ModuleMetaV2> for ModuleMeta {
    fn from(v2: ModuleMetaV2) -> ModuleMeta {
        // Version 2 did not tell a lock function from a timed one: both read as timed.
        let functions = v2.functions.into_iter().map(|f| MetaProbe {
            point: MetaPoint::Entry(MetaFunction { name: f.name, addr: f.addr, size: f.size }),
            action: if f.timed { MetaAction::Time } else { MetaAction::Count },
        });
        let syscalls = v2.syscalls.into_iter().map(|s| MetaProbe { point: MetaPoint::Syscall(s), action: MetaAction::Time });
        let block_action = if v2.block_marks { MetaAction::Mark } else { MetaAction::Count };
        let blocks = v2.blocks.into_iter().map(|b| MetaProbe {
            point: MetaPoint::Block(MetaBlock { addr: b.addr, end: b.end, function: b.function }),
            action: if b.point { MetaAction::Probe } else { block_action },
        });
        ModuleMeta {
            version: META_VERSION,
            module: v2.module,
            source: v2.source,
            counters: v2.counters,
            probes: functions.chain(syscalls).chain(blocks).collect(),
            unprobed_blocks: v2.unprobed_blocks,
            script: v2.script,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-2 module: a counted and a timed function, a `syscall` site, a coverage
    /// block and a script's instruction point.
    const V2: &str = r#"{"version":2,"module":"/t/prog.lopi","source":"/t/prog",
        "functions":[{"name":"main","addr":4096,"size":40,"timed":false},{"name":"work","addr":4160,"size":12,"timed":true}],
        "counters":20480,
        "syscalls":[{"addr":4200,"function":"work","nr":1}],
        "blocks":[{"addr":4160,"end":4166,"function":"work"},{"addr":4166,"end":4172,"function":"work","point":true}],
        "unprobed_blocks":[{"addr":4172,"end":4173,"function":"work","reason":"too-short","implied_by":[4160]}],
        "block_marks":true,
        "script":{"source":"func:work { }","max_entries":null,"ring_len":4096}}"#;

    #[test]
    fn version_2_reads_as_one_probe_list_in_counter_order() {
        let meta = ModuleMeta::from_json(V2.as_bytes()).expect("version 2 reads");
        assert_eq!(meta.version, META_VERSION);
        assert_eq!((meta.module.as_str(), meta.source.as_str(), meta.counters), ("/t/prog.lopi", "/t/prog", 20480));
        let functions: Vec<_> = meta.functions().map(|(c, f, a)| (c, f.name.as_str(), f.addr, f.size, a)).collect();
        assert_eq!(functions, [(0, "main", 4096, 40, MetaAction::Count), (1, "work", 4160, 12, MetaAction::Time)]);
        let syscalls: Vec<_> = meta.syscalls().map(|(c, s)| (c, s.addr, s.function.as_str(), s.nr)).collect();
        assert_eq!(syscalls, [(2, 4200, "work", Some(1))]);
        let blocks: Vec<_> = meta.blocks().map(|(c, b, a)| (c, b.addr, b.end, a)).collect();
        assert_eq!(blocks, [(3, 4160, 4166, MetaAction::Mark), (4, 4166, 4172, MetaAction::Probe)]);
        assert_eq!(meta.unprobed_blocks.len(), 1);
        assert_eq!(meta.unprobed_blocks[0].implied_by, [4160]);
        assert_eq!(meta.script.as_ref().map(|s| s.ring_len), Some(4096));
    }

    #[test]
    fn version_2_counted_blocks_and_the_oldest_fields_defaulted() {
        let v2 = r#"{"version":2,"module":"m","source":"s","functions":[{"name":"f","addr":1,"size":2}],"blocks":[{"addr":1,"end":2,"function":"f"}]}"#;
        let meta = ModuleMeta::from_json(v2.as_bytes()).expect("version 2 reads");
        let actions: Vec<MetaAction> = meta.probes.iter().map(|p| p.action).collect();
        assert_eq!(actions, [MetaAction::Count, MetaAction::Count]);
    }

    #[test]
    fn this_version_round_trips() {
        let meta = ModuleMeta::from_json(V2.as_bytes()).expect("version 2 reads");
        let json = serde_json::to_string(&meta).expect("serialises");
        assert!(json.contains(r#"{"point":"entry","name":"main","addr":4096,"size":40,"action":"count"}"#), "{json}");
        assert_eq!(ModuleMeta::from_json(json.as_bytes()).expect("reads back"), meta);
    }

    #[test]
    fn damaged_or_newer_metadata_is_an_error() {
        for bad in ["", "{", "[]", r#"{"version":"2"}"#, r#"{"version":2}"#, r#"{"version":3,"module":"m","source":"s","probes":[{"point":"exit","action":"count"}]}"#, r#"{"version":3,"module":"m","source":"s","probes":[{"point":"entry","name":"f","addr":1,"size":1,"action":"jump"}]}"#] {
            assert!(ModuleMeta::from_json(bad.as_bytes()).is_err(), "{bad}");
        }
        let newer = ModuleMeta::from_json(br#"{"version":4,"module":"m"}"#).unwrap_err();
        assert_eq!(newer, "metadata of version 4, written by a newer lopi; this lopi reads versions up to 3");
    }
}
