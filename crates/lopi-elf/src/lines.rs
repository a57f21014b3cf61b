//! Source lines of code addresses, from a file's DWARF line tables (`.debug_line` and the
//! units that own them): what `lopi coverage` maps blocks to.
//!
//! Every row of the line programs is read (gimli), not one row per address: at -O2 several
//! rows often share an address (the statements of an inlined call, views), and a lookup that
//! keeps one of them (addr2line's) loses the others. Only `is_stmt` rows count: a row
//! without it marks an instruction that also serves another statement (a store merged by
//! the optimiser, an if-converted `cmov`), and crediting its line from there says a line ran
//! that gcov, on the same run, says did not.
//!
//! Sections compressed with zlib or zstd (`SHF_COMPRESSED`: `gcc -gz`, `objcopy
//! --compress-debug-sections`, Debian's -dbgsym packages; or GNU's older `.zdebug_*`) are
//! decompressed, only those the line tables need.
use gimli::{EndianSlice, LittleEndian, SectionId};
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::collections::HashMap;

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// A source file and line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Line {
    pub file: String,
    pub line: u32,
}

/// For each address range `start..end` of `ranges`, the source lines of the statements whose
/// code starts in it (in address order, each once), read from the DWARF of `data` (an ELF
/// file: the program, or its separate debug file). `None` when `data` has no line tables.
pub fn lines_of(data: &[u8], ranges: &[(u64, u64)]) -> Option<Vec<Vec<Line>>> {
    let file = object::File::parse(data).ok()?;
    file.section_by_name(".debug_line")?;
    // Units, their names and directories, and their line programs: not locations or ranges,
    // the biggest sections, which would only be decompressed for nothing.
    const NEEDED: [SectionId; 7] = [
        SectionId::DebugAbbrev,
        SectionId::DebugInfo,
        SectionId::DebugLine,
        SectionId::DebugLineStr,
        SectionId::DebugStr,
        SectionId::DebugStrOffsets,
        SectionId::DebugAddr,
    ];
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<'_, [u8]>, gimli::Error> {
        let section = NEEDED.contains(&id).then(|| file.section_by_name(id.name())).flatten();
        // A section that does not decompress reads as absent: the others' lines stay.
        Ok(section.and_then(|s| s.uncompressed_data().ok()).unwrap_or(Cow::Borrowed(&[])))
    })
    .ok()?;
    let dwarf = sections.borrow(|s| EndianSlice::new(s, LittleEndian));
    let (mut rows, files) = statement_rows(&dwarf);
    rows.sort_unstable();
    let mut out = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges {
        let from = rows.partition_point(|r| r.0 < start);
        let mut lines: Vec<Line> = Vec::new();
        for &(_, file, line) in rows[from..].iter().take_while(|r| r.0 < end) {
            let l = Line { file: files[file].clone(), line };
            if !lines.contains(&l) {
                lines.push(l);
            }
        }
        out.push(lines);
    }
    Some(out)
}

/// Every `is_stmt` row with a line, as (address, file number, line), and the files' paths. A
/// unit or row that cannot be read is skipped: the lines of the others stay.
fn statement_rows(dwarf: &gimli::Dwarf<Reader<'_>>) -> (Vec<(u64, usize, u32)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut files: Vec<String> = Vec::new();
    let mut numbers: HashMap<String, usize> = HashMap::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else { continue };
        let Some(program) = unit.line_program.clone() else { continue };
        // The unit's file index -> lopi's file number.
        let mut unit_files: HashMap<u64, Option<usize>> = HashMap::new();
        let mut program_rows = program.rows();
        while let Ok(Some((header, row))) = program_rows.next_row() {
            if row.end_sequence() || !row.is_stmt() {
                continue;
            }
            let Some(line) = row.line().and_then(|l| u32::try_from(l.get()).ok()) else { continue };
            let number = *unit_files.entry(row.file_index()).or_insert_with(|| {
                let path = row.file(header).and_then(|f| file_path(dwarf, &unit, header, f))?;
                let next = files.len();
                Some(*numbers.entry(path.clone()).or_insert_with(|| {
                    files.push(path);
                    next
                }))
            });
            if let Some(number) = number {
                rows.push((row.address(), number, line));
            }
        }
    }
    (rows, files)
}

/// A line-table file's path as a compiler wrote it: its name, under its directory, under the
/// unit's compilation directory, each only while the path is still relative.
fn file_path(dwarf: &gimli::Dwarf<Reader<'_>>, unit: &gimli::Unit<Reader<'_>>, header: &gimli::LineProgramHeader<Reader<'_>>, file: &gimli::FileEntry<Reader<'_>>) -> Option<String> {
    let string = |attr| dwarf.attr_string(unit, attr).ok().map(|s| s.to_string_lossy().into_owned());
    let mut path = string(file.path_name())?;
    if let Some(dir) = file.directory(header).and_then(string) {
        path = joined(&dir, &path);
    }
    if let Some(comp_dir) = &unit.comp_dir {
        path = joined(&comp_dir.to_string_lossy(), &path);
    }
    Some(path)
}

fn joined(dir: &str, path: &str) -> String {
    if path.starts_with('/') || dir.is_empty() {
        path.to_string()
    } else {
        format!("{}/{path}", dir.trim_end_matches('/'))
    }
}
