//! "Never panic on input": mutated and truncated ELF files go through the whole pipeline
//! (parse, plan, rewrite), and mutated data files through the reader. Each case must end in
//! a value or an error. Deterministic (fixed seed), so a failure names its case.
use lopi_elf::ElfModule;
use std::path::PathBuf;
use std::process::Command;

/// xorshift64*: enough randomness for mutation, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn build_sample() -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("robustness");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("sample.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nstatic int sq(int x){return x*x;}\nint tiny(void){return 0;}\n\
         int sw(int x){switch(x){case 0:return 3;case 1:return 7;case 2:return 9;case 3:return 1;\
         case 4:return 5;case 5:return 8;default:return -1;}}\n\
         int main(int c,char**v){printf(\"%d %d %d\\n\",sq(c),tiny(),sw(c));return 0;}\n",
    )
    .unwrap();
    let exe = dir.join("sample");
    let ok = Command::new("cc").args(["-O2", "-o"]).arg(&exe).arg(&src).status().expect("cc must be installed").success();
    assert!(ok, "cc failed");
    std::fs::read(exe).unwrap()
}

fn pipeline(bytes: &[u8]) {
    let Ok(mut module) = ElfModule::parse(bytes) else { return };
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &lopi_patch::Filter::default(), lopi_patch::Probes::TIME);
    let names = lopi_rewrite::ModuleNames { module: "m".into(), source: "s".into() };
    let _ = lopi_rewrite::rewrite(&module, selection, &names, lopi_rewrite::Recording { trace: true, budget_ppm: 0, sample_hz: 0, syscall_log: false, catch_unprobed: false });
}

#[test]
fn mutated_elf_files_never_panic() {
    let original = build_sample();
    pipeline(&original);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..3000 {
        let mut bytes = original.clone();
        match case % 3 {
            // Headers and tables are where parsers trust lengths and offsets.
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let at = rng.below(bytes.len().min(4096));
                    bytes[at] = rng.next() as u8;
                }
            }
            1 => {
                for _ in 0..1 + rng.below(32) {
                    let at = rng.below(bytes.len());
                    bytes[at] ^= 1 << rng.below(8);
                }
            }
            _ => bytes.truncate(rng.below(original.len())),
        }
        let result = std::panic::catch_unwind(|| pipeline(&bytes));
        assert!(result.is_ok(), "case {case} panicked");
    }
}

#[test]
fn mutated_data_files_never_panic() {
    use lopi_rt_abi::{own_calls, RecordHeader, DATA_MAGIC, PAGE_SIZE, RECORD_HEADER_LEN, RECORD_MAGIC};
    let meta = br#"{"version":1,"module":"m","source":"s","functions":[{"name":"f","addr":4096,"size":3}]}"#;
    // A header page, the counters (one, and the runtime's own calls), one CPU's block.
    let counters_len = lopi_rt_abi::counters_len(1);
    let mut file = vec![0u8; (2 * PAGE_SIZE + 2 * counters_len) as usize];
    file[..8].copy_from_slice(&DATA_MAGIC);
    let header = RecordHeader {
        magic: RECORD_MAGIC,
        record_len: PAGE_SIZE + 2 * counters_len,
        pid: 7,
        exe_len: 3,
        load_bias: 0,
        meta_offset: 128,
        meta_len: meta.len() as u64,
        counters_offset: PAGE_SIZE,
        counters_len,
        counter_count: 1,
        percpu_offset: PAGE_SIZE + counters_len,
        cpu_count: 1,
        stride: counters_len as u32,
        tsc_hz: 1_000_000_000,
    };
    let rec = PAGE_SIZE as usize;
    file[rec..rec + RECORD_HEADER_LEN].copy_from_slice(&header.to_bytes());
    file[rec + RECORD_HEADER_LEN..rec + RECORD_HEADER_LEN + 3].copy_from_slice(b"exe");
    file[rec + 128..rec + 128 + meta.len()].copy_from_slice(meta);
    let counters = 2 * rec;
    file[counters..counters + 8].copy_from_slice(&42u64.to_le_bytes());
    let open = counters + (counters_len - own_calls::LEN + own_calls::entry(2)) as usize;
    file[open..open + 8].copy_from_slice(&5u64.to_le_bytes());
    file[open + 8..open + 16].copy_from_slice(&700u64.to_le_bytes());
    let block = counters + counters_len as usize;
    file[block..block + 8].copy_from_slice(&8u64.to_le_bytes());
    let parsed = lopi_trace::DataFile::parse(&file).unwrap();
    assert_eq!(parsed.records[0].counts, vec![50], "shared plus per-CPU counts");
    assert_eq!(parsed.records[0].own_calls, vec![(2, 5, 700)], "the runtime's own calls");
    assert_eq!(lopi_trace::OwnCalls::from_data(&parsed).ns, Some(700.0), "their time at the record's rate");

    let mut rng = Rng(0x1234_5678_9abc_def1);
    for case in 0..3000 {
        let mut bytes = file.clone();
        if case % 4 == 3 {
            // A cut says what it cut: the header page, or the record (never read as whole).
            let cut = rng.below(file.len());
            bytes.truncate(cut);
            let parsed = lopi_trace::DataFile::parse(&bytes);
            let damage: Vec<String> = parsed.as_ref().map(|d| d.damage.iter().map(|d| d.to_string()).collect()).unwrap_or_default();
            match cut {
                0..8 => assert!(parsed.is_err(), "case {case}: {cut} bytes are no data file"),
                8 => assert!(damage.is_empty(), "case {case}: the magic alone is a file its process left at once"),
                _ if cut == rec => assert!(damage.is_empty(), "case {case}: the header page alone"),
                _ if cut < rec => assert!(damage.len() == 1 && damage[0].starts_with("header page: truncated: "), "case {case}: {damage:?}"),
                _ => assert!(damage.len() == 1 && damage[0].starts_with("module record 1 at offset 0x1000: truncated"), "case {case}: {damage:?}"),
            }
            assert!(parsed.is_err() || parsed.is_ok_and(|d| d.records.is_empty()), "case {case}: a cut record is not read");
        } else {
            for _ in 0..1 + rng.below(6) {
                let at = rec + rng.below(RECORD_HEADER_LEN + 200);
                bytes[at] = rng.next() as u8;
            }
        }
        let result = std::panic::catch_unwind(|| {
            if let Ok(d) = lopi_trace::DataFile::parse(&bytes) {
                let _ = lopi_trace::Profile::from_data(&d);
            }
        });
        assert!(result.is_ok(), "case {case} panicked");
    }
}

/// A real data file with timing and a trace (small capacities), from the sample rewritten
/// with every probe, mutated in its thread chunks: reader, report and exports never panic.
#[test]
fn mutated_timed_data_files_never_panic() {
    use std::os::unix::fs::PermissionsExt;
    let original = build_sample();
    let mut module = ElfModule::parse(&original).unwrap();
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &lopi_patch::Filter::default(), lopi_patch::Probes::TIME);
    let names = lopi_rewrite::ModuleNames { module: "m".into(), source: "s".into() };
    let rewritten = lopi_rewrite::rewrite(&module, selection, &names, lopi_rewrite::Recording { trace: true, budget_ppm: 0, sample_hz: 0, syscall_log: false, catch_unprobed: false }).unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("robustness");
    let exe = dir.join("sample.timed");
    let data = dir.join("sample.timed.lopi");
    let _ = std::fs::remove_file(&data);
    std::fs::write(&exe, &rewritten.image).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ok = Command::new(&exe)
        .env("LOPI_OUTPUT", &data)
        .env("LOPI_NODES", "16")
        .env("LOPI_DEPTH", "8")
        .env("LOPI_TRACE_EVENTS", "64")
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "the rewritten sample failed");
    let file = std::fs::read(&data).unwrap();
    let parsed = lopi_trace::DataFile::parse(&file).unwrap();
    assert_eq!(parsed.threads.len(), 1, "one timed thread");
    // The thread chunk is appended after the module record; its tree may have grown into an
    // extension after it (16 nodes is less than the sample needs).
    let header = &parsed.threads[0].header;
    let chunk_at = (0..file.len())
        .step_by(lopi_rt_abi::PAGE_SIZE as usize)
        .find(|&at| file[at..].starts_with(&lopi_rt_abi::THREAD_MAGIC))
        .expect("a thread chunk");
    let exercise = |bytes: &[u8]| {
        if let Ok(d) = lopi_trace::DataFile::parse(bytes) {
            let _ = lopi_trace::Profile::from_data(&d);
            if let Some(t) = lopi_trace::Timing::from_data(&d) {
                let _ = lopi_trace::folded(&t, lopi_trace::Weight::SelfTime);
                let _ = lopi_trace::pprof(&t);
                let _ = lopi_trace::chrome_trace(&t);
            }
        }
    };
    exercise(&file);
    let mut rng = Rng(0x0bad_cafe_f00d_d00d);
    // The header page (its tables too), then the start of the node, stack and trace regions
    // and of the extension headers.
    let mut hot: Vec<usize> = vec![
        chunk_at,
        chunk_at + lopi_rt_abi::UNMATCHED_TABLE as usize,
        chunk_at + lopi_rt_abi::BUDGET_STATE as usize,
        chunk_at + lopi_rt_abi::BUDGET_MODULES as usize,
        header.nodes_file as usize,
        header.stack_file as usize,
        chunk_at + header.trace_offset as usize,
    ];
    hot.extend([header.nodes_file, header.stack_file].iter().filter(|&&f| f >= (chunk_at as u64) + header.chunk_len).map(|&f| f as usize - 4096));
    for case in 0..3000 {
        let mut bytes = file.clone();
        if case % 5 == 4 {
            bytes.truncate(chunk_at + rng.below(file.len() - chunk_at));
        } else {
            for _ in 0..1 + rng.below(6) {
                let at = hot[rng.below(hot.len())] + rng.below(256);
                if at < bytes.len() {
                    bytes[at] = rng.next() as u8;
                }
            }
        }
        let result = std::panic::catch_unwind(|| exercise(&bytes));
        assert!(result.is_ok(), "case {case} panicked");
    }
}

/// The names fixture (functions with `.cold` parts) built with -g, then stripped and split:
/// (stripped file, its separate debug file).
fn build_split_sample(pie: bool) -> (Vec<u8>, Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("robustness");
    std::fs::create_dir_all(&dir).unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/names/cold_parts.c");
    let exe = dir.join(if pie { "cold-pie" } else { "cold-nopie" });
    let pic = if pie { ["-fPIE", "-pie"] } else { ["-fno-pie", "-no-pie"] };
    let run = |cmd: &mut Command| assert!(cmd.status().expect("cc and binutils must be installed").success(), "{cmd:?} failed");
    run(Command::new("cc").args(["-g", "-O2"]).args(pic).arg("-o").arg(&exe).arg(&src));
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&exe).arg(exe.with_extension("debug")));
    run(Command::new("strip").arg(&exe));
    (std::fs::read(&exe).unwrap(), std::fs::read(exe.with_extension("debug")).unwrap())
}

fn pipeline_with_debug(stripped: &[u8], debug: Vec<u8>) {
    let Some(debug) = lopi_elf::DebugFile::from_bytes(stripped, "debug".into(), debug) else { return };
    let Ok(mut module) = ElfModule::parse_with_debug(stripped, Some(&debug)) else { return };
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &lopi_patch::Filter::default(), lopi_patch::Probes::TIME);
    let names = lopi_rewrite::ModuleNames { module: "m".into(), source: "s".into() };
    let _ = lopi_rewrite::rewrite(&module, selection, &names, lopi_rewrite::Recording { trace: true, budget_ppm: 0, sample_hz: 0, syscall_log: false, catch_unprobed: false });
}

/// Stripped files (functions from `.eh_frame`, `.cold` parts told apart by the planner, code
/// references from relocations and data) and separate debug files (symbols read from a file
/// that is not the one planned), mutated: values or errors, never panics.
#[test]
fn mutated_stripped_and_debug_files_never_panic() {
    let mut rng = Rng(0x0bad_c0de_dead_beef);
    for pie in [true, false] {
        let (stripped, debug) = build_split_sample(pie);
        let mut module = ElfModule::parse(&stripped).unwrap();
        assert!(!lopi_patch::analyse(&mut module).fragments.is_empty(), "the sample has frameless .cold parts");
        let named = lopi_elf::DebugFile::from_bytes(&stripped, "debug".into(), debug.clone()).expect("the debug file matches");
        let module = ElfModule::parse_with_debug(&stripped, Some(&named)).unwrap();
        assert!(module.functions.iter().any(|f| f.name == "checked_double"), "names from the debug file");
        for case in 0..1500 {
            let mut bytes = stripped.clone();
            for _ in 0..1 + rng.below(16) {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
            assert!(std::panic::catch_unwind(|| pipeline(&bytes)).is_ok(), "stripped pie={pie} case {case} panicked");
            // Symbols, strings and section headers sit at the end of a debug file.
            let mut bytes = debug.clone();
            let tail = bytes.len().saturating_sub(5000);
            match case % 3 {
                0 => {
                    for _ in 0..1 + rng.below(8) {
                        let at = tail + rng.below(bytes.len() - tail);
                        bytes[at] = rng.next() as u8;
                    }
                }
                1 => {
                    for _ in 0..1 + rng.below(32) {
                        let at = tail + rng.below(bytes.len() - tail);
                        bytes[at] ^= 1 << rng.below(8);
                    }
                }
                _ => bytes.truncate(tail + rng.below(bytes.len() - tail)),
            }
            assert!(std::panic::catch_unwind(|| pipeline_with_debug(&stripped, bytes)).is_ok(), "debug file pie={pie} case {case} panicked");
        }
    }
}
