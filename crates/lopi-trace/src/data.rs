//! Data files: a header page, then one page-aligned record per module per process. See
//! `lopi-rt-abi` for the layouts and `runtime/lopi-rt` for the writer.
use crate::ModuleMeta;
use lopi_rt_abi::{RecordHeader, DATA_MAGIC, PAGE_SIZE, RECORD_HEADER_LEN, RECORD_MAGIC};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("not a lopi data file (bad magic)")]
    NotData,
    #[error("corrupt record at offset {offset:#x}: {what}")]
    Corrupt { offset: u64, what: String },
}

/// One module's counts in one process.
#[derive(Clone, Debug)]
pub struct Record {
    pub pid: u32,
    pub exe: String,
    pub load_bias: u64,
    pub meta: ModuleMeta,
    pub counts: Vec<u64>,
}

/// A whole data file.
#[derive(Clone, Debug, Default)]
pub struct DataFile {
    pub records: Vec<Record>,
    /// True when a record was cut short (its process died while registering).
    pub truncated: bool,
}

impl DataFile {
    pub fn parse(bytes: &[u8]) -> Result<Self, DataError> {
        if bytes.len() < 8 || bytes[..8] != DATA_MAGIC {
            return Err(DataError::NotData);
        }
        let mut out = DataFile::default();
        let mut offset = PAGE_SIZE;
        while offset < bytes.len() as u64 {
            let rest = &bytes[offset as usize..];
            let Some(header) = RecordHeader::from_bytes(rest) else {
                out.truncated = true;
                break;
            };
            if header.magic != RECORD_MAGIC {
                // Zero magic: a record whose writer died before finishing it.
                out.truncated = true;
                break;
            }
            let corrupt = |what: &str| DataError::Corrupt { offset, what: what.to_string() };
            if header.record_len == 0 || header.record_len % PAGE_SIZE != 0 || header.record_len > rest.len() as u64 {
                return Err(corrupt("record length"));
            }
            let record = &rest[..header.record_len as usize];
            let slice = |at: u64, len: u64| {
                let end = at.checked_add(len)?;
                record.get(at as usize..usize::try_from(end).ok()?)
            };
            let exe = slice(RECORD_HEADER_LEN as u64, u64::from(header.exe_len)).ok_or_else(|| corrupt("exe path"))?;
            let meta_bytes = slice(header.meta_offset, header.meta_len).ok_or_else(|| corrupt("metadata range"))?;
            let meta: ModuleMeta =
                serde_json::from_slice(meta_bytes).map_err(|e| corrupt(&format!("metadata: {e}")))?;
            let count_bytes = header.counter_count.checked_mul(8).ok_or_else(|| corrupt("counter count"))?;
            let counters = slice(header.counters_offset, count_bytes).ok_or_else(|| corrupt("counter range"))?;
            if meta.functions.len() as u64 != header.counter_count {
                return Err(corrupt("metadata and counters disagree"));
            }
            let mut counts: Vec<u64> = read_counts(counters);
            // Per-CPU blocks (see runtime/lopi-rt): a function's calls are the sum over all.
            for cpu in 0..u64::from(header.cpu_count) {
                let at = cpu
                    .checked_mul(u64::from(header.stride))
                    .and_then(|o| o.checked_add(header.percpu_offset))
                    .ok_or_else(|| corrupt("per-CPU block offset"))?;
                let block = slice(at, count_bytes).ok_or_else(|| corrupt("per-CPU block range"))?;
                for (total, n) in counts.iter_mut().zip(read_counts(block)) {
                    *total = total.saturating_add(n);
                }
            }
            out.records.push(Record {
                pid: header.pid,
                exe: String::from_utf8_lossy(exe).into_owned(),
                load_bias: header.load_bias,
                meta,
                counts,
            });
            offset += header.record_len;
        }
        Ok(out)
    }
}

fn read_counts(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()
}
