//! bpftrace's spellings of the points lopi has: `BEGIN`, `END`, `uprobe:PATH:FUNC`,
//! `uretprobe:PATH:FUNC`, `uprobe:PATH:FUNC+OFF`, `tracepoint:syscalls:sys_enter_NAME` and
//! `sys_exit_NAME`, `tracepoint:raw_syscalls:sys_enter` and `sys_exit`, `interval:s:N` (and
//! `ms`, `us`, `hz`), `profile:hz:N` (the same units), and SystemTap's static markers, `usdt:PATH:[PROVIDER:]NAME`. Kernel
//! points are refused in one line: lopi probes user space.
use super::point::{duration, func, glob, Part};
use crate::ast::{Name, PointSpec, Spelling};
use crate::diag::Issue;

/// Kinds of point that only a kernel has.
const KERNEL_KINDS: [&str; 11] = ["kprobe", "kretprobe", "kfunc", "kretfunc", "fentry", "fexit", "rawtracepoint", "software", "hardware", "watchpoint", "asyncwatchpoint"];

/// The point bpftrace spells as `kind:parts`, or `None` when `kind` is none of its.
pub(super) fn spec(kind: &Part, parts: &[Part]) -> Option<Result<PointSpec, Issue>> {
    Some(match kind.text {
        "BEGIN" | "END" if parts.is_empty() => Ok(if kind.text == "BEGIN" { PointSpec::Begin } else { PointSpec::End }),
        "uprobe" | "uretprobe" => uprobe(kind, parts),
        "tracepoint" => tracepoint(kind, parts),
        "profile" => match interval(kind, parts) {
            Some(ns) => ns.map(|ns| PointSpec::Profile { ns }),
            None => Err(Issue::new(kind.span, "expected `profile:hz:N` (or `profile:ms:N`, `s`, `us`): a sample every so much of the process's CPU time")),
        },
        "usdt" => usdt(kind, parts),
        k if KERNEL_KINDS.contains(&k) => Err(Issue::new(kind.span, format!("`{k}:` points are the kernel's; lopi probes user space (func:, syscall:, lock:, thread:, addr:)"))),
        _ => return None,
    })
}

/// `uprobe:PATH:FUNC` is `func:PATH:FUNC`, `uretprobe:PATH:FUNC` `func:PATH:FUNC:return`;
/// `uprobe:FUNC` names the program's own function.
fn uprobe(kind: &Part, parts: &[Part]) -> Result<PointSpec, Issue> {
    let ret = kind.text == "uretprobe";
    if let [.., last] = parts {
        if last.text.starts_with("0x") {
            return Err(Issue::new(last.span, "a uprobe at an address: use `addr:0xADDR` (an address in the program's file)"));
        }
    }
    match (func(kind, parts)?, ret) {
        (PointSpec::Func { lib, glob, ret: false }, ret) if parts.len() <= 2 => Ok(PointSpec::Func { lib, glob, ret }),
        (spec @ PointSpec::FuncOffset { .. }, false) => Ok(spec),
        (PointSpec::FuncOffset { .. }, true) => Err(Issue::new(kind.span, "a uretprobe is at a function's return, not at an offset")),
        _ => Err(Issue::new(kind.span, format!("expected `{}:PATH:FUNCTION`", kind.text))),
    }
}

/// `usdt:PATH:PROVIDER:NAME` or `usdt:PATH:NAME`; PROVIDER and NAME may be globs.
fn usdt(kind: &Part, parts: &[Part]) -> Result<PointSpec, Issue> {
    let (lib, provider, name) = match parts {
        [lib, name] => (lib, None, name),
        [lib, provider, name] => (lib, Some(provider), name),
        [_, _, _, extra, ..] => return Err(Issue::new(extra.span, "too many `:` parts in a `usdt` point")),
        _ => return Err(Issue::new(kind.span, "expected `usdt:PATH:PROVIDER:NAME` or `usdt:PATH:NAME`, PATH the program's or a library's")),
    };
    if lib.text.is_empty() {
        return Err(Issue::new(lib.span, "expected the path or file name of the program or library that has the marker"));
    }
    if let Some(provider) = provider {
        glob(provider, "provider")?;
    }
    glob(name, "marker")?;
    Ok(PointSpec::Usdt { lib: lib.name(), provider: provider.map(Part::name), name: name.name() })
}

/// The system-call tracepoints, as lopi's `syscall:` points.
fn tracepoint(kind: &Part, parts: &[Part]) -> Result<PointSpec, Issue> {
    let refuse = |part: &Part| Issue::new(part.span, format!("`tracepoint:{}` is the kernel's; lopi probes user space (only the syscalls and raw_syscalls tracepoints are system calls it sees)", part.text));
    match parts {
        [category, event] if category.text == "syscalls" => {
            let (prefix, ret) = if event.text.starts_with("sys_enter_") { ("sys_enter_", false) } else if event.text.starts_with("sys_exit_") { ("sys_exit_", true) } else {
                return Err(Issue::new(event.span, format!("expected sys_enter_NAME or sys_exit_NAME, found `{}`", event.text)));
            };
            let name = event.sub(prefix.len(), event.text.len());
            glob(&name, "system call")?;
            let mut name = name.name();
            name.text = crate::syscall_args::call_of_tracepoint(&name.text).to_string();
            Ok(PointSpec::Syscall { glob: name, ret, spelling: Spelling::Tracepoint })
        }
        [category, event] if category.text == "raw_syscalls" => match event.text {
            "sys_enter" | "sys_exit" => Ok(PointSpec::Syscall { glob: Name { text: "*".into(), span: event.span }, ret: event.text == "sys_exit", spelling: Spelling::RawTracepoint }),
            _ => Err(Issue::new(event.span, format!("expected sys_enter or sys_exit, found `{}`", event.text))),
        },
        [category, ..] => Err(refuse(category)),
        [] => Err(Issue::new(kind.span, "`tracepoint` needs a category and an event, as in `tracepoint:syscalls:sys_enter_openat`")),
    }
}

/// bpftrace's `interval:UNIT:N` (`s`, `ms`, `us`, or `hz`: N times a second) as a period in ns.
pub(super) fn interval(kind: &Part, parts: &[Part]) -> Option<Result<u64, Issue>> {
    let [unit, count] = parts else { return None };
    let text = format!("{}{}", count.text, unit.text);
    let period = Part { text: &text, span: count.span };
    Some(match unit.text {
        "s" | "ms" | "us" => duration(&period).map_err(|e| Issue::new(count.span, e.message)),
        // N times a second: the period, rounded down to whole ns.
        "hz" => match super::point::number(count) {
            Ok(0) => Err(Issue::new(count.span, "`interval:hz:0` never fires")),
            Ok(hz) => {
                let ns = 1_000_000_000 / hz;
                if ns < crate::limits::MIN_INTERVAL_NS {
                    Err(Issue::new(count.span, format!("`interval:hz:{hz}` is shorter than the minimum period, 1ms (1000 hz)")))
                } else {
                    Ok(ns)
                }
            }
            Err(e) => Err(e),
        },
        _ => Err(Issue::new(unit.span, format!("unknown unit `{}` in `{}:UNIT:N`; expected s, ms, us or hz", unit.text, kind.text))),
    })
}

#[cfg(test)]
mod tests {
    use crate::ast::{Name, PointSpec, Spelling};
    use crate::diag::Span;

    fn spec_of(src: &str) -> Result<PointSpec, String> {
        super::super::point::point(src, 0).map(|(p, _)| p.spec).map_err(|e| e.message)
    }

    fn name(text: &str, start: usize) -> Name {
        Name { text: text.into(), span: Span::new(start, start + text.len()) }
    }

    #[test]
    fn bpftrace_spellings_are_lopis_points() {
        assert_eq!(spec_of("BEGIN {").unwrap(), PointSpec::Begin);
        assert_eq!(spec_of("END").unwrap(), PointSpec::End);
        assert_eq!(spec_of("uprobe:/bin/bash:readline").unwrap(), PointSpec::Func { lib: Some(name("/bin/bash", 7)), glob: name("readline", 17), ret: false });
        assert_eq!(spec_of("uretprobe:libc.so.6:mall*").unwrap(), PointSpec::Func { lib: Some(name("libc.so.6", 10)), glob: name("mall*", 20), ret: true });
        assert_eq!(spec_of("uprobe:main").unwrap(), PointSpec::Func { lib: None, glob: name("main", 7), ret: false });
        assert_eq!(spec_of("uprobe:./prog:main+0x10").unwrap(), PointSpec::FuncOffset { lib: Some(name("./prog", 7)), name: name("main", 14), offset: 16 });
        assert_eq!(spec_of("tracepoint:syscalls:sys_enter_openat").unwrap(), PointSpec::Syscall { glob: name("openat", 30), ret: false, spelling: Spelling::Tracepoint });
        assert_eq!(spec_of("tracepoint:syscalls:sys_exit_read*").unwrap(), PointSpec::Syscall { glob: name("read*", 29), ret: true, spelling: Spelling::Tracepoint });
        assert_eq!(spec_of("tracepoint:syscalls:sys_enter_newstat").unwrap(), PointSpec::Syscall { glob: Name { text: "stat".into(), span: Span::new(30, 37) }, ret: false, spelling: Spelling::Tracepoint });
        assert_eq!(spec_of("tracepoint:raw_syscalls:sys_exit").unwrap(), PointSpec::Syscall { glob: Name { text: "*".into(), span: Span::new(24, 32) }, ret: true, spelling: Spelling::RawTracepoint });
        assert_eq!(spec_of("interval:s:2").unwrap(), PointSpec::Interval { ns: 2_000_000_000 });
        assert_eq!(spec_of("interval:ms:100").unwrap(), PointSpec::Interval { ns: 100_000_000 });
        assert_eq!(spec_of("usdt:./prog:myprov:tick {").unwrap(), PointSpec::Usdt { lib: name("./prog", 5), provider: Some(name("myprov", 12)), name: name("tick", 19) });
        assert_eq!(spec_of("usdt:/usr/bin/python3.11:function__*").unwrap(), PointSpec::Usdt { lib: name("/usr/bin/python3.11", 5), provider: None, name: name("function__*", 25) });
        assert_eq!(spec_of("usdt:libstdc++.so.6:libstdcxx:throw").unwrap(), PointSpec::Usdt { lib: name("libstdc++.so.6", 5), provider: Some(name("libstdcxx", 20)), name: name("throw", 30) });
    }

    #[test]
    fn kernel_points_and_what_lopi_lacks_are_refused_in_one_line() {
        for point in ["kprobe:do_sys_open", "kretprobe:vfs_read", "kfunc:vfs_read", "software:faults:1", "hardware:cache-misses:100"] {
            assert!(spec_of(point).unwrap_err().contains("the kernel's; lopi probes user space"), "{point}");
        }
        assert!(spec_of("tracepoint:sched:sched_switch").unwrap_err().contains("`tracepoint:sched` is the kernel's"));
        assert!(spec_of("tracepoint:syscalls:sys_foo").unwrap_err().contains("sys_enter_NAME"));
        assert!(spec_of("uretprobe:/bin/x:f+4").unwrap_err().contains("not at an offset"));
        assert!(spec_of("uprobe:/bin/x:0x1234").unwrap_err().contains("addr:0xADDR"));
        assert_eq!(spec_of("interval:hz:4").unwrap(), PointSpec::Interval { ns: 250_000_000 });
        assert!(spec_of("interval:hz:5000").unwrap_err().contains("minimum period"));
        assert!(spec_of("interval:hz:0").unwrap_err().contains("never fires"));
        assert!(spec_of("interval:ms:0").unwrap_err().contains("minimum"));
        assert_eq!(spec_of("profile:hz:99").unwrap(), PointSpec::Profile { ns: 10_101_010 });
        assert_eq!(spec_of("profile:ms:5").unwrap(), PointSpec::Profile { ns: 5_000_000 });
        assert!(spec_of("profile:99").unwrap_err().contains("expected `profile:hz:N`"));
        assert!(spec_of("usdt:tick").unwrap_err().contains("usdt:PATH:PROVIDER:NAME"));
        assert!(spec_of("usdt:./p:a:b:c").unwrap_err().contains("too many"));
        assert!(spec_of("usdt::tick").unwrap_err().contains("path or file name"));
    }
}
