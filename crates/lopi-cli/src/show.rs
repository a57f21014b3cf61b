//! Text and JSON views of plans and profiles.
use lopi_elf::ElfModule;
use lopi_patch::Outcome;
use lopi_trace::Profile;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::Path;

/// Counts behind the summary line of `info` and `rewrite`.
pub struct Summary {
    pub found: usize,
    pub selected: usize,
    pub probed: usize,
    pub skipped_by_reason: BTreeMap<&'static str, usize>,
}

impl Summary {
    pub fn new(module: &ElfModule<'_>, outcomes: &[Outcome]) -> Summary {
        let mut s = Summary { found: module.functions.len(), selected: 0, probed: 0, skipped_by_reason: BTreeMap::new() };
        for outcome in outcomes {
            match outcome {
                Outcome::Probed(_) => s.probed += 1,
                Outcome::Skipped(r) => *s.skipped_by_reason.entry(r.key()).or_default() += 1,
                Outcome::NotSelected => continue,
            }
            s.selected += 1;
        }
        s
    }

    pub fn skipped(&self) -> usize {
        self.skipped_by_reason.values().sum()
    }

    /// Probed share of the selected functions, in percent.
    pub fn coverage(&self) -> f64 {
        if self.selected == 0 {
            return 100.0;
        }
        100.0 * self.probed as f64 / self.selected as f64
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} functions found", self.found)?;
        if self.selected != self.found {
            write!(f, ", {} selected", self.selected)?;
        }
        write!(f, ", {} probed ({:.2}%), {} skipped", self.probed, self.coverage(), self.skipped())?;
        if !self.skipped_by_reason.is_empty() {
            let reasons: Vec<String> = self.skipped_by_reason.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            write!(f, " ({})", reasons.join(", "))?;
        }
        Ok(())
    }
}

fn outcome_fields(outcome: &Outcome) -> (&'static str, Option<&'static str>, Option<String>) {
    match outcome {
        Outcome::Probed(t) => ("probed", Some(t.name()), None),
        Outcome::Skipped(r) => ("skipped", None, Some(format!("{}: {r}", r.key()))),
        Outcome::NotSelected => ("not-selected", None, None),
    }
}

pub fn info_json(path: &Path, module: &ElfModule<'_>, outcomes: &[Outcome], summary: &Summary) -> Value {
    let functions: Vec<Value> = module
        .functions
        .iter()
        .zip(outcomes)
        .map(|(f, o)| {
            let (status, tactic, reason) = outcome_fields(o);
            let mut v = json!({
                "name": f.name, "addr": format!("{:#x}", f.addr.0), "size": f.size,
                "source": f.source, "status": status,
            });
            if !f.aliases.is_empty() {
                v["aliases"] = json!(f.aliases);
            }
            if let Some(t) = tactic {
                v["tactic"] = json!(t);
            }
            if let Some(r) = reason {
                v["reason"] = json!(r);
            }
            v
        })
        .collect();
    json!({
        "path": path.display().to_string(),
        "kind": module.kind,
        "symbols": module.has_symtab,
        "functions": functions,
        "summary": {
            "found": summary.found,
            "selected": summary.selected,
            "probed": summary.probed,
            "skipped": summary.skipped(),
            "coverage_percent": (summary.coverage() * 100.0).round() / 100.0,
            "skipped_by_reason": summary.skipped_by_reason,
        },
    })
}

pub fn info_text(module: &ElfModule<'_>, outcomes: &[Outcome], summary: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<18} {:>7}  {:<14} NAME", "ADDRESS", "SIZE", "PROBE");
    for (f, o) in module.functions.iter().zip(outcomes) {
        let (status, tactic, reason) = outcome_fields(o);
        let how = tactic.unwrap_or(status);
        let _ = match reason {
            Some(r) => writeln!(out, "{:#018x} {:>7}  {:<14} {}  ({r})", f.addr.0, f.size, how, f.name),
            None => writeln!(out, "{:#018x} {:>7}  {:<14} {}", f.addr.0, f.size, how, f.name),
        };
    }
    let _ = writeln!(out, "{summary}");
    out
}

pub fn report_text(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "program: {}", profile.program);
    let pids: Vec<String> = profile.pids.iter().map(u32::to_string).collect();
    let _ = writeln!(out, "processes: {} (pid {})", profile.pids.len(), pids.join(", "));
    if profile.incomplete {
        let _ = writeln!(out, "warning: a process died while registering a module; that module's counts are missing");
    }
    let called: Vec<_> = profile.functions.iter().filter(|f| f.calls > 0).collect();
    let _ = writeln!(out, "functions called: {} of {} probed, {} calls in total\n", called.len(), profile.functions.len(), profile.total_calls);
    let width = called.first().map_or(5, |f| f.calls.to_string().len().max(5));
    let multi_module = profile.modules.len() > 1;
    let _ = writeln!(out, "{:>width$}  {:>6}  FUNCTION", "CALLS", "%");
    let rows = if top == 0 { called.len() } else { top.min(called.len()) };
    for f in &called[..rows] {
        let share = 100.0 * f.calls as f64 / profile.total_calls.max(1) as f64;
        let module = if multi_module {
            format!("  [{}]", Path::new(&f.module).file_name().map_or(f.module.clone(), |n| n.to_string_lossy().into_owned()))
        } else {
            String::new()
        };
        let _ = writeln!(out, "{:>width$}  {:>5.1}%  {}{module}", f.calls, share, f.name);
    }
    if rows < called.len() {
        let _ = writeln!(out, "... {} more (use --top 0 for all)", called.len() - rows);
    }
    out
}
