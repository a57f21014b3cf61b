//! "Never panic, never hang" for the front end: random bytes, random token soups, damaged
//! copies of every valid script and pathological nesting all go through parse and check (and
//! the rendering of their errors) without a panic and in bounded time. Deterministic (fixed
//! seed), so a failure names its input.
mod common;

use common::{Rng, TestResolver, SCRIPTS};
use std::time::{Duration, Instant};

/// Generous for a debug build: no input here should take a millisecond.
const BOUND: Duration = Duration::from_secs(2);

/// Parses and checks `input`, renders its errors or asks what its program needs.
fn run(input: &str) {
    let start = Instant::now();
    match lopi_script::compile_front(input, &TestResolver) {
        Ok(program) => {
            let _ = program.needs();
            program.probes.iter().flat_map(|p| &p.points).for_each(|p| drop(p.to_string()));
        }
        Err(diagnostics) => {
            assert!(!diagnostics.errors.is_empty(), "no error for a refused input: {input:?}");
            let _ = diagnostics.render(input, "fuzz.lp");
        }
    }
    assert!(start.elapsed() < BOUND, "took {:?}: {input:?}", start.elapsed());
}

#[test]
fn random_bytes() {
    let mut rng = Rng(0x5eed_0001);
    for case in 0..1500 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match case % 2 {
                0 => rng.next() as u8,
                _ => b' ' + rng.below(95) as u8,
            })
            .collect();
        run(&String::from_utf8_lossy(&bytes));
    }
}

/// Pieces of scripts, valid and not.
const TOKENS: &[&str] = &[
    "begin", "end", "func:foo", "func:foo:return", "func:libc.so.6:malloc", "func:main+0x10", "addr:0x10", "syscall:read",
    "syscall:*:return", "lock:*", "interval:1s", "thread:start", "{", "}", "(", ")", "[", "]", ",", ";", "/", "?", ":", "=",
    "+=", "++", "--", "<<=", "+", "-", "*", "%", "&&", "||", "!", "~", "==", "<", "if", "else", "while", "printf", "print",
    "delete", "clear", "exit", "count()", "hist(", "lhist(", "sum(", "str(", "ustack(", "@m", "@n", "@", "$x", "$y", "arg0",
    "retval", "elapsed", "comm", "pid", "func", "probe", "1", "0", "0xff", "18446744073709551616", "\"%d %s\\n\"", "\"x\"",
    "\"unterminated", "/*", "*/", "//", "\n", "é", "\t",
];

#[test]
fn token_soups() {
    let mut rng = Rng(0x5eed_0002);
    for _ in 0..1500 {
        let len = 1 + rng.below(60);
        let soup: Vec<&str> = (0..len).map(|_| rng.pick(TOKENS)).collect();
        run(&soup.join(if rng.below(2) == 0 { " " } else { "" }));
    }
}

#[test]
fn damaged_valid_scripts() {
    let mut rng = Rng(0x5eed_0003);
    const PUNCT: &[u8] = b"{}()[];,/@$\"\\:*+-=!?<>%&|^~.#'`0x \n";
    for (_, src) in SCRIPTS {
        let bytes = src.as_bytes();
        for case in 0..40 {
            let mut mutated = bytes.to_vec();
            let at = rng.below(mutated.len() + 1);
            let len = rng.below(8).min(mutated.len() - at.min(mutated.len()));
            match case % 4 {
                0 => drop(mutated.drain(at..at + len)),
                1 => {
                    let copy = mutated[at..at + len].to_vec();
                    mutated.splice(at..at, copy);
                }
                2 => {
                    for _ in 0..1 + rng.below(3) {
                        let at = rng.below(mutated.len() + 1);
                        mutated.insert(at, PUNCT[rng.below(PUNCT.len())]);
                    }
                }
                _ => {
                    let to = rng.below(mutated.len() + 1);
                    let piece = mutated[at.min(to)..at.max(to)].to_vec();
                    mutated.extend_from_slice(&piece);
                }
            }
            run(&String::from_utf8_lossy(&mutated));
        }
    }
}

#[test]
fn pathological_shapes() {
    let n = 100_000;
    let inputs = [
        "(".repeat(n),
        format!("begin {{ $x = {}", "(".repeat(n)),
        format!("begin {{ $x = {}1; }}", "-".repeat(n)),
        format!("begin {{ $x = {}1; }}", "!~".repeat(n)),
        format!("begin {{ {}", "if (1) {".repeat(n)),
        format!("begin {{ {}", "{".repeat(n)),
        format!("begin {{ $x = 1{}; }}", "+1".repeat(n)),
        format!("begin {{ @a = 1; $x = {}1; }}", "@a[".repeat(n)),
        format!("begin {{ $x = {}1; }}", "1?".repeat(n)),
        format!("begin {{ $x = str({}1; }}", "str(".repeat(n)),
        format!("{} {{ }}", vec!["begin"; n].join(",")),
        format!("func:foo {{ if (arg0) {{ }} {} }}", "else if (arg0) { @x = 1 } ".repeat(n / 10)),
        format!("begin {{ printf(\"{}\"); }}", "%d".repeat(n)),
        format!("begin {{ {} }}", "$x = $y; ".repeat(n / 10)),
        format!("begin {{ {} }}", (0..n / 10).map(|i| format!("$v{i} = 1; if ($v{i}) {{ }} ")).collect::<String>()),
        format!("begin {{ {} }}", (0..n / 10).map(|i| format!("@m{i} = @m{} + 1; ", i + 1)).collect::<String>()),
        (0..n / 100).map(|i| format!("func:foo {{ @m{} = @m{i} + 1; }} ", i + 1)).collect::<String>() + "begin { @m0 = 1 }",
        format!("begin {{ /* {} }}", "x".repeat(n)),
        format!("begin {{ $x = \"{}\"; }}", "\\x4".repeat(n)),
        "begin { }\n".repeat(n / 10),
        format!("func:{} {{ }}", "[".repeat(n)),
        format!("func:/{} {{ }}", "a/".repeat(n)),
        "func:./caf\u{e9}.so:\u{e9}+1 { } func:\u{e9} { } syscall:\u{e9}* { } func:/\u{e9}".to_string(),
    ];
    for input in &inputs {
        run(input);
    }
}
