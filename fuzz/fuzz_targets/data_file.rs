//! Any bytes through the data-file reader and the report aggregation.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = lopi_trace::DataFile::parse(data) {
        let _ = lopi_trace::Profile::from_data(&file);
    }
});
