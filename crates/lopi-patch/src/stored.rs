//! A [`Selection`] as bytes, for lopi's plan cache. What is read back is checked against the
//! module before use: every index must name one of its functions and every patch must have
//! a size a site can have, so that a damaged or stale entry can never make an installer
//! index out of bounds or write past a site. (The cache checksums its entries and keys them
//! by lopi's build; this check is what remains if both were defeated.)
use crate::Selection;
use lopi_elf::ElfModule;

#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error("cannot encode or decode the selection: {0}")]
    Format(#[from] postcard::Error),
    #[error("{0} bytes follow the stored selection")]
    Trailing(usize),
    #[error("the stored selection does not fit the module: {0}")]
    Mismatch(&'static str),
}

/// More bytes than any site covers (an entry's instructions up to the 5th byte, plus one).
const MAX_COVERED: usize = 64;

impl Selection {
    pub fn to_bytes(&self) -> Result<Vec<u8>, StoredError> {
        Ok(postcard::to_stdvec(self)?)
    }

    /// Reads what [`Selection::to_bytes`] wrote for `module`.
    pub fn from_bytes(bytes: &[u8], module: &ElfModule<'_>) -> Result<Selection, StoredError> {
        let (selection, rest): (Selection, _) = postcard::take_from_bytes(bytes)?;
        if !rest.is_empty() {
            return Err(StoredError::Trailing(rest.len()));
        }
        selection.check(module.functions.len())?;
        Ok(selection)
    }

    fn check(&self, functions: usize) -> Result<(), StoredError> {
        let fail = |what| Err(StoredError::Mismatch(what));
        if self.outcomes.len() != functions || self.timing.len() != functions {
            return fail("another number of functions");
        }
        for site in &self.sites {
            if site.function >= functions || site.owners.iter().any(|&o| o >= functions) {
                return fail("a site names a function that does not exist");
            }
            if site.covered == 0 || site.covered > MAX_COVERED || site.nops.len() > MAX_COVERED {
                return fail("a site covers an impossible number of bytes");
            }
        }
        Ok(())
    }
}
