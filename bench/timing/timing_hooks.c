// Timing handler for `gcc -finstrument-functions`: the hand-written compiler-hook baseline that
// lopi's entry+exit probes are compared with. It keeps what lopi's timing report gives per
// function: calls, inclusive time and self time.
//
// Per thread (`__thread`, allocated on the thread's first call):
//   - a shadow stack of {table slot, start TSC, children's time}: the entry hook looks the function
//     up, counts the call, pushes a frame and reads the TSC last; the exit hook reads the TSC
//     first, pops the frame and adds the interval to the slot's inclusive time, the interval
//     minus the children's to its self time, and the interval to the parent frame's children;
//   - an open-addressing hash table (function address -> calls, inclusive and self TSC ticks).
// Nothing is printed on the hot path and no lock is taken there. At exit a destructor converts
// ticks to ns (TSC rate measured between the constructor and the destructor) and prints
//   timing_hooks: calls=N functions=F threads=T top=<calls of the most called function> ...
// on stderr; with $TIMING_HOOKS_OUTPUT set it also writes one line per function there
// (address calls inclusive_ns self_ns). Recursion makes inclusive times overlap, as in any
// per-function inclusive sum.
//
// Entries deeper than STACK_MAX are counted in too_deep and not timed. An exit whose frame is not
// the function's (longjmp out of instrumented code) is counted in mismatched and still popped.
//
// Build: gcc -O2 -c timing_hooks.c (itself NOT compiled with -finstrument-functions).
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define NOINST __attribute__((no_instrument_function))
#define TABLE_BITS 14
#define TABLE_SIZE (1u << TABLE_BITS)
#define STACK_MAX 4096

struct slot {
    void *fn;
    uint64_t calls, incl, self;
};

struct frame {
    struct slot *slot;
    uint64_t t0, children;
};

struct state {
    uint64_t depth, too_deep, mismatched, table_full;
    struct state *next;
    struct frame stack[STACK_MAX];
    struct slot table[TABLE_SIZE];
    struct slot overflow; // calls of functions that found the table full
};

static __thread struct state *tls_state;
static struct state *all_states;
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t tsc_start, ns_start;

static NOINST uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

NOINST __attribute__((constructor)) static void timing_hooks_start(void) {
    ns_start = now_ns();
    tsc_start = __rdtsc();
}

static NOINST __attribute__((noinline)) struct state *new_state(void) {
    struct state *st = calloc(1, sizeof *st);
    if (!st) abort();
    pthread_mutex_lock(&all_lock);
    st->next = all_states;
    all_states = st;
    pthread_mutex_unlock(&all_lock);
    tls_state = st;
    return st;
}

static inline NOINST struct slot *lookup(struct state *st, void *fn) {
    uint32_t i = (uint32_t)(((uintptr_t)fn * 0x9E3779B97F4A7C15ull) >> (64 - TABLE_BITS));
    for (uint32_t probes = 0; probes < TABLE_SIZE; probes++, i = (i + 1) & (TABLE_SIZE - 1)) {
        struct slot *s = &st->table[i];
        if (s->fn == fn) return s;
        if (s->fn == NULL) {
            s->fn = fn;
            return s;
        }
    }
    st->table_full++;
    return &st->overflow;
}

NOINST void __cyg_profile_func_enter(void *fn, void *call_site) {
    (void)call_site;
    struct state *st = tls_state;
    if (__builtin_expect(st == NULL, 0)) st = new_state();
    uint64_t d = st->depth++;
    if (__builtin_expect(d >= STACK_MAX, 0)) {
        st->too_deep++;
        return;
    }
    struct slot *s = lookup(st, fn);
    s->calls++;
    struct frame *f = &st->stack[d];
    f->slot = s;
    f->children = 0;
    f->t0 = __rdtsc();
}

NOINST void __cyg_profile_func_exit(void *fn, void *call_site) {
    (void)call_site;
    uint64_t t = __rdtsc();
    struct state *st = tls_state;
    if (__builtin_expect(st == NULL || st->depth == 0, 0)) return;
    uint64_t d = --st->depth;
    if (__builtin_expect(d >= STACK_MAX, 0)) return;
    struct frame *f = &st->stack[d];
    if (__builtin_expect(f->slot->fn != fn, 0)) st->mismatched++;
    uint64_t dt = t - f->t0;
    f->slot->incl += dt;
    f->slot->self += dt - f->children;
    if (d) st->stack[d - 1].children += dt;
}

NOINST __attribute__((destructor)) static void timing_hooks_report(void) {
    uint64_t dns = now_ns() - ns_start, dtsc = __rdtsc() - tsc_start;
    double ns_per_tick = dtsc ? (double)dns / (double)dtsc : 0.0;
    const char *path = getenv("TIMING_HOOKS_OUTPUT");
    FILE *out = path && *path ? fopen(path, "w") : NULL;
    uint64_t calls = 0, functions = 0, threads = 0, top = 0, too_deep = 0, mismatched = 0, full = 0;
    pthread_mutex_lock(&all_lock);
    for (struct state *st = all_states; st; st = st->next) {
        threads++;
        too_deep += st->too_deep;
        mismatched += st->mismatched;
        full += st->table_full;
        calls += st->overflow.calls;
        for (uint32_t i = 0; i < TABLE_SIZE; i++) {
            struct slot *s = &st->table[i];
            if (!s->fn) continue;
            functions++;
            calls += s->calls;
            if (s->calls > top) top = s->calls;
            if (out)
                fprintf(out, "%p %llu %.0f %.0f\n", s->fn, (unsigned long long)s->calls,
                        (double)s->incl * ns_per_tick, (double)s->self * ns_per_tick);
        }
    }
    pthread_mutex_unlock(&all_lock);
    if (out) fclose(out);
    fprintf(stderr,
            "timing_hooks: calls=%llu functions=%llu threads=%llu top=%llu too_deep=%llu mismatched=%llu "
            "table_full=%llu ns_per_tick=%.4f\n",
            (unsigned long long)(calls + too_deep), (unsigned long long)functions, (unsigned long long)threads,
            (unsigned long long)top, (unsigned long long)too_deep, (unsigned long long)mismatched,
            (unsigned long long)full, ns_per_tick);
}
