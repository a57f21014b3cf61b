//! Which of a script's `func:` points can run on the functions they name, once a module is
//! planned: an entry point runs wherever the function's entry is probed (timed, or counted
//! with its counter's probes run first: `lopi_patch::Selection::probe_entries`), a `:return`
//! point only where every exit is probed (the function is timed), a probe that only counts
//! calls wherever the calls are counted. A point none of whose functions can run it is
//! refused, before the program runs; functions a point loses among others are named.
use anyhow::{bail, Result};
use lopi_image::script::ScriptSpec;
use lopi_patch::{Outcome, PointKind, TimingOutcome};
use lopi_script::ir::Point;

/// Whether `glob` matches one of `f`'s names.
pub(super) fn named(f: &lopi_elf::Function, glob: &str) -> bool {
    std::iter::once(&f.name).chain(&f.aliases).any(|n| lopi_script::glob_match(glob, n))
}

/// The script's `func:` points in the module they call `library` (`None`: the program):
/// (the point as written, a `:return` point, its glob).
fn function_points<'s>(spec: &'s ScriptSpec, library: Option<&'s str>) -> impl Iterator<Item = (String, bool, &'s str)> + 's {
    spec.program.probes.iter().flat_map(|p| &p.points).filter_map(move |point| match point {
        Point::FuncEntry { lib, glob } if lib.as_deref() == library => Some((point.to_string(), false, glob.as_str())),
        Point::FuncReturn { lib, glob } if lib.as_deref() == library => Some((point.to_string(), true, glob.as_str())),
        _ => None,
    })
}

/// Whether a `func:` point of the script names `f` in the module the points call `library`.
pub(super) fn named_by_points(spec: &ScriptSpec, library: Option<&str>, f: &lopi_elf::Function) -> bool {
    function_points(spec, library).any(|(_, _, glob)| named(f, glob))
}

/// Whether a probe that only counts calls (taken out of the program) covers `f` of the program.
pub(super) fn counted_by_probes(spec: &ScriptSpec, f: &lopi_elf::Function) -> bool {
    spec.counted.iter().flat_map(|c| c.probes.iter().flatten()).any(|g| named(f, g))
}

/// Why a function's entry (`returns`: its returns) cannot run a point's probes; `None`: it can.
fn why_not(outcome: &Outcome, timing: &TimingOutcome, returns: bool) -> Option<String> {
    match (outcome, timing) {
        (Outcome::Skipped(why), _) => Some(format!("{}: {}", why.key(), why.describe(PointKind::Entry))),
        (Outcome::NotSelected, _) => Some("not probed".to_string()),
        (_, TimingOutcome::Untimed(why)) if returns => Some(format!("its returns cannot all be probed, {}: {}", why.key(), why.describe(PointKind::Exit))),
        (_, TimingOutcome::Off) if returns => Some("its returns are not probed".to_string()),
        (Outcome::Probed(_) | Outcome::Moved, _) => None,
    }
}

/// Says on stderr how many functions of a module (`what`: its path) the script's probes are
/// in, and which functions a point names that cannot run it; refuses a point none of whose
/// functions can (`func:F:return` on a function whose exits cannot all be probed).
pub fn check_probes(spec: &ScriptSpec, library: Option<&str>, functions: &[lopi_elf::Function], outcomes: &[Outcome], timing: &[TimingOutcome], what: &str) -> Result<()> {
    let planned = || functions.iter().zip(outcomes).zip(timing);
    for (point, returns, glob) in function_points(spec, library) {
        let named: Vec<_> = planned().filter(|((f, _), _)| named(f, glob)).collect();
        let lost: Vec<String> = named.iter().filter_map(|((f, o), t)| why_not(o, t, returns).map(|why| format!("{} ({why})", f.name))).collect();
        if !named.is_empty() && lost.len() == named.len() {
            let entries_run = returns && named.iter().all(|((_, o), t)| why_not(o, t, false).is_none());
            let hint = match point.strip_suffix(":return") {
                Some(entry) if entries_run => format!("; an entry point (`{entry}`) runs there"),
                _ => String::new(),
            };
            bail!("`{point}` cannot run in {what}: {}{hint}", lost.join(", "));
        }
    }
    let mut probed = 0;
    let mut lost = Vec::new();
    for ((f, outcome), timing) in planned() {
        let counts = library.is_none() && counted_by_probes(spec, f);
        let mut why = function_points(spec, library).filter(|(_, _, glob)| named(f, glob)).filter_map(|(point, returns, _)| why_not(outcome, timing, returns).map(|why| format!("`{point}` ({why})")));
        let why = why.next().or_else(|| counts.then(|| why_not(outcome, timing, false)).flatten());
        match why {
            Some(why) => lost.push(format!("{}: {why}", f.name)),
            None if counts || named_by_points(spec, library, f) => probed += 1,
            None => {}
        }
    }
    let points = spec.instruction_points(library).len();
    let at = if points == 0 { String::new() } else { format!(" and at {points} instruction{}", if points == 1 { "" } else { "s" }) };
    eprintln!("lopi: script probes in {probed} function{}{at} of {what}", if probed == 1 { "" } else { "s" });
    if !lost.is_empty() {
        eprintln!("lopi: {} function{} the script names cannot run some of its probes, which never fire there: {}", lost.len(), if lost.len() == 1 { "" } else { "s" }, lost.join("; "));
    }
    Ok(())
}
