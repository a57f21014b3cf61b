/* bench/locks' cost per uncontended lock: N pthread_mutex_lock + pthread_mutex_unlock pairs on one
 * mutex in one thread, timed in-process around the loop only (clock_gettime(CLOCK_MONOTONIC), the
 * vDSO), so that a tool's start-up and exit are not counted. No other thread ever exists: every
 * lock call takes the uncontended fast path (one atomic compare-and-exchange), and every unlock
 * finds no waiter, so the loop is the cheapest lock traffic a program can make.
 *
 *   pair N    prints `pairs N ns <loop time> ns_per_pair <loop time / N>` */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter; /* the critical section: one increment the compiler must keep */

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        counter++;
        pthread_mutex_unlock(&lock);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
    printf("pairs %ld ns %ld ns_per_pair %.2f\n", n, ns, n ? (double)ns / n : 0.0);
    return counter != n;
}
