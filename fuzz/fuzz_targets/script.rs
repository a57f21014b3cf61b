//! Any text through the probe language's parser and checker (against a resolver that knows a
//! few functions and system calls), and the rendering of their errors: errors are fine,
//! panics and hangs are bugs.
#![no_main]
use libfuzzer_sys::fuzz_target;

struct Known;

impl lopi_script::Resolver for Known {
    fn functions_matching(&self, lib: Option<&str>, glob: &str) -> usize {
        let names: &[&str] = if lib.is_some() { &["malloc", "free"] } else { &["main", "foo", "bar"] };
        names.iter().filter(|n| lopi_script::glob_match(glob, n)).count()
    }

    fn syscall_known(&self, name: &str) -> bool {
        ["read", "write", "futex"].contains(&name)
    }

    fn syscalls_matching(&self, glob: &str) -> usize {
        ["read", "write", "futex"].iter().filter(|n| lopi_script::glob_match(glob, n)).count()
    }

    fn markers_matching(&self, _lib: &str, _provider: Option<&str>, name: &str) -> usize {
        usize::from(lopi_script::glob_match(name, "tick"))
    }
}

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    match lopi_script::parse(&source).and_then(|script| lopi_script::check(&script, &Known)) {
        Ok(program) => drop(program.needs()),
        Err(diagnostics) => drop(diagnostics.render(&source, "fuzz.lp")),
    }
});
