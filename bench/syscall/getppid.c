/* bench/syscall's cost per system call: N getppid() calls through glibc in a tight loop, timed
 * in-process around the loop only, so that a tool's start-up and exit are not counted.
 * getppid: the cheapest system call that glibc neither caches nor serves from the vDSO, so every
 * call is one `syscall` instruction (in libc's getppid) and one entry into the kernel.
 *
 *   getppid N        prints `hot_ns=<loop time> calls=N ns_per_call=<hot_ns / N>`
 *   getppid N sud    the same with Syscall User Dispatch on, its selector letting every call
 *                    through: what the kernel's check of the selector at each call costs (lopi's
 *                    catch of calls from unprobed code turns it on) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_ON 1
#endif

static volatile char selector; /* 0: SYSCALL_DISPATCH_FILTER_ALLOW */

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000, sum = 0;
    if (argc > 2 && strcmp(argv[2], "sud") == 0 &&
        prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, 0, 0, &selector) != 0) {
        perror("getppid: prctl(PR_SET_SYSCALL_USER_DISPATCH) (Linux 5.11)");
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a); /* vDSO: not a system call */
    for (long i = 0; i < n; i++)
        sum += getppid(); /* the sum keeps every call's result used */
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
    printf("hot_ns=%ld calls=%ld ns_per_call=%.2f\n", ns, n, n ? (double)ns / n : 0.0);
    return sum < 0; /* pids are positive: always 0, but the compiler cannot know */
}
