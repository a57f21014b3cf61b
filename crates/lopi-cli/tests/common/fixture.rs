//! Fixture directives: the `// lopi-...:` comment lines of a fixture source, and the list
//! of fixture sources.

use super::fixtures_dir;
use std::path::PathBuf;

/// Directives read from `// lopi-...:` comment lines of a fixture source.
#[derive(Debug, Clone, Default)]
pub struct Fixture {
    pub file: String,
    pub path: PathBuf,
    pub cxx: bool,
    /// `lopi-expect`: entry counts of the program's own functions.
    pub expect: Vec<(String, u64)>,
    /// `lopi-expect-lib`: entry counts of the shared library's functions.
    pub expect_lib: Vec<(String, u64)>,
    /// `lopi-exit` / `lopi-signal`: how the original program terminates.
    pub exit: Option<i32>,
    pub signal: Option<i32>,
    /// `lopi-cflags` (compile and link) / `lopi-ldflags` (link only).
    pub cflags: Vec<String>,
    pub ldflags: Vec<String>,
    /// `lopi-lib: x.c` (linked against libfix.so built from x.c) or
    /// `lopi-dlopen: x.c` (only placed on LD_LIBRARY_PATH).
    pub lib: Option<String>,
    pub dlopen: bool,
    /// `lopi-kind: shared` — a library source, not a program.
    pub shared: bool,
    /// `lopi-may-skip: name ...` — functions lopi may leave unprobed, as long as
    /// `lopi info` says why (e.g. 1-byte functions packed with no padding).
    pub may_skip: Vec<String>,
}

fn parse_pairs(file: &str, s: &str) -> Vec<(String, u64)> {
    s.split_whitespace()
        .map(|tok| {
            let (k, v) = tok
                .rsplit_once('=')
                .unwrap_or_else(|| panic!("{file}: bad expectation {tok:?}"));
            (
                k.to_string(),
                v.parse()
                    .unwrap_or_else(|_| panic!("{file}: bad count in {tok:?}")),
            )
        })
        .collect()
}

impl Fixture {
    pub fn load(file: &str) -> Fixture {
        let path = fixtures_dir().join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut fx = Fixture {
            file: file.to_string(),
            cxx: file.ends_with(".cpp") || file.ends_with(".cc"),
            path,
            ..Default::default()
        };
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("//") else {
                continue;
            };
            let Some((key, val)) = rest.trim().split_once(':') else {
                continue;
            };
            let val = val.trim();
            match key.trim() {
                "lopi-expect" => fx.expect = parse_pairs(file, val),
                "lopi-expect-lib" => fx.expect_lib = parse_pairs(file, val),
                "lopi-exit" => fx.exit = Some(val.parse().expect("lopi-exit")),
                "lopi-signal" => fx.signal = Some(val.parse().expect("lopi-signal")),
                "lopi-cflags" => fx.cflags = val.split_whitespace().map(String::from).collect(),
                "lopi-ldflags" => fx.ldflags = val.split_whitespace().map(String::from).collect(),
                "lopi-lib" => fx.lib = Some(val.to_string()),
                "lopi-dlopen" => {
                    fx.lib = Some(val.to_string());
                    fx.dlopen = true;
                }
                "lopi-kind" => fx.shared = val == "shared",
                "lopi-may-skip" => fx.may_skip = val.split_whitespace().map(String::from).collect(),
                k if k.starts_with("lopi-") => panic!("{file}: unknown directive {k}"),
                _ => {}
            }
        }
        fx
    }

    pub fn compiler(&self) -> &'static str {
        if self.cxx {
            "c++"
        } else {
            "cc"
        }
    }
}

/// All fixture sources (top level of fixtures/, *.c / *.cpp / *.cc).
pub fn all_fixture_files() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("read fixtures dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".c") || n.ends_with(".cpp") || n.ends_with(".cc"))
        .collect();
    v.sort();
    v
}
