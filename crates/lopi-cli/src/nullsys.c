/* lopi whatif's null system call: the round trip of getppid(), the cheapest call the kernel
 * has, in TSC cycles and in ns, median of ROUNDS rounds of BATCH calls each.
 *
 *   nullsys [ROUNDS]   prints "cycles C ns N" per call */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define BATCH 100

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1000;
    if (rounds < 1 || rounds > 1000000) return 2;
    double *cycles = malloc(rounds * sizeof *cycles), *ns = malloc(rounds * sizeof *ns);
    if (!cycles || !ns) return 1;
    for (int r = 0; r < rounds; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        unsigned long long c0 = __rdtsc();
        for (int i = 0; i < BATCH; i++) syscall(SYS_getppid);
        unsigned long long c1 = __rdtsc();
        clock_gettime(CLOCK_MONOTONIC, &b);
        cycles[r] = (double)(c1 - c0) / BATCH;
        ns[r] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / BATCH;
    }
    qsort(cycles, rounds, sizeof *cycles, by_value);
    qsort(ns, rounds, sizeof *ns, by_value);
    printf("cycles %.0f ns %.1f\n", cycles[rounds / 2], ns[rounds / 2]);
    return 0;
}
