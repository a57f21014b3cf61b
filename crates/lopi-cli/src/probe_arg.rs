//! `--probe`: the probes asked for, as points × actions. Each value is a place (`entry`,
//! `syscall`, `locks`, `block`) whose probes run its usual measure, or `PLACE:MEASURE`
//! (`entry:mark`); `exit` times the entries' calls and `coverage` marks blocks, as they always
//! have.
use anyhow::{bail, Result};
use lopi_patch::{Measure, Place, Probes};

/// One `--probe` value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Probe {
    /// `exit`: the entries' calls timed.
    Exit,
    /// A place, with the measure asked for (`None`: its usual one).
    At(Place, Option<Measure>),
}

/// Parses one value (clap's value parser).
pub(crate) fn parse(text: &str) -> Result<Probe, String> {
    let place_named = |name: &str| Place::ALL.into_iter().find(|p| p.name() == name);
    let (place, measure) = match text.split_once(':') {
        None if text == "exit" => return Ok(Probe::Exit),
        None if text == "coverage" => return Ok(Probe::At(Place::Blocks, Some(Measure::Mark))),
        None => (text, None),
        Some((place, measure)) => (place, Some(measure)),
    };
    let known = "entry, exit, syscall, locks, block, coverage, or PLACE:MEASURE (entry:count, entry:time, entry:mark, block:count, block:mark)";
    let Some(place) = place_named(place) else { return Err(format!("{text:?}: not a probe; one of {known}")) };
    let Some(measure) = measure else { return Ok(Probe::At(place, None)) };
    match Measure::ALL.into_iter().find(|m| m.name() == measure) {
        Some(m) if place.measures().contains(&m) => Ok(Probe::At(place, Some(m))),
        _ => {
            let can: Vec<&str> = place.measures().iter().map(|m| m.name()).collect();
            Err(format!("{text:?}: {}'s probes can {}", place.name(), can.join(" or ")))
        }
    }
}

/// The values as one set, or why they do not go together.
pub(crate) fn probe_set(values: &[Probe]) -> Result<Probes> {
    let mut probes = Probes::NONE;
    for &value in values {
        let Probe::At(place, measure) = value else { continue };
        let measure = measure.unwrap_or(place.measures()[0]);
        match probes.at(place) {
            Some(other) if other != measure => bail!("--probe asks {} to {} and to {}: give one", place.name(), other.name(), measure.name()),
            _ => probes = probes.with(place, measure),
        }
    }
    if values.contains(&Probe::Exit) {
        match probes.at(Place::Entries) {
            Some(Measure::Count | Measure::Time) => probes = probes.with(Place::Entries, Measure::Time),
            Some(Measure::Mark) => bail!("--probe exit times calls, entry:mark only marks that a function ran: give one"),
            None => bail!("--probe exit needs `entry`: exits are timed against their entries (use --probe entry,exit)"),
        }
    }
    let others = probes.pairs().count() > 1;
    match (probes.at(Place::Blocks), probes.at(Place::Entries)) {
        (Some(Measure::Count), _) if others => {
            bail!("--probe block counts every block of the selected functions; it does not combine with other probes yet (the entry block counts the calls)")
        }
        (Some(_), _) if others => bail!("--probe coverage records which blocks of the selected functions ran; it does not combine with other probes"),
        (_, Some(Measure::Mark)) if others => bail!("--probe entry:mark records which functions ran; it does not combine with other probes"),
        _ => Ok(probes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> Result<Probes> {
        probe_set(&values.iter().map(|v| parse(v).expect("a probe")).collect::<Vec<_>>())
    }

    #[test]
    fn the_old_spellings_mean_what_they_did() {
        assert_eq!(set(&["entry"]).unwrap(), Probes::COUNT);
        assert_eq!(set(&["entry", "exit"]).unwrap(), Probes::TIME);
        assert_eq!(set(&["entry:time"]).unwrap(), Probes::TIME);
        assert_eq!(set(&["coverage"]).unwrap(), Probes::NONE.with(Place::Blocks, Measure::Mark));
        assert_eq!(set(&["block:mark"]).unwrap(), Probes::NONE.with(Place::Blocks, Measure::Mark));
        assert_eq!(set(&["syscall", "locks"]).unwrap(), Probes::NONE.with(Place::Syscalls, Measure::Time).with(Place::LockFunctions, Measure::Time));
        assert_eq!(set(&["entry:mark"]).unwrap(), Probes::NONE.with(Place::Entries, Measure::Mark));
    }

    #[test]
    fn what_does_not_go_together_is_refused() {
        assert!(parse("syscall:mark").unwrap_err().contains("syscall's probes can time"));
        assert!(parse("exits").is_err());
        assert!(set(&["exit"]).unwrap_err().to_string().contains("needs `entry`"));
        assert!(set(&["entry:mark", "exit"]).is_err());
        assert!(set(&["entry:mark", "syscall"]).is_err());
        assert!(set(&["entry:count", "entry:mark"]).is_err());
        assert!(set(&["block", "entry"]).is_err());
    }
}
