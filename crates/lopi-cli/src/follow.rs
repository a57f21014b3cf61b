//! `lopi run` following the program's process tree (`lopi_live::Tree`): every program a
//! process of it executes gets the same probes before its libraries' constructors run,
//! recording into the same data file, and every process's end is recorded there with what lopi knows of it (parent,
//! command line, wait status, start and end, the system calls made before its probes).
//! `lopi attach -f` follows the tree of a running process the same way until it detaches.
use crate::live::Probes;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicI32, Ordering};
use lopi_live::{Ended, Process, Tree, TreeEvent};
use lopi_rt_abi::{PAGE_SIZE, PROCESS_CALL_LEN, PROCESS_HEADER_LEN, PROCESS_LOG_ALIGN, PROCESS_MAGIC};
use std::os::unix::process::ExitStatusExt;

/// The signal that ended lopi's wait, if any (SIGTERM, SIGHUP).
static ENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn ending(signal: i32) {
    ENDING.store(signal, Ordering::Relaxed);
}

/// SIGTERM and SIGHUP (and, detaching, Ctrl-C's SIGINT) interrupt lopi's wait (no
/// `SA_RESTART`) instead of killing it at once: it takes its traps out of the processes first
/// (see [`Tree::let_go`], [`Tree::detach`]).
fn catch_ending_signals(until: Until) -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(ending), SaFlags::empty(), SigSet::empty());
    let interrupt = matches!(until, Until::Detach(_)).then_some(Signal::SIGINT);
    for signal in [Signal::SIGTERM, Signal::SIGHUP].into_iter().chain(interrupt) {
        // SAFETY: the handler only stores to an atomic.
        #[allow(unsafe_code)]
        unsafe { sigaction(signal, &action) }.with_context(|| format!("catching {signal}"))?;
    }
    Ok(())
}

/// When following stops.
#[derive(Clone, Copy)]
pub(crate) enum Until {
    /// `lopi run`: when every process has ended (a SIGTERM or SIGHUP ends lopi).
    AllEnded,
    /// `lopi attach -f`: when the root ends, at the deadline, or on Ctrl-C, SIGTERM or SIGHUP.
    Detach(Option<std::time::Instant>),
}

/// Why following stopped.
pub(crate) enum Stopped {
    /// Every process ended; the root's status.
    Done(std::process::ExitStatus),
    /// Time to let the tree go (see [`Tree::detach`]).
    Detach,
}

/// The signal lopi's wait is woken by (`Until::Detach`), to look at the clock and at `ENDING`.
const TICK: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGALRM;

extern "C" fn tick(_: i32) {}

/// Wakes this thread's waits every 100 ms with a `TICK` aimed at it alone (other threads keep
/// it blocked or never get it), while the timer lives.
fn ticker() -> Result<nix::sys::timer::Timer> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigEvent, SigHandler, SigSet, SigevNotify};
    use nix::sys::timer::{Expiration, Timer, TimerSetTimeFlags};
    let action = SigAction::new(SigHandler::Handler(tick), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler does nothing; it is there so that the signal interrupts waitpid.
    #[allow(unsafe_code)]
    unsafe { sigaction(TICK, &action) }.context("catching SIGALRM")?;
    let event = SigEvent::new(SigevNotify::SigevThreadId { signal: TICK, thread_id: nix::unistd::gettid().as_raw(), si_value: 0 });
    let mut timer = Timer::new(nix::time::ClockId::CLOCK_MONOTONIC, event).context("timer_create")?;
    let every = nix::sys::time::TimeSpec::from_duration(std::time::Duration::from_millis(100));
    timer.set(Expiration::Interval(every), TimerSetTimeFlags::empty()).context("timer_settime")?;
    Ok(timer)
}

/// Runs the tree until its last process has ended (`lopi run`: the launched program's exit
/// status), or until it is time to detach (`lopi attach -f`).
pub(crate) fn follow(tree: &mut Tree, probes: &Probes, output: &str, quiet: bool, until: Until) -> Result<Stopped> {
    let spec = probes.spec(output)?;
    catch_ending_signals(until)?;
    let _ticker = match until {
        Until::AllEnded => None,
        Until::Detach(_) => {
            // Ctrl-C too means "detach"; `attach` blocked these in this thread to read them
            // from a signalfd, but here they must interrupt the wait.
            let mut mask = nix::sys::signal::SigSet::empty();
            for signal in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGHUP] {
                mask.add(signal);
            }
            mask.thread_unblock().context("unblocking SIGINT")?;
            Some(ticker()?)
        }
    };
    let (mut probed, mut unprobed) = (0usize, 0usize);
    let followed = |probed: usize, unprobed: usize| {
        if !quiet && probed + unprobed > 0 {
            eprintln!("lopi: followed {} more programs: {probed} probed, {unprobed} not", probed + unprobed);
        }
    };
    loop {
        if let Until::Detach(deadline) = until {
            // Looked at after every event, not only when a tick interrupted the wait: a busy
            // tree may be between waits whenever one comes.
            if ENDING.load(Ordering::Relaxed) != 0 || deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                followed(probed, unprobed);
                return Ok(Stopped::Detach);
            }
        }
        match tree.next_event()? {
            TreeEvent::Exec(mut target, process) => {
                let planned = lopi_live::plan(process.pid, &spec, target.entry(), &crate::progress::Bar::new("", false));
                match planned.and_then(|mut plan| target.install(&mut plan)) {
                    Ok(installation) => {
                        probed += 1;
                        tree.probed(&target, Some(installation));
                    }
                    Err(e) => {
                        unprobed += 1;
                        if !quiet {
                            eprintln!("lopi: pid {} ({}) runs without probes: {}", process.pid, program(&process), crate::output::one_line(&anyhow::Error::new(e)));
                        }
                    }
                }
                target.release();
            }
            TreeEvent::Loaded(mut target, process) => {
                let later = lopi_live::Spec { probed_already: Some(process.modules.clone()), ..spec.clone() };
                let planned = lopi_live::plan(process.pid, &later, None, &crate::progress::Bar::new("", false));
                let installation = match planned.and_then(|mut plan| target.install(&mut plan)) {
                    Ok(installation) => Some(installation),
                    Err(e) => {
                        if !quiet {
                            eprintln!("lopi: pid {} ({}): a library it loaded runs without probes: {}", process.pid, program(&process), crate::output::one_line(&anyhow::Error::new(e)));
                        }
                        None
                    }
                };
                tree.probed(&target, installation);
                target.release();
            }
            TreeEvent::ExecUnprobed(process, e) => {
                unprobed += 1;
                if !quiet {
                    eprintln!("lopi: pid {} ({}) runs without probes: {e}", process.pid, program(&process));
                }
            }
            TreeEvent::Ended(ended) => {
                let root = ended.process.pid == tree.root();
                if let Err(e) = record(output, &ended) {
                    eprintln!("lopi: recording the end of pid {}: {e:#}", ended.process.pid);
                }
                if root && matches!(until, Until::Detach(_)) {
                    followed(probed, unprobed);
                    return Ok(Stopped::Detach);
                }
            }
            TreeEvent::Interrupted => {
                let signal = ENDING.load(Ordering::Relaxed);
                if signal != 0 && matches!(until, Until::AllEnded) {
                    tree.let_go();
                    eprintln!("lopi: ended by signal {signal}: the processes run on without lopi, their probes in");
                    // The default action back, so that lopi dies of the signal as it would have.
                    // SAFETY: restoring the default action of a signal lopi caught.
                    #[allow(unsafe_code)]
                    let _ = unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::try_from(signal)?, nix::sys::signal::SigHandler::SigDfl) };
                    crate::live::exit_like(std::process::ExitStatus::from_raw(signal), &nix::sys::signal::SigSet::empty());
                }
            }
            TreeEvent::Done(status) => {
                followed(probed, unprobed);
                return Ok(Stopped::Done(std::process::ExitStatus::from_raw(status)));
            }
        }
    }
}

/// `lopi attach -f`: follows the attached process's tree until it is time to detach (the
/// root ended, `duration` passed, Ctrl-C, SIGTERM or SIGHUP), then lets every process of it
/// go, its probes taken out, and records how each ended or that it was let go.
pub(crate) fn attached(tree: &mut Tree, probes: &Probes, output: &str, duration: Option<std::time::Duration>) -> Result<()> {
    let deadline = duration.map(|d| std::time::Instant::now() + d);
    let detaching = std::time::Instant::now();
    let followed = follow(tree, probes, output, false, Until::Detach(deadline));
    if let Ok(Stopped::Done(_)) = followed {
        return Ok(());
    }
    // Also after an error: a probe or trap left in a process lopi no longer traces would cost
    // it its life at its next dlopen.
    let (ended, detached) = tree.detach();
    for ended in &ended {
        if let Err(e) = record(output, ended) {
            eprintln!("lopi: recording the end of pid {}: {e:#}", ended.process.pid);
        }
    }
    let (mut restored, mut changed) = (0, 0);
    for d in &detached {
        let mut unmaps = (0, 0);
        for removal in &d.removals {
            match removal {
                Ok(r) => {
                    (restored, changed) = (restored + r.restored_sites, changed + r.changed_sites);
                    unmaps = (unmaps.0 + r.unmaps, unmaps.1 + r.unmap_ticks);
                }
                Err(e) => eprintln!("lopi: pid {} ({}): taking the probes out: {e} (they stay in; the record stays valid)", d.process.pid, program(&d.process)),
            }
        }
        // Its calls still open end here; the tree shows it as let go, not ended.
        let ended = Ended { process: d.process.clone(), status: DETACHED, at: lopi_live::tsc() };
        if let Err(e) = record_end(output, &ended, lopi_rt_abi::END_DETACHED, unmaps) {
            eprintln!("lopi: recording the detach from pid {}: {e:#}", d.process.pid);
        }
    }
    eprintln!(
        "lopi: detached from the tree after {:.1} s: {} processes running let go, {restored} sites restored{}",
        detaching.elapsed().as_secs_f64(),
        detached.len(),
        if changed > 0 { format!(" ({changed} changed by someone else meanwhile, left as they are)") } else { String::new() }
    );
    followed.map(|_| ())
}

/// The status of a process record of a process lopi let go running: a stop's wait status
/// (`WIFSTOPPED`), never an end's.
const DETACHED: i32 = 0x7f;

fn program(process: &Process) -> &str {
    process.command.first().map_or("?", |a| a.as_str())
}

/// Appends process `ended`'s end (closing its threads' open calls) and its process record.
pub(crate) fn record(output: &str, ended: &Ended) -> Result<()> {
    record_end(output, ended, lopi_rt_abi::END_EXITED, (0, 0))
}

/// [`record`] with the end record's kind (`END_*`) and the unmaps of a detach.
fn record_end(output: &str, ended: &Ended, kind: u32, unmaps: (u64, u64)) -> Result<()> {
    crate::ends::record(output, ended.process.pid, kind, unmaps)?;
    if std::path::Path::new(output).exists() {
        crate::parallelism::append(output, &process_record(ended))?;
    }
    Ok(())
}

/// A `PROCESS_MAGIC` record of `ended`.
fn process_record(ended: &Ended) -> Vec<u8> {
    let p = &ended.process;
    let command = p.command.join("\0");
    let calls_len = p.startup.len() as u64 * PROCESS_CALL_LEN;
    let log_at = (PROCESS_HEADER_LEN + calls_len + command.len() as u64).next_multiple_of(PROCESS_LOG_ALIGN);
    let len = (log_at + p.startup_log.len() as u64).next_multiple_of(PAGE_SIZE);
    let mut record = vec![0u8; len as usize];
    record[..8].copy_from_slice(&PROCESS_MAGIC);
    record[8..16].copy_from_slice(&len.to_le_bytes());
    record[16..20].copy_from_slice(&(p.pid as u32).to_le_bytes());
    record[20..24].copy_from_slice(&(p.parent as u32).to_le_bytes());
    record[24..28].copy_from_slice(&ended.status.to_le_bytes());
    record[28..32].copy_from_slice(&p.execs.to_le_bytes());
    record[32..40].copy_from_slice(&p.started.to_le_bytes());
    record[40..48].copy_from_slice(&ended.at.to_le_bytes());
    record[48..52].copy_from_slice(&(p.startup.len() as u32).to_le_bytes());
    record[52..56].copy_from_slice(&(command.len() as u32).to_le_bytes());
    record[56..60].copy_from_slice(&(p.startup_log.len() as u32).to_le_bytes());
    let mut at = PROCESS_HEADER_LEN as usize;
    for (&nr, &calls) in &p.startup {
        record[at..at + 4].copy_from_slice(&(nr as u32).to_le_bytes());
        record[at + 8..at + 16].copy_from_slice(&calls.to_le_bytes());
        at += PROCESS_CALL_LEN as usize;
    }
    record[at..at + command.len()].copy_from_slice(command.as_bytes());
    record[log_at as usize..log_at as usize + p.startup_log.len()].copy_from_slice(&p.startup_log);
    record
}
