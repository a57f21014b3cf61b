//! Source lines of code addresses, from a file's DWARF line tables (`.debug_line` and the
//! units that own them), through addr2line: what `lopi coverage` maps blocks to.
use gimli::{EndianSlice, LittleEndian};
use object::{Object, ObjectSection};

/// A source file and line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Line {
    pub file: String,
    pub line: u32,
}

/// For each address range `start..end` of `ranges`, the source lines its code comes from (in
/// address order, each once), read from the DWARF of `data` (an ELF file: the program, or its
/// separate debug file). `None` when `data` has no line tables.
pub fn lines_of(data: &[u8], ranges: &[(u64, u64)]) -> Option<Vec<Vec<Line>>> {
    let file = object::File::parse(data).ok()?;
    file.section_by_name(".debug_line")?;
    let section = |id: gimli::SectionId| -> Result<EndianSlice<'_, LittleEndian>, gimli::Error> {
        let bytes = file.section_by_name(id.name()).and_then(|s| s.data().ok()).unwrap_or(&[]);
        Ok(EndianSlice::new(bytes, LittleEndian))
    };
    let dwarf = gimli::Dwarf::load(section).ok()?;
    let context = addr2line::Context::from_dwarf(dwarf).ok()?;
    let mut out = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges {
        let mut lines: Vec<Line> = Vec::new();
        if let Ok(locations) = context.find_location_range(start, end) {
            for (_, _, loc) in locations {
                if let (Some(file), Some(line)) = (loc.file, loc.line) {
                    let l = Line { file: file.to_string(), line };
                    if line > 0 && !lines.contains(&l) {
                        lines.push(l);
                    }
                }
            }
        }
        out.push(lines);
    }
    Some(out)
}
