// W1: call-heavy micro-benchmark for entry-probe cost (same workload as the anchor measurements).
//
//   w1 fib N R   R x fib(N), naive recursion: 2*F(N+1)-1 calls of fib per repetition
//   w1 loop N    N calls of tiny() (lea; ret)
//
// Build: gcc -O2 -g -fno-inline -fno-optimize-sibling-calls w1.c -o w1
// (-fno-optimize-sibling-calls keeps both recursive calls of fib real calls.)
//
// It prints the elapsed time of the hot section only (CLOCK_MONOTONIC), so process start-up,
// instrumentation set-up and the writing of counts at exit are not part of the metric:
//   hot_ns=<nanoseconds> calls_expected=<exact number of calls of fib/tiny> result=<checksum>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

long fib(long n) {
    if (n < 2) return n;
    return fib(n - 1) + fib(n - 2);
}

int tiny(int x) { return x + 1; }

// Number of calls fib(n) makes to fib, itself included: C(n) = 1 + C(n-1) + C(n-2), C(0)=C(1)=1.
static uint64_t fib_calls(long n) {
    uint64_t a = 1, b = 1; // C(0), C(1)
    for (long i = 2; i <= n; i++) { uint64_t c = 1 + a + b; a = b; b = c; }
    return n == 0 ? a : b;
}

static int usage(void) {
    fprintf(stderr, "usage: w1 fib N REPS | w1 loop N\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    uint64_t t0, t1, expected;
    long result = 0;
    if (strcmp(argv[1], "fib") == 0 && argc == 4) {
        long n = atol(argv[2]), reps = atol(argv[3]);
        t0 = now_ns();
        for (long r = 0; r < reps; r++) result += fib(n);
        t1 = now_ns();
        expected = fib_calls(n) * (uint64_t)reps;
    } else if (strcmp(argv[1], "loop") == 0 && argc == 3) {
        long n = atol(argv[2]);
        int acc = 0;
        t0 = now_ns();
        for (long i = 0; i < n; i++) acc = tiny(acc);
        t1 = now_ns();
        result = acc;
        expected = (uint64_t)n;
    } else {
        return usage();
    }
    printf("hot_ns=%llu calls_expected=%llu result=%ld\n", (unsigned long long)(t1 - t0),
           (unsigned long long)expected, result);
    return 0;
}
