// delay_link: a TCP forwarder that delays every byte by a fixed time each way, so that a client and a server
// on one host talk as across a network with that latency (the GPU hosts have no tc), and with RATE_MBIT,
// through a link of that rate. bench/distance.sh runs it between cuwire's client and server for latency,
// bench/link_rate.sh for bandwidth.
//
//   delay_link LISTEN_PORT TARGET_PORT DELAY_US [RATE_MBIT]   (both on 127.0.0.1; prints "listening on PORT")
//
// Each accepted connection gets its own connection to the target and two directions, each a reader thread
// that stamps what it reads with the time it is due (now + DELAY_US) and a writer thread that sends it then,
// in order. Without RATE_MBIT bandwidth is not limited: this models latency only. With it, every
// connection's bytes in one direction share one link of that rate, as a router's outgoing port: what a
// reader reads is put on the link when the link is free (its clock, wire_free), crosses it at the rate,
// and is due DELAY_US after its last byte left; a direction holds at most the link's bytes in flight and
// QUEUE_MOST more, so a sender faster than the link waits (TCP's own back-pressure), as at a real link.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long delay_ns;
#define CHUNK (1u << 20) /* the most one read takes: a large copy crosses in few chunks */
#define QUEUE_MOST (4u << 20) /* the link's buffer, past the bytes in flight (RATE_MBIT given) */

static double ns_per_byte;     /* 0: no rate limit */
static size_t direction_most;  /* with a rate: the bytes one direction may hold, in flight and queued */
static pthread_mutex_t wire_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t wire_free[2];  /* per way (0: towards the target, 1: back): when the link is next free */

struct chunk {
    struct chunk *next;
    uint64_t due;
    size_t len;
    char data[];
};

struct link;
struct direction {
    int from, to, way;
    pthread_mutex_t lock;
    pthread_cond_t ready, room;
    size_t held; /* bytes read and not yet sent */
    struct chunk *head, *tail;
    int ended;
    struct link *link;
};

/* A connection: its two directions; the last of their four threads to end closes both sockets. */
struct link {
    struct direction way[2];
    pthread_mutex_t lock;
    int threads;
};

static void thread_ends(struct link *l)
{
    pthread_mutex_lock(&l->lock);
    int last = --l->threads == 0;
    pthread_mutex_unlock(&l->lock);
    if (last) {
        close(l->way[0].from);
        close(l->way[0].to);
        for (int i = 0; i < 2; i++) /* (ended: every chunk was sent or freed) */
            pthread_mutex_destroy(&l->way[i].lock), pthread_cond_destroy(&l->way[i].ready),
                pthread_cond_destroy(&l->way[i].room);
        pthread_mutex_destroy(&l->lock);
        free(l);
    }
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* When bytes read now are due at the other end: after the delay, and with a rate, once the link carried
 * them behind everything read before them in this direction, of any connection. */
static uint64_t due_at(int way, size_t len)
{
    uint64_t now = now_ns();
    if (ns_per_byte <= 0)
        return now + (uint64_t)delay_ns;
    pthread_mutex_lock(&wire_lock);
    uint64_t start = wire_free[way] > now ? wire_free[way] : now;
    wire_free[way] = start + (uint64_t)((double)len * ns_per_byte);
    uint64_t left = wire_free[way];
    pthread_mutex_unlock(&wire_lock);
    return left + (uint64_t)delay_ns;
}

static void *reader(void *arg)
{
    struct direction *d = arg;
    for (;;) {
        if (direction_most) { /* the link and its buffer are full: wait, so that the sender does */
            pthread_mutex_lock(&d->lock);
            while (d->held >= direction_most)
                pthread_cond_wait(&d->room, &d->lock);
            pthread_mutex_unlock(&d->lock);
        }
        struct chunk *c = malloc(sizeof *c + CHUNK);
        if (!c)
            break;
        ssize_t n = recv(d->from, c->data, CHUNK, 0);
        if (n < 0 && errno == EINTR) {
            free(c);
            continue;
        }
        if (n <= 0) {
            free(c);
            break;
        }
        struct chunk *smaller = realloc(c, sizeof *c + (size_t)n); /* (queued chunks hold what they read) */
        if (smaller)
            c = smaller;
        c->len = (size_t)n;
        c->due = due_at(d->way, c->len);
        c->next = NULL;
        pthread_mutex_lock(&d->lock);
        d->held += c->len;
        if (d->tail)
            d->tail->next = c;
        else
            d->head = c;
        d->tail = c;
        pthread_cond_signal(&d->ready);
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_lock(&d->lock);
    d->ended = 1;
    pthread_cond_signal(&d->ready);
    pthread_mutex_unlock(&d->lock);
    thread_ends(d->link);
    return NULL;
}

static void *writer(void *arg)
{
    struct direction *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->lock);
        while (!d->head && !d->ended)
            pthread_cond_wait(&d->ready, &d->lock);
        struct chunk *c = d->head;
        if (c) {
            d->head = c->next;
            if (!d->head)
                d->tail = NULL;
            d->held -= c->len;
            pthread_cond_signal(&d->room);
        }
        pthread_mutex_unlock(&d->lock);
        if (!c)
            break; /* ended, and everything sent */
        if (c->due > now_ns()) {
            struct timespec due = {(time_t)(c->due / 1000000000u), (long)(c->due % 1000000000u)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
                ;
        }
        for (size_t off = 0; off < c->len;) {
            ssize_t n = send(d->to, c->data + off, c->len - off, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                free(c);
                /* the other side is gone: end this direction, and the connection with a reset once both
                 * directions ended (a plain close of a socket whose window a full link closed leaves its
                 * sender probing that window for a minute) */
                struct linger reset = {.l_onoff = 1, .l_linger = 0};
                setsockopt(d->from, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
                shutdown(d->from, SHUT_RDWR);
                pthread_mutex_lock(&d->lock); /* (what its reader queued until it ends; a reader waiting */
                for (;;) {                    /* for room gets it, and finds its socket shut) */
                    while ((c = d->head)) {
                        d->head = c->next;
                        free(c);
                    }
                    d->tail = NULL;
                    d->held = 0;
                    pthread_cond_signal(&d->room);
                    if (d->ended)
                        break;
                    pthread_cond_wait(&d->ready, &d->lock);
                }
                pthread_mutex_unlock(&d->lock);
                thread_ends(d->link);
                return NULL;
            }
            off += (size_t)n;
        }
        free(c);
    }
    shutdown(d->to, SHUT_WR);
    thread_ends(d->link);
    return NULL;
}

static void start(struct link *l, int way, int from, int to)
{
    struct direction *d = &l->way[way];
    d->link = l;
    d->way = way;
    d->from = from;
    d->to = to;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->ready, NULL);
    pthread_cond_init(&d->room, NULL);
    pthread_t t;
    pthread_create(&t, NULL, reader, d);
    pthread_detach(t);
    pthread_create(&t, NULL, writer, d);
    pthread_detach(t);
}

static int nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: delay_link LISTEN_PORT TARGET_PORT DELAY_US [RATE_MBIT]\n");
        return 2;
    }
    delay_ns = atol(argv[3]) * 1000;
    double mbit = argc == 5 ? atof(argv[4]) : 0;
    if (mbit > 0) {
        ns_per_byte = 8e3 / mbit; /* 8 bits a byte, 1e9 ns / (mbit * 1e6 bit/s) */
        direction_most = (size_t)((double)delay_ns / ns_per_byte) + QUEUE_MOST;
    }
    prctl(PR_SET_TIMERSLACK, 1UL); /* sleeps end when due, not up to 50 us later */
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    struct sockaddr_in target = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    inet_pton(AF_INET, "127.0.0.1", &at.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &target.sin_addr);
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener, (struct sockaddr *)&at, sizeof at) || listen(listener, 64)) {
        perror("delay_link: listen");
        return 1;
    }
    socklen_t len = sizeof at;
    getsockname(listener, (struct sockaddr *)&at, &len);
    printf("listening on %d, delaying by %ld us each way", ntohs(at.sin_port), delay_ns / 1000);
    if (mbit > 0)
        printf(", %g Mbit/s each way", mbit);
    printf("\n");
    fflush(stdout);
    for (;;) {
        int client = accept(listener, NULL, NULL);
        if (client < 0) {
            if (errno == EINTR)
                continue;
            perror("delay_link: accept");
            return 1;
        }
        int server = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(server, (struct sockaddr *)&target, sizeof target)) {
            perror("delay_link: connect");
            close(client);
            close(server);
            continue;
        }
        nodelay(client);
        nodelay(server);
        struct link *l = calloc(1, sizeof *l);
        if (!l) {
            close(client);
            close(server);
            continue;
        }
        pthread_mutex_init(&l->lock, NULL);
        l->threads = 4;
        start(l, 0, client, server);
        start(l, 1, server, client);
    }
}
