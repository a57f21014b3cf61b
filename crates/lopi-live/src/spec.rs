//! What to install (`Spec`, a `ModuleRequest` per module), how a request's library name
//! finds a loaded module, and the environment block the runtime is handed.
use crate::error::LiveError;
use crate::procfs::Mapping;
use lopi_image::Recording;
use lopi_patch::{Filter, Probes};
use lopi_rt_abi::PAGE_SIZE;

/// Which functions of which module to probe.
#[derive(Clone, Debug)]
pub struct ModuleRequest {
    /// `None`: the main executable. `Some(name)`: the loaded library whose file name is
    /// `name` or starts with `name.` or `name-` (`libc` finds `libc.so.6`).
    pub library: Option<String>,
    pub filter: Filter,
    pub probes: Probes,
    /// Functions (by name) counted, not timed, whatever `probes` says (a script only counts
    /// their calls).
    pub count_only: Vec<String>,
    /// The module gets the spec's script (its points name functions of it).
    pub scripted: bool,
}

/// What to install.
#[derive(Clone, Debug)]
pub struct Spec {
    pub modules: Vec<ModuleRequest>,
    /// Probes for every loaded module, asked for or not: `syscall` instructions (libc, ld.so,
    /// the vDSO) and lock functions (libc).
    pub everywhere: lopi_patch::Probes,
    pub recording: Recording,
    /// Environment the runtime sees: `LOPI_OUTPUT` (absolute) and its knobs.
    pub env: Vec<(String, String)>,
    /// Where planned selections are kept and looked up; `None`: plan every time.
    pub cache: Option<lopi_cache::PlanCache>,
    /// A probe script for the main executable (`lopi trace`).
    pub script: Option<std::sync::Arc<lopi_image::script::ScriptSpec>>,
    /// Set when planning the libraries a process loaded after its probes went in (`dlopen`):
    /// the modules probed already, which are left alone, as is a library asked for that is
    /// still not loaded (a later load may bring it).
    pub probed_already: Option<Vec<String>>,
}

/// `NAME=value` strings and the NULL-terminated pointer array the runtime reads as `envp`.
pub(crate) struct EnvBlock {
    strings: Vec<Vec<u8>>,
}

impl EnvBlock {
    pub(crate) fn new(env: &[(String, String)]) -> Self {
        let strings = env
            .iter()
            .map(|(k, v)| {
                let mut s = format!("{k}={v}").into_bytes();
                s.retain(|&b| b != 0);
                s.push(0);
                s
            })
            .collect();
        EnvBlock { strings }
    }

    fn pointers_len(&self) -> usize {
        8 * (self.strings.len() + 1)
    }

    pub(crate) fn len(&self) -> usize {
        self.pointers_len() + self.strings.iter().map(Vec::len).sum::<usize>()
    }

    /// The block as it must appear at run-time address `at`.
    pub(crate) fn bytes(&self, at: u64) -> Vec<u8> {
        let mut pointers = Vec::new();
        let mut text = Vec::new();
        for s in &self.strings {
            pointers.extend_from_slice(&(at + (self.pointers_len() + text.len()) as u64).to_le_bytes());
            text.extend_from_slice(s);
        }
        pointers.extend_from_slice(&[0; 8]);
        pointers.extend_from_slice(&text);
        pointers
    }
}

/// Whether the library at `path` is the one `name` names: its file name is `name`, or starts
/// with `name.` or `name-` (`libc` names `libc.so.6`), or its `DT_SONAME` is `name` (the name
/// `ldd` prints: `libjsoncpp.so.25` is the file `libjsoncpp.so.1.9.5`); a `name` that is an
/// absolute path names that file (also seen through a process's root, `/proc/PID/root/...`).
pub fn library_named(path: &str, name: &str) -> bool {
    if name.starts_with('/') {
        return path.ends_with(name) && (path.len() == name.len() || path[..path.len() - name.len()].ends_with("/root"));
    }
    let file = path.rsplit('/').next().unwrap_or(path);
    file == name || file.strip_prefix(name).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-')) || soname(path).as_deref() == Some(name)
}

/// The `DT_SONAME` of the ELF file at `path`, if it has one. Only the headers, the dynamic
/// section and the name are read: every library of a process may be asked (cmake's libicudata
/// is 30 MB).
fn soname(path: &str) -> Option<String> {
    use object::read::elf::{Dyn, FileHeader, ProgramHeader};
    use object::ReadRef;
    let cache = object::ReadCache::new(std::fs::File::open(path).ok()?);
    let data = &cache;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let segments = header.program_headers(endian, data).ok()?;
    let dynamic = segments.iter().find_map(|p| p.dynamic(endian, data).ok().flatten())?;
    let strtab = dynamic.iter().find(|d| d.tag32(endian) == Some(object::elf::DT_STRTAB))?.d_val(endian);
    let name = dynamic.iter().find(|d| d.tag32(endian) == Some(object::elf::DT_SONAME))?.d_val(endian);
    // DT_STRTAB is an address: the file offset of the segment that holds it.
    let at = segments.iter().find(|p| p.p_type(endian) == object::elf::PT_LOAD && (p.p_vaddr(endian)..p.p_vaddr(endian) + p.p_filesz(endian)).contains(&strtab))?;
    let offset = strtab - at.p_vaddr(endian) + at.p_offset(endian) + name;
    let bytes = data.read_bytes_at_until(offset..offset.saturating_add(4096), 0).ok()?;
    String::from_utf8(bytes.to_vec()).ok()
}

/// The path of the module a request names, as `/proc/PID/maps` shows it.
pub(crate) fn module_path(maps: &[Mapping], exe: &str, library: Option<&str>) -> Result<String, LiveError> {
    let Some(name) = library else {
        return maps
            .iter()
            .find(|m| m.path == exe)
            .map(|m| m.path.clone())
            .ok_or_else(|| LiveError::Module(format!("{exe} is not mapped in the process (deleted or replaced since it started?)")));
    };
    let mut paths: Vec<&str> = maps
        .iter()
        .filter(|m| m.path.starts_with('/') && m.executable)
        .map(|m| m.path.as_str())
        .filter(|p| library_named(p, name))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    match paths.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(LiveError::Module(format!("no library named {name:?} is loaded in the process (`ldd PROG` lists those it loads at start; one it opens later with dlopen cannot be probed)"))),
        many => Err(LiveError::Module(format!("{name:?} names several loaded libraries: {}", many.join(", ")))),
    }
}

/// Run-time address minus file address, from the mapping of file offset 0.
/// From the program headers only: a plan from the cache needs no more of the file.
pub(crate) fn load_bias(data: &[u8], mapped: &[&Mapping]) -> Option<u64> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let first = mapped.iter().filter(|m| m.offset == 0).map(|m| m.start).min()?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let load = header.program_headers(endian, data).ok()?.iter().find(|p| p.p_type(endian) == object::elf::PT_LOAD && p.p_offset(endian) == 0)?;
    Some(first.wrapping_sub(load.p_vaddr(endian) & !(PAGE_SIZE - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs;

    #[test]
    fn env_block_points_at_its_strings() {
        let env = EnvBlock::new(&[("LOPI_OUTPUT".into(), "/tmp/x".into()), ("LOPI_DEPTH".into(), "64".into())]);
        let at = 0x7000_0000u64;
        let bytes = env.bytes(at);
        assert_eq!(bytes.len(), env.len());
        let pointer = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
        let string = |p: u64| {
            let s = &bytes[(p - at) as usize..];
            String::from_utf8(s[..s.iter().position(|&b| b == 0).unwrap()].to_vec()).unwrap()
        };
        assert_eq!(string(pointer(0)), "LOPI_OUTPUT=/tmp/x");
        assert_eq!(string(pointer(1)), "LOPI_DEPTH=64");
        assert_eq!(pointer(2), 0);
    }

    #[test]
    fn library_names() {
        let maps = procfs::parse_maps(
            "7f00-7f10 r-xp 00001000 fe:00 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
             7f20-7f30 r-xp 00001000 fe:00 2 /usr/lib/x86_64-linux-gnu/libcrypt.so.1\n\
             7f40-7f50 r-xp 00001000 fe:00 3 /opt/lib/libfoo-2.1.so\n",
        );
        assert_eq!(module_path(&maps, "/bin/x", Some("libc")).unwrap(), "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(module_path(&maps, "/bin/x", Some("libc.so.6")).unwrap(), "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(module_path(&maps, "/bin/x", Some("libfoo")).unwrap(), "/opt/lib/libfoo-2.1.so");
        assert!(module_path(&maps, "/bin/x", Some("libz")).is_err());
        assert!(module_path(&maps, "/bin/x", None).is_err(), "the executable is not mapped");
    }
}
