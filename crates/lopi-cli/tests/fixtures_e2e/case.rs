//! One case (a fixture in one configuration): the commands it runs, recorded so that a
//! failure prints a repro, and lopi's steps on it (rewrite, report, info).

use crate::common::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Collects the commands run for one case, so a failure can print a repro.
pub struct Case {
    pub label: String,
    pub dir: PathBuf,
    pub repro: Vec<String>,
}

impl Case {
    /// Runs the rewritten program `rw` in `cwd` (LOPI_OUTPUT = `data`, or unset) and
    /// panics with the case's details unless it succeeds.
    pub fn run_rewritten_ok(&mut self, rw: &Path, cwd: &Path, data: Option<&Path>) -> Output {
        let mut cmd = Command::new(rw);
        cmd.current_dir(cwd);
        match data {
            Some(d) => cmd.env("LOPI_OUTPUT", d),
            None => cmd.env_remove("LOPI_OUTPUT"),
        };
        let out = self.run(&mut cmd, "rewritten program").unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success(), "{}", self.fail(format!("rewritten program: {}", out.describe_status())));
        out
    }

    pub fn new(label: String) -> Case {
        let dir = fresh_dir(&label);
        Case {
            label,
            dir,
            repro: Vec::new(),
        }
    }

    pub fn fail(&self, what: impl std::fmt::Display) -> String {
        let mut s = format!("=== [{}] {}\n", self.label, what.to_string().trim_end());
        let _ = writeln!(s, "  temp dir kept: {}", self.dir.display());
        let _ = writeln!(s, "  repro:");
        for r in &self.repro {
            let _ = writeln!(s, "    {r}");
        }
        s
    }

    pub fn compile(&mut self, cmd: &mut Command) -> Result<(), String> {
        self.repro.push(render_cmd(cmd));
        compile(cmd).map_err(|e| self.fail(e))
    }

    pub fn run(&mut self, cmd: &mut Command, what: &str) -> Result<Output, String> {
        self.repro.push(render_cmd(cmd));
        run(cmd, default_timeout()).map_err(|e| self.fail(format!("cannot run {what}: {e}")))
    }

    /// `lopi rewrite IN -o OUT` must succeed and leave IN unchanged.
    pub fn rewrite(&mut self, input: &Path, output: &Path, extra: &[&str]) -> Result<(), String> {
        let before = std::fs::read(input)
            .map_err(|e| self.fail(format!("read {}: {e}", input.display())))?;
        if let Some(p) = output.parent() {
            std::fs::create_dir_all(p).unwrap();
        }
        let mut cmd = Command::new(lopi_bin());
        cmd.arg("rewrite")
            .arg(input)
            .arg("-o")
            .arg(output)
            .args(extra);
        let out = self.run(&mut cmd, "lopi rewrite")?;
        if !out.status.success() {
            return Err(self.fail(format!(
                "lopi rewrite {} failed: {}\nstderr:\n{}",
                input.display(),
                out.describe_status(),
                out.stderr_str()
            )));
        }
        if out.stderr_str().contains("panicked") {
            return Err(self.fail(format!(
                "lopi rewrite printed a panic:\n{}",
                out.stderr_str()
            )));
        }
        let after = std::fs::read(input)
            .map_err(|e| self.fail(format!("read {}: {e}", input.display())))?;
        if before != after {
            return Err(self.fail(format!(
                "lopi rewrite modified its input {}",
                input.display()
            )));
        }
        if !output.is_file() {
            return Err(self.fail(format!(
                "lopi rewrite exited 0 but wrote no {}",
                output.display()
            )));
        }
        Ok(())
    }

    /// Runs `lopi SUB PATH --format json`; its stdout, or a failure.
    fn lopi_json(&mut self, sub: &str, path: &Path) -> Result<String, String> {
        let mut cmd = Command::new(lopi_bin());
        cmd.arg(sub).arg(path).args(["--format", "json"]);
        let out = self.run(&mut cmd, &format!("lopi {sub}"))?;
        if !out.status.success() {
            return Err(self.fail(format!(
                "lopi {sub} failed: {}\nstderr:\n{}",
                out.describe_status(),
                out.stderr_str()
            )));
        }
        Ok(out.stdout_str())
    }

    pub fn report(&mut self, data: &Path) -> Result<Vec<ReportEntry>, String> {
        if !data.exists() {
            return Err(self.fail(format!(
                "rewritten program wrote no data file {}",
                data.display()
            )));
        }
        let stdout = self.lopi_json("report", data)?;
        let entries = parse_report(&stdout)
            .map_err(|e| self.fail(format!("bad report JSON: {e}\n{}", truncate(&stdout, 4000))))?;
        for w in entries.windows(2) {
            if w[0].calls < w[1].calls {
                return Err(self.fail(format!(
                    "report not sorted by calls desc: {} ({}) before {} ({})",
                    w[0].name, w[0].calls, w[1].name, w[1].calls
                )));
            }
        }
        Ok(entries)
    }

    pub fn info(&mut self, module: &Path) -> Result<Info, String> {
        let stdout = self.lopi_json("info", module)?;
        let info = parse_info(&stdout)
            .map_err(|e| self.fail(format!("bad info JSON: {e}\n{}", truncate(&stdout, 4000))))?;
        check_info_summary(&info).map_err(|e| self.fail(e))?;
        Ok(info)
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n... ({} bytes total)", &s[..end], s.len())
    }
}
