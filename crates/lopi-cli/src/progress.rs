//! The plan cache as the command line sets it up, and a progress bar for planning that
//! takes long.
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lopi_cache::{Lookup, PlanCache};
use lopi_patch::{Progress, Stage};
use std::cell::Cell;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `LOPI_CACHE=off` turns the plan cache off, as `--no-cache` does.
pub const CACHE_ENV: &str = "LOPI_CACHE";

/// The plan cache: `$XDG_CACHE_HOME/lopi`, else `~/.cache/lopi`; `None` when turned off or
/// when there is no such directory to use.
pub fn plan_cache(no_cache: bool) -> Option<PlanCache> {
    if no_cache || std::env::var(CACHE_ENV).is_ok_and(|v| matches!(v.as_str(), "off" | "0" | "no" | "false")) {
        return None;
    }
    cache_dir().map(PlanCache::new)
}

fn cache_dir() -> Option<PathBuf> {
    // The XDG base directory spec ignores relative paths.
    let absolute = |var: &str| std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    absolute("XDG_CACHE_HOME").map(|d| d.join("lopi")).or_else(|| absolute("HOME").map(|h| h.join(".cache/lopi")))
}

/// What to say about where a module's plan came from: a suffix for its summary line, and a
/// note when the cache did not work as it should.
pub fn lookup_text(lookup: &Lookup) -> (&'static str, Option<String>) {
    match lookup {
        Lookup::Hit => (" (plan from the cache)", None),
        Lookup::Off | Lookup::Stored => ("", None),
        Lookup::NotStored(why) => ("", Some(format!("plan not cached: {why}"))),
        Lookup::Replaced(why) => ("", Some(format!("a cached plan was unusable and was replaced: {why}"))),
    }
}

/// A path's last part: what a one-line bar has room for.
pub fn file_name(path: &std::path::Path) -> String {
    path.file_name().unwrap_or(path.as_os_str()).to_string_lossy().into_owned()
}

/// Planning already this long gets a bar.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A bar on stderr for planning `what`, drawn once planning has taken a second, and only
/// when stderr is a terminal; cleared when dropped.
pub struct Bar {
    bar: ProgressBar,
    what: String,
    started: Instant,
    shown: Cell<bool>,
    enabled: bool,
}

impl Bar {
    pub fn new(what: &str, enabled: bool) -> Self {
        let style = ProgressStyle::with_template("lopi: {msg} [{bar:30}] {percent:>3}%")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        Bar {
            bar: ProgressBar::hidden().with_style(style),
            what: what.to_string(),
            started: Instant::now(),
            shown: Cell::new(false),
            enabled: enabled && std::io::stderr().is_terminal(),
        }
    }

    /// A step with no measure of its own (writing the output).
    pub fn step(&self, what: &str) {
        if self.show() {
            self.bar.set_message(format!("{}: {what}", self.what));
        }
    }

    fn show(&self) -> bool {
        if !self.shown.get() && self.enabled && self.started.elapsed() >= SHOW_AFTER {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
        self.shown.get()
    }
}

impl Progress for Bar {
    fn update(&self, stage: Stage, done: u64, total: u64) {
        if self.show() {
            self.bar.set_message(format!("{}: {}", self.what, stage.name()));
            self.bar.set_length(total);
            self.bar.set_position(done);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
