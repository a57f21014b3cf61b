//! Continuous export (`lopi run --push URL --every 10s`): each request holds what happened
//! since the one before. A running program's data file is read whole at every push; its
//! request ([`super::request`]) holds everything so far, and [`Windows::next`] keeps of each
//! sample only what the earlier windows did not send. A call still open at a window's end is
//! in it with its time up to then (`lopi.open_calls`), and its time after that goes to the
//! windows that follow: a sample's identity leaves that attribute out, so that an open call
//! and the same call closed are one sample whose value grows.
//!
//! Samples are matched across requests by what they say (process, sample type, frames,
//! attributes), each request's dictionary being its own. A value that shrank (the probes'
//! cost estimate, taken out of open calls' times, grew faster than they did) sends nothing
//! until it has grown past what was sent, so that the windows always add up to the last
//! request's values wherever those are the largest yet, and counts always do.
use super::proto::{self, ExportProfilesServiceRequest, ProfilesDictionary, Value};
use std::collections::HashMap;

/// The attribute of the calls still open when the data was read.
const OPEN_CALLS: &str = "lopi.open_calls";

/// What the windows sent so far, per sample.
#[derive(Default)]
pub struct Windows {
    sent: HashMap<SampleKey, i64>,
}

/// A sample as any request names it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct SampleKey {
    /// The resource's `process.pid`.
    pid: i64,
    /// The profile's sample type and unit.
    kind: (String, String),
    frames: Vec<Frame>,
    attributes: Vec<(String, String)>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Frame {
    mapping: String,
    address: u64,
    functions: Vec<String>,
}

impl Windows {
    pub fn new() -> Self {
        Self::default()
    }

    /// The part of `whole` (a request of everything recorded so far) that earlier windows did
    /// not send, as the window from `start_unix_ns` to `end_unix_ns`; `None` when nothing
    /// happened since. Samples that only differ in `lopi.open_calls` are one sample here.
    pub fn next(&mut self, mut whole: ExportProfilesServiceRequest, start_unix_ns: u64, end_unix_ns: u64) -> Option<ExportProfilesServiceRequest> {
        let dict = whole.dictionary.clone().unwrap_or_default();
        let names = Names::new(&dict);
        for resource in &mut whole.resource_profiles {
            let pid = resource.resource.as_ref().and_then(|r| r.attributes.iter().find(|a| a.key == "process.pid")).and_then(|a| match a.value.as_ref()?.value {
                Some(Value::Int(pid)) => Some(pid),
                _ => None,
            });
            let pid = pid.unwrap_or(0);
            for scope in &mut resource.scope_profiles {
                for profile in &mut scope.profiles {
                    let kind = profile.sample_type.map_or((String::new(), String::new()), |t| (names.string(t.type_strindex), names.string(t.unit_strindex)));
                    let samples = std::mem::take(&mut profile.samples);
                    profile.samples = self.new_part(samples, pid, &kind, &names);
                    profile.time_unix_nano = start_unix_ns;
                    profile.duration_nano = end_unix_ns.saturating_sub(start_unix_ns);
                }
                scope.profiles.retain(|p| !p.samples.is_empty());
            }
            resource.scope_profiles.retain(|s| !s.profiles.is_empty());
        }
        whole.resource_profiles.retain(|r| !r.scope_profiles.is_empty());
        (!whole.resource_profiles.is_empty()).then_some(whole)
    }

    /// One profile's samples, merged by identity, less what was sent of each.
    fn new_part(&mut self, samples: Vec<proto::Sample>, pid: i64, kind: &(String, String), names: &Names) -> Vec<proto::Sample> {
        let mut merged: Vec<(SampleKey, proto::Sample, i64)> = Vec::new();
        let mut at: HashMap<SampleKey, usize> = HashMap::new();
        for mut sample in samples {
            let value: i64 = sample.values.iter().sum();
            sample.attribute_indices.retain(|&i| names.attribute(i).0 != OPEN_CALLS);
            let key = SampleKey {
                pid,
                kind: kind.clone(),
                frames: names.frames(sample.stack_index),
                attributes: sample.attribute_indices.iter().map(|&i| names.attribute(i)).collect(),
            };
            match at.get(&key) {
                Some(&i) => merged[i].2 = merged[i].2.saturating_add(value),
                None => {
                    at.insert(key.clone(), merged.len());
                    merged.push((key, sample, value));
                }
            }
        }
        let mut out = Vec::new();
        for (key, mut sample, value) in merged {
            let sent = self.sent.entry(key).or_default();
            if value > *sent {
                sample.values = vec![value - *sent];
                *sent = value;
                out.push(sample);
            }
        }
        out
    }
}

/// A request's dictionary, read by index.
struct Names<'d> {
    dict: &'d ProfilesDictionary,
}

impl<'d> Names<'d> {
    fn new(dict: &'d ProfilesDictionary) -> Self {
        Names { dict }
    }

    fn string(&self, i: i32) -> String {
        usize::try_from(i).ok().and_then(|i| self.dict.string_table.get(i)).cloned().unwrap_or_default()
    }

    fn frames(&self, stack: i32) -> Vec<Frame> {
        let Some(stack) = usize::try_from(stack).ok().and_then(|i| self.dict.stack_table.get(i)) else { return Vec::new() };
        stack
            .location_indices
            .iter()
            .map(|&l| {
                let location = usize::try_from(l).ok().and_then(|i| self.dict.location_table.get(i)).cloned().unwrap_or_default();
                let mapping = usize::try_from(location.mapping_index).ok().and_then(|i| self.dict.mapping_table.get(i));
                let functions = location
                    .lines
                    .iter()
                    .map(|line| usize::try_from(line.function_index).ok().and_then(|i| self.dict.function_table.get(i)).map_or(String::new(), |f| self.string(f.name_strindex)))
                    .collect();
                Frame { mapping: mapping.map_or(String::new(), |m| self.string(m.filename_strindex)), address: location.address, functions }
            })
            .collect()
    }

    /// An attribute's key and its value as text.
    fn attribute(&self, i: i32) -> (String, String) {
        let Some(a) = usize::try_from(i).ok().and_then(|i| self.dict.attribute_table.get(i)) else { return Default::default() };
        let value = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Int(n)) => n.to_string(),
            None => String::new(),
        };
        (self.string(a.key_strindex), value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::proto::*;

    /// A request of one process (pid 7) with a `calls` profile: (leaf function, open calls
    /// attribute or not, value) per sample.
    fn request(samples: &[(&str, bool, i64)]) -> ExportProfilesServiceRequest {
        let mut strings = vec![String::new(), "calls".into(), "count".into(), OPEN_CALLS.into()];
        let mut functions = vec![Function::default()];
        let mut locations = vec![Location::default()];
        let mut stacks = vec![Stack::default()];
        let mut out = Vec::new();
        for &(name, open, value) in samples {
            strings.push(name.into());
            functions.push(Function { name_strindex: strings.len() as i32 - 1, ..Default::default() });
            locations.push(Location { mapping_index: 0, address: 0, lines: vec![Line { function_index: functions.len() as i32 - 1, line: 0 }] });
            stacks.push(Stack { location_indices: vec![locations.len() as i32 - 1] });
            let attribute_indices = if open { vec![1] } else { vec![] };
            out.push(Sample { stack_index: stacks.len() as i32 - 1, attribute_indices, values: vec![value] });
        }
        let open = KeyValueAndUnit { key_strindex: 3, value: Some(AnyValue::int(1)), unit_strindex: 0 };
        let dictionary = ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: locations,
            function_table: functions,
            link_table: vec![Link::default()],
            string_table: strings,
            attribute_table: vec![KeyValueAndUnit::default(), open],
            stack_table: stacks,
        };
        let profile = Profile { sample_type: Some(ValueType { type_strindex: 1, unit_strindex: 2 }), samples: out, ..Default::default() };
        let resource = Resource { attributes: vec![KeyValue { key: "process.pid".into(), value: Some(AnyValue::int(7)) }] };
        let scope = ScopeProfiles { scope: None, profiles: vec![profile], schema_url: String::new() };
        ExportProfilesServiceRequest { resource_profiles: vec![ResourceProfiles { resource: Some(resource), scope_profiles: vec![scope], schema_url: String::new() }], dictionary: Some(dictionary) }
    }

    /// A window's values by leaf function.
    fn values(window: &ExportProfilesServiceRequest) -> Vec<(String, i64)> {
        let names = Names::new(window.dictionary.as_ref().expect("dictionary"));
        let profiles = window.resource_profiles.iter().flat_map(|r| &r.scope_profiles).flat_map(|s| &s.profiles);
        let mut out: Vec<(String, i64)> = profiles.flat_map(|p| &p.samples).map(|s| (names.frames(s.stack_index)[0].functions[0].clone(), s.values.iter().sum())).collect();
        out.sort();
        out
    }

    #[test]
    fn each_window_holds_what_grew_since_the_last() {
        let mut windows = Windows::new();
        let first = windows.next(request(&[("main", true, 1), ("f", false, 10)]), 0, 5).expect("first window");
        assert_eq!(values(&first), [("f".to_string(), 10), ("main".to_string(), 1)]);
        let profile = &first.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!((profile.time_unix_nano, profile.duration_nano), (0, 5));
        // Another dictionary order; f grew, g is new, main is the same.
        let second = windows.next(request(&[("g", false, 2), ("f", false, 25), ("main", true, 1)]), 5, 10).expect("second window");
        assert_eq!(values(&second), [("f".to_string(), 15), ("g".to_string(), 2)]);
        assert!(windows.next(request(&[("g", false, 2), ("f", false, 25), ("main", true, 1)]), 10, 15).is_none(), "nothing new");
    }

    #[test]
    fn an_open_call_carries_on_into_later_windows() {
        let mut windows = Windows::new();
        // Time: main open for 100, then 250 in all once it returned, beside a closed call's 50.
        windows.next(request(&[("main", true, 100)]), 0, 1).expect("first");
        let second = windows.next(request(&[("main", false, 50), ("main", true, 200)]), 1, 2).expect("second");
        assert_eq!(values(&second), [("main".to_string(), 150)]);
        assert!(second.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].attribute_indices.is_empty(), "no open-calls attribute");
    }

    #[test]
    fn a_value_that_shrank_sends_nothing_until_it_grew_back() {
        let mut windows = Windows::new();
        windows.next(request(&[("f", true, 100)]), 0, 1).expect("first");
        assert!(windows.next(request(&[("f", true, 90)]), 1, 2).is_none());
        let third = windows.next(request(&[("f", false, 130)]), 2, 3).expect("third");
        assert_eq!(values(&third), [("f".to_string(), 30)]);
    }
}
