//! Block and coverage probes over the code libc is made of. A fixture with vfprintf's computed
//! goto (a table of label differences, its base taken with a `lea`): every label is a block,
//! so no probe covers one, and each block's instructions ran as often as its first (callgrind).
//! A fixture with the hand-written string functions' fall-through from one function into the
//! next across padding: no bounce goes there; one with dead padding before code: no block
//! starts in it.
//! Real libc: `printf` through `__vfprintf_internal` under block probes, live and in a
//! rewritten copy of libc.so.6; `sed` under block and coverage probes over all of libc, whose
//! image is placed where there is room when the process has mapped memory since it was planned.
mod common;

use common::{block_counts, build_c, callgrind_counts, cleanup, fresh_dir, lopi_bin, run};
use serde_json::Value as Json;
use std::path::Path;
use std::process::Command;

/// glibc's vfprintf dispatch: `goto *(&&do_base + jumps[c])` with `jumps[]` holding `&&do_x -
/// &&do_base` (int32). Every label but the base is reached only through the table, and each is
/// fallen into from a short label before it (`do_add`'s `not` is three bytes): a probe at the
/// start of `do_add` that did not know `do_mul` is a label would cover it.
const LABELS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long interpret(const char *s) {
    static const int jumps[] = {
        &&do_base - &&do_base, &&do_add - &&do_base, &&do_mul - &&do_base, &&do_xor - &&do_base,
        &&do_neg - &&do_base, &&do_shift - &&do_base, &&do_end - &&do_base,
    };
    long x = 1, steps = 0;
    const char *p = s;
#define NEXT goto *(&&do_base + jumps[(unsigned char)*p++ % 7])
    NEXT;
do_base:
    steps += 2;
    NEXT;
do_add:
    x = ~x;
do_mul:
    x = x * 3 + 1;
do_xor:
    x ^= 0x55 + steps;
do_neg:
    x = -x;
    steps++;
do_shift:
    x = (x << 1) ^ (x >> 3);
    NEXT;
do_end:
    return x + steps;
}
int main(int argc, char **argv) {
    long sum = 0;
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    char prog[64];
    for (int i = 0; i < n; i++) {
        int len = 1 + i % 40;
        for (int j = 0; j < len; j++) prog[j] = (char)(i * 7 + j * 13) % 7 == 6 ? 0 : (char)(i * 7 + j * 13);
        prog[len] = 6;
        sum += interpret(prog);
    }
    printf("%ld\n", sum);
    return 0;
}
"#;

fn hex(v: &Json) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// `func`'s blocks as `lopi info --probe block` plans them: (start, end).
fn planned_blocks(prog: &Path, func: &str) -> Vec<(u64, u64)> {
    let out = run(Command::new(lopi_bin()).args(["info", "--probe", "block", "--format", "json", "--functions", func]).arg(prog), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    let f = &json["functions"][0];
    f["blocks"].as_array().unwrap_or_else(|| panic!("{func} has no graph: {f}")).iter().map(|b| (hex(&b["start"]), hex(&b["end"]))).collect()
}

/// Checks `func`'s graph and probes in `prog` (not PIE: callgrind's addresses are then the
/// file's) against callgrind, run with `arg`: every block's instructions ran as often as its
/// first (control enters a block only at its start), and, rewritten and under `lopi run`, the
/// program prints what it does natively and each block probe counts what callgrind does.
fn blocks_agree_with_callgrind(dir: &Path, prog: &Path, func: &str, arg: &str) {
    let oracle = callgrind_counts(prog, &[arg], dir);
    for (start, end) in planned_blocks(prog, func) {
        let first = oracle.get(&start).copied().unwrap_or(0);
        for (&addr, &n) in oracle.iter().filter(|(&a, _)| a > start && a < end) {
            assert_eq!(n, first, "{func}: the block {start:#x}..{end:#x} is entered elsewhere than at its start: {addr:#x} ran {n} times, {start:#x} {first}");
        }
    }
    let native = run(Command::new(prog).arg(arg), common::default_timeout()).unwrap().stdout_str();
    for probe in ["block", "coverage"] {
        let rewritten = dir.join(format!("{func}.{probe}"));
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", probe, "-o"]).arg(&rewritten).arg(prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        for mode in ["rewritten", "lopi run"] {
            let data = dir.join(format!("{func}-{probe}-{}.data", mode.replace(' ', "-")));
            let mut cmd = if mode == "lopi run" {
                let mut c = Command::new(lopi_bin());
                c.args(["run", "-q", "--probe", probe, "--"]).arg(prog);
                c
            } else {
                Command::new(&rewritten)
            };
            let out = run(cmd.arg(arg).env("LOPI_OUTPUT", &data), common::default_timeout()).unwrap();
            assert!(out.status.success(), "--probe {probe}, {mode}: {}", common::describe_status(&out.status));
            assert_eq!(out.stdout_str(), native, "--probe {probe}, {mode}: the program's output");
            let mut counted = 0;
            for b in block_counts(&data, func) {
                let want = oracle.get(&b["address"].as_u64().unwrap()).copied().unwrap_or(0);
                match b["count"].as_u64() {
                    Some(count) if probe == "block" => assert_eq!(count, want, "--probe block, {mode}: {b}"),
                    Some(mark) => assert_eq!(mark > 0, want > 0, "--probe coverage, {mode}: {b}"),
                    None => continue,
                }
                counted += 1;
            }
            assert!(counted >= 2, "--probe {probe}, {mode}: {counted} blocks of {func} counted");
        }
    }
}

#[test]
fn computed_goto_through_label_differences() {
    let dir = fresh_dir("blocks_labels");
    let prog = build_c(&dir, "labels", LABELS, &["-O2", "-no-pie"]);
    blocks_agree_with_callgrind(&dir, &prog, "interpret", "1000");
    cleanup(&dir);
}

/// Padding after an indirect jump, then code reached only by it, at an address it computes
/// (glibc's `__strcmp_sse42` has such code, reached from nowhere lopi can see): the padding,
/// which `gaps.rs` may give to a bounce, is no part of the block, whose probe goes where its
/// code begins.
const PADDED: &str = r#"
#include <stdio.h>
#include <stdlib.h>
long padded(long x);
asm(".text\n"
    ".p2align 4\n"
    ".globl padded\n.type padded, @function\n"
    "padded:\n"
    "  lea padded(%rip), %rax\n"
    "  add $(.Lcode - padded), %rax\n"
    "  jmp *%rax\n"
    "  .byte 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0\n" /* an 11-byte nop */
    ".Lcode:\n"
    "  lea 1(%rdi), %rax\n"
    "  imul %rdi, %rax\n"
    "  ret\n"
    ".size padded, .-padded\n");
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000, total = 0;
    for (long i = 0; i < n; i++) total += padded(i);
    printf("%ld\n", total);
    return 0;
}
"#;

#[test]
fn dead_padding_is_no_part_of_a_block() {
    let dir = fresh_dir("blocks_padded");
    let prog = build_c(&dir, "padded", PADDED, &["-O2", "-no-pie"]);
    blocks_agree_with_callgrind(&dir, &prog, "padded", "1000");
    cleanup(&dir);
}

/// A loop of one block shorter than a jump and a half (`sub; jne` back to itself: libc's
/// string functions have such), moved whole into its probe: each iteration goes back through
/// the probe.
const SPIN: &str = r#"
#include <stdio.h>
#include <stdlib.h>
long spin(long n);
asm(".text\n.p2align 4\n.globl spin\n.type spin, @function\nspin:\n"
    "  mov %rdi, %rax\n"
    "  xor %edx, %edx\n"
    ".Lloop:\n"
    "  sub $1, %rax\n"
    "  jne .Lloop\n"
    "  lea (%rdi,%rdi,2), %rax\n"
    "  ret\n.size spin, .-spin\n");
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    printf("%ld\n", spin(n));
    return 0;
}
"#;

#[test]
fn a_block_that_loops_to_itself_counts_each_iteration() {
    let dir = fresh_dir("blocks_spin");
    let prog = build_c(&dir, "spin", SPIN, &["-O2", "-no-pie"]);
    blocks_agree_with_callgrind(&dir, &prog, "spin", "1000");
    cleanup(&dir);
}

/// glibc's `__memcpy_chk_avx512_unaligned_erms`: a check that ends in a conditional jump and
/// runs on through alignment padding (one-byte nops, each of which runs) into the function
/// after it, whose first blocks are too short for a 5-byte jump. A bounce placed in that
/// padding would run in the middle of `checked_sum`.
const FALLS_THROUGH: &str = r#"
#include <stdio.h>
#include <stdlib.h>
long checked_sum(long a, long b, long limit);
long sum_from(long a, long b);
asm(".text\n"
    ".p2align 6\n"
    "filler:\n" /* code enough that no earlier padding is in a short jump's reach */
    ".rept 50\n mov %rax, %rax\n .endr\n"
    "ret\n"
    ".p2align 4\n"
    ".globl checked_sum\n.type checked_sum, @function\n"
    "checked_sum:\n"
    "  cmp %rsi, %rdx\n"
    "  jb too_big\n"
    ".size checked_sum, .-checked_sum\n"
    ".rept 27\n .byte 0x90\n .endr\n"
    ".globl sum\n.type sum, @function\n"
    "sum:\n"
    "  mov %rdi, %rax\n" /* 3 bytes, then a label another function jumps to */
    ".Lbody:\n"
    "  add %rsi, %rax\n"
    "  test %rax, %rax\n"
    "  js .Lneg\n"
    "  ret\n"
    ".Lneg:\n"
    "  neg %rax\n"
    "  ret\n"
    ".size sum, .-sum\n"
    ".globl sum_from\n.type sum_from, @function\n"
    "sum_from:\n"
    "  lea 1(%rdi), %rax\n"
    "  jmp .Lbody\n"
    ".size sum_from, .-sum_from\n"
    "too_big:\n"
    "  mov $-1, %rax\n"
    "  ret\n");
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000, total = 0;
    for (long i = 0; i < n; i++) total += checked_sum(i, i % 13 - 6, 5) + sum_from(-i, 3);
    printf("%ld\n", total);
    return 0;
}
"#;

#[test]
fn padding_that_code_runs_through_holds_no_bounce() {
    let dir = fresh_dir("blocks_falls_through");
    let prog = build_c(&dir, "falls", FALLS_THROUGH, &["-O2"]);
    let native = run(&mut Command::new(&prog), common::default_timeout()).unwrap().stdout_str();
    for probe in ["block", "coverage"] {
        let rewritten = dir.join(format!("falls.{probe}"));
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", probe, "-o"]).arg(&rewritten).arg(&prog), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        let mut live = Command::new(lopi_bin());
        live.args(["run", "-q", "--probe", probe, "--"]).arg(&prog);
        for (mode, cmd) in [("rewritten", &mut Command::new(&rewritten)), ("lopi run", &mut live)] {
            let out = run(cmd.env("LOPI_OUTPUT", dir.join("falls.data")), common::default_timeout()).unwrap();
            assert!(out.status.success(), "--probe {probe}, {mode}: {}", common::describe_status(&out.status));
            assert_eq!(out.stdout_str(), native, "--probe {probe}, {mode}: the program's output");
        }
    }
    cleanup(&dir);
}

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// `bash -c 'printf "%s %5.2f\n" a 2.5'` under `args` (lopi run's options, or a rewritten
/// libc's directory on `LD_LIBRARY_PATH`): its output and status are native's.
fn printf_as_native(what: &str, cmd: &mut Command) {
    let out = run(cmd.args(["bash", "-c", r#"printf "%s %5.2f\n" a 2.5"#]), common::default_timeout()).unwrap();
    assert!(out.status.success(), "{what}: {}: {}", common::describe_status(&out.status), out.stderr_str());
    assert_eq!(out.stdout_str(), "a  2.50\n", "{what}");
}

#[test]
fn libc_vfprintf_under_block_probes() {
    let dir = fresh_dir("blocks_vfprintf");
    for probe in ["block", "coverage"] {
        let mut cmd = Command::new(lopi_bin());
        cmd.args(["run", "-q", "--probe", probe, "--functions", "*", "--functions", "libc:__vfprintf_internal", "--"]).env("LOPI_OUTPUT", dir.join(format!("{probe}.data")));
        printf_as_native(&format!("lopi run --probe {probe}"), &mut cmd);
        let lib = dir.join(probe);
        std::fs::create_dir_all(&lib).unwrap();
        let out = run(Command::new(lopi_bin()).args(["rewrite", "--probe", probe, "--functions", "__vfprintf_internal", LIBC, "-o"]).arg(lib.join("libc.so.6")), common::default_timeout()).unwrap();
        assert!(out.status.success(), "{}", out.stderr_str());
        let mut cmd = Command::new("env");
        cmd.env("LD_LIBRARY_PATH", &lib).env("LOPI_OUTPUT", dir.join(format!("{probe}-rewritten.data")));
        printf_as_native(&format!("a libc rewritten with --probe {probe}"), &mut cmd);
    }
    cleanup(&dir);
}

/// `sed -n 1p FILE` with block and coverage probes over all of libc: its image (19 MB) goes in
/// the hole right below the lowest library, where the kernel also put the data file that the
/// executable's runtime maps at its init.
#[test]
fn sed_under_probes_over_all_of_libc() {
    let dir = fresh_dir("blocks_libc_all");
    let file = dir.join("lines.txt");
    std::fs::write(&file, "first line\nsecond line\n").unwrap();
    for probe in ["block", "coverage"] {
        let out = run(
            Command::new(lopi_bin()).args(["run", "-q", "--probe", probe, "--functions", "*", "--functions", "libc:*", "--", "sed", "-n", "1p"]).arg(&file).env("LOPI_OUTPUT", dir.join(format!("{probe}.data"))),
            common::default_timeout(),
        )
        .unwrap();
        assert!(out.status.success(), "--probe {probe}: {}: {}", common::describe_status(&out.status), out.stderr_str());
        assert_eq!(out.stdout_str(), "first line\n", "--probe {probe}");
    }
    cleanup(&dir);
}

const MAPPER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
/* Takes the 4 GiB above its highest library (PROT_NONE, nothing committed), so that the free
   address space nearest libc's code is right below its lowest mapping, then maps 256 KiB
   there every millisecond (the kernel takes the highest hole that fits): what a planner read
   of its mappings a moment ago is not free any more. Formats numbers meanwhile (libc's
   vfprintf); prints their checksum at the end. */
int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 3;
    unsigned long top = 0, start_, end_;
    char line[512], path[256];
    FILE *maps = fopen("/proc/self/maps", "r");
    while (fgets(line, sizeof line, maps)) {
        path[0] = 0;
        sscanf(line, "%lx-%lx %*s %*s %*s %*s %255s", &start_, &end_, path);
        if (strcmp(path, "[stack]") != 0 && strcmp(path, "[vsyscall]") != 0 && end_ > top) top = end_;
    }
    fclose(maps);
    if (mmap((void *)top, 4UL << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0) == MAP_FAILED) return 2;
    struct timespec start, now, ms = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned long sum = 0, rounds = 0;
    char buf[64];
    do {
        mmap(NULL, 256 << 10, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        for (int i = 0; i < 100; i++) sum += strlen(buf + snprintf(buf, sizeof buf, "%d %5.2f", i, i / 4.0) / 2);
        rounds++;
        nanosleep(&ms, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < seconds);
    printf("%lu\n", sum / rounds);
    return 0;
}
"#;

/// `lopi attach` plans while the process runs: a program that maps memory all the while has
/// taken the hole its libc image was planned in by the time its threads are stopped. The image
/// is laid out again where there is room.
#[test]
fn attach_lays_out_again_where_the_process_mapped_meanwhile() {
    let dir = fresh_dir("blocks_attach_placement");
    let prog = build_c(&dir, "mapper", MAPPER, &["-O2"]);
    let native = run(Command::new(&prog).arg("1"), common::default_timeout()).unwrap().stdout_str();
    let mut child = Command::new(&prog).arg("4").stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = run(
        Command::new(lopi_bin()).args(["attach", &child.id().to_string(), "--duration", "300ms", "--probe", "block", "--functions", "libc:*"]).env("LOPI_OUTPUT", dir.join("mapper.data")),
        common::default_timeout(),
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(out.status.success(), "lopi attach: {}", out.stderr_str());
    assert!(status.success() && printed == native, "the program: {status:?}, {printed:?}; lopi: {}", out.stderr_str());
    cleanup(&dir);
}
