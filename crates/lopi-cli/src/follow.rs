//! `lopi run` following the program's process tree (`lopi_live::Tree`): every program a
//! process of it executes gets the same probes at its entry point, recording into the same
//! data file, and every process's end is recorded there with what lopi knows of it (parent,
//! command line, wait status, start and end, the system calls made before its probes).
use crate::live::Probes;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicI32, Ordering};
use lopi_live::{Ended, Process, Tree, TreeEvent};
use lopi_rt_abi::{PAGE_SIZE, PROCESS_CALL_LEN, PROCESS_HEADER_LEN, PROCESS_MAGIC};
use std::os::unix::process::ExitStatusExt;

/// The signal that ended lopi's wait, if any (SIGTERM, SIGHUP).
static ENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn ending(signal: i32) {
    ENDING.store(signal, Ordering::Relaxed);
}

/// SIGTERM and SIGHUP interrupt lopi's wait (no `SA_RESTART`) instead of killing it at once:
/// it takes its traps out of the processes first (see [`Tree::let_go`]).
fn catch_ending_signals() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(ending), SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        #[allow(unsafe_code)]
        unsafe { sigaction(signal, &action) }.context("catching SIGTERM")?;
    }
    Ok(())
}

/// Runs the tree until its last process has ended; the launched program's exit status.
pub(crate) fn follow(tree: &mut Tree, probes: &Probes, output: &str, quiet: bool) -> Result<std::process::ExitStatus> {
    let spec = probes.spec(output)?;
    catch_ending_signals()?;
    let (mut probed, mut unprobed) = (0usize, 0usize);
    loop {
        match tree.next_event()? {
            TreeEvent::Exec(mut target, process) => {
                let planned = lopi_live::plan(process.pid, &spec, target.entry(), &crate::progress::Bar::new("", false));
                match planned.and_then(|mut plan| target.install(&mut plan)) {
                    Ok(_) => {
                        probed += 1;
                        tree.probed(&target);
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
                if let Err(e) = planned.and_then(|mut plan| target.install(&mut plan)) {
                    if !quiet {
                        eprintln!("lopi: pid {} ({}): a library it loaded runs without probes: {}", process.pid, program(&process), crate::output::one_line(&anyhow::Error::new(e)));
                    }
                }
                tree.probed(&target);
                target.release();
            }
            TreeEvent::ExecUnprobed(process, e) => {
                unprobed += 1;
                if !quiet {
                    eprintln!("lopi: pid {} ({}) runs without probes: {e}", process.pid, program(&process));
                }
            }
            TreeEvent::Ended(ended) => {
                if let Err(e) = record(output, &ended) {
                    eprintln!("lopi: recording the end of pid {}: {e:#}", ended.process.pid);
                }
            }
            TreeEvent::Interrupted => {
                let signal = ENDING.load(Ordering::Relaxed);
                if signal != 0 {
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
                if !quiet && probed + unprobed > 0 {
                    eprintln!("lopi: followed {} more programs: {probed} probed, {unprobed} not", probed + unprobed);
                }
                return Ok(std::process::ExitStatus::from_raw(status));
            }
        }
    }
}

fn program(process: &Process) -> &str {
    process.command.first().map_or("?", |a| a.as_str())
}

/// Appends process `ended`'s end (closing its threads' open calls) and its process record.
fn record(output: &str, ended: &Ended) -> Result<()> {
    crate::ends::record(output, ended.process.pid, lopi_rt_abi::END_EXITED, (0, 0))?;
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
    let len = (PROCESS_HEADER_LEN + calls_len + command.len() as u64).next_multiple_of(PAGE_SIZE);
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
    let mut at = PROCESS_HEADER_LEN as usize;
    for (&nr, &calls) in &p.startup {
        record[at..at + 4].copy_from_slice(&(nr as u32).to_le_bytes());
        record[at + 8..at + 16].copy_from_slice(&calls.to_le_bytes());
        at += PROCESS_CALL_LEN as usize;
    }
    record[at..at + command.len()].copy_from_slice(command.as_bytes());
    record
}
