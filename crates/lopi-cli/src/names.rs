//! Names of run-time addresses of recorded processes, from their memory maps (recorded with
//! `--probe locks`) and the mapped files' symbols: locks, call sites, start routines. One
//! naming everywhere: a symbol (a function, for a call site) where the file or its debug file
//! has one, else the file and the address in it (`libX.so+0x1234`), never a bare run-time
//! address where the map says which file it is in.
use lopi_elf::SymbolTable;
use lopi_trace::ProcessMaps;
use std::collections::HashMap;

/// One mapping of a `/proc/PID/maps` text.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

fn mappings(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let _perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let (_dev, _inode) = (fields.next()?, fields.next()?);
            let path = fields.collect::<Vec<_>>().join(" ");
            let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
            path.starts_with('/').then_some(Mapping { start, end, offset, path })
        })
        .collect()
}

/// Names run-time addresses of the recorded processes.
pub struct Namer {
    maps: HashMap<u32, Vec<Mapping>>,
    tables: HashMap<String, SymbolTable>,
}

/// Where a run-time address lies: the file mapped there, and the address in that file.
pub struct Place {
    pub path: String,
    pub vaddr: u64,
}

impl Place {
    /// `file+0xVADDR`, the file by its name: how people find a local function of a stripped
    /// library (`liblzma.so.5+0xccd0`).
    pub fn text(&self) -> String {
        let file = self.path.rsplit('/').next().unwrap_or(&self.path);
        format!("{file}+{:#x}", self.vaddr)
    }
}

impl Namer {
    pub fn new(maps: &[ProcessMaps]) -> Namer {
        Namer { maps: maps.iter().map(|m| (m.pid, mappings(&m.text))).collect(), tables: HashMap::new() }
    }

    /// The file mapped closest below `addr` in process `pid` (or, failing that, in any
    /// recorded process: a forked child shares its parent's map), with its symbols, the load
    /// bias of that mapping and whether the mapping holds `addr`. `.bss` past a file's last
    /// page is anonymous memory right after its mappings: a symbol's size tells whether it
    /// really covers `addr`.
    fn mapped(&mut self, pid: u32, addr: u64) -> Option<(String, &SymbolTable, u64, bool)> {
        let maps = self.maps.get(&pid).filter(|m| !m.is_empty()).or_else(|| self.maps.values().find(|m| !m.is_empty()))?;
        let m = maps.iter().filter(|m| m.start <= addr).max_by_key(|m| m.start)?;
        let (path, start, offset, holds) = (m.path.clone(), m.start, m.offset, addr < m.end);
        let table = self.tables.entry(path.clone()).or_insert_with(|| match std::fs::read(&path) {
            Ok(data) => SymbolTable::of(&data, std::path::Path::new(&path)),
            Err(_) => SymbolTable::default(),
        });
        let bias = start.wrapping_sub(table.vaddr_of_offset(offset)?);
        Some((path, table, bias, holds))
    }

    /// The file mapped at `addr` in process `pid`, and the address in it.
    pub fn place(&mut self, pid: u32, addr: u64) -> Option<Place> {
        let (path, _, bias, holds) = self.mapped(pid, addr)?;
        holds.then(|| Place { path, vaddr: addr.wrapping_sub(bias) })
    }

    /// `symbol+offset` (`symbol` alone at offset 0) of `addr` in process `pid`.
    pub fn name(&mut self, pid: u32, addr: u64) -> Option<Named> {
        let (_, table, bias, _) = self.mapped(pid, addr)?;
        let s = table.lookup(addr.wrapping_sub(bias))?;
        let with_offset = |name: &str| if s.offset == 0 { name.to_string() } else { format!("{name}+{}", s.offset) };
        let name = with_offset(&demangle(&s.name).unwrap_or_else(|| s.name.clone()));
        Some(Named { name, symbol: with_offset(&s.name), function: s.function })
    }

    /// `symbol+offset`, else `file+0xVADDR` (the file's own address: a local function of a
    /// stripped library), else the bare address.
    pub fn describe(&mut self, pid: u32, addr: u64) -> String {
        if let Some(named) = self.name(pid, addr) {
            return named.name;
        }
        self.place(pid, addr).map_or_else(|| format!("{addr:#x}"), |p| p.text())
    }

    /// The function a return address is in, without the offset.
    pub fn function(&mut self, pid: u32, ret: u64) -> Option<String> {
        // The call instruction is before the return address.
        let named = self.name(pid, ret.checked_sub(1)?)?;
        named.function.then(|| named.name.rsplit_once('+').map_or(named.name.clone(), |(f, _)| f.to_string()))
    }

    /// A call site, by its return address, as every view names it: its function, else
    /// `file+0xVADDR` of the return address, else the bare address.
    pub fn site(&mut self, pid: u32, ret: u64) -> String {
        if let Some(f) = self.function(pid, ret) {
            return f;
        }
        self.place(pid, ret).map_or_else(|| format!("{ret:#x}"), |p| p.text())
    }
}

/// What [`Namer::name`] found.
pub struct Named {
    /// As people write it: a C++ name demangled (without its parameters).
    pub name: String,
    /// The symbol as the file has it.
    pub symbol: String,
    /// The symbol is a function's.
    pub function: bool,
}

/// A C++ (Itanium ABI) symbol as its source names it: `_ZN2fx9log_mutexE` is `fx::log_mutex`,
/// `_ZN2fx6workerEi` is `fx::worker`. `None` for any other name.
fn demangle(symbol: &str) -> Option<String> {
    if !symbol.starts_with("_Z") {
        return None;
    }
    let options = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
    cpp_demangle::Symbol::new(symbol).ok()?.demangle(&options).ok()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cxx_names_are_demangled_without_parameters() {
        assert_eq!(demangle("_ZN2fx9log_mutexE").as_deref(), Some("fx::log_mutex"));
        assert_eq!(demangle("_ZN2fx6workerEi").as_deref(), Some("fx::worker"));
        assert_eq!(demangle("hold_lock"), None);
        assert_eq!(demangle("_Zgarbage"), None);
    }
}
