//! Locals of one probe body: numbered on first assignment, which also fixes their type, and
//! tracked as assigned or not along every path, so that no read can see a value from another
//! run of the probe.
use crate::ast::Name;
use crate::diag::{Issue, Span};
use crate::ir::{Local, LocalId, Type};
use crate::limits::MAX_LOCALS;
use std::collections::{HashMap, HashSet};

struct Slot {
    name: String,
    /// `None` when the first assignment's value did not check.
    ty: Option<Type>,
    first: Span,
}

#[derive(Default)]
pub(super) struct Locals {
    slots: Vec<Slot>,
    by_name: HashMap<String, LocalId>,
    /// Per slot: assigned on every path to here.
    assigned: Vec<bool>,
    /// Locals refused past [`MAX_LOCALS`]: their reads are not errors of their own.
    refused: HashSet<String>,
}

impl Locals {
    /// An assignment of a `ty` value to `name`; `None` past [`MAX_LOCALS`].
    pub fn assign(&mut self, name: &Name, ty: Option<Type>, issues: &mut Vec<Issue>) -> Option<LocalId> {
        let id = match self.by_name.get(&name.text) {
            Some(&id) => id,
            None => {
                if self.slots.len() == MAX_LOCALS {
                    issues.push(Issue::new(name.span, format!("too many locals in one probe: at most {MAX_LOCALS} are allowed")));
                    self.refused.insert(name.text.clone());
                    return None;
                }
                let id = LocalId(self.slots.len());
                self.slots.push(Slot { name: name.text.clone(), ty: None, first: name.span });
                self.by_name.insert(name.text.clone(), id);
                id
            }
        };
        let slot = &mut self.slots[id.0];
        match (slot.ty, ty) {
            (Some(old), Some(new)) if !old.same_kind(new) => {
                let message = format!("`${}` holds {old} values (from its first assignment), not {new}", slot.name);
                issues.push(Issue::new(name.span, message).note(Some(slot.first), "first assigned here"));
            }
            (None, Some(_)) => slot.ty = ty,
            _ => {}
        }
        self.assigned.resize(self.slots.len(), false);
        self.assigned[id.0] = true;
        Some(id)
    }

    /// A read of `$name` at `span`: its slot and type, or an error if it may be unassigned.
    pub fn read(&self, name: &str, span: Span, issues: &mut Vec<Issue>) -> Option<(LocalId, Type)> {
        let Some(&id) = self.by_name.get(name) else {
            if self.refused.contains(name) {
                return None;
            }
            issues.push(Issue::new(span, format!("`${name}` is used before it is assigned")));
            return None;
        };
        if !self.assigned.get(id.0).copied().unwrap_or(false) {
            issues.push(Issue::new(span, format!("`${name}` is not assigned on every path to this use")));
            return None;
        }
        self.slots[id.0].ty.map(|ty| (id, ty))
    }

    /// What is assigned on every path to here, to come back to at the start of a branch.
    pub fn snapshot(&self) -> Vec<bool> {
        self.assigned.clone()
    }

    pub fn restore(&mut self, snapshot: &[bool]) {
        self.assigned.clear();
        self.assigned.extend_from_slice(snapshot);
        self.assigned.resize(self.slots.len(), false);
    }

    /// Where branches meet: assigned if assigned on all of `paths`.
    pub fn join(&mut self, paths: &[Vec<bool>]) {
        let n = self.slots.len();
        self.assigned = (0..n).map(|i| paths.iter().all(|p| p.get(i).copied().unwrap_or(false))).collect();
    }

    /// The locals. One whose type never became known follows from an earlier error; were there
    /// none, it gets its own.
    pub fn finish(self, issues: &mut Vec<Issue>) -> Vec<Local> {
        let mut out = Vec::new();
        for slot in self.slots {
            match slot.ty {
                Some(ty) => out.push(Local { name: slot.name, ty }),
                None if issues.is_empty() => issues.push(Issue::new(slot.first, format!("the type of `${}` could not be inferred", slot.name))),
                None => {}
            }
        }
        out
    }
}
