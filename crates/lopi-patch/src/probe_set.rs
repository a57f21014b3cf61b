//! Which probes the planner places: a set of (place, measure) pairs, the model's points ×
//! actions as a user asks for them (`--probe entry:time`). A place is a family of points the
//! planner finds (function entries, `syscall` instructions, ...); the measure is the action
//! its probes run. A new kind asked for this way is a new pair, not a new flag.

/// A family of points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    /// The entries of the functions the filter selects (their exits too, when timed).
    Entries,
    /// Every `syscall` instruction.
    Syscalls,
    /// The lock functions (`locks.rs`), each call timed as a lock operation; with them the
    /// `futex` system calls, which tell time blocked from time spinning.
    LockFunctions,
    /// Every basic block of the functions the filter selects.
    Blocks,
}

impl Place {
    pub const ALL: [Place; 4] = [Place::Entries, Place::Syscalls, Place::LockFunctions, Place::Blocks];

    /// As `--probe` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Place::Entries => "entry",
            Place::Syscalls => "syscall",
            Place::LockFunctions => "locks",
            Place::Blocks => "block",
        }
    }

    /// The measures its probes can run: the first is what `--probe PLACE` alone asks.
    pub fn measures(self) -> &'static [Measure] {
        match self {
            Place::Entries => &[Measure::Count, Measure::Time, Measure::Mark],
            Place::Syscalls | Place::LockFunctions => &[Measure::Time],
            Place::Blocks => &[Measure::Count, Measure::Mark],
        }
    }
}

/// What the probes at a place do. Ordered by what one probe tells: a mark that the point ran,
/// a count of how often, a time for each run (which counts too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measure {
    /// One byte stored the first time the point runs; the probe can then take itself out.
    Mark,
    /// Executions counted per CPU.
    Count,
    /// Each execution timed (a function's calls in its thread's calling-context tree, a
    /// system call's or lock operation's wait).
    Time,
}

impl Measure {
    pub const ALL: [Measure; 3] = [Measure::Mark, Measure::Count, Measure::Time];

    pub fn name(self) -> &'static str {
        match self {
            Measure::Mark => "mark",
            Measure::Count => "count",
            Measure::Time => "time",
        }
    }
}

/// At most one measure per place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    at: [Option<Measure>; 4],
}

impl Probes {
    pub const NONE: Probes = Probes { at: [None; 4] };
    /// Calls counted (`--probe entry`).
    pub const COUNT: Probes = Probes::NONE.with(Place::Entries, Measure::Count);
    /// Calls timed (`--probe entry,exit`).
    pub const TIME: Probes = Probes::NONE.with(Place::Entries, Measure::Time);

    /// This set with `place`'s probes running `measure` (replacing what they ran).
    pub const fn with(mut self, place: Place, measure: Measure) -> Probes {
        self.at[place as usize] = Some(measure);
        self
    }

    /// This set without probes at `place`.
    pub const fn without(mut self, place: Place) -> Probes {
        self.at[place as usize] = None;
        self
    }

    /// What the probes at `place` run, if it has probes.
    pub fn at(self, place: Place) -> Option<Measure> {
        self.at[place as usize]
    }

    /// Whether `place` has probes.
    pub fn has(self, place: Place) -> bool {
        self.at(place).is_some()
    }

    /// Whether `place`'s probes run `measure`.
    pub fn is(self, place: Place, measure: Measure) -> bool {
        self.at(place) == Some(measure)
    }

    /// Every probe of both sets; a place in both runs the measure that tells more.
    pub fn union(self, other: Probes) -> Probes {
        let mut out = self;
        for (mine, theirs) in out.at.iter_mut().zip(other.at) {
            *mine = (*mine).max(theirs);
        }
        out
    }

    /// The places with probes and what they run.
    pub fn pairs(self) -> impl Iterator<Item = (Place, Measure)> {
        Place::ALL.into_iter().filter_map(move |p| Some((p, self.at(p)?)))
    }

    /// Whether `syscall` instructions get probes: asked for, or for the lock functions, whose
    /// `futex` calls tell time blocked from time spinning.
    pub fn probes_system_calls(self) -> bool {
        self.has(Place::Syscalls) || self.has(Place::LockFunctions)
    }

    pub fn is_empty(self) -> bool {
        self.pairs().next().is_none()
    }

    /// As `--probe` spells it: a place alone for its first measure, `entry,exit` for timed
    /// calls, `coverage` for marked blocks, `PLACE:MEASURE` otherwise.
    pub fn name(self) -> String {
        let spell = |(place, measure): (Place, Measure)| match (place, measure) {
            (Place::Entries, Measure::Time) => "entry,exit".to_string(),
            (Place::Blocks, Measure::Mark) => "coverage".to_string(),
            (p, m) if p.measures()[0] == m => p.name().to_string(),
            (p, m) => format!("{}:{}", p.name(), m.name()),
        };
        self.pairs().map(spell).collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_probe_options_spelling() {
        assert_eq!(Probes::COUNT.name(), "entry");
        assert_eq!(Probes::TIME.with(Place::Syscalls, Measure::Time).with(Place::LockFunctions, Measure::Time).name(), "entry,exit,syscall,locks");
        assert_eq!(Probes::NONE.with(Place::Blocks, Measure::Count).name(), "block");
        assert_eq!(Probes::NONE.with(Place::Blocks, Measure::Mark).name(), "coverage");
        assert_eq!(Probes::NONE.with(Place::Entries, Measure::Mark).name(), "entry:mark");
        assert_eq!(Probes::NONE.name(), "");
    }

    #[test]
    fn a_union_keeps_the_measure_that_tells_more() {
        let marked = Probes::NONE.with(Place::Entries, Measure::Mark);
        assert_eq!(marked.union(Probes::COUNT), Probes::COUNT);
        assert_eq!(Probes::TIME.union(Probes::COUNT), Probes::TIME);
        let both = Probes::COUNT.union(Probes::NONE.with(Place::Syscalls, Measure::Time));
        assert!(both.is(Place::Entries, Measure::Count) && both.has(Place::Syscalls));
        assert_eq!(both.without(Place::Entries).pairs().collect::<Vec<_>>(), [(Place::Syscalls, Measure::Time)]);
    }
}
