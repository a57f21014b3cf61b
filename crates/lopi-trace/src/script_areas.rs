//! Probe-script areas in a data file (`lopi trace`): each traced thread's tables and output
//! ring, found by walking the file's records by their lengths (past one that is unfinished
//! or damaged, at the next page where one starts), which a reader can do while the program
//! still appends to it. Nothing read here is trusted: an area that is not what
//! its header says yields nothing, never a panic.
use lopi_rt_abi::script::{ScriptArea, TableShape, RECORD_HEAD_LEN, SCRIPT_AREA_MAGIC};
use lopi_rt_abi::{DATA_MAGIC, PAGE_SIZE};

/// One thread's area, as a view of the data file's bytes.
#[derive(Clone, Copy, Debug)]
pub struct AreaView<'a> {
    /// Offset of the area in the data file.
    pub offset: u64,
    pub header: ScriptArea,
    bytes: &'a [u8],
}

/// An output record taken from a ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRecord {
    pub kind: u16,
    pub what: u32,
    pub tsc: u64,
    pub payload: Vec<u8>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |w| u32::from_le_bytes(w.try_into().unwrap_or([0; 4])))
}

/// Every script area of script `id` in `data` (a whole data file, possibly still growing).
pub fn areas(data: &[u8], id: u64) -> Vec<AreaView<'_>> {
    let mut out = Vec::new();
    if !data.starts_with(&DATA_MAGIC) {
        return out;
    }
    let mut offset = PAGE_SIZE;
    while let Some(rest) = data.get(offset as usize..) {
        let len = u64_at(rest, 8);
        if rest.len() < 16 || len == 0 || !len.is_multiple_of(PAGE_SIZE) {
            // A record still being written, or damage: read on at the next one.
            match crate::data::next_item(data, offset) {
                Some(next) => {
                    offset = next;
                    continue;
                }
                None => break,
            }
        }
        if rest.starts_with(&SCRIPT_AREA_MAGIC) {
            if let Some(bytes) = rest.get(..len as usize) {
                let header = header(bytes);
                if header.script_id == id && header.len == len {
                    out.push(AreaView { offset, header, bytes });
                }
            }
        }
        offset += len;
    }
    out
}

fn header(b: &[u8]) -> ScriptArea {
    ScriptArea {
        magic: SCRIPT_AREA_MAGIC,
        len: u64_at(b, 8),
        pid: u32_at(b, 16),
        tid: u32_at(b, 20),
        script_id: u64_at(b, 24),
        faults: u64_at(b, 32),
        ring_drops: u64_at(b, 40),
        ring_head: u64_at(b, 48),
        ring_tail: u64_at(b, 56),
        exit: u64_at(b, 64),
        tail_returns: u64_at(b, 72),
        missed_samples: u64_at(b, 80),
    }
}

impl<'a> AreaView<'a> {
    /// The `u32` at `at` in the area (0 past its end).
    pub fn u32_at(&self, at: usize) -> u32 {
        u32_at(self.bytes, at)
    }

    /// The bytes of a map's table, if the area holds them.
    pub fn table(&self, shape: &TableShape, len: usize) -> &'a [u8] {
        self.bytes.get(shape.offset as usize..).and_then(|t| t.get(..len)).unwrap_or(&[])
    }

    /// The code objects `pystack` named in the thread's table at `offset` (0: none), each as
    /// `qualname (file:line)`.
    pub fn python_names(&self, offset: u64) -> Vec<(u64, String)> {
        use lopi_rt_abi::python::{PY_CODES, PY_CODE_NAME_LEN, PY_FILE_LEN, PY_NAME_LEN};
        let Some(table) = (offset != 0).then(|| self.bytes.get(offset as usize..)).flatten() else { return Vec::new() };
        table
            .chunks_exact(PY_CODE_NAME_LEN)
            .take(PY_CODES)
            .filter(|e| u64_at(e, 0) != 0)
            .map(|e| {
                let text = |at: usize, len: usize, cap: usize| String::from_utf8_lossy(&e[at..at + len.min(cap)]).into_owned();
                let (name_len, file_len) = (u32_at(e, 12) as usize & 0xffff, (u32_at(e, 12) >> 16) as usize);
                let name = text(16, name_len, PY_NAME_LEN);
                let file = text(16 + PY_NAME_LEN, file_len, PY_FILE_LEN);
                (u64_at(e, 0), format!("{name} ({file}:{})", u32_at(e, 8)))
            })
            .collect()
    }

    /// The records from `tail` (where the last reader stopped) to the ring's head: the new
    /// tail and the records.
    pub fn records(&self, ring_offset: u64, ring_len: u64, tail: u64) -> (u64, Vec<OutputRecord>) {
        let mut out = Vec::new();
        let head = self.header.ring_head;
        let Some(ring) = self.bytes.get(ring_offset as usize..).and_then(|r| r.get(..ring_len as usize)) else { return (tail, out) };
        if ring_len == 0 || head < tail || head - tail > ring_len {
            return (head, out);
        }
        let mut at = tail;
        while at < head {
            let pos = (at % ring_len) as usize;
            let len = u32_at(ring, pos) as u64;
            let kind = u32_at(ring, pos + 4) as u16;
            if len < 8 || !len.is_multiple_of(8) || at + len > head {
                return (head, out);
            }
            if kind != lopi_rt_abi::script::record::PAD {
                let Some(record) = ring.get(pos..pos + len as usize) else { return (head, out) };
                if record.len() >= RECORD_HEAD_LEN {
                    out.push(OutputRecord {
                        kind,
                        what: u32_at(record, 8),
                        tsc: u64_at(record, 16),
                        payload: record[RECORD_HEAD_LEN..].to_vec(),
                    });
                }
            }
            at += len;
        }
        (at, out)
    }
}
