//! The emulated application kernel (`LOPI_WHATIF=app-kernel`, `app-kernel-spin`): every
//! thread's system calls made by a proxy thread of its own. A program that waits in system
//! calls for its other threads, forks, execs, takes SIGPIPE, runs a signal handler that
//! writes while its thread waits in a forwarded read, makes many short threads and lets its
//! main thread end first behaves exactly as natively; `lopi whatif` reports the forwarding
//! and a null system call slower than the native one, with more threads than CPUs too.
mod common;

use common::{build_c, build_mpbench, cleanup, fresh_dir, lopi_bin, run};
use serde_json::Value as Json;
use std::process::Command;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int ab[2], ba[2], blocker[2];
static volatile sig_atomic_t pipes_broken;

static void *pong(void *arg) {
    int v;
    for (int i = 0; i < 500; i++) { if (read(ab[0], &v, sizeof v) != sizeof v) return arg; v++; write(ba[1], &v, sizeof v); }
    return arg;
}

static void on_usr1(int sig) { (void)sig; static const char m[] = "handler wrote\n"; write(1, m, sizeof m - 1); }
static void on_pipe(int sig) { (void)sig; pipes_broken++; }

static void *blocked_reader(void *arg) {
    char c;
    ssize_t n = read(blocker[0], &c, 1);
    printf("blocked read got %zd '%c'\n", n, n == 1 ? c : '?');
    return arg;
}

static void *short_lived(void *arg) {
    long i = (long)arg;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getppid() == (long)getppid() ? i : -1);
    return (void *)(long)n;
}

static void *outliving(void *arg) {
    usleep(100000);
    printf("outlived main\n");
    fflush(stdout);
    return arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Threads that wait for each other in system calls. */
    pipe(ab); pipe(ba);
    pthread_t t; pthread_create(&t, NULL, pong, NULL);
    int v = 0;
    for (int i = 0; i < 500; i++) { write(ab[1], &v, sizeof v); if (read(ba[0], &v, sizeof v) != sizeof v) return 1; v++; }
    pthread_join(t, NULL);
    printf("ping-pong %d\n", v);
    /* Calls about the calling thread. */
    printf("thread id is its own: %d\n", (pid_t)syscall(SYS_gettid) == getpid());
    struct rusage ru; printf("own usage: %d\n", getrusage(RUSAGE_THREAD, &ru));
    /* Children: fork, exec through system(), wait. */
    pid_t c = fork();
    if (c == 0) { printf("child %d\n", getppid() > 0); _exit(7); }
    int st; waitpid(c, &st, 0);
    printf("child exit %d\n", WEXITSTATUS(st));
    fflush(stdout);
    printf("system %d\n", system("echo from sh"));
    /* A write to a broken pipe raises SIGPIPE in the writer. */
    signal(SIGPIPE, on_pipe);
    int p[2]; pipe(p); close(p[0]);
    ssize_t w = write(p[1], "x", 1);
    printf("broken pipe: %zd %s, SIGPIPE %d\n", w, strerror(errno), (int)pipes_broken);
    /* A signal handler's call while its thread waits in a forwarded read. */
    struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART };
    sigaction(SIGUSR1, &sa, NULL);
    pipe(blocker);
    pthread_create(&t, NULL, blocked_reader, NULL);
    usleep(100000);
    pthread_kill(t, SIGUSR1);
    usleep(100000);
    write(blocker[1], "z", 1);
    pthread_join(t, NULL);
    /* Many short threads: each gets a proxy, which ends with it. */
    long sum = 0;
    for (long i = 0; i < 40; i++) {
        pthread_t s; void *r;
        pthread_create(&s, NULL, short_lived, (void *)i);
        pthread_join(s, &r);
        sum += (long)r;
    }
    printf("short threads %ld\n", sum);
    /* The main thread ends first; the process ends with its last thread. */
    pthread_create(&t, NULL, outliving, NULL);
    pthread_exit(NULL);
}
"#;

#[test]
fn forwarded_calls_keep_the_programs_behaviour() {
    let dir = fresh_dir("appkernel_behaviour");
    let prog = build_c(&dir, "appk", PROGRAM, &["-O2", "-pthread"]);
    let native = run(&mut Command::new(&prog), common::default_timeout()).unwrap();
    assert!(native.status.success(), "{}", native.stderr_str());
    assert!(native.stdout_str().contains("handler wrote") && native.stdout_str().contains("SIGPIPE 1"), "{}", native.stdout_str());
    for kernel in ["app-kernel", "app-kernel-spin"] {
        let data = dir.join(format!("{kernel}.lopi"));
        let mut cmd = Command::new(lopi_bin());
        cmd.args(["run", "-q", "--probe", "syscall,locks", "--"]).arg(&prog).env("LOPI_OUTPUT", &data).env("LOPI_WHATIF", kernel);
        let out = run(&mut cmd, common::default_timeout()).unwrap();
        assert!(out.status.success(), "{kernel}: {}\n{}", out.describe_status(), out.stderr_str());
        assert_eq!(out.stdout_str(), native.stdout_str(), "{kernel}");
        let report = run(Command::new(lopi_bin()).args(["report", "--breakdown", "--format", "json"]).arg(&data), common::default_timeout()).unwrap();
        assert!(report.status.success(), "{}", report.stderr_str());
        let json: Json = serde_json::from_str(&report.stdout_str()).unwrap();
        json["threads"].as_array().unwrap().iter().for_each(common::assert_parts_add_up);
    }
    cleanup(&dir);
}

#[test]
fn whatif_reports_the_forwarding_and_a_slower_null_system_call() {
    let dir = fresh_dir("appkernel_whatif");
    let prog = build_mpbench(&dir);
    let out = run(
        Command::new(lopi_bin()).args(["whatif", "--kernel", "app-kernel", "--runs", "1", "--format", "json", "--"]).arg(&prog).args(["{cpus}", "20000", "100"]),
        common::default_timeout(),
    )
    .unwrap();
    assert!(out.status.success(), "lopi whatif failed: {}\n{}", out.describe_status(), out.stderr_str());
    let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
    assert_eq!(json["output_identical"], true, "{json}");
    let k = &json["app-kernel"];
    assert_eq!(k["proxy_wait"], "spin", "{json}");
    assert_eq!(k["proxy_failed"], false, "{json}");
    // Every round's read of /dev/zero went to a proxy; the threads' own ends and starts did not.
    assert!(k["forwarded"].as_u64().unwrap() >= 20000, "{json}");
    assert!(k["in_place"].as_u64().unwrap() > 0, "{json}");
    assert!(k["round_trip_ns"].as_f64().unwrap() > k["proxy_ns"].as_f64().unwrap(), "{json}");
    let native = json["native"]["null_syscall_ns"].as_f64().unwrap();
    assert!(k["null_syscall_ns_spin"].as_f64().unwrap() > native, "{json}");
    // Sleeping proxies are woken for every call: several times the native call.
    assert!(k["null_syscall_ns_futex"].as_f64().unwrap() > 3.0 * native, "{json}");
    cleanup(&dir);
}

/// More threads than CPUs: four threads' proxies share the kernel CPU, spinning or asleep,
/// and every call still goes through them with the program's output unchanged.
#[test]
fn proxies_of_more_threads_than_cpus_forward_every_call() {
    let dir = fresh_dir("appkernel_oversubscribed");
    let prog = build_mpbench(&dir);
    for wait in ["spin", "futex"] {
        let out = run(
            Command::new(lopi_bin()).args(["whatif", "--kernel", "app-kernel", "--proxy-wait", wait, "--runs", "1", "--format", "json", "--"]).arg(&prog).args(["4", "8000", "100"]),
            common::default_timeout(),
        )
        .unwrap();
        assert!(out.status.success(), "{wait}: lopi whatif failed: {}\n{}", out.describe_status(), out.stderr_str());
        let json: Json = serde_json::from_str(&out.stdout_str()).unwrap();
        assert_eq!(json["output_identical"], true, "{wait}: {json}");
        let k = &json["app-kernel"];
        assert_eq!(k["proxy_wait"], wait, "{json}");
        assert_eq!(k["proxy_failed"], false, "{wait}: {json}");
        assert!(k["forwarded"].as_u64().unwrap() >= 8000, "{wait}: {json}");
        assert!(k["round_trip_ns"].as_f64().unwrap() > k["proxy_ns"].as_f64().unwrap(), "{wait}: {json}");
    }
    cleanup(&dir);
}
