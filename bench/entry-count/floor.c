// Floor of an entry probe on this machine: what a 5-byte jump to a trampoline and back costs,
// with and without a counter increment (plain `incq` or atomic `lock incq`) in the trampoline, next to
// a plain call+ret. Each case calls one function in a loop, so its counter increments form a chain of
// dependent read-modify-writes: the figure is what a hot function's own counter costs.
//
// Build: gcc -O2 floor.c -o floor      Run: floor [N]
// Prints one line per case: `<case> ns_per_call=<x>` (N direct calls in a loop each).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t floor_counter __attribute__((aligned(64)));

__asm__(".text\n"
        // plain: the function an uninstrumented call reaches
        ".globl f_plain\n.p2align 4\nf_plain:\n ret\n"
        // entry patched with `jmp trampoline`; the trampoline jumps straight back
        ".globl f_jmp\n.p2align 4\nf_jmp:\n jmp tr_jmp\nf_jmp_back:\n ret\n"
        // same, the trampoline increments a counter in .data (flags are dead at a function entry)
        ".globl f_jmp_inc\n.p2align 4\nf_jmp_inc:\n jmp tr_inc\nf_jmp_inc_back:\n ret\n"
        // same with an atomic increment (what a counter shared by threads needs)
        ".globl f_jmp_lock\n.p2align 4\nf_jmp_lock:\n jmp tr_lock\nf_jmp_lock_back:\n ret\n"
        ".p2align 12\n"  // trampolines on another page than the patched functions
        "tr_jmp:\n jmp f_jmp_back\n"
        ".p2align 4\ntr_inc:\n incq floor_counter(%rip)\n jmp f_jmp_inc_back\n"
        ".p2align 4\ntr_lock:\n lock incq floor_counter(%rip)\n jmp f_jmp_lock_back\n");
void f_plain(void), f_jmp(void), f_jmp_inc(void), f_jmp_lock(void);

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

#define TIME(label, fn)                                                   \
    do {                                                                  \
        uint64_t t0 = now_ns();                                           \
        for (long i = 0; i < n; i++) {                                    \
            fn();                                                         \
            __asm__ volatile("" ::: "memory");                            \
        }                                                                 \
        printf("%s ns_per_call=%.4f\n", label, (double)(now_ns() - t0) / n); \
    } while (0)

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000000L;
    TIME("plain", f_plain);
    TIME("jmp", f_jmp);
    TIME("jmp_inc", f_jmp_inc);
    TIME("jmp_lock_inc", f_jmp_lock);
    if (floor_counter != 2 * (uint64_t)n) {
        fprintf(stderr, "floor: counter %llu != 2 * %ld\n", (unsigned long long)floor_counter, n);
        return 1;
    }
    return 0;
}
