//! Address kinds, after samply: never pass a bare `u64` where one of these is meant.
use serde::{Deserialize, Serialize};

/// Stated virtual memory address: an address as the ELF file gives it (`p_vaddr`, `st_value`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Svma(pub u64);

/// Offset of a byte in the ELF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct FileOffset(pub u64);

impl std::ops::Add<u64> for Svma {
    type Output = Svma;

    fn add(self, n: u64) -> Svma {
        Svma(self.0.wrapping_add(n))
    }
}
