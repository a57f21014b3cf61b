// Floor of timing every call on this machine: what reading the TSC at a function's entry and at
// its exit costs, next to a plain call+ret. Each case calls one function in a loop N times.
//
//   plain           call + ret (the uninstrumented call)
//   rdtsc2          the function reads the TSC at entry (kept in memory, as a probe must keep it
//                   across the body) and at exit, adds the difference to a total and counts the
//                   call: the floor of any tool that times calls with the TSC
//   rdtsc2_hijack   same, with the exit reached the way a probe that sees only the entry reaches it:
//                   the entry saves the return address and start time on a shadow stack and
//                   replaces the return address with an exit stub, which reads the TSC and jumps
//                   back (the `ret` no longer matches the CPU's return-stack prediction)
//   clock_gettime2  clock_gettime(CLOCK_MONOTONIC) before and after the call (vDSO), the
//                   timestamp source uftrace uses for its entry and exit records
//
// Build: gcc -O2 floor.c -o floor      Run: floor [N]
// Prints one line per case: `<case> ns_per_call=<x>`.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t floor_t0, floor_total, floor_calls;
uint64_t *floor_sp;
static uint64_t shadow[64];

__asm__(".text\n"
        ".globl f_plain\n.p2align 4\nf_plain:\n ret\n"

        ".globl f_rdtsc2\n.p2align 4\nf_rdtsc2:\n"
        " rdtsc\n shl $32, %rdx\n or %rdx, %rax\n mov %rax, floor_t0(%rip)\n"
        // (the function's body would run here)
        " rdtsc\n shl $32, %rdx\n or %rdx, %rax\n sub floor_t0(%rip), %rax\n"
        " add %rax, floor_total(%rip)\n incq floor_calls(%rip)\n ret\n"

        ".globl f_hijack\n.p2align 4\nf_hijack:\n"
        " rdtsc\n shl $32, %rdx\n or %rdx, %rax\n"
        " mov floor_sp(%rip), %rcx\n mov (%rsp), %rdx\n mov %rdx, (%rcx)\n mov %rax, 8(%rcx)\n"
        " add $16, %rcx\n mov %rcx, floor_sp(%rip)\n"
        " lea hijack_exit(%rip), %rdx\n mov %rdx, (%rsp)\n"
        // (the function's body would run here; its `ret` goes to the exit stub)
        " ret\n"
        ".p2align 4\nhijack_exit:\n"
        " rdtsc\n shl $32, %rdx\n or %rdx, %rax\n"
        " mov floor_sp(%rip), %rcx\n sub $16, %rcx\n mov %rcx, floor_sp(%rip)\n"
        " sub 8(%rcx), %rax\n add %rax, floor_total(%rip)\n incq floor_calls(%rip)\n"
        " jmp *(%rcx)\n");
void f_plain(void), f_rdtsc2(void), f_hijack(void);

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

#define TIME(label, stmt)                                                    \
    do {                                                                     \
        uint64_t t0 = now_ns();                                              \
        for (long i = 0; i < n; i++) {                                       \
            stmt;                                                            \
            __asm__ volatile("" ::: "memory");                               \
        }                                                                    \
        printf("%s ns_per_call=%.4f\n", label, (double)(now_ns() - t0) / n); \
    } while (0)

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000000L;
    floor_sp = shadow;
    TIME("plain", f_plain());
    TIME("rdtsc2", f_rdtsc2());
    TIME("rdtsc2_hijack", f_hijack());
    TIME("clock_gettime2", {
        uint64_t s = now_ns();
        f_plain();
        floor_total += now_ns() - s;
        floor_calls++;
    });
    if (floor_calls != 3 * (uint64_t)n || floor_sp != shadow) {
        fprintf(stderr, "floor: calls %llu != 3 * %ld or shadow stack unbalanced\n",
                (unsigned long long)floor_calls, n);
        return 1;
    }
    return 0;
}
