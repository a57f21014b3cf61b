//! The plan cache: the planner's [`Selection`] of a module, kept on disk so that running or
//! rewriting the same program again does not plan it again.
//!
//! A selection is address independent (laying it out at an address is cheap), so one entry
//! serves every process of a program. It is keyed by every input of planning ([`plan_key`]):
//! lopi's own build, the module file's identity and build-id, and the probe options. The key
//! is a list, so callers can add inputs (a separate debug file that supplies symbols); the
//! live installer keeps the image it laid out for a program under the plan's key plus the
//! image's own inputs ([`PlanCache::store`]).
#![deny(unsafe_code)]

mod store;

use lopi_elf::{DebugFile, ElfModule};
use lopi_patch::{Filter, Probes, Selection};
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
pub use store::{Key, Store, Unusable};

/// Bytes the entries of one cache directory may take together (cc1's plan is ~3 MB).
pub const DEFAULT_LIMIT: u64 = 256 << 20;

/// Which file, as it was: a different file at the same path, or the same file changed, has
/// another identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Modification and status-change times, in ns: `touch` changes the first, a write with
    /// the modification time put back (`touch -r`) still changes the second.
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileId {
    pub fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        FileId { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime_ns: ns(meta.mtime(), meta.mtime_nsec()), ctime_ns: ns(meta.ctime(), meta.ctime_nsec()) }
    }
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dev {} inode {} size {} mtime {} ctime {}", self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
    }
}

/// A module file's bytes, and its identity when known to be that of these bytes.
pub struct ModuleFile {
    bytes: Bytes,
    pub id: Option<FileId>,
}

enum Bytes {
    Read(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for ModuleFile {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Read(v) => v,
            Bytes::Mapped(m) => m,
        }
    }
}

impl ModuleFile {
    /// Code that is no file (the vDSO, read from a process): no identity, so never cached.
    pub fn from_bytes(bytes: Vec<u8>) -> ModuleFile {
        ModuleFile { bytes: Bytes::Read(bytes), id: None }
    }
}

/// Reads `path` through one open file, taking its identity before and after.
pub fn read_file(path: &Path) -> io::Result<ModuleFile> {
    let mut file = File::open(path)?;
    let before = FileId::of(&file.metadata()?);
    let mut data = Vec::with_capacity(before.size as usize);
    file.read_to_end(&mut data)?;
    let after = FileId::of(&file.metadata()?);
    Ok(ModuleFile { bytes: Bytes::Read(data), id: (before == after).then_some(before) })
}

/// Maps `path`, a module a running process has mapped: only the pages planning touches are
/// read (a program's debug sections never are), which makes planning from the cache several
/// times faster for programs built with debug information.
pub fn map_file(path: &Path) -> io::Result<ModuleFile> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() == 0 {
        return read_file(path);
    }
    // SAFETY: a private read-only mapping of a file whose contents the process being planned
    // for maps too. If the file is changed meanwhile, the bytes read may change: the ELF
    // parser and planner treat every byte as untrusted input, the installer compares the code
    // in the process with the plan's before writing, and a change also changes the file's
    // ctime, so a plan made from changed bytes is stored under a key no later lookup has.
    // A file truncated meanwhile faults here as it does in the process.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok(ModuleFile { bytes: Bytes::Mapped(map), id: Some(FileId::of(&meta)) })
}

/// lopi's own build: the GNU build-id of the running executable (a hash of all its bytes,
/// so any change to lopi's code changes it), else the executable file's identity.
pub fn lopi_build() -> &'static str {
    static BUILD: OnceLock<String> = OnceLock::new();
    BUILD.get_or_init(|| {
        let exe = Path::new("/proc/self/exe");
        // Read on demand: only the headers and the note, not the whole executable.
        let build_id = File::open(exe).ok().and_then(|f| {
            let file = object::read::ReadCache::new(f);
            let elf = object::File::parse(&file).ok()?;
            object::Object::build_id(&elf).ok().flatten().map(hex)
        });
        match build_id {
            Some(id) => format!("build-id {id}"),
            None => match std::fs::metadata(exe) {
                Ok(meta) => format!("executable {}", FileId::of(&meta)),
                // No way to tell builds apart: a key no lookup can match.
                Err(e) => format!("unknown ({e}, pid {})", std::process::id()),
            },
        }
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inputs of [`lopi_patch::select`] on a module read from a file with identity `file`,
/// named from `debug` if it has a separate debug file.
pub fn plan_key(file: FileId, data: &[u8], debug: Option<&DebugFile>, filter: &Filter, probes: Probes) -> Key {
    let globs = |patterns: &[glob::Pattern]| patterns.iter().map(|p| p.as_str()).collect::<Vec<_>>().join("\0");
    let mut key = Key::new().with("lopi", lopi_build()).with("module", file.to_string());
    let build_id = object::File::parse(data).ok().and_then(|elf| object::Object::build_id(&elf).ok().flatten().map(hex));
    if let Some(id) = build_id {
        key = key.with("module-build-id", id);
    }
    if let Some(debug) = debug {
        let id = std::fs::metadata(&debug.path).map_or_else(|e| format!("unreadable ({e})"), |m| FileId::of(&m).to_string());
        key = key.with("debug-file", format!("{} {id}", debug.path.display()));
    }
    key.with("probes", probes.name())
        .with("functions", globs(&filter.include))
        .with("exclude", globs(&filter.exclude))
}

/// Plan entries in a directory.
#[derive(Clone, Debug)]
pub struct PlanCache {
    store: Store,
}

/// Where a selection came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No cache (disabled).
    Off,
    /// From the cache.
    Hit,
    /// Planned, and stored for next time.
    Stored,
    /// Planned, not stored: why.
    NotStored(String),
    /// A stored entry could not be used (why); planned again, and the entry replaced.
    Replaced(String),
}

impl PlanCache {
    pub fn new(dir: PathBuf) -> Self {
        PlanCache { store: Store::new(dir, DEFAULT_LIMIT) }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The selection stored under `key` if there is a sound one for `module`, else `plan()`'s,
    /// stored. Either way `module` ends analysed as its selection expects: a stored entry
    /// holds the analysis's fragments, which are applied to it; `plan` analyses it itself and
    /// returns the fragments with the selection.
    pub fn selection(&self, key: &Key, module: &mut ElfModule<'_>, plan: impl FnOnce(&mut ElfModule<'_>) -> (Vec<u64>, Selection)) -> (Selection, Lookup) {
        let unusable = match self.store.get(key) {
            Ok(Some(bytes)) => match read_entry(&bytes) {
                Some((fragments, rest)) => {
                    let functions = (module.functions.clone(), module.fragments.clone());
                    lopi_patch::apply_fragments(module, &fragments);
                    match Selection::from_bytes(rest, module) {
                        Ok(selection) => return (selection, Lookup::Hit),
                        Err(e) => {
                            (module.functions, module.fragments) = functions;
                            Some(e.to_string())
                        }
                    }
                }
                None => Some("a damaged list of fragments".into()),
            },
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        let (fragments, selection) = plan(module);
        let stored = selection.to_bytes().map_err(|e| e.to_string()).and_then(|b| {
            self.store.put(key, &entry(&fragments, &b)).map_err(|e| format!("writing to {}: {e}", self.store.dir().display()))
        });
        let lookup = match (stored, unusable) {
            (Err(why), _) => Lookup::NotStored(why),
            (Ok(()), Some(why)) => Lookup::Replaced(why),
            (Ok(()), None) => Lookup::Stored,
        };
        (selection, lookup)
    }
}

/// A plan entry: the fragments the analysis found (a count, then addresses, little-endian),
/// then the stored selection.
fn entry(fragments: &[u64], selection: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 8 * fragments.len() + selection.len());
    out.extend((fragments.len() as u64).to_le_bytes());
    fragments.iter().for_each(|f| out.extend(f.to_le_bytes()));
    out.extend(selection);
    out
}

/// What [`entry`] wrote: the fragments and the selection's bytes; `None` when cut short.
fn read_entry(bytes: &[u8]) -> Option<(Vec<u64>, &[u8])> {
    let word = |at: usize| bytes.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let count = usize::try_from(word(0)?).ok()?;
    let end = count.checked_mul(8)?.checked_add(8)?;
    if end > bytes.len() {
        return None;
    }
    let fragments = (0..count).map(|i| word(8 + 8 * i)).collect::<Option<Vec<u64>>>()?;
    Some((fragments, &bytes[end..]))
}

/// The selection for `module`: through `cache` when there is one and the file's identity is
/// known (`key`), else planned (see [`PlanCache::selection`]).
pub fn selection(
    cache: Option<&PlanCache>,
    key: Option<&Key>,
    module: &mut ElfModule<'_>,
    plan: impl FnOnce(&mut ElfModule<'_>) -> (Vec<u64>, Selection),
) -> (Selection, Lookup) {
    match (cache, key) {
        (Some(cache), Some(key)) => cache.selection(key, module, plan),
        (Some(_), None) => (plan(module).1, Lookup::NotStored("the file changed while it was read".into())),
        (None, _) => (plan(module).1, Lookup::Off),
    }
}
