/* bench/agent's server: a small key-value service over TCP, one thread per connection.
 *
 *   server PORT [KEYS]     (PORT 0: any free port; prints "port N" once it listens)
 *   server --selftest N    (N requests through the handler without sockets; prints ns/request)
 *
 * A request is a line, "GET KEY SEQ" or "ADD KEY N SEQ"; the reply is "OK KEY COUNT CRC SEQ".
 * Every key has a 1 KiB value whose CRC-32 each reply carries (what a cache that checks its
 * entries does), so that a request is ~1-5 us of the server's own work in ~25 calls of the
 * functions below (noinline and external, so gcc neither inlines nor clones them: each call is
 * one a probe sees) besides the read and the write. The table has a lock per stripe of buckets. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define BUCKETS 1024
#define STRIPES 64
#define VALUE_BYTES 1024
#define CHUNK 128
#define LINE_MAX_BYTES 256

struct entry {
    struct entry *next;
    uint64_t hash;
    uint64_t count;
    char key[32];
    unsigned char value[VALUE_BYTES];
};

struct request {
    const char *op, *key, *n, *seq;
    size_t op_len, key_len, n_len, seq_len;
};

static struct entry *buckets[BUCKETS];
static pthread_mutex_t stripes[STRIPES];
static uint32_t crc_table[256];

NOINLINE const char *next_token(const char *p, const char *end, const char **start, size_t *len) {
    while (p < end && *p == ' ')
        p++;
    *start = p;
    while (p < end && *p != ' ')
        p++;
    *len = (size_t)(p - *start);
    return p;
}

NOINLINE uint64_t parse_uint(const char *s, size_t len) {
    uint64_t v = 0;
    for (size_t i = 0; i < len && s[i] >= '0' && s[i] <= '9'; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    return v;
}

/* 0 when the line is a request, -1 when not. */
NOINLINE int parse_request(const char *line, size_t len, struct request *r) {
    const char *end = line + len, *p = line;
    memset(r, 0, sizeof *r);
    p = next_token(p, end, &r->op, &r->op_len);
    p = next_token(p, end, &r->key, &r->key_len);
    if (r->op_len == 3 && memcmp(r->op, "ADD", 3) == 0)
        p = next_token(p, end, &r->n, &r->n_len);
    next_token(p, end, &r->seq, &r->seq_len);
    if (r->key_len == 0 || r->key_len >= sizeof(((struct entry *)0)->key) || r->seq_len == 0)
        return -1;
    return 0;
}

/* FNV-1a. */
NOINLINE uint64_t hash_key(const char *key, size_t len) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

NOINLINE int key_equal(const struct entry *e, uint64_t hash, const char *key, size_t len) {
    return e->hash == hash && strlen(e->key) == len && memcmp(e->key, key, len) == 0;
}

NOINLINE void fill_value(struct entry *e) {
    uint64_t x = e->hash | 1;
    for (size_t i = 0; i < VALUE_BYTES; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        e->value[i] = (unsigned char)x;
    }
}

NOINLINE struct entry *new_entry(uint64_t hash, const char *key, size_t len) {
    struct entry *e = calloc(1, sizeof *e);
    if (!e)
        abort();
    e->hash = hash;
    memcpy(e->key, key, len);
    fill_value(e);
    return e;
}

/* The entry of KEY, made on first use; its stripe's lock held by the caller. */
NOINLINE struct entry *table_get(uint64_t hash, const char *key, size_t len) {
    struct entry **b = &buckets[hash % BUCKETS];
    for (struct entry *e = *b; e; e = e->next)
        if (key_equal(e, hash, key, len))
            return e;
    struct entry *e = new_entry(hash, key, len);
    e->next = *b;
    *b = e;
    return e;
}

/* ADD N also stirs N into the value, so that its checksum changes. */
NOINLINE void entry_apply(struct entry *e, const struct request *r) {
    uint64_t n = r->n_len ? parse_uint(r->n, r->n_len) : 0;
    e->count += n ? n : 1;
    if (n)
        e->value[e->count % VALUE_BYTES] ^= (unsigned char)n;
}

NOINLINE uint32_t crc32_chunk(uint32_t crc, const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

NOINLINE uint32_t value_crc(const struct entry *e) {
    uint32_t crc = 0xffffffffu;
    for (size_t off = 0; off < VALUE_BYTES; off += CHUNK)
        crc = crc32_chunk(crc, e->value + off, CHUNK);
    return ~crc;
}

NOINLINE char *put_str(char *out, const char *s, size_t len) {
    memcpy(out, s, len);
    return out + len;
}

NOINLINE char *put_uint(char *out, uint64_t v) {
    char tmp[24];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0)
        *out++ = tmp[--n];
    return out;
}

NOINLINE char *put_hex(char *out, uint32_t v) {
    static const char digits[] = "0123456789abcdef";
    for (int shift = 28; shift >= 0; shift -= 4)
        *out++ = digits[(v >> shift) & 0xf];
    return out;
}

NOINLINE size_t format_reply(char *out, const struct request *r, uint64_t count, uint32_t crc) {
    char *p = put_str(out, "OK ", 3);
    p = put_str(p, r->key, r->key_len);
    *p++ = ' ';
    p = put_uint(p, count);
    *p++ = ' ';
    p = put_hex(p, crc);
    *p++ = ' ';
    p = put_str(p, r->seq, r->seq_len);
    *p++ = '\n';
    return (size_t)(p - out);
}

/* One request line (without its newline) to its reply in OUT; the reply's length. */
NOINLINE size_t handle_request(const char *line, size_t len, char *out) {
    struct request r;
    if (parse_request(line, len, &r) != 0)
        return (size_t)(put_str(out, "ERR\n", 4) - out);
    uint64_t h = hash_key(r.key, r.key_len);
    pthread_mutex_t *lock = &stripes[h % STRIPES];
    pthread_mutex_lock(lock);
    struct entry *e = table_get(h, r.key, r.key_len);
    entry_apply(e, &r);
    uint64_t count = e->count;
    uint32_t crc = value_crc(e);
    pthread_mutex_unlock(lock);
    return format_reply(out, &r, count, crc);
}

static int write_all(int fd, const char *p, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n <= 0)
            return -1;
        p += n, len -= (size_t)n;
    }
    return 0;
}

/* A connection's thread: its requests, replies written as each line is whole. */
static void *serve(void *arg) {
    int fd = (int)(intptr_t)arg;
    char in[4096], out[4 * LINE_MAX_BYTES];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, in + have, sizeof in - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        size_t start = 0;
        char *nl;
        while ((nl = memchr(in + start, '\n', have - start)) != NULL) {
            size_t len = (size_t)(nl - (in + start));
            size_t m = handle_request(in + start, len < LINE_MAX_BYTES ? len : LINE_MAX_BYTES, out);
            if (write_all(fd, out, m) != 0)
                goto done;
            start += len + 1;
        }
        memmove(in, in + start, have - start);
        have -= start;
        if (have == sizeof in) /* a line longer than the buffer: not a client of ours */
            break;
    }
done:
    close(fd);
    return NULL;
}

static void init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripes[i], NULL);
}

static int selftest(long n) {
    char line[64], out[4 * LINE_MAX_BYTES];
    unsigned long sum = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        int len = (i & 1) ? snprintf(line, sizeof line, "ADD k%05ld 3 %ld", i % 1000, i)
                          : snprintf(line, sizeof line, "GET k%05ld %ld", i % 1000, i);
        sum += handle_request(line, (size_t)len, out);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("selftest requests=%ld ns_per_request=%.0f bytes=%lu\n", n, ns / (double)n, sum);
    return 0;
}

int main(int argc, char **argv) {
    init_tables();
    if (argc == 3 && strcmp(argv[1], "--selftest") == 0)
        return selftest(atol(argv[2]));
    if (argc != 2) {
        fprintf(stderr, "usage: server PORT | server --selftest N\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 64) != 0 ||
        getsockname(ls, (struct sockaddr *)&addr, &alen) != 0) {
        perror("server: listen");
        return 1;
    }
    printf("port %d\n", ntohs(addr.sin_port));
    fflush(stdout);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
}
