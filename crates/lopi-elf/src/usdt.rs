//! SystemTap's static markers (USDT, `<sys/sdt.h>`): each `DTRACE_PROBEn`/`STAP_PROBEn` is a
//! `nop` in the code and a note in `.note.stapsdt` (type 3, owner `stapsdt`) saying where the
//! `nop` is, the marker's provider and name, where its values are at the `nop` (an argument
//! string of the assembler's operands, see [`crate::usdt_args`]), and its semaphore: a `u16` in
//! `.probes` that guarded markers (`if (PROV_NAME_ENABLED())`) read, so they fire only while a
//! tracer has raised it.
//!
//! The note's addresses are link-time ones; `base` is where the linker put `.stapsdt.base`,
//! so a file moved since (prelink) is corrected by that section's address now.
use crate::usdt_args::{self, UsdtArg};
use object::elf;
use object::read::elf::{FileHeader as _, SectionHeader as _};
use object::LittleEndian as LE;

/// One marker of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtMarker {
    pub provider: String,
    pub name: String,
    /// The `nop`'s file address.
    pub addr: u64,
    /// The semaphore's file address; 0 for a marker without one.
    pub semaphore: u64,
    /// The argument string as the note holds it (`-4@%eax 8@-16(%rbp)`).
    pub args_text: String,
    /// Its arguments, or why they cannot be read.
    pub args: Result<Vec<UsdtArg>, String>,
}

impl UsdtMarker {
    /// `provider:name`.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }
}

/// The note type of a marker.
const NT_STAPSDT: u32 = 3;

/// The markers of the ELF file `data`, in the notes' order; none for a file that has no
/// `.note.stapsdt` or does not parse. Never panics: a note that runs past its section ends the
/// list, a marker without its three names is left out.
pub fn markers(data: &[u8]) -> Vec<UsdtMarker> {
    let Ok(header) = elf::FileHeader64::<LE>::parse(data) else { return Vec::new() };
    let Ok(sections) = header.sections(LE, data) else { return Vec::new() };
    let named = |name: &[u8]| sections.iter().find(|s| sections.section_name(LE, s).is_ok_and(|n| n == name));
    let Some(notes) = named(b".note.stapsdt").and_then(|s| s.data(LE, data).ok()) else { return Vec::new() };
    let base_now = named(b".stapsdt.base").map(|s| s.sh_addr(LE));
    parse_notes(notes, base_now)
}

/// The markers in the bytes of a `.note.stapsdt` section; `base_now` is the address of
/// `.stapsdt.base` in the file (`None`: the file has none, addresses are taken as they are).
pub fn parse_notes(notes: &[u8], base_now: Option<u64>) -> Vec<UsdtMarker> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = notes.get(at..at.saturating_add(12)) {
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]) as usize;
        let (namesz, descsz, kind) = (word(0), word(4), word(8) as u32);
        let name_at = at + 12;
        let Some(desc_at) = name_at.checked_add(namesz.next_multiple_of(4)) else { break };
        let Some(next) = desc_at.checked_add(descsz.next_multiple_of(4)) else { break };
        let (Some(owner), Some(desc)) = (notes.get(name_at..name_at + namesz), notes.get(desc_at..desc_at.saturating_add(descsz))) else { break };
        if kind == NT_STAPSDT && owner == b"stapsdt\0" {
            out.extend(marker(desc, base_now));
        }
        at = next;
    }
    out
}

/// One note's description: pc, base and semaphore (8 bytes each), then provider, name and
/// argument string, each ending with a NUL.
fn marker(desc: &[u8], base_now: Option<u64>) -> Option<UsdtMarker> {
    let word = |i: usize| desc.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let (pc, base, semaphore) = (word(0)?, word(8)?, word(16)?);
    let mut strings = desc.get(24..)?.split(|&b| b == 0);
    let mut text = || strings.next().map(|s| String::from_utf8_lossy(s).into_owned());
    let (provider, name, args_text) = (text()?, text()?, text().unwrap_or_default());
    if provider.is_empty() || name.is_empty() {
        return None;
    }
    let shift = base_now.map_or(0, |now| now.wrapping_sub(base));
    Some(UsdtMarker {
        provider,
        name,
        addr: pc.wrapping_add(shift),
        semaphore: if semaphore == 0 { 0 } else { semaphore.wrapping_add(shift) },
        args: usdt_args::parse(&args_text),
        args_text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usdt_args::Location;

    /// A note as the assembler writes it.
    fn note(pc: u64, base: u64, sem: u64, provider: &str, name: &str, args: &str) -> Vec<u8> {
        let mut desc = Vec::new();
        for w in [pc, base, sem] {
            desc.extend(w.to_le_bytes());
        }
        for s in [provider, name, args] {
            desc.extend(s.as_bytes());
            desc.push(0);
        }
        let mut out = Vec::new();
        out.extend(8u32.to_le_bytes());
        out.extend((desc.len() as u32).to_le_bytes());
        out.extend(NT_STAPSDT.to_le_bytes());
        out.extend(b"stapsdt\0");
        let len = desc.len();
        out.extend(desc);
        out.resize(out.len() + (len.next_multiple_of(4) - len), 0);
        out
    }

    #[test]
    fn notes_give_markers_moved_by_the_base() {
        let mut notes = note(0x1139, 0x2004, 0x4010, "myprov", "tick", "-4@%eax 8@-16(%rbp)");
        notes.extend(note(0x1150, 0x2004, 0, "myprov", "tock", ""));
        let markers = parse_notes(&notes, Some(0x2104));
        assert_eq!(markers.len(), 2);
        assert_eq!((markers[0].full_name().as_str(), markers[0].addr, markers[0].semaphore), ("myprov:tick", 0x1239, 0x4110));
        let args = markers[0].args.as_ref().unwrap();
        assert_eq!((args[0].size, args[0].signed, args[1].size), (4, true, 8));
        assert!(matches!(args[1].location, Location::Memory { disp: -16, symbol: None, .. }));
        assert_eq!((markers[1].addr, markers[1].semaphore, markers[1].args.as_ref().unwrap().len()), (0x1250, 0, 0));
        assert_eq!(parse_notes(&notes, None)[0].addr, 0x1139);
    }

    #[test]
    fn garbled_notes_never_panic() {
        let good = note(0x1139, 0x2004, 0x4010, "myprov", "tick", "-4@%eax 8@-16(%rbp) 4@$5 -8@8(%rax,%rdx,4) 8@foo+8(%rip)");
        // Every truncation, and every byte set to a few values that break lengths and strings.
        for len in 0..=good.len() {
            parse_notes(&good[..len], Some(0x2004));
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..good.len() {
            for value in [0u8, 0xff, b'@', b'(', b'%', b'$', b',', b'-', 0x7f] {
                let mut bad = good.clone();
                bad[i] = value;
                parse_notes(&bad, Some(0x2004));
            }
            // And random bytes over a random stretch.
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut bad = good.clone();
            for b in bad.iter_mut().skip(i).take((seed >> 60) as usize) {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                *b = (seed >> 56) as u8;
            }
            parse_notes(&bad, Some(0x2004));
        }
        let huge = [0xffu8; 12];
        assert!(parse_notes(&huge, None).is_empty());
        assert!(markers(b"\x7fELF garbage").is_empty());
    }
}
