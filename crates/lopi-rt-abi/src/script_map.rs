//! One thread's table of one probe-script map: an open-addressing hash table in a byte region
//! of the data file, written by the runtime's map helpers (one thread, no lock) and read by
//! the host, which merges the threads' tables when it prints.
//!
//! ```text
//! header (32 bytes)  key_size u32 | slot_size u32 | capacity u32 | max_entries u32 |
//!                    live u32 | deleted u32 | drops u64
//! entries            capacity x { state u32 | hash u32 | key, padded to 8 | slot, padded to 8 }
//! ```
//! `capacity` is a power of two at least twice `max_entries`, so that a probe sequence always
//! meets an empty entry. A key is never moved once inserted (the generated code holds its
//! slot's address until its update is done). Every access is bounds-checked through `get`: a
//! table that is not what its header says yields nothing, never a panic.

/// Bytes of the header.
pub const HEADER: usize = 32;
const KEY_SIZE: usize = 0;
const SLOT_SIZE: usize = 4;
const CAPACITY: usize = 8;
const MAX_ENTRIES: usize = 12;
const LIVE: usize = 16;
const DELETED: usize = 20;
const DROPS: usize = 24;

const EMPTY: u32 = 0;
const FULL: u32 = 1;
/// A deleted entry: probe sequences go on past it; an insert may reuse it.
const GONE: u32 = 2;

const fn padded(n: usize) -> usize {
    (n + 7) & !7
}

/// Bytes of one entry.
pub const fn entry_size(key_size: usize, slot_size: usize) -> usize {
    8 + padded(key_size) + padded(slot_size)
}

/// Entries of a table that holds up to `max_entries` keys.
pub const fn capacity(max_entries: u32) -> u32 {
    let want = if max_entries == 0 { 1 } else { max_entries as u64 * 2 };
    let c = want.next_power_of_two();
    if c > u32::MAX as u64 {
        0x8000_0000
    } else {
        c as u32
    }
}

/// Bytes of a table that holds up to `max_entries` keys of `key_size` bytes with
/// `slot_size`-byte values.
pub const fn table_size(key_size: usize, slot_size: usize, max_entries: u32) -> usize {
    HEADER + capacity(max_entries) as usize * entry_size(key_size, slot_size)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, b1, c, d]) => u32::from_le_bytes([a, b1, c, d]),
        _ => 0,
    }
}

fn set_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(dst) = b.get_mut(at..at + 4) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8) {
        Some(&[a, b1, c, d, e, f, g, h]) => u64::from_le_bytes([a, b1, c, d, e, f, g, h]),
        _ => 0,
    }
}

/// Eight bytes at a time, multiply and rotate (keys are mostly `str_size`-byte strings, their
/// tails zero): a 64-byte key is 8 steps. Nothing a compiler would vectorise (the runtime runs
/// without vector registers): 64-bit multiplies.
#[inline(always)]
fn hash(key: &[u8]) -> u32 {
    let mut h: u64 = 0x243f_6a88_85a3_08d3 ^ key.len() as u64;
    let mut step = |w: u64| h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31);
    let words = key.len() / 8;
    for (i, w) in key.chunks_exact(8).enumerate() {
        // A stack key is mostly zero words (its unused frames): those are skipped, and the
        // others mixed with their place.
        let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        if w != 0 {
            step(w ^ (i as u64).wrapping_mul(0xff51_afd7_ed55_8ccd));
        }
    }
    let mut tail = 0u64;
    for (i, &b) in key.iter().enumerate().skip(8 * words) {
        tail |= u64::from(b) << (8 * (i - 8 * words));
    }
    step(tail);
    (h ^ h >> 32) as u32
}

/// Whether two keys of one length are equal, eight bytes at a time (a byte loop would cost
/// more than the hash; the runtime has no `memcmp`).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let word = |w: &[u8]| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
    let (wa, wb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tails_equal = wa.remainder().iter().zip(wb.remainder()).all(|(x, y)| x == y);
    a.len() == b.len() && wa.zip(wb).all(|(x, y)| word(x) == word(y)) && tails_equal
}

/// The header's shape, if the table is as large as it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub key_size: usize,
    pub slot_size: usize,
    pub capacity: usize,
    pub max_entries: u32,
}

impl Shape {
    fn entry(&self) -> usize {
        entry_size(self.key_size, self.slot_size)
    }

    fn entry_at(&self, index: usize) -> usize {
        HEADER + index * self.entry()
    }

    fn key_at(&self, index: usize) -> usize {
        self.entry_at(index) + 8
    }

    fn slot_at(&self, index: usize) -> usize {
        self.key_at(index) + padded(self.key_size)
    }
}

/// Reads and checks `table`'s header.
#[inline(always)]
pub fn shape(table: &[u8]) -> Option<Shape> {
    let s = Shape {
        key_size: u32_at(table, KEY_SIZE) as usize,
        slot_size: u32_at(table, SLOT_SIZE) as usize,
        capacity: u32_at(table, CAPACITY) as usize,
        max_entries: u32_at(table, MAX_ENTRIES),
    };
    let fits = s.capacity.is_power_of_two() && s.capacity.checked_mul(s.entry()).and_then(|n| n.checked_add(HEADER)).is_some_and(|n| n <= table.len());
    (fits && s.key_size <= 1 << 20 && s.slot_size <= 1 << 20).then_some(s)
}

/// Makes `table` (at least [`table_size`] bytes, zeroed) an empty table. False when it is
/// too small.
pub fn init(table: &mut [u8], key_size: u32, slot_size: u32, max_entries: u32) -> bool {
    if table.len() < table_size(key_size as usize, slot_size as usize, max_entries) {
        return false;
    }
    set_u32(table, KEY_SIZE, key_size);
    set_u32(table, SLOT_SIZE, slot_size);
    set_u32(table, CAPACITY, capacity(max_entries));
    set_u32(table, MAX_ENTRIES, max_entries);
    true
}

/// Where `key` is, or where it would go (the first deleted entry on its way, else the empty
/// entry that ends it): `(index, found)`.
#[inline(always)]
fn probe(table: &[u8], s: &Shape, key: &[u8]) -> Option<(usize, bool)> {
    if key.len() != s.key_size {
        return None;
    }
    let h = hash(key);
    let mask = s.capacity - 1;
    let mut reuse = None;
    let mut i = h as usize & mask;
    for _ in 0..s.capacity {
        let at = s.entry_at(i);
        match u32_at(table, at) {
            EMPTY => return Some((reuse.unwrap_or(i), false)),
            FULL if u32_at(table, at + 4) == h && table.get(s.key_at(i)..s.key_at(i) + s.key_size).is_some_and(|k| same(k, key)) => return Some((i, true)),
            GONE if reuse.is_none() => reuse = Some(i),
            _ => {}
        }
        i = (i + 1) & mask;
    }
    reuse.map(|i| (i, false))
}

/// The value slot of `key`, inserted zeroed if absent; `None` when the table is full (the
/// drop is counted) or `key` has the wrong length.
pub fn slot<'t>(table: &'t mut [u8], key: &[u8]) -> Option<&'t mut [u8]> {
    slot_with(table, key, |dst, src| dst.copy_from_slice(src), |dst| dst.fill(0))
}

/// [`slot`], copying the key and zeroing the slot with `copy` and `zero`: the runtime's
/// own, which call no `memcpy` or `memset` (a flat blob cannot reach them).
#[inline(always)]
pub fn slot_with<'t>(table: &'t mut [u8], key: &[u8], copy: impl Fn(&mut [u8], &[u8]), zero: impl Fn(&mut [u8])) -> Option<&'t mut [u8]> {
    let s = shape(table)?;
    let (i, found) = probe(table, &s, key)?;
    if !found {
        let live = u32_at(table, LIVE);
        if live >= s.max_entries {
            let drops = u64_at(table, DROPS).wrapping_add(1);
            set_u32(table, DROPS, drops as u32);
            set_u32(table, DROPS + 4, (drops >> 32) as u32);
            return None;
        }
        if u32_at(table, s.entry_at(i)) == GONE {
            set_u32(table, DELETED, u32_at(table, DELETED).saturating_sub(1));
        }
        set_u32(table, LIVE, live + 1);
        set_u32(table, s.entry_at(i) + 4, hash(key));
        copy(table.get_mut(s.key_at(i)..s.key_at(i) + s.key_size)?, key);
        zero(table.get_mut(s.slot_at(i)..s.slot_at(i) + s.slot_size)?);
        set_u32(table, s.entry_at(i), FULL);
    }
    table.get_mut(s.slot_at(i)..s.slot_at(i) + s.slot_size)
}

/// The value slot of `key`, if present.
pub fn lookup<'t>(table: &'t [u8], key: &[u8]) -> Option<&'t [u8]> {
    let s = shape(table)?;
    match probe(table, &s, key)? {
        (i, true) => table.get(s.slot_at(i)..s.slot_at(i) + s.slot_size),
        _ => None,
    }
}

/// Removes `key`; false when it was absent.
pub fn delete(table: &mut [u8], key: &[u8]) -> bool {
    let Some(s) = shape(table) else { return false };
    let Some((i, true)) = probe(table, &s, key) else { return false };
    set_u32(table, s.entry_at(i), GONE);
    set_u32(table, LIVE, u32_at(table, LIVE).saturating_sub(1));
    set_u32(table, DELETED, u32_at(table, DELETED) + 1);
    true
}

/// Removes every key (the drop count stays).
pub fn clear(table: &mut [u8]) {
    let Some(s) = shape(table) else { return };
    for i in 0..s.capacity {
        set_u32(table, s.entry_at(i), EMPTY);
    }
    set_u32(table, LIVE, 0);
    set_u32(table, DELETED, 0);
}

/// Updates refused because the table was full.
pub fn drops(table: &[u8]) -> u64 {
    u64_at(table, DROPS)
}

/// Every live `(key, slot)`, in table order.
pub fn entries(table: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let s = shape(table);
    (0..s.map_or(0, |s| s.capacity)).filter_map(move |i| {
        let s = s?;
        (u32_at(table, s.entry_at(i)) == FULL).then_some(())?;
        Some((table.get(s.key_at(i)..s.key_at(i) + s.key_size)?, table.get(s.slot_at(i)..s.slot_at(i) + s.slot_size)?))
    })
}
