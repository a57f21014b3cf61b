/* lopi.h: C handlers for lopi (`lopi run|rewrite|attach --handler FILE.c`).
 * `lopi handler-header > lopi.h` writes this file; lopi compiles handlers against its own
 * copy, so an outdated copy beside the handler is an error, not a silent mismatch.
 *
 * A handler defines any of the callbacks below. lopi compiles it with the system's C
 * compiler (-O2, no libc, integer registers only: no floating point) and links it into the
 * probe image, where the probed program's own threads call it: lopi_enter at each probed
 * function's entry, lopi_leave at its return, lopi_syscall_enter/lopi_syscall_leave around
 * each system call, lopi_lock_acquire (an acquisition's entry), lopi_lock_contended (it
 * found its lock held), lopi_lock_acquired (it got the lock: elapsed_ns is the wait,
 * retval the function's result) and lopi_lock_release (elapsed_ns: the hold it ends) around
 * every mutex, rwlock and spinlock call of libc, lopi_thread_start in each new thread first
 * and lopi_thread_exit in each thread as it ends, and lopi_init once when the image starts,
 * before any other callback. The system-call, lock and thread callbacks need lopi run or
 * attach: those calls are libc's, which a rewritten file does not probe.
 *
 * Callbacks run on many threads at once, inside signal handlers too: keep state in
 * globals updated with __atomic builtins (lopi_add below), or per thread by lopi_tid().
 * Each probed module (the executable, a library named by --functions LIB:GLOB, each module
 * whose system calls are probed) holds its own copy of the handler and of its globals.
 * There is no libc: the helpers below make system calls directly. Thread-local variables and
 * constructors are refused; memcpy, memset, memmove and memcmp are provided.
 */
#ifndef LOPI_H
#define LOPI_H

#define LOPI_HANDLER_ABI 1
#if defined(LOPI_EXPECT_ABI) && LOPI_EXPECT_ABI != LOPI_HANDLER_ABI
#error "this lopi.h is for another version of lopi: write it again with `lopi handler-header > lopi.h`"
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct lopi_event {
    /* Entry: the six integer argument registers (rdi, rsi, rdx, rcx, r8, r9); a system
     * call's: its arguments (rdi, rsi, rdx, r10, r8, r9), at its return too; a lock event's:
     * the lock's address first. */
    uint64_t arg[6];
    /* lopi_leave: the function's rax; lopi_syscall_leave: the call's result. */
    uint64_t retval;
    /* lopi_leave and lopi_syscall_leave: nanoseconds since the matching entry; lock events:
     * the wait (acquired) or the hold (release). */
    uint64_t elapsed_ns;
    /* The probe's number in its module (a function's, or a system-call site's). */
    uint64_t index;
    uint64_t lopi_private[5];
    /* The function's name (a lock event's: the lock function's), or the system call's;
     * NULL at thread events. */
    const char *name;
    /* The function's address in the process, or the `syscall` instruction's. */
    uint64_t addr;
    /* The system call's number; UINT64_MAX at a function. */
    uint64_t nr;
};

void lopi_init(void);
void lopi_enter(const struct lopi_event *e);
void lopi_leave(const struct lopi_event *e);
void lopi_syscall_enter(const struct lopi_event *e);
void lopi_syscall_leave(const struct lopi_event *e);
void lopi_lock_acquire(const struct lopi_event *e);
void lopi_lock_acquired(const struct lopi_event *e);
void lopi_lock_release(const struct lopi_event *e);
void lopi_lock_contended(const struct lopi_event *e);
void lopi_thread_start(const struct lopi_event *e);
void lopi_thread_exit(const struct lopi_event *e);

/* Atomic addition, for counters several threads update. */
#define lopi_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

static inline long lopi_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* write(2): every byte, retrying short writes; -errno on failure. */
static inline long lopi_write(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        long n = lopi_syscall6(1, fd, (long)((const char *)buf + done), (long)(len - done), 0, 0, 0);
        if (n == -4)
            continue;
        if (n <= 0)
            return n;
        done += (size_t)n;
    }
    return (long)done;
}

static inline int lopi_tid(void) { return (int)lopi_syscall6(186, 0, 0, 0, 0, 0, 0); }
static inline int lopi_pid(void) { return (int)lopi_syscall6(39, 0, 0, 0, 0, 0, 0); }

/* CLOCK_MONOTONIC in nanoseconds (a system call: the vDSO is libc's to find). */
static inline uint64_t lopi_now_ns(void)
{
    struct { long sec, nsec; } ts = {0, 0};
    lopi_syscall6(228, 1, (long)&ts, 0, 0, 0, 0);
    return (uint64_t)ts.sec * 1000000000u + (uint64_t)ts.nsec;
}

/* The time-stamp counter: cheap, in ticks. */
static inline uint64_t lopi_ticks(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return (uint64_t)hi << 32 | lo;
}

static inline size_t lopi_strlen(const char *s)
{
    size_t n = 0;
    while (s && s[n])
        n++;
    return n;
}

static inline int lopi_streq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* snprintf without libc: %d %i %u %x %X %o %c %s %p %% with the l, ll, z and h lengths,
 * the flags - and 0 and a width. Returns the length the whole text needs, as snprintf. */
static inline int lopi_vsnprintf(char *buf, size_t cap, const char *fmt, va_list ap)
{
    size_t n = 0;
#define LOPI_PUT(ch) do { if (n + 1 < cap) buf[n] = (ch); n++; } while (0)
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            LOPI_PUT(*fmt);
            continue;
        }
        fmt++;
        int left = 0, zero = 0, width = 0, lng = 0;
        for (;; fmt++) {
            if (*fmt == '-') left = 1;
            else if (*fmt == '0') zero = 1;
            else break;
        }
        while (*fmt >= '0' && *fmt <= '9')
            width = width * 10 + (*fmt++ - '0');
        while (*fmt == 'l' || *fmt == 'z' || *fmt == 'h') {
            if (*fmt != 'h') lng = 1;
            fmt++;
        }
        char tmp[24];
        const char *text = tmp;
        size_t len = 0;
        int neg = 0;
        unsigned long long v = 0;
        unsigned base = 10;
        switch (*fmt) {
        case 'd': case 'i': {
            long long s = lng ? va_arg(ap, long long) : va_arg(ap, int);
            neg = s < 0;
            v = neg ? 0 - (unsigned long long)s : (unsigned long long)s;
            break;
        }
        case 'u': v = lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned); break;
        case 'x': case 'X': base = 16; v = lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned); break;
        case 'o': base = 8; v = lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned); break;
        case 'p': base = 16; v = (unsigned long long)(uintptr_t)va_arg(ap, void *); LOPI_PUT('0'); LOPI_PUT('x'); break;
        case 'c': tmp[0] = (char)va_arg(ap, int); len = 1; base = 0; break;
        case 's': text = va_arg(ap, const char *); if (!text) text = "(null)"; len = lopi_strlen(text); base = 0; break;
        case '%': tmp[0] = '%'; len = 1; base = 0; break;
        case '\0': fmt--; continue;
        default: tmp[0] = '%'; tmp[1] = *fmt; len = 2; base = 0; break;
        }
        if (base) {
            const char *digits = *fmt == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
            char *end = tmp + sizeof tmp, *at = end;
            do {
                *--at = digits[v % base];
                v /= base;
            } while (v);
            if (neg)
                *--at = '-';
            text = at;
            len = (size_t)(end - at);
        }
        size_t pad = (size_t)width > len ? (size_t)width - len : 0;
        if (!left && zero && base && neg) {
            LOPI_PUT('-');
            text++, len--;
        }
        for (; !left && pad; pad--)
            LOPI_PUT(zero && base ? '0' : ' ');
        for (size_t i = 0; i < len; i++)
            LOPI_PUT(text[i]);
        for (; left && pad; pad--)
            LOPI_PUT(' ');
    }
    if (cap)
        buf[n < cap ? n : cap - 1] = '\0';
#undef LOPI_PUT
    return (int)n;
}

static inline int lopi_snprintf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = lopi_vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

/* printf to file descriptor `fd` (up to 1 KiB a call, in one write). */
static inline int lopi_dprintf(int fd, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = lopi_vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    lopi_write(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    return n;
}

#define lopi_printf(...) lopi_dprintf(2, __VA_ARGS__)

#endif
