use super::*;
use crate::timing::{ContextNode, ThreadProfile, TimedFunction};
use crate::{MetaFunction, MetaPoint, MetaProbe, ModuleMeta, Record, META_VERSION};
use prost::Message;

fn node(parent: u32, function: Option<u32>, calls: u64, self_ns: f64) -> ContextNode {
    ContextNode { parent, function, calls, total_ns: self_ns, self_ns, max_ns: self_ns, merged: false, syscall: None, open: 0 }
}

/// Process 100: thread 100 calls main, main calls work (three times, one still open at the
/// end) and `read`; thread 101 ("worker") calls work twice. The executable's record counts
/// `helper`, counted only, four times, and one call of main that was not timed.
fn recording() -> (DataFile, Timing) {
    let function = |name: &str, addr| TimedFunction { name: name.into(), module: "/bin/prog".into(), addr, syscall: None, lock: None };
    let read = TimedFunction { name: "[syscall] read".into(), module: String::new(), addr: 0, syscall: Some(0), lock: None };
    let functions = vec![function("main", 0x1100), function("work", 0x1200), read, function("helper", 0x1300)];
    let main_thread = ThreadProfile {
        pid: 100,
        tid: 100,
        nodes: vec![
            node(0, None, 0, 0.0),
            node(0, Some(0), 1, 500.0),
            ContextNode { open: 1, ..node(1, Some(1), 3, 300.0) },
            node(1, Some(2), 7, 2000.0),
        ],
        ..Default::default()
    };
    let worker = ThreadProfile { pid: 100, tid: 101, name: "worker".into(), nodes: vec![node(0, None, 0, 0.0), node(0, Some(1), 2, 40.0)], ..Default::default() };
    let timing = Timing { functions, threads: vec![main_thread, worker], probe_cost: Default::default(), syscall_sites: Vec::new() };
    let entry = |name: &str, addr, action| MetaProbe { point: MetaPoint::Entry(MetaFunction { name: name.into(), addr, size: 16 }), action };
    let meta = ModuleMeta {
        version: META_VERSION,
        module: "/bin/prog".into(),
        source: "/bin/prog".into(),
        counters: 0,
        probes: vec![entry("main", 0x1100, MetaAction::Time), entry("helper", 0x1300, MetaAction::Count)],
        unprobed_blocks: Vec::new(),
        script: None,
    };
    let record = Record { pid: 100, exe: "/bin/prog".into(), load_bias: 0, meta, counts: vec![1, 4], own_calls: Vec::new(), tsc_hz: 0 };
    (DataFile { records: vec![record], ..Default::default() }, timing)
}

fn context() -> OtlpContext {
    OtlpContext {
        service: None,
        host_name: Some("build-host".into()),
        labels: vec![("env".into(), "test".into()), ("host.name".into(), "web-1".into())],
        build_ids: HashMap::from([("/bin/prog".to_string(), "0123abcd".to_string())]),
        lines: HashMap::from([(("/bin/prog".to_string(), 0x1200), ("prog.c".to_string(), 42))]),
        end_unix_ns: 1_000_000,
    }
}

fn encoded(data: &DataFile, t: &Timing, context: &OtlpContext) -> proto::ExportProfilesServiceRequest {
    let bytes = request(data, t, &mut |_, _| SiteFrame { name: String::new(), place: None }, context).encode_to_vec();
    proto::ExportProfilesServiceRequest::decode(bytes.as_slice()).expect("the request decodes")
}

/// What a reader sees: per profile type, the sum of the values whose leaf is each frame.
fn by_leaf(r: &proto::ExportProfilesServiceRequest) -> BTreeMap<String, BTreeMap<String, i64>> {
    let d = r.dictionary.as_ref().expect("dictionary");
    let s = |i: i32| d.string_table[i as usize].clone();
    let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for p in &r.resource_profiles[0].scope_profiles[0].profiles {
        let kind = p.sample_type.map(|t| format!("{}/{}", s(t.type_strindex), s(t.unit_strindex))).expect("sample type");
        for sample in &p.samples {
            let leaf = d.stack_table[sample.stack_index as usize].location_indices[0];
            let function = d.location_table[leaf as usize].lines[0].function_index;
            let name = s(d.function_table[function as usize].name_strindex);
            *out.entry(kind.clone()).or_default().entry(name).or_default() += sample.values.iter().sum::<i64>();
        }
    }
    out
}

#[test]
fn every_kind_has_its_profile_and_calls_match_the_report() {
    let (data, t) = recording();
    let r = encoded(&data, &t, &context());
    let profiles = by_leaf(&r);
    let kinds: Vec<&str> = profiles.keys().map(String::as_str).collect();
    assert_eq!(kinds, ["calls/count", "syscall_time/nanoseconds", "syscalls/count", "wall/nanoseconds"]);
    let calls: Vec<(&str, i64)> = profiles["calls/count"].iter().map(|(k, v)| (k.as_str(), *v)).collect();
    // main: 1 timed + 1 untimed; work: 3 + 2 over two threads; helper counted only.
    assert_eq!(calls, [("[syscall] read", 7), ("helper", 4), ("main", 2), ("work", 5)]);
    assert_eq!(profiles["syscalls/count"].iter().collect::<Vec<_>>(), [(&"[syscall] read".to_string(), &7)]);
    assert_eq!(profiles["syscall_time/nanoseconds"]["[syscall] read"], 2000);
    assert_eq!(profiles["wall/nanoseconds"]["work"], 340);
}

#[test]
fn tables_start_with_their_zero_value() {
    let (data, t) = recording();
    let d = encoded(&data, &t, &context()).dictionary.expect("dictionary");
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.mapping_table[0], proto::Mapping::default());
    assert_eq!(d.location_table[0], proto::Location::default());
    assert_eq!(d.function_table[0], proto::Function::default());
    assert_eq!(d.stack_table[0], proto::Stack::default());
    assert_eq!(d.attribute_table[0], proto::KeyValueAndUnit::default());
    assert_eq!(d.link_table.len(), 1);
    // Each string once.
    let mut strings = d.string_table.clone();
    strings.sort();
    strings.dedup();
    assert_eq!(strings.len(), d.string_table.len());
}

#[test]
fn frames_have_their_module_build_id_and_line() {
    let (data, t) = recording();
    let d = encoded(&data, &t, &context()).dictionary.expect("dictionary");
    let s = |i: i32| d.string_table[i as usize].as_str();
    let work = d.location_table.iter().find(|l| l.address == 0x1200).expect("work's location");
    assert_eq!(work.lines[0].line, 42);
    let f = d.function_table[work.lines[0].function_index as usize];
    assert_eq!((s(f.name_strindex), s(f.filename_strindex), f.start_line), ("work", "prog.c", 42));
    let m = &d.mapping_table[work.mapping_index as usize];
    assert_eq!(s(m.filename_strindex), "/bin/prog");
    assert_eq!((m.memory_start, m.memory_limit), (0x1100, 0x1301));
    let build_id = &d.attribute_table[m.attribute_indices[0] as usize];
    assert_eq!(s(build_id.key_strindex), "process.executable.build_id.gnu");
    assert_eq!(build_id.value, Some(AnyValue::string("0123abcd")));
    // A system call belongs to no module.
    let read = d.function_table.iter().position(|f| s(f.name_strindex) == "[syscall] read").expect("read") as i32;
    let location = d.location_table.iter().find(|l| l.lines.first().is_some_and(|l| l.function_index == read)).expect("read's location");
    assert_eq!(location.mapping_index, 0);
}

#[test]
fn resource_and_sample_attributes() {
    let (data, t) = recording();
    let r = encoded(&data, &t, &context());
    assert_eq!(r.resource_profiles.len(), 1);
    let attributes: Vec<(String, AnyValue)> = r.resource_profiles[0]
        .resource
        .as_ref()
        .expect("resource")
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone().expect("value")))
        .collect();
    let expected = [
        ("service.name", AnyValue::string("prog")),
        ("process.pid", AnyValue::int(100)),
        ("process.executable.name", AnyValue::string("prog")),
        ("process.executable.path", AnyValue::string("/bin/prog")),
        ("process.executable.build_id.gnu", AnyValue::string("0123abcd")),
        ("env", AnyValue::string("test")),
        // A label overrides lopi's own value.
        ("host.name", AnyValue::string("web-1")),
    ];
    assert_eq!(attributes, expected.map(|(k, v)| (k.to_string(), v)));
    let scope = r.resource_profiles[0].scope_profiles[0].scope.as_ref().expect("scope");
    assert_eq!(scope.name, "lopi");

    let d = r.dictionary.as_ref().expect("dictionary");
    let attribute = |i: &i32| {
        let a = &d.attribute_table[*i as usize];
        format!("{}={:?}", d.string_table[a.key_strindex as usize], a.value.as_ref().and_then(|v| v.value.clone()).expect("value"))
    };
    let calls = &r.resource_profiles[0].scope_profiles[0].profiles[0];
    let seen: Vec<Vec<String>> = calls.samples.iter().map(|s| s.attribute_indices.iter().map(attribute).collect()).collect();
    assert!(seen.contains(&vec!["thread.id=Int(100)".to_string(), "lopi.open_calls=Int(1)".to_string()]), "{seen:?}");
    assert!(seen.contains(&vec!["thread.id=Int(101)".to_string(), "thread.name=String(\"worker\")".to_string()]), "{seen:?}");
    // Untimed calls have no thread.
    assert!(seen.contains(&Vec::new()), "{seen:?}");
    assert_eq!((calls.period, calls.period_type, calls.time_unix_nano), (1, calls.sample_type, 1_000_000));
}

#[test]
fn the_service_name_can_be_given() {
    let (data, t) = recording();
    let r = encoded(&data, &t, &OtlpContext { service: Some("checkout".into()), ..context() });
    let first = &r.resource_profiles[0].resource.as_ref().expect("resource").attributes[0];
    assert_eq!((first.key.as_str(), first.value.clone()), ("service.name", Some(AnyValue::string("checkout"))));
}

/// A record of counts alone (`--probe entry`) has its calls profile, every call untimed.
#[test]
fn counts_alone_are_calls() {
    let (data, _) = recording();
    let r = encoded(&data, &Timing::default(), &context());
    let profiles = by_leaf(&r);
    assert_eq!(profiles.keys().collect::<Vec<_>>(), ["calls/count"]);
    let calls: Vec<(&str, i64)> = profiles["calls/count"].iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(calls, [("helper", 4), ("main", 1)]);
    let d = r.dictionary.expect("dictionary");
    let root = d.stack_table.iter().skip(1).map(|s| s.location_indices[1]).collect::<Vec<_>>();
    let names: Vec<&str> = root.iter().map(|&l| d.string_table[d.function_table[d.location_table[l as usize].lines[0].function_index as usize].name_strindex as usize].as_str()).collect();
    assert_eq!(names, ["[untimed calls]", "[untimed calls]"]);
}

/// The dictionary has the frames the samples use, not every probed function.
#[test]
fn functions_never_called_stay_out() {
    let (data, mut t) = recording();
    t.functions.push(TimedFunction { name: "never".into(), module: "/bin/prog".into(), addr: 0x1400, syscall: None, lock: None });
    let d = encoded(&data, &t, &context()).dictionary.expect("dictionary");
    assert!(!d.string_table.iter().any(|s| s == "never"), "{:?}", d.string_table);
    assert_eq!(d.function_table.len(), 1 + 5, "the zero function, main, work, read, helper, [untimed calls]");
}

#[test]
fn block_counts_are_a_profile_of_their_own() {
    let block = |addr, action| MetaProbe { point: crate::MetaPoint::Block(crate::MetaBlock { addr, end: addr + 4, function: "work".into() }), action };
    let (mut data, t) = recording();
    let record = &mut data.records[0];
    record.meta.probes.extend([block(0x1200, MetaAction::Count), block(0x1210, MetaAction::Count), block(0x1220, MetaAction::Count), block(0x1230, MetaAction::Probe)]);
    record.counts.extend([5, 2, 0, 9]);
    let r = encoded(&data, &t, &context());
    let d = r.dictionary.as_ref().expect("dictionary");
    let blocks = r.resource_profiles[0].scope_profiles[0].profiles.iter().find(|p| p.sample_type.is_some_and(|t| d.string_table[t.type_strindex as usize] == "block_executions")).expect("a block profile");
    let by_address: Vec<(u64, i64)> = blocks.samples.iter().map(|s| (d.location_table[d.stack_table[s.stack_index as usize].location_indices[0] as usize].address, s.values[0])).collect();
    // The block that never ran has no sample; an instruction point's counter is no block's.
    assert_eq!(by_address, [(0x1200, 5), (0x1210, 2)]);
    assert_eq!(by_leaf(&r)["block_executions/count"]["work"], 7);
}
