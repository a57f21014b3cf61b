//! What a script's points name: the program's functions, and those of the libraries it loads
//! (`func:LIB:GLOB`, `LIB` a file name or its start: `libc` is `libc.so.6`), read from the
//! files the process maps (`-p`) or that `ldd` says the program will load.
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct Functions<'a> {
    names: Vec<&'a str>,
    /// Libraries the points may name, and the function names of those read so far.
    libraries: Vec<PathBuf>,
    read: RefCell<HashMap<PathBuf, Vec<String>>>,
    /// Every library point names something: the script was checked against the libraries when
    /// it ran (`lopi report --script` reads it again).
    libraries_known: bool,
    /// The traced program's file: a point may name it as its library (bpftrace's
    /// `uprobe:/path/to/prog:main`), which means the program's own functions.
    program: Option<PathBuf>,
}

impl<'a> Functions<'a> {
    pub fn new(names: Vec<&'a str>, libraries: Vec<PathBuf>) -> Functions<'a> {
        Functions { names, libraries, read: RefCell::default(), libraries_known: false, program: None }
    }

    /// As `new`, for a script checked before: its library points are taken as they are.
    pub fn checked(names: Vec<&'a str>) -> Functions<'a> {
        Functions { names, libraries: Vec::new(), read: RefCell::default(), libraries_known: true, program: None }
    }

    /// With `program` the traced program's file (see [`names_program`]).
    pub fn of_program(self, program: &Path) -> Functions<'a> {
        Functions { program: Some(program.to_path_buf()), ..self }
    }

    /// Whether `lib` names the traced program rather than a library.
    pub fn is_program(&self, lib: &str) -> bool {
        self.program.as_deref().is_some_and(|p| names_program(lib, p))
    }

    /// The one library `name` names, if exactly one does.
    fn library(&self, name: &str) -> Option<&PathBuf> {
        one_library(&self.libraries, name)
    }

    /// The library a point naming `lib` means for the functions `glob` matches, when it is not
    /// `lib`: libc, for a library glibc 2.34 emptied into it ([`IN_LIBC`]) that the program loads
    /// without those functions, or not at all, where libc has them.
    pub fn moved_to_libc(&self, lib: &str, glob: &str) -> Option<String> {
        let merged = IN_LIBC.iter().any(|m| lib == *m || lib.strip_prefix(m).is_some_and(|rest| rest.starts_with(".so")));
        if !merged || self.libraries_known || self.matching_in(lib, glob) > 0 || self.matching_in("libc.so.6", glob) == 0 {
            return None;
        }
        Some("libc.so.6".to_string())
    }

    /// How many functions of the loaded library `lib` match `glob`.
    fn matching_in(&self, lib: &str, glob: &str) -> usize {
        let Some(path) = self.library(lib) else { return 0 };
        self.library_functions(path);
        self.read.borrow().get(path).map_or(0, |names| names.iter().filter(|n| lopi_script::glob_match(glob, n)).count())
    }

    fn library_functions(&self, path: &Path) -> usize {
        let mut read = self.read.borrow_mut();
        let names = read.entry(path.to_path_buf()).or_insert_with(|| function_names(path).unwrap_or_default());
        names.len()
    }
}

/// Libraries whose functions glibc 2.34 moved into libc, leaving each an empty stub for programs
/// linked before (bpftrace's threadsnoop.bt still names `libpthread:pthread_create`).
const IN_LIBC: [&str; 5] = ["libpthread", "libdl", "librt", "libutil", "libanl"];

/// The one of `libraries` that `name` names, if exactly one does.
fn one_library<'l>(libraries: &'l [PathBuf], name: &str) -> Option<&'l PathBuf> {
    let name = canonical_library(name);
    let mut found = libraries.iter().filter(|p| lopi_live::library_named(&p.to_string_lossy(), &name));
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// The file of the library `name` among `libraries` (a program's), if exactly one is it.
pub fn library_file(libraries: &[PathBuf], name: &str) -> Option<PathBuf> {
    one_library(libraries, name).cloned()
}

/// Whether `lib` (a path, or a file name) names the file `program`.
pub fn names_program(lib: &str, program: &Path) -> bool {
    if lib.contains('/') {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        canonical(Path::new(lib)) == canonical(program)
    } else {
        program.file_name().is_some_and(|name| name == lib)
    }
}

/// A file's functions, as the planner sees them (named from its debug file when it has one).
pub fn functions(path: &Path) -> Option<Vec<lopi_elf::Function>> {
    let file = lopi_cache::read_file(path).ok()?;
    let debug = lopi_elf::DebugFile::find(path, &file, &lopi_elf::debug_dir());
    let mut module = lopi_elf::ElfModule::parse_with_debug(&file, debug.as_ref()).ok()?;
    lopi_patch::analyse(&mut module);
    Some(module.functions)
}

/// A file's function names, aliases too.
fn function_names(path: &Path) -> Option<Vec<String>> {
    Some(functions(path)?.into_iter().flat_map(|f| std::iter::once(f.name).chain(f.aliases)).collect())
}

impl lopi_script::Resolver for Functions<'_> {
    fn functions_matching(&self, lib: Option<&str>, glob: &str) -> usize {
        match lib {
            Some(lib) if self.is_program(lib) => self.functions_matching(None, glob),
            None => self.names.iter().filter(|n| lopi_script::glob_match(glob, n)).count(),
            Some(_) if self.libraries_known => 1,
            Some(lib) => match self.moved_to_libc(lib, glob) {
                Some(libc) => self.matching_in(&libc, glob),
                None => self.matching_in(lib, glob),
            },
        }
    }

    fn syscall_known(&self, name: &str) -> bool {
        (0..1024).any(|nr| lopi_trace::syscall_name(nr) == name)
    }

    /// Calls of the numbers the probes cover that x86-64 names (not `syscall_N`).
    fn syscalls_matching(&self, glob: &str) -> Vec<String> {
        let names = (0..lopi_rt_abi::script::SYSCALLS as u64).map(lopi_trace::syscall_name).filter(|n| !n.starts_with("syscall_"));
        names.filter(|n| lopi_script::glob_match(glob, n)).collect()
    }

    fn markers_matching(&self, lib: &str, provider: Option<&str>, name: &str) -> usize {
        let path = match &self.program {
            _ if self.libraries_known => return 1,
            Some(program) if self.is_program(lib) => program.clone(),
            _ => match self.library(lib) {
                Some(path) => path.clone(),
                None => return 0,
            },
        };
        super::usdt::file_markers(&path).iter().filter(|m| super::usdt::matches(m, provider, name)).count()
    }
}

/// The libraries process `pid` runs code from.
pub fn mapped_libraries(pid: i32) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = lopi_live::procfs::maps(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.executable && m.path.starts_with('/'))
        .map(|m| PathBuf::from(format!("/proc/{pid}/root{}", m.path)))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The libraries `ldd` says `program` loads (none if it cannot tell), the dynamic loader too
/// (the line without `=>`), as the process will map them (symbolic links resolved: `/lib` is
/// `/usr/lib` on Debian).
pub fn needed_libraries(program: &Path) -> Vec<PathBuf> {
    let Ok(out) = std::process::Command::new("ldd").arg(program).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split("=>").last()?.split_whitespace().next().filter(|p| p.starts_with('/')).map(PathBuf::from))
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect()
}

/// A library named by path as the process maps it (links resolved); a name stays as it is.
pub fn canonical_library(name: &str) -> String {
    match name.starts_with('/') {
        true => std::fs::canonicalize(name).map_or_else(|_| name.to_string(), |p| p.display().to_string()),
        false => name.to_string(),
    }
}

/// Where each of the script's `addr:` and `func:NAME+OFF` points is in `module` (the main
/// executable), by point index: `addr:` takes the file's addresses (as `lopi info` prints
/// them), `func:NAME+OFF` counts from the function's start and must stay inside it.
pub fn instruction_points(program: &lopi_script::ir::Program, module: &lopi_elf::ElfModule<'_>) -> anyhow::Result<std::collections::BTreeMap<usize, u64>> {
    use lopi_script::ir::Point;
    let mut out = std::collections::BTreeMap::new();
    for (n, point) in program.probes.iter().flat_map(|p| &p.points).enumerate() {
        let addr = match point {
            Point::Addr(addr) => *addr,
            Point::FuncOffset { lib: Some(_), .. } => anyhow::bail!("`{point}`: instruction points in libraries are not built yet; name an instruction of the program"),
            Point::FuncOffset { lib: None, name, offset } => {
                let named: Vec<&lopi_elf::Function> = module.functions.iter().filter(|f| f.name == *name || f.aliases.iter().any(|a| a == name)).collect();
                let [f] = named[..] else { anyhow::bail!("`{point}`: {} functions are named {name}", named.len()) };
                if *offset >= f.size.max(1) {
                    anyhow::bail!("`{point}`: {name} is {} bytes long", f.size);
                }
                f.addr.0 + offset
            }
            _ => continue,
        };
        out.insert(n, addr);
    }
    Ok(out)
}
