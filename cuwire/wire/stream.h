/* A session's connection as a byte stream each way, counted and kept so that a dropped connection can
 * resume (cuwire/wire/resume.py says how).
 *
 * Each side counts the bytes it has sent on the session's connection and the bytes it has received, from
 * the session's welcome on, and keeps the last bytes it sent, up to a window, in a ring. After a drop,
 * each side tells the other how many bytes it received, and sends again, from its ring, those the other
 * lacks. A peer lacks at most what was in flight when the connection dropped (both sides' socket buffers
 * and the link): a window larger than that always holds it. Where it did not, the resume fails, by name
 * (cw_stream_since), and the session ends as it would have without resume.
 *
 * The C and the Python of each side both send and receive on the connection, so both note here what they
 * send (before sending it) and what they receive; the caller serialises them (the client's wire lock, the
 * server's one session thread). Its implementation is compiled once per C module (client/wire.c; the
 * server's records module, records_build.py), which defines CW_STREAM_IMPLEMENTATION before including it.
 */
#ifndef CUWIRE_STREAM_H
#define CUWIRE_STREAM_H

#include <stdint.h>

/* cffi cdef: from here (the client's and the server's builds read these declarations) */
typedef struct cw_stream cw_stream;
cw_stream *cw_stream_new(uint64_t window);
void cw_stream_free(cw_stream *s);
void cw_stream_sent(cw_stream *s, const char *data, uint64_t n);
void cw_stream_received(cw_stream *s, uint64_t n);
uint64_t cw_stream_sent_total(const cw_stream *s);
uint64_t cw_stream_received_total(const cw_stream *s);
int cw_stream_since(const cw_stream *s, uint64_t from, const char **first, uint64_t *first_len, const char **second, uint64_t *second_len);
/* cffi cdef: to here */
#endif

#if defined(CW_STREAM_IMPLEMENTATION) && !defined(CUWIRE_STREAM_C)
#define CUWIRE_STREAM_C

#include <stdlib.h>
#include <string.h>

struct cw_stream {
    uint64_t sent, received; /* bytes of the connection's stream so far, each way */
    uint64_t window;         /* the most bytes kept */
    uint64_t cap;            /* the ring's size now: it grows, doubling, up to the window */
    uint64_t lost;           /* bytes before this are not held (the ring could not grow: no memory) */
    char *ring;              /* byte i of what was sent is at ring[i % cap] */
};

cw_stream *cw_stream_new(uint64_t window)
{
    cw_stream *s = calloc(1, sizeof *s);
    if (s)
        s->window = window;
    return s;
}

void cw_stream_free(cw_stream *s)
{
    if (s)
        free(s->ring);
    free(s);
}

static uint64_t cw_stream_held(const cw_stream *s) /* how many of the last bytes sent the ring holds */
{
    uint64_t held = s->sent < s->cap ? s->sent : s->cap;
    uint64_t since_lost = s->sent - s->lost;
    return held < since_lost ? held : since_lost;
}

/* The ring at least `need` bytes large (at most the window), the bytes it held kept at their places. */
static int cw_stream_grow(cw_stream *s, uint64_t need)
{
    if (need <= s->cap || s->cap >= s->window)
        return 0;
    uint64_t cap = s->cap ? s->cap : 64u << 10;
    while (cap < need)
        cap *= 2;
    if (cap > s->window)
        cap = s->window;
    char *ring = malloc(cap);
    if (!ring)
        return -1;
    /* the held bytes, from their places in the old ring to theirs in the new one, in spans that wrap in
     * neither (at most three): a byte at a time, with two divisions each, cost a program that sends a few
     * hundred KB a step over a millisecond a step while its ring grew to the window (64 MB by default) */
    for (uint64_t i = s->sent - cw_stream_held(s); i < s->sent;) {
        uint64_t from = i % s->cap, to = i % cap, n = s->sent - i;
        if (n > s->cap - from)
            n = s->cap - from;
        if (n > cap - to)
            n = cap - to;
        memcpy(ring + to, s->ring + from, n);
        i += n;
    }
    free(s->ring);
    s->ring = ring;
    s->cap = cap;
    return 0;
}

void cw_stream_sent(cw_stream *s, const char *data, uint64_t n)
{
    if (!s || !n)
        return;
    if (s->window == 0) {
        s->sent += n;
        s->lost = s->sent;
        return;
    }
    if (cw_stream_grow(s, cw_stream_held(s) + n) != 0) {
        s->sent += n;
        s->lost = s->sent; /* nothing before here can be sent again */
        return;
    }
    if (n > s->cap) { /* only its last cap bytes can be kept */
        data += n - s->cap;
        s->sent += n - s->cap;
        n = s->cap;
    }
    uint64_t at = s->sent % s->cap, first = n < s->cap - at ? n : s->cap - at;
    memcpy(s->ring + at, data, first);
    memcpy(s->ring, data + first, n - first);
    s->sent += n;
}

void cw_stream_received(cw_stream *s, uint64_t n)
{
    if (s)
        s->received += n;
}

uint64_t cw_stream_sent_total(const cw_stream *s) { return s ? s->sent : 0; }

uint64_t cw_stream_received_total(const cw_stream *s) { return s ? s->received : 0; }

/* The bytes sent from stream offset `from` on, as at most two spans of the ring: 0; or -1 when the ring
 * no longer holds them all (more were in flight than the window), or `from` is past what was sent. */
int cw_stream_since(const cw_stream *s, uint64_t from, const char **first, uint64_t *first_len, const char **second,
                    uint64_t *second_len)
{
    *first = *second = NULL;
    *first_len = *second_len = 0;
    if (!s || from > s->sent || s->sent - from > cw_stream_held(s))
        return -1;
    uint64_t n = s->sent - from;
    if (!n)
        return 0;
    uint64_t at = from % s->cap, k = n < s->cap - at ? n : s->cap - at;
    *first = s->ring + at;
    *first_len = k;
    *second = s->ring;
    *second_len = n - k;
    return 0;
}
#endif
