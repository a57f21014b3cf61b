//! A [`Selection`] as bytes, for lopi's plan cache. The moved instructions are not stored:
//! each site keeps the range of original code they were made of, decoded again from the
//! module when read back, so stored bytes can never put instructions the file does not have
//! into a trampoline. The rest is checked against the module: every index must name one of
//! its functions and every patch must have a size a site can have, so that a damaged or stale
//! entry can never make an installer index out of bounds or write past a site. (The cache
//! also checksums its entries and keys them by lopi's build; these checks are what remains
//! if both were defeated.)
use crate::blocks::FunctionBlocks;
use crate::syscalls::NO_FUNCTION;
use crate::{Insn, Outcome, Point, Selection, Site, SyscallSite, TimingOutcome};
use lopi_elf::{ElfModule, Svma};
use lopi_x86::Flow;

#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error("cannot encode or decode the selection: {0}")]
    Format(#[from] postcard::Error),
    #[error("{0} bytes follow the stored selection")]
    Trailing(usize),
    #[error("the stored selection does not fit the module: {0}")]
    Mismatch(&'static str),
}

/// What is stored of a selection; its sites' moved instructions are left out.
#[derive(serde::Serialize)]
struct Stored<'s> {
    sites: &'s [Site],
    outcomes: &'s [Outcome],
    timing: &'s [TimingOutcome],
    syscalls: &'s [SyscallSite],
    blocks: &'s [FunctionBlocks],
}

/// [`Stored`], read back.
#[derive(serde::Deserialize)]
struct Read {
    sites: Vec<Site>,
    outcomes: Vec<Outcome>,
    timing: Vec<TimingOutcome>,
    syscalls: Vec<SyscallSite>,
    blocks: Vec<FunctionBlocks>,
}

/// More bytes than any site covers (an entry's instructions up to the 5th byte, plus one).
const MAX_COVERED: usize = 64;
/// The largest code a site moves: a whole function (the planner's limit is 4 KiB).
const MAX_MOVED: usize = 1 << 16;

impl Selection {
    pub fn to_bytes(&self) -> Result<Vec<u8>, StoredError> {
        Ok(postcard::to_stdvec(&Stored { sites: &self.sites, outcomes: &self.outcomes, timing: &self.timing, syscalls: &self.syscalls, blocks: &self.blocks })?)
    }

    /// Reads what [`Selection::to_bytes`] wrote for `module`.
    pub fn from_bytes(bytes: &[u8], module: &ElfModule<'_>) -> Result<Selection, StoredError> {
        let (stored, rest): (Read, _) = postcard::take_from_bytes(bytes)?;
        if !rest.is_empty() {
            return Err(StoredError::Trailing(rest.len()));
        }
        let mut selection = Selection { sites: stored.sites, outcomes: stored.outcomes, timing: stored.timing, syscalls: stored.syscalls, blocks: stored.blocks, entry_probes: Default::default() };
        selection.check(module.functions.len())?;
        for site in &mut selection.sites {
            site.relocated = moved(module, site.moved_from, site.moved_len)
                .ok_or(StoredError::Mismatch("a site's moved code does not decode as it did when planned"))?;
            if let Some((from, len)) = site.copy_from {
                let copy = leaf(module, from, len).ok_or(StoredError::Mismatch("a function's copy does not decode as it did when planned"))?;
                site.copy = Some(copy);
            }
        }
        Ok(selection)
    }

    fn check(&self, functions: usize) -> Result<(), StoredError> {
        let fail = |what| Err(StoredError::Mismatch(what));
        if self.outcomes.len() != functions || self.timing.len() != functions {
            return fail("another number of functions");
        }
        let no_function = |s: &Site| matches!(s.point, Point::Syscall(_)) && s.function == NO_FUNCTION;
        if self.syscalls.iter().any(|s| s.function.is_some_and(|f| f >= functions)) {
            return fail("a system-call site names a function that does not exist");
        }
        if self.blocks.iter().any(|b| b.function >= functions) {
            return fail("blocks name a function that does not exist");
        }
        for site in &self.sites {
            if (site.function >= functions && !no_function(site)) || site.owners.iter().any(|&o| o >= functions) {
                return fail("a site names a function that does not exist");
            }
            let moved = site.moved_from.0..site.moved_from.0.saturating_add(site.moved_len as u64);
            if site.syscalls.iter().any(|ip| !moved.contains(ip)) {
                return fail("a site probes a system call outside the code it moves");
            }
            let copy_len = site.copy_from.map_or(0, |(_, len)| len);
            if site.covered == 0 || site.covered > MAX_COVERED || site.nops.len() > MAX_COVERED || site.moved_len > MAX_MOVED || copy_len > MAX_MOVED {
                return fail("a site covers an impossible number of bytes");
            }
        }
        Ok(())
    }
}

/// The instructions the planner moved for `len` bytes of code at `from`: decoded whole, a
/// call (only ever the last, ending an entry site) emulated as the planner emulates it.
fn moved(module: &ElfModule<'_>, from: Svma, len: usize) -> Option<Vec<Insn>> {
    let bytes = module.bytes_from(from)?.get(..len)?;
    let mut insns = Vec::new();
    let mut at = 0;
    for insn in lopi_x86::decode(bytes, from.0) {
        at += insn.len();
        if matches!(lopi_x86::flow(&insn), Flow::Call | Flow::IndirectCall) {
            if at != len {
                return None;
            }
            insns.extend(lopi_x86::emulate_call(&insn)?);
        } else {
            insns.push(insn);
        }
    }
    (at == len).then_some(insns)
}

/// A clean copy's instructions: `len` bytes at `from` that decode whole, with no call or
/// indirect jump (what the planner copies).
fn leaf(module: &ElfModule<'_>, from: Svma, len: usize) -> Option<Vec<Insn>> {
    let bytes = module.bytes_from(from)?.get(..len)?;
    let insns: Vec<Insn> = lopi_x86::decode(bytes, from.0).collect();
    let whole = insns.iter().map(|i| i.len()).sum::<usize>() == len;
    let leaf = insns.iter().all(|i| !matches!(lopi_x86::flow(i), Flow::Call | Flow::IndirectCall | Flow::IndirectJump));
    (whole && leaf).then_some(insns)
}
