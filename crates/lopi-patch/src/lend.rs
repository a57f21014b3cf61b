//! Room for a bounce where no padding is near (tightly packed cold code): a neighbouring
//! entry site moves more of its instructions, ten bytes or more, and the bytes after its
//! jump, dead once the jump is written (no branch targets them), hold the bounce. The
//! bounce's patch is written inside the neighbour's, so an installer sees one patch there;
//! a neighbour that is not placed takes the sites that borrowed its room with it.
use crate::gaps::Gaps;
use crate::targets::Targets;
use crate::entry::entry_instructions;
use crate::{CodePatch, Point, Site, Tactic};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::JMP32_LEN;
use std::collections::HashSet;

/// Makes room for a `JMP32_LEN`-byte bounce starting in `[lo, hi]` by lengthening one entry
/// site of `sites` that has not lent yet (`lent`: their addresses); the room is added to
/// `gaps`. False when no site can lend.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lend_room(
    module: &ElfModule<'_>,
    sites: &mut [Site],
    lent: &mut HashSet<Svma>,
    ends: &[u64],
    targets: &Targets,
    gaps: &mut Gaps,
    lo: u64,
    hi: u64,
) -> bool {
    let want = 2 * JMP32_LEN;
    for site in sites.iter_mut() {
        let tail = site.patch_at.0 + JMP32_LEN as u64;
        // Entry sites move at most 64 bytes.
        if site.point != Point::Entry(Tactic::Jmp32) || site.bounce.is_some() || tail > hi || tail + 64 < lo || lent.contains(&site.patch_at) {
            continue;
        }
        let function = &module.functions[site.function];
        let Ok(entry) = entry_instructions(module, function, ends[site.function], targets, want) else { continue };
        let end = site.patch_at.0 + entry.len as u64;
        let slot = tail.max(lo);
        if entry.patch_at != site.patch_at || entry.len < want || slot > hi || slot + JMP32_LEN as u64 > end {
            continue;
        }
        if !gaps.lend(tail, end) {
            continue;
        }
        lent.insert(site.patch_at);
        let len = entry.len;
        *site = entry.into_site(site.function, Tactic::Jmp32, len, None);
        return true;
    }
    false
}

/// Writes each patch that lies inside another (a bounce in a lent room) into that one.
pub(crate) fn merge_nested(mut patches: Vec<CodePatch>) -> Vec<CodePatch> {
    patches.sort_by_key(|p| (p.at, std::cmp::Reverse(p.bytes.len())));
    let mut out: Vec<CodePatch> = Vec::with_capacity(patches.len());
    for p in patches {
        if let Some(host) = out.last_mut() {
            let offset = p.at.0.wrapping_sub(host.at.0) as usize;
            if p.at >= host.at && offset + p.bytes.len() <= host.bytes.len() {
                host.bytes[offset..offset + p.bytes.len()].copy_from_slice(&p.bytes);
                continue;
            }
        }
        out.push(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(at: u64, bytes: &[u8]) -> CodePatch {
        CodePatch { at: Svma(at), bytes: bytes.to_vec(), original: vec![0; bytes.len()] }
    }

    #[test]
    fn a_bounce_inside_a_lent_room_is_written_into_its_host() {
        let host = patch(0x100, &[0xe9, 1, 2, 3, 4, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc]);
        let bounce = patch(0x106, &[0xe9, 9, 9, 9, 9]);
        let other = patch(0x10c, &[0xeb, 0x10]);
        let merged = merge_nested(vec![other.clone(), bounce, host]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].at, Svma(0x100));
        assert_eq!(merged[0].bytes, [0xe9, 1, 2, 3, 4, 0xcc, 0xe9, 9, 9, 9, 9, 0xcc]);
        assert_eq!(merged[0].original.len(), 12);
        assert_eq!(merged[1].bytes, other.bytes);
    }
}
