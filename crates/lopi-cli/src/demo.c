/* lopi's built-in example: a little word-frequency program with recursion, a sort
 * callback, and a helper called in a loop. `lopi demo` builds it, rewrites it, runs it
 * and shows how often each function ran and how long it took. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *text =
    "the quick brown fox jumps over the lazy dog and the dog sleeps while the fox runs "
    "far over the hills and the quick fox finds the lazy dog again";

struct word { char s[16]; int n; };

__attribute__((noinline)) static int is_sep(char c) { return c == ' ' || c == '\0'; }

__attribute__((noinline)) static struct word *find(struct word *w, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (strcmp(w[i].s, s) == 0) return &w[i];
    return NULL;
}

__attribute__((noinline)) static int by_count(const void *a, const void *b) {
    const struct word *x = a, *y = b;
    return y->n != x->n ? y->n - x->n : strcmp(x->s, y->s);
}

__attribute__((noinline)) static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(void) {
    struct word words[64];
    int n = 0, len = 0;
    char cur[16];
    for (const char *p = text;; p++) {
        if (is_sep(*p)) {
            cur[len] = '\0';
            struct word *w = find(words, n, cur);
            if (w) w->n++;
            else if (len) { strcpy(words[n].s, cur); words[n++].n = 1; }
            len = 0;
            if (!*p) break;
        } else if (len < 15) {
            cur[len++] = *p;
        }
    }
    qsort(words, n, sizeof words[0], by_count);
    for (int i = 0; i < 3; i++) printf("%-6s %d\n", words[i].s, words[i].n);
    printf("fib(20) = %ld\n", fib(20));
    return 0;
}
