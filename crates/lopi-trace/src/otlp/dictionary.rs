//! The tables an OTLP request's profiles index into (`ProfilesDictionary`): each string,
//! mapping, function, location, stack and attribute once, entry 0 of each its zero value.
use super::proto::{self, AnyValue, KeyValueAndUnit, Value};
use super::OtlpContext;
use crate::pprof::proto as pprof;
use std::collections::{HashMap, HashSet};

/// The OpenTelemetry semantic conventions' key of a GNU build-id, on a resource and on a
/// mapping alike.
pub(super) const BUILD_ID_GNU: &str = "process.executable.build_id.gnu";

pub(super) struct Dictionary<'c> {
    context: &'c OtlpContext,
    pub(super) tables: proto::ProfilesDictionary,
    strings: HashMap<String, i32>,
    /// By file name: one mapping per module, its address span widened to its locations.
    mappings: HashMap<String, i32>,
    functions: HashMap<proto::Function, i32>,
    locations: HashMap<proto::Location, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(String, AttributeValue), i32>,
}

/// An attribute's value as a key of [`Dictionary::attribute`]'s index.
#[derive(Clone, PartialEq, Eq, Hash)]
enum AttributeValue {
    String(String),
    Int(i64),
}

impl<'c> Dictionary<'c> {
    pub(super) fn new(context: &'c OtlpContext) -> Self {
        let tables = proto::ProfilesDictionary {
            mapping_table: vec![proto::Mapping::default()],
            location_table: vec![proto::Location::default()],
            function_table: vec![proto::Function::default()],
            link_table: vec![proto::Link::default()],
            string_table: vec![String::new()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![proto::Stack::default()],
        };
        Dictionary {
            context,
            tables,
            strings: HashMap::from([(String::new(), 0)]),
            mappings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            stacks: HashMap::new(),
            attributes: HashMap::new(),
        }
    }

    pub(super) fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = index(self.tables.string_table.len());
        self.tables.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    pub(super) fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType { type_strindex: self.string(kind), unit_strindex: self.string(unit) }
    }

    /// An attribute of the table, for samples, mappings and profiles to point to.
    pub(super) fn attribute(&mut self, key: &str, value: AnyValue) -> i32 {
        let as_key = match &value.value {
            Some(Value::Int(n)) => AttributeValue::Int(*n),
            Some(Value::String(s)) => AttributeValue::String(s.clone()),
            None => AttributeValue::String(String::new()),
        };
        if let Some(&i) = self.attributes.get(&(key.to_string(), as_key.clone())) {
            return i;
        }
        let i = index(self.tables.attribute_table.len());
        let key_strindex = self.string(key);
        self.tables.attribute_table.push(KeyValueAndUnit { key_strindex, value: Some(value), unit_strindex: 0 });
        self.attributes.insert((key.to_string(), as_key), i);
        i
    }

    /// The mapping of the module file `filename` (0, none, for ""), with its build-id when
    /// known, its span widened to `address`.
    fn mapping(&mut self, filename: &str, address: u64) -> i32 {
        if filename.is_empty() {
            return 0;
        }
        let end = address.saturating_add(1);
        if let Some(&i) = self.mappings.get(filename) {
            let m = &mut self.tables.mapping_table[i as usize];
            m.memory_start = m.memory_start.min(address);
            m.memory_limit = m.memory_limit.max(end);
            return i;
        }
        let filename_strindex = self.string(filename);
        let attribute_indices = match self.context.build_ids.get(filename) {
            Some(id) => vec![self.attribute(BUILD_ID_GNU, AnyValue::string(id.as_str()))],
            None => Vec::new(),
        };
        let i = index(self.tables.mapping_table.len());
        self.tables.mapping_table.push(proto::Mapping { memory_start: address, memory_limit: end, file_offset: 0, filename_strindex, attribute_indices });
        self.mappings.insert(filename.to_string(), i);
        i
    }

    fn function(&mut self, function: proto::Function) -> i32 {
        *self.functions.entry(function).or_insert_with(|| {
            self.tables.function_table.push(function);
            index(self.tables.function_table.len() - 1)
        })
    }

    /// The location of the frame `name` at `address` of `module` ("" and 0 for a frame of no
    /// module: a system call, a lock, `[merged call paths]`), at its source line when the
    /// context knows it.
    pub(super) fn location(&mut self, module: &str, address: u64, name: &str) -> i32 {
        let mapping_index = self.mapping(module, address);
        let source = self.context.lines.get(&(module.to_string(), address));
        let (file, line) = source.map_or(("", 0), |(f, l)| (f.as_str(), i64::from(*l)));
        let name_strindex = self.string(name);
        let filename_strindex = self.string(file);
        let function = proto::Function { name_strindex, system_name_strindex: name_strindex, filename_strindex, start_line: line };
        let function_index = self.function(function);
        let location = proto::Location { mapping_index, address, lines: vec![proto::Line { function_index, line }] };
        if let Some(&i) = self.locations.get(&location) {
            return i;
        }
        let i = index(self.tables.location_table.len());
        self.tables.location_table.push(location.clone());
        self.locations.insert(location, i);
        i
    }

    /// The dictionary's location of each of a pprof profile's locations that a sample uses
    /// (pprof.rs lists every probed function, called or not), by pprof id.
    pub(super) fn locations_of(&mut self, p: &pprof::Profile) -> HashMap<u64, i32> {
        let text = |i: i64| p.string_table.get(i as usize).map_or("", String::as_str);
        let used: HashSet<u64> = p.sample.iter().flat_map(|s| &s.location_id).copied().collect();
        let modules: HashMap<u64, &str> = p.mapping.iter().map(|m| (m.id, text(m.filename))).collect();
        let names: HashMap<u64, &str> = p.function.iter().map(|f| (f.id, text(f.name))).collect();
        let mut out = HashMap::new();
        for l in p.location.iter().filter(|l| used.contains(&l.id)) {
            let module = modules.get(&l.mapping_id).copied().unwrap_or("");
            let name = l.line.first().and_then(|line| names.get(&line.function_id)).copied().unwrap_or("");
            out.insert(l.id, self.location(module, l.address, name));
        }
        out
    }

    /// The stack of `locations` (leaf first).
    pub(super) fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = index(self.tables.stack_table.len());
        self.tables.stack_table.push(proto::Stack { location_indices: locations.clone() });
        self.stacks.insert(locations, i);
        i
    }
}

/// A table index: OTLP's are int32; a table never grows that large from one data file
/// (each entry is a distinct call path or name).
fn index(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}
