//! How planning goes, told to whoever shows it (the planner never prints).

/// Told how planning goes, for a progress display.
pub trait Progress {
    /// `done` of `total` units of `stage` are finished.
    fn update(&self, stage: Stage, done: u64, total: u64);
}

/// No display.
impl Progress for () {
    fn update(&self, _: Stage, _: u64, _: u64) {}
}

/// The steps of [`select`](crate::select), in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Sweeping the code for branch targets (units: bytes).
    Targets,
    /// Choosing entry sites (units: functions).
    Entries,
    /// Finding and planning exits (units: entry sites).
    Exits,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Targets => "branch targets",
            Stage::Entries => "entries",
            Stage::Exits => "exits",
        }
    }
}

/// How often (in functions or sites) the planner's loops tell their progress.
pub(crate) const PROGRESS_EVERY: usize = 256;
