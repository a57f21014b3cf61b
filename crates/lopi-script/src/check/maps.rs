//! The maps of a script: numbered on first use; their key tuple fixed by the first use that
//! has keys typed, their values by the first assignment. Every later use must agree, and an
//! error at a disagreeing use says where the map was fixed.
use crate::ast::{Name, Script, Stmt, StmtKind, Target};
use crate::diag::{Issue, Span};
use crate::ir::{MapId, Type, ValueKind};
use crate::limits::{MAX_KEYS, MAX_MAPS};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Value kinds a round ended with, by map name: what the next round assumes for a map read
/// before its first assignment.
pub(super) type Hints = BTreeMap<String, ValueKind>;

pub(super) struct MapInfo {
    pub name: String,
    pub first: Span,
    pub keys: Option<(Vec<Type>, Span)>,
    pub value: Option<(ValueKind, Span)>,
}

pub(super) struct Maps<'a> {
    pub list: Vec<MapInfo>,
    by_name: HashMap<String, MapId>,
    /// Maps some statement assigns.
    assigned: &'a HashSet<String>,
    hints: &'a Hints,
    /// Hints this round relied on.
    pub used_hints: Hints,
}

fn keys(n: usize) -> String {
    match n {
        0 => "no key".to_string(),
        1 => "1 key".to_string(),
        n => format!("{n} keys"),
    }
}

impl<'a> Maps<'a> {
    pub fn new(assigned: &'a HashSet<String>, hints: &'a Hints) -> Maps<'a> {
        Maps { list: Vec::new(), by_name: HashMap::new(), assigned, hints, used_hints: Hints::new() }
    }

    /// The map `name`, numbered now if this is its first use; `None` past [`MAX_MAPS`].
    pub fn id(&mut self, name: &Name, issues: &mut Vec<Issue>) -> Option<MapId> {
        if let Some(&id) = self.by_name.get(&name.text) {
            return Some(id);
        }
        if self.list.len() == MAX_MAPS {
            issues.push(Issue::new(name.span, format!("too many maps: at most {MAX_MAPS} are allowed")));
            return None;
        }
        let id = MapId(self.list.len());
        self.list.push(MapInfo { name: name.text.clone(), first: name.span, keys: None, value: None });
        self.by_name.insert(name.text.clone(), id);
        Some(id)
    }

    /// False, with an error, for a map no statement assigns.
    pub fn check_assigned(&self, name: &Name, issues: &mut Vec<Issue>) -> bool {
        if self.assigned.contains(&name.text) {
            return true;
        }
        issues.push(Issue::new(name.span, format!("map `@{}` is never assigned", name.text)));
        false
    }

    /// A use of map `id` with keys of these types (`None` where a key did not check) at `at`.
    pub fn use_keys(&mut self, id: MapId, keys_used: &[(Option<Type>, Span)], at: Span, issues: &mut Vec<Issue>) -> bool {
        let info = &mut self.list[id.0];
        if keys_used.len() > MAX_KEYS {
            issues.push(Issue::new(at, format!("a map key has at most {MAX_KEYS} parts; this one has {}", keys_used.len())));
            return false;
        }
        let Some((fixed, first)) = &info.keys else {
            if let Some(types) = keys_used.iter().map(|(ty, _)| *ty).collect::<Option<Vec<_>>>() {
                info.keys = Some((types, at));
            }
            return true;
        };
        let note = format!("`@{}` was first used here", info.name);
        if fixed.len() != keys_used.len() {
            let message = format!("map `@{}` is used with {} here, but with {} where it was first used", info.name, keys(keys_used.len()), keys(fixed.len()));
            issues.push(Issue::new(at, message).note(Some(*first), note));
            return false;
        }
        let mut ok = true;
        for (i, ((ty, span), want)) in keys_used.iter().zip(fixed).enumerate() {
            if let Some(ty) = ty.filter(|ty| !ty.same_kind(*want)) {
                let message = format!("key {} of `@{}` is {ty} here, but {want} where the map was first used", i + 1, info.name);
                issues.push(Issue::new(*span, message).note(Some(*first), note.clone()));
                ok = false;
            }
        }
        ok
    }

    /// An assignment of `kind` values to map `id`, written at `at`.
    pub fn assign(&mut self, id: MapId, kind: ValueKind, at: Span, issues: &mut Vec<Issue>) -> bool {
        let info = &mut self.list[id.0];
        match &info.value {
            None => {
                info.value = Some((kind, at));
                true
            }
            // An int map keeps the sign it was first given, as bpftrace's.
            Some((fixed, _)) if fixed.same_kind(kind) => true,
            Some((fixed, first)) => {
                let message = format!("map `@{}` was first given {fixed} values, not {kind}", info.name);
                issues.push(Issue::new(at, message).note(Some(*first), format!("`@{}` first given its values here", info.name)));
                false
            }
        }
    }

    /// The type a read of map `id` at `at` gives, with an error if it has none or holds an
    /// aggregation.
    pub fn read(&mut self, id: MapId, at: Span, issues: &mut Vec<Issue>) -> Option<Type> {
        let info = &self.list[id.0];
        let kind = match (&info.value, self.hints.get(&info.name)) {
            (Some((kind, _)), _) => Some(*kind),
            (None, Some(hint)) => {
                self.used_hints.insert(info.name.clone(), *hint);
                Some(*hint)
            }
            // Typed by no assignment yet, not even by one that reads it (`@n = @n + 1`): an
            // integer, as bpftrace takes it (a map reads 0 before it is set), unless the
            // round's end finds it otherwise.
            (None, None) if self.assigned.contains(&info.name) => {
                let int = ValueKind::Plain(Type::Int);
                self.used_hints.insert(info.name.clone(), int);
                Some(int)
            }
            (None, None) => None,
        };
        let message = match kind {
            Some(ValueKind::Plain(ty)) => return Some(ty),
            Some(agg) => format!("map `@{}` holds {agg} aggregations, which cannot be read in an expression; `print(@{})` shows them", info.name, info.name),
            None => format!("map `@{}` is never assigned", info.name),
        };
        issues.push(Issue::new(at, message));
        None
    }

    /// What each map's values ended up being.
    pub fn values(&self) -> Hints {
        self.list.iter().filter_map(|m| m.value.map(|(kind, _)| (m.name.clone(), kind))).collect()
    }
}

/// Names of the maps some statement of `script` assigns.
pub(super) fn assigned(script: &Script) -> HashSet<String> {
    fn walk(stmts: &[Stmt], out: &mut HashSet<String>) {
        for stmt in stmts {
            match &stmt.kind {
                StmtKind::Assign { target: Target::Map(map), .. } => {
                    out.insert(map.name.text.clone());
                }
                StmtKind::If { arms, els } => {
                    arms.iter().for_each(|arm| walk(&arm.body, out));
                    els.iter().for_each(|els| walk(els, out));
                }
                _ => {}
            }
        }
    }
    let mut out = HashSet::new();
    script.probes.iter().for_each(|p| walk(&p.body, &mut out));
    out
}
