/* bench/agent's load: CONNS threads, each with its own connection to the server, send a request
 * and wait for its reply, as fast as they can, for SECONDS.
 *
 *   client PORT CONNS SECONDS [KEYS]
 *
 * Prints "requests=N seconds=S rps=R errors=E" (S from when every connection is open to when the
 * last thread stops). A reply must be "OK KEY ..." and end with the request's sequence number;
 * one that does not is an error and ends its thread. Exits 1 on an error. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct worker {
    pthread_t thread;
    int fd;
    unsigned id;
    unsigned long requests, errors;
};

static pthread_barrier_t ready;
static double deadline, started;
static unsigned keys = 1000;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A reply line into BUF (without its newline); its length, or -1. */
static int read_line(int fd, char *buf, size_t size) {
    size_t have = 0;
    while (have < size) {
        ssize_t n = read(fd, buf + have, size - have);
        if (n <= 0)
            return -1;
        have += (size_t)n;
        if (buf[have - 1] == '\n')
            return (int)have - 1;
    }
    return -1;
}

static void *run(void *arg) {
    struct worker *w = arg;
    char req[64], reply[256], key[16];
    unsigned long seq = 0;
    unsigned x = w->id * 2654435761u + 1;
    pthread_barrier_wait(&ready);
    while (now() < deadline) {
        x = x * 1103515245u + 12345u;
        snprintf(key, sizeof key, "k%05u", (x >> 8) % keys);
        int len = (seq & 1) ? snprintf(req, sizeof req, "ADD %s %u %lu\n", key, (x >> 4) % 7 + 1, seq)
                            : snprintf(req, sizeof req, "GET %s %lu\n", key, seq);
        if (write(w->fd, req, (size_t)len) != len) {
            w->errors++;
            break;
        }
        int n = read_line(w->fd, reply, sizeof reply - 1);
        char tail[24];
        int tail_len = snprintf(tail, sizeof tail, " %lu", seq);
        size_t klen = strlen(key);
        if (n < 3 + (int)klen || memcmp(reply, "OK ", 3) != 0 || memcmp(reply + 3, key, klen) != 0 ||
            n < tail_len || memcmp(reply + n - tail_len, tail, (size_t)tail_len) != 0) {
            w->errors++;
            break;
        }
        w->requests++;
        seq++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: client PORT CONNS SECONDS [KEYS]\n");
        return 2;
    }
    int port = atoi(argv[1]), conns = atoi(argv[2]);
    double seconds = atof(argv[3]);
    if (argc > 4)
        keys = (unsigned)atoi(argv[4]);
    struct worker *ws = calloc((size_t)conns, sizeof *ws);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < conns; i++) {
        int one = 1;
        ws[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        ws[i].id = (unsigned)i;
        if (connect(ws[i].fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            perror("client: connect");
            return 1;
        }
        setsockopt(ws[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    /* The timed span starts once every thread exists; the barrier publishes the deadline to them. */
    pthread_barrier_init(&ready, NULL, (unsigned)conns + 1);
    for (int i = 0; i < conns; i++)
        pthread_create(&ws[i].thread, NULL, run, &ws[i]);
    started = now();
    deadline = started + seconds;
    pthread_barrier_wait(&ready);
    unsigned long requests = 0, errors = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(ws[i].thread, NULL);
        requests += ws[i].requests;
        errors += ws[i].errors;
        close(ws[i].fd);
    }
    double took = now() - started;
    printf("requests=%lu seconds=%.3f rps=%.0f errors=%lu\n", requests, took, (double)requests / took, errors);
    return errors ? 1 : 0;
}
