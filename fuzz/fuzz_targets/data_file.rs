//! Any bytes through the data-file reader, the report aggregation and the exports.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = lopi_trace::DataFile::parse(data) {
        let _ = lopi_trace::Profile::from_data(&file);
        if let Some(t) = lopi_trace::Timing::from_data(&file) {
            let _ = lopi_trace::folded(&t, lopi_trace::Weight::Calls);
            let _ = lopi_trace::pprof(&t);
            let _ = lopi_trace::chrome_trace(&t);
        }
    }
});
