//! Entries on disk: one file per key, written whole under a temporary name and renamed into
//! place (readers see an old entry or a new one, never half of one), checked whole when read.
//!
//! ```text
//! "LOPICACH" | format u32 | key length u32 | key | payload | BLAKE3 of all before it (32)
//! ```
//!
//! An entry that fails any check (truncated, damaged, another format, another key under the
//! same name) is reported, never trusted; the caller plans again and the new entry replaces
//! it. The directory is kept under a size bound by removing the least recently used entries.
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"LOPICACH";
/// The layout above; entries of another format are replaced.
const FORMAT: u32 = 1;
const HASH_LEN: usize = 32;
const HEADER_LEN: usize = 16;
const SUFFIX: &str = "plan";
/// A temporary file this old was left by a lopi that died while writing.
const STALE_TEMP: Duration = Duration::from_secs(3600);
/// Entries are marked used at most this often, so that a battery of short runs does not
/// write to the directory each time.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// What a stored entry depends on: named inputs, in the order given. A lookup finds only an
/// entry stored under the very same list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Key {
    inputs: Vec<(String, Vec<u8>)>,
}

impl Key {
    pub fn new() -> Self {
        Key::default()
    }

    /// Adds one input: anything whose change must make a stored entry unusable.
    pub fn with(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.inputs.push((name.to_string(), value.as_ref().to_vec()));
        self
    }

    /// Length-prefixed names and values: two different lists never give the same bytes.
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.inputs {
            for part in [name.as_bytes(), value] {
                out.extend_from_slice(&(part.len() as u64).to_le_bytes());
                out.extend_from_slice(part);
            }
        }
        out
    }
}

/// Why a stored entry was not used.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is damaged or incomplete ({what})")]
    Damaged { path: PathBuf, what: &'static str },
}

/// A directory of entries.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
    /// Bytes the entries may take together.
    limit: u64,
}

impl Store {
    pub fn new(dir: PathBuf, limit: u64) -> Self {
        Store { dir, limit }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key_bytes: &[u8]) -> PathBuf {
        let name = blake3::hash(key_bytes).to_hex();
        self.dir.join(format!("{}.{SUFFIX}", &name[..32]))
    }

    /// The payload stored under `key`; `Ok(None)` when there is none.
    pub fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, Unusable> {
        let key_bytes = key.bytes();
        let path = self.path(&key_bytes);
        let mut entry = Vec::new();
        let file = match File::open(&path).and_then(|mut f| f.read_to_end(&mut entry).map(|_| f)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Unusable::Io { path, source }),
        };
        let damaged = |what| Unusable::Damaged { path: path.clone(), what };
        if entry.len() < HEADER_LEN + HASH_LEN {
            return Err(damaged("too short"));
        }
        let (body, hash) = entry.split_at(entry.len() - HASH_LEN);
        if blake3::hash(body).as_bytes() != hash {
            return Err(damaged("checksum"));
        }
        let word = |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        if &body[..8] != MAGIC || word(8) != FORMAT {
            return Err(damaged("not an entry of this format"));
        }
        let key_len = word(12) as usize;
        let payload_at = HEADER_LEN.checked_add(key_len).filter(|&end| end <= body.len()).ok_or_else(|| damaged("key length"))?;
        if body[HEADER_LEN..payload_at] != key_bytes {
            return Err(damaged("another key under the same name"));
        }
        touch(&file);
        entry.truncate(entry.len() - HASH_LEN);
        entry.drain(..payload_at);
        Ok(Some(entry))
    }

    /// Stores `payload` under `key`, replacing what was there, then keeps the directory
    /// under its size bound.
    pub fn put(&self, key: &Key, payload: &[u8]) -> io::Result<()> {
        let key_bytes = key.bytes();
        let path = self.path(&key_bytes);
        let key_len = u32::try_from(key_bytes.len()).map_err(|_| io::Error::other("key too long"))?;
        let mut entry = Vec::with_capacity(HEADER_LEN + key_bytes.len() + payload.len() + HASH_LEN);
        entry.extend_from_slice(MAGIC);
        entry.extend_from_slice(&FORMAT.to_le_bytes());
        entry.extend_from_slice(&key_len.to_le_bytes());
        entry.extend_from_slice(&key_bytes);
        entry.extend_from_slice(payload);
        let hash = blake3::hash(&entry);
        entry.extend_from_slice(hash.as_bytes());
        if entry.len() as u64 > self.limit {
            return Err(io::Error::other(format!("{} bytes exceed the cache's bound of {} bytes", entry.len(), self.limit)));
        }
        fs::create_dir_all(&self.dir)?;
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        let temp = self.dir.join(format!(".{}.{}.{nanos}.tmp", path.file_stem().unwrap_or_default().to_string_lossy(), std::process::id()));
        let written = File::create(&temp).and_then(|mut f| f.write_all(&entry)).and_then(|()| fs::rename(&temp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written?;
        self.evict(&path)
    }

    /// Removes the least recently used entries until the rest fit the bound (never `keep`,
    /// just written), and temporary files left by a lopi that died while writing.
    fn evict(&self, keep: &Path) -> io::Result<()> {
        let now = SystemTime::now();
        let mut entries = Vec::new();
        let mut total = 0;
        for item in fs::read_dir(&self.dir)? {
            let Ok(item) = item else { continue };
            let path = item.path();
            let Ok(meta) = item.metadata() else { continue };
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let name = item.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                if now.duration_since(used).unwrap_or_default() > STALE_TEMP {
                    let _ = fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|e| e == SUFFIX) && meta.is_file() {
                total += meta.len();
                entries.push((used, meta.len(), path));
            }
        }
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.limit {
                break;
            }
            if path != keep && fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
        Ok(())
    }

    /// Every entry's size, for `lopi cache`.
    pub fn entries(&self) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut out = Vec::new();
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let path = item.path();
            if path.extension().is_some_and(|e| e == SUFFIX) {
                out.push((path, item.metadata()?.len()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Removes every entry; returns how many there were.
    pub fn clear(&self) -> io::Result<usize> {
        let entries = match self.entries() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            other => other?,
        };
        for (path, _) in &entries {
            fs::remove_file(path)?;
        }
        Ok(entries.len())
    }
}

/// Marks an entry used (its modification time orders eviction). Best effort: a cache the
/// user cannot write still serves.
fn touch(file: &File) {
    let now = SystemTime::now();
    let stale = file.metadata().and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).unwrap_or_default() > TOUCH_EVERY);
    if stale {
        let _ = file.set_modified(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store(name: &str, limit: u64) -> Store {
        let dir = std::env::temp_dir().join(format!("lopi-cache-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Store::new(dir, limit)
    }

    #[test]
    fn stores_and_finds_by_the_whole_key() {
        let store = temp_store("keys", 1 << 20);
        let key = Key::new().with("a", "1").with("b", "2");
        assert!(store.get(&key).unwrap().is_none());
        store.put(&key, b"payload").unwrap();
        assert_eq!(store.get(&key).unwrap().as_deref(), Some(&b"payload"[..]));
        // Another value, another order, a value moved across the name boundary: other keys.
        for other in [Key::new().with("a", "1").with("b", "3"), Key::new().with("b", "2").with("a", "1"), Key::new().with("a", "12").with("b", "")] {
            assert!(store.get(&other).unwrap().is_none(), "{other:?}");
        }
        // An entry of another key under this key's name is not trusted.
        let other = Key::new().with("a", "2");
        store.put(&other, b"other").unwrap();
        fs::copy(store.path(&other.bytes()), store.path(&key.bytes())).unwrap();
        assert!(matches!(store.get(&key), Err(Unusable::Damaged { what: "another key under the same name", .. })));
        store.put(&key, b"again").unwrap();
        assert_eq!(store.get(&key).unwrap().as_deref(), Some(&b"again"[..]));
        assert_eq!(store.entries().unwrap().len(), 2);
        assert_eq!(store.clear().unwrap(), 2);
        assert!(store.get(&key).unwrap().is_none());
        let _ = fs::remove_dir_all(store.dir());
    }

    #[test]
    fn every_truncation_and_flipped_bit_is_caught() {
        let store = temp_store("damage", 1 << 20);
        let key = Key::new().with("k", "v");
        store.put(&key, &[7u8; 100]).unwrap();
        let path = store.path(&key.bytes());
        let good = fs::read(&path).unwrap();
        for len in 0..good.len() {
            fs::write(&path, &good[..len]).unwrap();
            assert!(store.get(&key).is_err(), "truncated to {len} bytes");
        }
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                fs::write(&path, &bad).unwrap();
                assert!(store.get(&key).is_err(), "bit {bit} of byte {at} flipped");
            }
        }
        let _ = fs::remove_dir_all(store.dir());
    }

    #[test]
    fn least_recently_used_entries_go_first() {
        let store = temp_store("evict", 3000);
        let key = |i: u32| Key::new().with("i", i.to_string());
        for i in 0..3 {
            store.put(&key(i), &[0; 800]).unwrap();
            // Older modification times for the earlier entries (what a lookup refreshes).
            let age = Duration::from_secs(3600 * u64::from(3 - i));
            File::options().append(true).open(store.path(&key(i).bytes())).unwrap().set_modified(SystemTime::now() - age).unwrap();
        }
        // Entry 0 is used: it becomes the most recent.
        assert!(store.get(&key(0)).unwrap().is_some());
        store.put(&key(3), &[0; 800]).unwrap();
        let kept: Vec<bool> = (0..4).map(|i| store.get(&key(i)).unwrap().is_some()).collect();
        assert_eq!(kept, [true, false, true, true], "entry 1 was the least recently used");
        // An entry larger than the bound is refused, not stored.
        assert!(store.put(&key(9), &[0; 4000]).is_err());
        let _ = fs::remove_dir_all(store.dir());
    }
}
