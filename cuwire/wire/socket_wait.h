/* How cuwire's C waits for its peer on a socket, client (client/wire.c) and server (server/records.c) alike:
 * it polls the socket for a while before it sleeps in recv. On the H100 host a loopback round trip that
 * sleeps costs 21 us (p50), one that polls 8.7 us; over a Unix socket 13 and 4.3 us (build/probe). The
 * poll is bounded (CUWIRE_SPIN_US, settings.py), so a peer that is slow to answer costs that much CPU
 * time, not more; and both sides skip it where the same wait last took longer than the poll would last
 * (a call that waits for the GPU's work, a program that computes between calls), so that its threads keep
 * every core. */
#ifndef CUWIRE_SOCKET_WAIT_H
#define CUWIRE_SOCKET_WAIT_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

static inline uint64_t cw_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* recv(fd, buf, len, 0), the socket polled for up to spin_ns nanoseconds before the call sleeps. */
static inline ssize_t cw_recv_spin(int fd, void *buf, size_t len, long spin_ns)
{
    struct timespec start = {0, 0};
    for (int tries = 0; spin_ns > 0; tries++) {
        ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return n;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (tries == 0)
            start = t;
        else if ((t.tv_sec - start.tv_sec) * 1000000000L + (t.tv_nsec - start.tv_nsec) >= spin_ns)
            break;
    }
    return recv(fd, buf, len, 0);
}

#endif
