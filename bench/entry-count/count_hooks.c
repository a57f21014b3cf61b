// Trivial counting handler for `gcc -finstrument-functions`: the baseline lopi's entry-count probe is
// compared with.
//
// Counter: ONE global 64-bit counter, plain (non-atomic, thread-unsafe) increment in the entry hook;
// the exit hook is empty (GCC still emits its call). The workloads are single-threaded, so the count is
// exact; a per-function table would need an address lookup per call and measure that lookup instead.
//
// At exit it prints `count_hooks: calls=N` on stderr, the number of entry-hook calls. This counts
// source-level function entries, including those of functions GCC inlined (the hook call stays), so
// it can be larger than the number of binary-level calls lopi sees.
//
// Build: gcc -O2 -c count_hooks.c (itself NOT compiled with -finstrument-functions).
#include <stdint.h>
#include <stdio.h>

#define NOINST __attribute__((no_instrument_function))

static uint64_t entry_calls;

NOINST void __cyg_profile_func_enter(void *fn, void *call_site) {
    (void)fn;
    (void)call_site;
    entry_calls++;
}

NOINST void __cyg_profile_func_exit(void *fn, void *call_site) {
    (void)fn;
    (void)call_site;
}

NOINST __attribute__((destructor)) static void count_hooks_report(void) {
    fprintf(stderr, "count_hooks: calls=%llu\n", (unsigned long long)entry_calls);
}
