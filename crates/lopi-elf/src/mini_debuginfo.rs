//! MiniDebugInfo (`.gnu_debugdata`): an xz-compressed ELF file, inside a stripped file, whose
//! `.symtab` names the functions `.dynsym` does not (Fedora and its derivatives ship it; gdb
//! and elfutils read it). Decoded with liblzma, within limits: the section is untrusted
//! input, and a few kilobytes of xz can claim gigabytes.
use object::read::elf::{FileHeader as _, SectionHeader as _};
use object::{elf, LittleEndian as LE};
use std::io::Read as _;

/// The decoder's memory limit (xz's dictionary; `xz -9` needs 64 MiB).
const MEMORY_LIMIT: u64 = 128 << 20;
/// The largest decoded file accepted: real ones are a few hundred kilobytes (libc's, 75 KB).
const OUTPUT_LIMIT: u64 = 64 << 20;

/// The ELF file held in `data`'s `.gnu_debugdata` section; `None` when there is none, or it
/// does not decode within the limits.
pub(crate) fn embedded_elf(data: &[u8]) -> Option<Vec<u8>> {
    let header = elf::FileHeader64::<LE>::parse(data).ok()?;
    let sections = header.sections(LE, data).ok()?;
    let (_, section) = sections.section_by_name(LE, b".gnu_debugdata")?;
    decompress(section.data(LE, data).ok()?)
}

/// `xz`'s bytes decoded, if they decode whole within the limits.
fn decompress(xz: &[u8]) -> Option<Vec<u8>> {
    let stream = liblzma::stream::Stream::new_stream_decoder(MEMORY_LIMIT, liblzma::stream::CONCATENATED).ok()?;
    let mut out = Vec::new();
    liblzma::read::XzDecoder::new_stream(xz, stream).take(OUTPUT_LIMIT + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= OUTPUT_LIMIT).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_within_limits_and_refuses_garbage() {
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(&b"\x7fELF symbols"[..], 6).read_to_end(&mut xz).unwrap();
        assert_eq!(decompress(&xz).as_deref(), Some(&b"\x7fELF symbols"[..]));
        assert_eq!(decompress(&xz[..xz.len() - 3]), None, "a truncated stream");
        assert_eq!(decompress(b"not xz at all"), None);
        // 65 MiB of zeros compress to about 10 KB: more than the limit, refused.
        let mut bomb = Vec::new();
        liblzma::read::XzEncoder::new(std::io::repeat(0).take(OUTPUT_LIMIT + 1), 1).read_to_end(&mut bomb).unwrap();
        assert!(bomb.len() < 1 << 20);
        assert_eq!(decompress(&bomb), None, "output beyond the limit");
    }
}
