//! The `lopi` command: parses the command line and dispatches each command to its module.
//! The libraries do the work.
#![deny(unsafe_code)]

mod agent;
mod blocks;
mod breakdown;
mod cache;
mod cli;
mod continuous;
mod coverage;
mod demo;
mod ends;
mod exports;
mod files;
mod follow;
mod forks;
mod handler;
mod info;
mod live;
mod locks;
mod markers;
mod names;
mod otlp;
mod output;
mod parallelism;
mod planning;
mod probe_arg;
mod processes;
mod progress;
mod push;
mod pyprofile;
mod queue;
mod report;
mod rewrite;
mod scale;
mod scaling;
mod show;
mod syscall_log;
mod syscalls;
mod threads;
mod trace;
mod whatif;

use anyhow::{bail, Context, Result};
use clap::Parser;
use cli::{Cli, Command};
use files::read_data;
use output::{one_line, print, Format};

fn main() {
    let cli = Cli::parse();
    if let Err(err) = run(cli) {
        match err.downcast_ref::<trace::Refused>() {
            // Diagnostics say `error:` themselves, rustc's way.
            Some(refused) => eprintln!("{refused}"),
            None => eprintln!("lopi: error: {}", one_line(&err)),
        }
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let cache = progress::plan_cache(cli.no_cache);
    match cli.command {
        Command::Info { prog, usdt: true, format, .. } => markers::info(&prog, format),
        Command::Info { prog, select, format, .. } => info::run(&prog, &select, format, cache.as_ref()),
        Command::Rewrite { prog, output, select, trace, timing, script, script_expr, handler } => {
            rewrite::run(rewrite::Request { prog, output, select, trace, timing, script, script_expr, handler, cache })
        }
        Command::Coverage { data, format, output } => coverage::run(&read_data(&data)?, format, output.as_deref()),
        Command::Report { data, format, top, views, select } => report::run(&data, views.view(), &select, format, top),
        Command::Flamegraph { data, output, weight, title } => exports::flamegraph(&data, &output, weight, title),
        Command::Export { data, format, output, weight, profile, resource } => {
            exports::export(&data, &output, exports::ExportOptions { format, weight, profile, resource })
        }
        Command::Push { data, url, resource, connect } => otlp::push(&data, &url, &resource, &connect),
        Command::Run { select, trace, timing, quiet, no_follow, arg0, push, log, command } => {
            let timing = timing.pushing(push.push.is_some());
            let mut probes = live::Probes { follow: !no_follow, ..select.probes(trace, timing, cache)? };
            log.ask(&mut probes)?;
            live::run(&probes, &command, arg0, quiet, &push, &log)
        }
        Command::Attach { pid, select, trace, timing, duration, follow, push, log } => {
            let timing = timing.pushing(push.push.is_some());
            let mut probes = live::Probes { follow, ..select.probes(trace, timing, cache)? };
            log.ask(&mut probes)?;
            live::attach(&probes, pid, duration, &push, &log)
        }
        Command::Agent { matches, poll, dir, keep, select, timing, push } => {
            let timing = timing.pushing(push.push.is_some());
            agent::run(select.probes(false, timing, cache)?, &push, agent::Request { matches, poll, dir, keep })
        }
        Command::HandlerHeader => print(handler::HEADER),
        Command::Cache { clear } => cache::show(cache.as_ref(), clear),
        Command::Demo { which, dir } => demo::run(which, dir),
        Command::Trace { args, expr, format, output, max_entries, pid, duration, record, command } => {
            let (source, source_name, params) = match (expr, args.split_first()) {
                (Some(text), _) => (text, "-e".to_string(), &args[..]),
                (None, Some((path, params))) => (std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?, path.clone(), params),
                (None, None) => bail!("lopi trace needs a script: a file, or -e 'PROGRAM'"),
            };
            let source = lopi_script::positional::substitute(&source, params);
            trace::run(trace::Request { source, source_name, json: format == Format::Json, output, max_entries, pid, duration, record, command, cache })
        }
        Command::Pyprofile { hz, calls, native, format, top, output, flamegraph, folded, max_entries, pid, duration, command } => {
            pyprofile::run(pyprofile::Request { hz, calls, native, json: format == Format::Json, top, output, flamegraph, folded, max_entries, pid, duration, command, cache })
        }
        Command::Whatif { kernel, proxy_wait, cpus, runs, format, command } => {
            whatif::run(whatif::Request { kernel, proxy_wait, cpus, runs, json: format == Format::Json, command })
        }
        Command::Scale { cpus, runs, output, breakdown, format, command } => {
            scale::run(scale::Request { cpus, runs, breakdown, chart: output, json: format == Format::Json, command })
        }
    }
}
