//! C++ exception landing pads, from the language-specific data areas (LSDAs, in
//! `.gcc_except_table`) that `.eh_frame` FDEs point to.
//!
//! When an exception passes a call site, the personality routine makes the unwinder resume
//! at that call site's landing pad (a `catch` or a cleanup that runs destructors), in the
//! middle of the function: a branch target that no instruction names.
//!
//! The format is GCC's (libstdc++ `parse_lsda_header` and `__gxx_personality_v0`):
//!
//! ```text
//! u8 LPStart encoding, [LPStart]       landing pads are relative to LPStart (default: FDE start)
//! u8 TType encoding, [uleb128 offset]  type table, not needed here
//! u8 call-site encoding, uleb128 call-site table length
//! call sites: {start, length, landing pad, uleb128 action}; a landing pad of 0 means none
//! ```
use gimli::{constants, DwEhPe, EndianSlice, LittleEndian, Reader, ReaderOffset};

type Bytes<'a> = EndianSlice<'a, LittleEndian>;

/// Landing pads of the LSDA at the start of `bytes`, which is loaded at `addr`, for the FDE
/// starting at `fde_start`.
///
/// Pads read before the table turns out malformed are kept: the personality routine walks the
/// records in the same order, so they are as real as they would be in a well-formed table, and
/// an extra target only makes the planner more careful. Whatever follows the damage (all of
/// it, if the header is unreadable or uses an encoding below that compilers do not emit) is
/// lost. That is not safe in general (a patch over a lost pad breaks that `catch`), but only
/// tables no compiler wrote are affected, and libgcc, which reads them without bounds checks,
/// could not use them reliably either.
pub(crate) fn landing_pads(bytes: &[u8], addr: u64, fde_start: u64) -> Vec<u64> {
    let mut pads = Vec::new();
    let _ = read_call_sites(bytes, addr, fde_start, &mut pads);
    pads
}

fn read_call_sites(bytes: &[u8], addr: u64, fde_start: u64, pads: &mut Vec<u64>) -> gimli::Result<()> {
    let start = Bytes::new(bytes, LittleEndian);
    let mut r = start;
    let lp_start = match omittable(r.read_u8()?) {
        Some(encoding) => read_encoded(&mut r, encoding, start, addr)?,
        None => fde_start,
    };
    if omittable(r.read_u8()?).is_some() {
        r.read_uleb128()?;
    }
    let encoding = DwEhPe(r.read_u8()?);
    // The action table follows the call sites: the bound keeps records from running into it.
    // A length past the end of the data still leaves the records before the end readable.
    let len = usize::from_u64(r.read_uleb128()?)?.min(r.len());
    let mut table = r.split(len)?;
    while !table.is_empty() {
        read_encoded(&mut table, encoding, start, addr)?; // start of the call site
        read_encoded(&mut table, encoding, start, addr)?; // its length
        let pad = read_encoded(&mut table, encoding, start, addr)?;
        table.read_uleb128()?; // action
        if pad != 0 {
            pads.push(lp_start.wrapping_add(pad));
        }
    }
    Ok(())
}

/// `None` for `DW_EH_PE_omit`, which only means "absent" where a field is optional.
fn omittable(encoding: u8) -> Option<DwEhPe> {
    let encoding = DwEhPe(encoding);
    (!encoding.is_absent()).then_some(encoding)
}

/// One value in a `DW_EH_PE_*` encoding, as libgcc's `read_encoded_value_with_base` reads it:
/// a zero stays zero whatever the encoding, so that "no landing pad" survives `pcrel`.
///
/// Only the applications compilers use in LSDAs are accepted: absolute and `pcrel`. The others
/// have no base an x86-64 unwinder agrees on (libgcc leaves the data base at 0 there, and reads
/// call-site fields with no context at all), so guessing one would invent targets.
fn read_encoded(r: &mut Bytes<'_>, encoding: DwEhPe, start: Bytes<'_>, addr: u64) -> gimli::Result<u64> {
    let here = addr.wrapping_add(r.offset_from(start) as u64);
    let value = match encoding.format() {
        constants::DW_EH_PE_absptr | constants::DW_EH_PE_udata8 => r.read_u64()?,
        constants::DW_EH_PE_uleb128 => r.read_uleb128()?,
        constants::DW_EH_PE_udata2 => r.read_u16()?.into(),
        constants::DW_EH_PE_udata4 => r.read_u32()?.into(),
        // Signed values are sign-extended to 64 bits, then added modulo 2^64.
        constants::DW_EH_PE_sleb128 => r.read_sleb128()? as u64,
        constants::DW_EH_PE_sdata2 => i64::from(r.read_i16()?) as u64,
        constants::DW_EH_PE_sdata4 => i64::from(r.read_i32()?) as u64,
        constants::DW_EH_PE_sdata8 => r.read_i64()? as u64,
        _ => return Err(gimli::Error::UnknownPointerEncoding(encoding)),
    };
    if value == 0 {
        return Ok(0);
    }
    if encoding.is_indirect() {
        return Err(gimli::Error::UnsupportedPointerEncoding);
    }
    match encoding.application() {
        constants::DW_EH_PE_absptr => Ok(value),
        constants::DW_EH_PE_pcrel => Ok(here.wrapping_add(value)),
        _ => Err(gimli::Error::UnsupportedPointerEncoding),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FDE: u64 = 0x1000;
    const AT: u64 = 0x5000;

    /// Two call sites with pads at +0x40 and +0x90 (two uleb128 bytes) and one without;
    /// LPStart and the type table omitted (what GCC emits for cleanups only).
    fn uleb_lsda() -> Vec<u8> {
        let sites = [0x04, 0x05, 0x40, 0x00, 0x10, 0x05, 0x00, 0x00, 0x20, 0x08, 0x90, 0x01, 0x01];
        let mut lsda = vec![0xff, 0xff, 0x01, sites.len() as u8];
        lsda.extend(sites);
        lsda.extend([0x01, 0x00]); // action table, not part of the call sites
        lsda
    }

    #[test]
    fn uleb128_call_sites_relative_to_the_fde_start() {
        assert_eq!(landing_pads(&uleb_lsda(), AT, FDE), [FDE + 0x40, FDE + 0x90]);
    }

    #[test]
    fn udata4_call_sites_with_a_type_table() {
        // TType udata4 with its uleb128 offset, then one 13-byte udata4 record.
        let mut lsda = vec![0xff, 0x03, 0x11, 0x03, 13];
        for field in [0x10u32, 0x20, 0x1234] {
            lsda.extend(field.to_le_bytes());
        }
        lsda.push(0x01);
        assert_eq!(landing_pads(&lsda, AT, FDE), [FDE + 0x1234]);
    }

    #[test]
    fn pcrel_lp_start_overrides_the_fde_start() {
        // LPStart pcrel|sdata4 = -0x100 from its own field (AT + 1).
        let mut lsda = vec![0x1b];
        lsda.extend((-0x100i32).to_le_bytes());
        lsda.extend([0xff, 0x01, 0x04, 0x00, 0x01, 0x08, 0x00]);
        assert_eq!(landing_pads(&lsda, AT, FDE), [AT + 1 - 0x100 + 8]);
    }

    #[test]
    fn unsupported_bases_give_no_pads() {
        // LPStart datarel|sdata4: no base to add.
        let mut lsda = vec![0x3b];
        lsda.extend(8i32.to_le_bytes());
        lsda.extend([0xff, 0x01, 0x04, 0x00, 0x01, 0x08, 0x00]);
        assert!(landing_pads(&lsda, AT, FDE).is_empty());
    }

    #[test]
    fn truncated_tables_keep_the_pads_read_before_the_cut() {
        let full = uleb_lsda();
        let all = landing_pads(&full, AT, FDE);
        for cut in 0..full.len() {
            let pads = landing_pads(&full[..cut], AT, FDE);
            assert!(all.starts_with(&pads), "cut at {cut}: {pads:x?}");
        }
        // The first record ends at byte 8, the last at 16.
        assert_eq!(landing_pads(&full[..8], AT, FDE), [FDE + 0x40]);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2000 {
            let bytes: Vec<u8> = (0..len % 64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            landing_pads(&bytes, u64::MAX - 3, u64::MAX);
        }
        // A call-site table length of 2^63 - 1 over a single record, and an overlong uleb128.
        let huge = [0xff, 0xff, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x01, 0x08, 0x00];
        assert_eq!(landing_pads(&huge, 0, 0), [8]);
        landing_pads(&[0xff, 0xff, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], 0, 0);
    }
}
