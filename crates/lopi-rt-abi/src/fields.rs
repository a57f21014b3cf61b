//! Reading little-endian fields, for the host side's decoders of the shared layouts.

/// Little-endian field reader for the host side's decoders.
pub(crate) struct Fields<'a>(pub(crate) &'a [u8]);

impl Fields<'_> {
    pub(crate) fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.0[at], self.0[at + 1]])
    }

    pub(crate) fn u32(&self, at: usize) -> u32 {
        let mut v = [0u8; 4];
        v.copy_from_slice(&self.0[at..at + 4]);
        u32::from_le_bytes(v)
    }

    pub(crate) fn u64(&self, at: usize) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.0[at..at + 8]);
        u64::from_le_bytes(v)
    }
}
