//! The harness of the timing tests (`timing_e2e.rs`, `timing_threads_e2e.rs`, `budget_e2e.rs`):
//! a fixture of `fixtures/timing/` built in a compiler configuration, rewritten (or run under
//! `lopi run`) with entry and exit probes, run beside the original, and its report read.
//!
//! Environment knobs (all optional):
//!   LOPI_BIN=path             lopi binary to test (default: the one cargo built)
//!   LOPI_TIMING_FILTER=str    only configurations whose name contains `str` ("O2-pie")
//!   LOPI_KEEP_TMP=1           keep temp dirs of passing cases too
//!   LOPI_TEST_TIMEOUT=secs    watchdog for each process (default 120)

// Each test binary uses part of the harness.
#![allow(dead_code, unused_imports)]

/// A test on the rewritten file (`$name`) and the same test under `lopi run` (`$live`), both
/// running `$body(live)`.
macro_rules! static_and_live {
    ($(#[$doc:meta])* $name:ident, $live:ident, $body:ident) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            $body(false);
        }

        /// The same, with the probes spliced in by `lopi run`.
        #[test]
        fn $live() {
            $body(true);
        }
    };
}

mod built;
mod checks;
mod config;
mod report;

pub use built::*;
pub use checks::*;
pub use config::*;
pub use report::*;
