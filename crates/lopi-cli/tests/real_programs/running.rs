//! Running a battery: the runner with a timeout, the original program's run (once per
//! test process), and the comparison of a rewritten run's output with the original's.

use super::secs;
use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub struct RunResult {
    pub stdout: String,
    pub code: i32,
    pub took: Duration,
}

/// Upper bound for one battery/suite run; a hang fails instead of blocking
/// the whole test run.  LOPI_REAL_TIMEOUT (seconds) overrides it.
fn suite_timeout() -> Duration {
    let s = std::env::var("LOPI_REAL_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1200);
    Duration::from_secs(s)
}

/// Run a command with stdin from /dev/null, in its own process group, with
/// a timeout (the whole group is killed then); stdout is the result (the
/// scripts fold stderr in themselves); stderr is kept for diagnostics.
pub fn run(cmd: &mut Command) -> RunResult {
    use std::os::unix::process::CommandExt;
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let base = std::env::temp_dir().join(format!("lopi-real-{}-{n}", std::process::id()));
    let out_path = base.with_extension("out");
    let err_path = base.with_extension("err");
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let limit = suite_timeout();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = String::from_utf8_lossy(&fs::read(&out_path).unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned();
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    if !stderr.trim().is_empty() {
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        println!(
            "    (stderr of {:?}: {})",
            cmd.get_program(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let code = match status {
        Some(st) => st.code().unwrap_or(128 + 99),
        None => {
            println!(
                "    TIMEOUT after {} : {cmd:?} (process group killed)",
                secs(limit)
            );
            -1
        }
    };
    RunResult {
        stdout,
        code,
        took: t.elapsed(),
    }
}

/// The ORIGINAL program's run of a battery, once per test process: the tests that rewrite
/// one binary in several modes compare against the same run.  KEY names the battery and the
/// binaries; the batteries' outputs do not depend on their scratch directory.
pub fn original(key: &str, cmd: impl FnOnce() -> Command) -> Arc<RunResult> {
    type Cell = Arc<OnceLock<Arc<RunResult>>>;
    static RUNS: OnceLock<Mutex<HashMap<String, Cell>>> = OnceLock::new();
    let cell = RUNS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(key.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| Arc::new(run(&mut cmd()))).clone()
}

/// Same stdout and exit code, else fail with a diff.  The original must pass.
pub fn assert_same(tag: &str, what: &str, dir: &Path, orig: &RunResult, rewritten: &RunResult) {
    let safe: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let a = dir.join(format!("{safe}.orig.txt"));
    let b = dir.join(format!("{safe}.rewritten.txt"));
    fs::write(&a, &orig.stdout).unwrap();
    fs::write(&b, &rewritten.stdout).unwrap();
    println!(
        "[{tag}] {what}: original {} (exit {}, {} lines), rewritten {} (exit {}) -> {}",
        secs(orig.took),
        orig.code,
        orig.stdout.lines().count(),
        secs(rewritten.took),
        rewritten.code,
        if orig.stdout == rewritten.stdout && orig.code == rewritten.code {
            "same"
        } else {
            "DIFFERENT"
        }
    );
    assert_eq!(
        orig.code, 0,
        "[{tag}] {what}: the ORIGINAL program fails (exit {}), so the environment is not as prepared; output in {}",
        orig.code,
        a.display()
    );
    if orig.stdout != rewritten.stdout || orig.code != rewritten.code {
        let diff = Command::new("diff")
            .args(["-u", a.to_str().unwrap(), b.to_str().unwrap()])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .take(80)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        panic!(
            "[{tag}] {what}: rewritten output differs from the original (exit {} vs {}).\n{}\n(full outputs: {} {})",
            orig.code,
            rewritten.code,
            diff,
            a.display(),
            b.display()
        );
    }
}
