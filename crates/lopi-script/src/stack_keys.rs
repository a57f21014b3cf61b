//! How many frames each stack part of a map's key keeps: the deepest stack any use of the map
//! puts there. A key is packed part after part, a stack part as its frame count and that many
//! frames, so that `@[pystack(1)]` hashes and compares 16 bytes, not a whole 1 KiB
//! `StackValue` (which locals and printing keep).
use crate::codegen::abi::STACK_FRAMES;
use crate::ir::{Expr, ExprKind, MapId, Program, Type};
use crate::walk::{self, Visit};

/// Per map, per part of its key: the frames a stack part keeps (0 for other parts).
pub fn key_frames(program: &Program) -> Vec<Vec<u8>> {
    let mut keys = KeyFrames(program.maps.iter().map(|m| vec![0; m.keys.len()]).collect());
    for probe in &program.probes {
        walk::probe(&mut keys, probe);
    }
    keys.0
}

/// The frames a stack expression holds at most: its `ustack(n)`/`pystack(n)` depth, or all of
/// them for a local or a value of unknown depth.
fn depth(expr: &Expr) -> u8 {
    match &expr.kind {
        ExprKind::Ustack { depth } | ExprKind::Pystack { depth, .. } => *depth,
        ExprKind::Ternary { then, els, .. } => depth(then).max(depth(els)),
        _ => STACK_FRAMES as u8,
    }
}

struct KeyFrames(Vec<Vec<u8>>);

impl Visit for KeyFrames {
    fn map_key(&mut self, map: MapId, keys: &[Expr]) {
        for (i, key) in keys.iter().enumerate().filter(|(_, k)| k.ty == Type::Stack) {
            if let Some(part) = self.0.get_mut(map.0).and_then(|m| m.get_mut(i)) {
                *part = (*part).max(depth(key));
            }
        }
    }
}
