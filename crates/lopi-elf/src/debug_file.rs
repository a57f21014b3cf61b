//! Separate debug files: where a stripped file's symbols went (`objcopy --only-keep-debug`,
//! Debian's `-dbgsym` packages). Looked up as gdb does: by build-id
//! (`<debug dir>/.build-id/xx/rest.debug`), then by `.gnu_debuglink` (`<dir>/name`,
//! `<dir>/.debug/name`, `<debug dir>/<dir>/name`). A candidate is used only if it matches: the
//! same build-id when both files have one, else the CRC32 the debug link records.
//!
//! Only the debug file's `.symtab` is read (its code sections are `NOBITS`; addresses equal
//! the stripped file's). Files are read on demand, not whole: a compiler's debug file may be
//! hundreds of megabytes, of which the symbols are a few.
use object::read::elf::{ElfFile64, FileHeader as _};
use object::read::{ReadCache, ReadRef};
use object::{elf, LittleEndian as LE, Object as _};
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// The environment variable that replaces `/usr/lib/debug` as the global debug directory.
pub const DEBUG_DIR_VAR: &str = "LOPI_DEBUG_DIR";

/// The global debug directory: `$LOPI_DEBUG_DIR`, else `/usr/lib/debug`.
pub fn debug_dir() -> PathBuf {
    std::env::var_os(DEBUG_DIR_VAR).filter(|d| !d.is_empty()).map_or_else(|| PathBuf::from("/usr/lib/debug"), PathBuf::from)
}

/// A debug file checked against the file it belongs to.
pub struct DebugFile {
    /// Where it was found.
    pub path: PathBuf,
    source: Source,
}

enum Source {
    File(ReadCache<File>),
    Bytes(Vec<u8>),
}

/// What ties a file to its debug file.
struct Identity {
    build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: the debug file's name and CRC32.
    link: Option<(Vec<u8>, u32)>,
}

impl Identity {
    fn of<'d, R: ReadRef<'d>>(data: R) -> Option<Identity> {
        let file = ElfFile64::<LE, R>::parse(data).ok()?;
        if file.elf_header().e_machine(LE) != elf::EM_X86_64 {
            return None;
        }
        Some(Identity {
            build_id: file.build_id().ok().flatten().filter(|id| !id.is_empty()).map(<[u8]>::to_vec),
            link: file.gnu_debuglink().ok().flatten().map(|(name, crc)| (name.to_vec(), crc)),
        })
    }

    /// Whether `candidate` (with `crc`, computed only when needed) is this file's debug file.
    fn accepts(&self, candidate: &Identity, crc: impl FnOnce() -> Option<u32>) -> bool {
        match (&self.build_id, &candidate.build_id) {
            (Some(mine), Some(theirs)) => mine == theirs,
            // Without two build-ids, only the link's CRC can tell.
            _ => self.link.as_ref().is_some_and(|&(_, want)| crc() == Some(want)),
        }
    }
}

impl DebugFile {
    /// Finds the debug file of `data`, read from `path`, in gdb's order; `None` when there is
    /// none that matches.
    pub fn find(path: &Path, data: &[u8], debug_dir: &Path) -> Option<DebugFile> {
        let me = Identity::of(data)?;
        if let Some(id) = me.build_id.as_deref().filter(|id| id.len() >= 2) {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let candidate = debug_dir.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
            if let Some(found) = Self::open_matching(&me, &candidate) {
                return Some(found);
            }
        }
        let (name, _) = me.link.as_ref()?;
        let name = OsStr::from_bytes(name);
        // A bare file name, as objcopy writes it: never a path that could leave the directories.
        if name.is_empty() || name.as_bytes().contains(&b'/') || name == ".." || name == "." {
            return None;
        }
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let dir = real.parent()?;
        let global = debug_dir.join(dir.strip_prefix("/").unwrap_or(dir));
        [dir.join(name), dir.join(".debug").join(name), global.join(name)]
            .into_iter()
            .filter(|c| std::fs::canonicalize(c).map_or(true, |c| c != real))
            .find_map(|c| Self::open_matching(&me, &c))
    }

    /// `bytes`, read from `path`, as the debug file of `data`, if it matches.
    pub fn from_bytes(data: &[u8], path: PathBuf, bytes: Vec<u8>) -> Option<DebugFile> {
        let me = Identity::of(data)?;
        let them = Identity::of(bytes.as_slice())?;
        me.accepts(&them, || Some(crc32fast::hash(&bytes))).then_some(DebugFile { path, source: Source::Bytes(bytes) })
    }

    fn open_matching(me: &Identity, path: &Path) -> Option<DebugFile> {
        let cache = ReadCache::new(File::open(path).ok()?);
        let them = Identity::of(&cache)?;
        me.accepts(&them, || file_crc32(path)).then(|| DebugFile { path: path.to_path_buf(), source: Source::File(cache) })
    }

    pub(crate) fn data(&self) -> DebugData<'_> {
        match &self.source {
            Source::File(cache) => DebugData::File(cache),
            Source::Bytes(bytes) => DebugData::Bytes(bytes),
        }
    }
}

/// A debug file's bytes, for the symbol reader.
pub(crate) enum DebugData<'d> {
    File(&'d ReadCache<File>),
    Bytes(&'d [u8]),
}

fn file_crc32(path: &Path) -> Option<u32> {
    let mut file = File::open(path).ok()?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Some(hasher.finalize()),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}
