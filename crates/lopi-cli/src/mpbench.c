/* lopi's built-in multiprocessor benchmark, after the thesis's synthetic workload (Paper II): threads
 * that loop in user space and make a CPU-bound system call at a set ratio. Every round is a user
 * loop of USER_ITERS dependent multiply-adds, then read(/dev/zero, 64 KiB), which the kernel spends
 * clearing memory: CPU work inside a system call that never blocks. ROUNDS rounds in all are split
 * evenly over THREADS threads (a fixed amount of work: strong scaling).
 *
 *   mpbench THREADS ROUNDS USER_ITERS   runs; prints a checksum that depends on ROUNDS and
 *                                       USER_ITERS only (the same for any THREADS)
 *   mpbench --calibrate [MS [USER_PCT]] prints "ROUNDS USER_ITERS" for one CPU to spend about MS
 *                                       ms (default 2000), USER_PCT% of it in user space (64)
 *
 * With MPBENCH_SPLIT set in the environment, each worker also prints to standard error the time
 * stamp counter's ticks it spent in its user loops and in its reads: its own user:kernel split,
 * measured in the same run, which `lopi report --breakdown`'s can be checked against.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define READ_BYTES 65536

static long rounds, user_iters;
static int threads;
static uint64_t sums[1024];

static uint64_t user_work(uint64_t x, long iters) {
    for (long i = 0; i < iters; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static void kernel_work(int fd, char *buf) {
    if (read(fd, buf, READ_BYTES) != READ_BYTES) {
        perror("mpbench: read /dev/zero");
        exit(1);
    }
}

static void *worker(void *arg) {
    long t = (long)arg;
    char *buf = malloc(READ_BYTES);
    int fd = open("/dev/zero", O_RDONLY);
    if (!buf || fd < 0) {
        perror("mpbench: /dev/zero");
        exit(1);
    }
    uint64_t sum = 0, user_ticks = 0, read_ticks = 0;
    /* The time stamp counter, not clock_gettime: no system call whatever the clock source. */
    uint64_t before = __rdtsc();
    /* Round r belongs to thread r % threads; each round's value depends on r only. */
    for (long r = t; r < rounds; r += threads) {
        sum += user_work((uint64_t)r, user_iters);
        uint64_t between = __rdtsc();
        kernel_work(fd, buf);
        uint64_t after = __rdtsc();
        user_ticks += between - before;
        read_ticks += after - between;
        before = after;
    }
    sums[t] = sum;
    if (getenv("MPBENCH_SPLIT"))
        fprintf(stderr, "mpbench: thread %ld: %llu ticks in user loops, %llu in reads\n", t, (unsigned long long)user_ticks,
                (unsigned long long)read_ticks);
    close(fd);
    free(buf);
    return NULL;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of 31 timings of `what`, in ns. */
static double median_ns(int what, int fd, char *buf, long iters) {
    double t[31];
    for (int i = 0; i < 31; i++) {
        double a = now_ns();
        if (what) kernel_work(fd, buf);
        else sums[0] += user_work((uint64_t)i, iters);
        t[i] = now_ns() - a;
    }
    qsort(t, 31, sizeof t[0], by_value);
    return t[15];
}

static int calibrate(double ms, double user_pct) {
    char *buf = malloc(READ_BYTES);
    int fd = open("/dev/zero", O_RDONLY);
    if (!buf || fd < 0 || user_pct <= 0 || user_pct >= 100 || ms <= 0) {
        fprintf(stderr, "mpbench: bad calibration arguments\n");
        return 2;
    }
    for (int i = 0; i < 100; i++) kernel_work(fd, buf); /* warm up */
    double kernel = median_ns(1, fd, buf, 0);
    long probe_iters = 100000;
    double user_per_iter = median_ns(0, fd, buf, probe_iters) / probe_iters;
    double user = kernel * user_pct / (100 - user_pct);
    long iters = (long)(user / user_per_iter + 0.5);
    long n = (long)(ms * 1e6 / (kernel + user) + 0.5);
    printf("%ld %ld\n", n < 1 ? 1 : n, iters < 1 ? 1 : iters);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--calibrate") == 0)
        return calibrate(argc > 2 ? atof(argv[2]) : 2000, argc > 3 ? atof(argv[3]) : 64);
    if (argc != 4) {
        fprintf(stderr, "usage: mpbench THREADS ROUNDS USER_ITERS | mpbench --calibrate [MS [USER_PCT]]\n");
        return 2;
    }
    threads = atoi(argv[1]);
    rounds = atol(argv[2]);
    user_iters = atol(argv[3]);
    if (threads < 1 || threads > 1024 || rounds < 1 || user_iters < 0) {
        fprintf(stderr, "mpbench: THREADS must be 1..1024, ROUNDS >= 1, USER_ITERS >= 0\n");
        return 2;
    }
    pthread_t tid[1024];
    for (long t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)t) != 0) {
            fprintf(stderr, "mpbench: pthread_create failed\n");
            return 1;
        }
    uint64_t sum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        sum += sums[t];
    }
    printf("mpbench: %ld rounds of %ld user iterations + read(/dev/zero, %d): checksum %016llx\n", rounds, user_iters, READ_BYTES,
           (unsigned long long)sum);
    return 0;
}
