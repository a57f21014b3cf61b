/* bench/syscall's cost per system call made from code no probe covers: getppid.c's loop, but
 * each getppid is a `syscall` instruction in machine code written at run time into an mmap'd
 * buffer and made executable (what a JIT does), so no probe spliced into the executable or a
 * library can see it. `lopi run --probe syscall --catch-unprobed` catches it with Syscall User
 * Dispatch (SIGSYS); without the flag it goes uncounted. Timed in-process around the loop only.
 *
 *   getppid_jit N    prints `hot_ns=<loop time> calls=N ns_per_call=<hot_ns / N>` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef long (*getppid_fn)(void);

/* getppid's call in a fresh page: the page is written, then made executable and read-only. */
static getppid_fn build_getppid(void) {
    static const unsigned char code[] = {
        0xf3, 0x0f, 0x1e, 0xfa,       /* endbr64 (CET builds) */
        0xb8, 0x6e, 0x00, 0x00, 0x00, /* mov eax, 110 (getppid) */
        0x0f, 0x05,                   /* syscall */
        0xc3,                         /* ret */
    };
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        exit(2);
    }
    return (getppid_fn)page;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000, sum = 0;
    getppid_fn jit_getppid = build_getppid();
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a); /* vDSO: not a system call */
    for (long i = 0; i < n; i++)
        sum += jit_getppid(); /* the sum keeps every call's result used */
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
    printf("hot_ns=%ld calls=%ld ns_per_call=%.2f\n", ns, n, n ? (double)ns / n : 0.0);
    return sum < 0; /* pids are positive: always 0, but the compiler cannot know */
}
