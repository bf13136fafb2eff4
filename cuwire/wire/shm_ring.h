/* Shared memory between a client and a server on the same host: a ring of slots that carries frames'
 * payloads (the bulk bytes of large copies) instead of the socket (cuwire/wire/ring.py says when).
 *
 * The server makes the memory (a memfd, registered with the driver so the GPU copies straight from and
 * into it) and hands its descriptor to the client with the welcome. The frames themselves still go on the
 * session's Unix socket; only their payload bytes go through the ring, in slots. One side writes a
 * payload at a time (request, then reply), so one pair of counters serves both directions:
 *
 *   filled   slots published by the side sending a payload (each with its byte count in lengths[])
 *   freed    slots given back by the side receiving it, in order
 *
 * A writer waits while all slots are full (filled - freed == nslots), a reader while its next slot is not
 * published. Waits spin briefly, then sleep on a futex of the counter (the memory is shared, so the peer's
 * wake reaches us), and check every few milliseconds that the peer still holds the socket: a peer that
 * died mid-payload ends the wait with an error, never a hang.
 *
 * Its implementation is compiled once per C module (client/wire.c; the server's records module,
 * records_build.py), which defines CW_RING_IMPLEMENTATION before including it. The peer is
 * not trusted: lengths it publishes are checked against the slot size, counters against the ring's size.
 */
#ifndef CUWIRE_SHM_RING_H
#define CUWIRE_SHM_RING_H

#include <stdint.h>

/* cffi cdef: from here (the client's and the server's builds read these declarations) */
typedef struct cw_ring cw_ring;
cw_ring *cw_ring_open(void *base, uint64_t size, int fd, int create, uint64_t slot_size, long spin_ns);
void cw_ring_close(cw_ring *r);
uint32_t cw_ring_slots(const cw_ring *r);
uint64_t cw_ring_slot_size(const cw_ring *r);
int cw_ring_write(cw_ring *r, const char *src, uint64_t n);
int cw_ring_flush(cw_ring *r);
int cw_ring_claim(cw_ring *r, char **ptr);
int cw_ring_publish(cw_ring *r, uint64_t n);
void cw_ring_begin_read(cw_ring *r);
int cw_ring_read(cw_ring *r, char *dst, uint64_t n);
int cw_ring_acquire(cw_ring *r, char **ptr, uint64_t *len);
void cw_ring_release(cw_ring *r, uint32_t count);
uint64_t cw_ring_lengths_offset(void);
int cw_ring_post_callback(cw_ring *r, uint64_t id);
int cw_ring_next_callback(cw_ring *r, uint64_t *id);
void cw_ring_callback_done(cw_ring *r);
void cw_ring_stop_callbacks(cw_ring *r);
void cw_ring_resume(cw_ring *r, uint64_t nanoseconds, int peer_pid);
uint64_t cw_reserve(uint64_t size);
uint64_t cw_reserve_at(uint64_t address, uint64_t size);
uint64_t cw_map_shared(int fd, uint64_t size, uint64_t address, int replace);
uint64_t cw_map_shared_over(int fd, uint64_t offset, uint64_t size, uint64_t address);
int cw_hold_over(uint64_t address, uint64_t size);
int cw_map_private_over(uint64_t address, uint64_t size);
int cw_unmap(uint64_t address, uint64_t size);
int cw_release_pages(uint64_t address, uint64_t size);
/* cffi cdef: to here */
#endif

/* The implementation, in the one file of a module that defines CW_RING_IMPLEMENTATION before including this. */
#if defined(CW_RING_IMPLEMENTATION) && !defined(CUWIRE_SHM_RING_C)
#define CUWIRE_SHM_RING_C

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CW_RING_MAGIC 0x474e4952u /* "RING" */
#define CW_RING_WAKE_CHECK_NS 5000000L /* how often a sleeping wait looks at the socket */
#define CW_CB_SLOTS 64                 /* host functions posted and not yet run, at most */

struct cw_ring_header { /* at the start of the shared memory; both processes write it */
    uint32_t magic, nslots;
    uint64_t slot_size, data_offset;
    char pad0[40];
    uint32_t filled; /* own cache lines: the two sides write these */
    char pad1[60];
    uint32_t freed;
    char pad2[60];
    /* host functions the GPU's streams reached (cuLaunchHostFunc, cuStreamAddCallback): the server posts
     * each one's id and waits; a thread of the client's runs it and says it is done */
    uint32_t cb_posted;
    char pad3[60];
    uint32_t cb_done;
    char pad4[60];
    uint64_t cb_ids[CW_CB_SLOTS];
    uint64_t lengths[]; /* bytes published in each slot */
};

struct cw_ring {
    struct cw_ring_header *h;
    char *data;
    uint32_t nslots;
    uint64_t slot_size;
    int fd;       /* the session's socket: a peer that closed it is gone */
    long spin_ns; /* how long a wait spins before it sleeps */
    uint64_t w_off; /* writer: bytes in the slot being filled (slot `filled`), not published yet */
    uint32_t r_next; /* reader: the next slot to read or acquire */
    uint64_t r_off, r_len; /* bytes read of slot r_next, and its length, while one is being read */
    pthread_mutex_t cb_lock; /* the server's side: host functions of several streams post one at a time */
    uint32_t cb_seen;        /* the client's side: host functions run so far */
    int cb_stop;             /* its callback waits are to end (cw_ring_stop_callbacks) */
    uint64_t resume_ns;      /* a socket that hung up counts as a gone peer for host functions only after this
                              * long: the session's connection may resume meanwhile (cw_ring_resume) */
    uint64_t hup_since;      /* when the socket was first seen hung up (CLOCK_MONOTONIC ns; 0: it was not) */
    int peer_pid;            /* the peer's process where known (the server's view of its client): gone, it is */
};

/* Large copies in and out of the ring are split over helper threads: one thread's memcpy moves 7-8 GB/s on
 * the H100 host, below what the driver's own staging of pageable memory reaches (10-18 GB/s there), and two
 * reached 12-16. CW_HELPERS helpers per process, started at the first large copy (again in a forked
 * child); each part is at least CW_PART_MIN bytes; a copy that finds them busy (another session's, with
 * thread isolation) goes alone. */
#define CW_SPLIT_MIN (1u << 20)
#define CW_PART_MIN (512u << 10)
#define CW_HELPERS 3
struct cw_helper {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int posted; /* 1: a part to copy; 2: copied */
    char *dst;
    const char *src;
    size_t n;
};
static struct {
    pthread_mutex_t busy;
    pid_t pid; /* the process whose helpers run: a forked child starts its own */
    int started;
    struct cw_helper h[CW_HELPERS];
} cw_helpers = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {{PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, NULL, 0}}};

static void *cw_helper_main(void *arg)
{
    struct cw_helper *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->posted != 1)
            pthread_cond_wait(&h->cond, &h->lock);
        pthread_mutex_unlock(&h->lock);
        memcpy(h->dst, h->src, h->n);
        pthread_mutex_lock(&h->lock);
        h->posted = 2;
        pthread_cond_broadcast(&h->cond);
    }
    return NULL;
}

/* Helpers for this process, started at its first large copy: how many run. */
static int cw_start_helpers(void)
{
    if (cw_helpers.pid == getpid())
        return cw_helpers.started;
    cw_helpers.started = 0;
    for (int i = 0; i < CW_HELPERS; i++) {
        struct cw_helper *h = &cw_helpers.h[i];
        pthread_mutex_init(&h->lock, NULL); /* a fork may have copied it held */
        pthread_cond_init(&h->cond, NULL);
        h->posted = 0;
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&t, &attr, cw_helper_main, h) == 0;
        pthread_attr_destroy(&attr);
        if (!ok)
            break;
        cw_helpers.started++;
    }
    cw_helpers.pid = getpid();
    return cw_helpers.started;
}

static void cw_copy(char *dst, const char *src, size_t n)
{
    if (n < CW_SPLIT_MIN || pthread_mutex_trylock(&cw_helpers.busy) != 0) {
        memcpy(dst, src, n);
        return;
    }
    int helpers = cw_start_helpers();
    size_t parts = n / CW_PART_MIN < (size_t)helpers + 1 ? n / CW_PART_MIN : (size_t)helpers + 1;
    size_t part = parts > 1 ? (n / parts) & ~(size_t)63 : n;
    for (size_t i = 1; i < parts; i++) { /* the helpers take the parts after the first */
        struct cw_helper *h = &cw_helpers.h[i - 1];
        pthread_mutex_lock(&h->lock);
        h->dst = dst + i * part;
        h->src = src + i * part;
        h->n = i + 1 < parts ? part : n - i * part;
        h->posted = 1;
        pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
    }
    memcpy(dst, src, parts > 1 ? part : n);
    for (size_t i = 1; i < parts; i++) {
        struct cw_helper *h = &cw_helpers.h[i - 1];
        pthread_mutex_lock(&h->lock);
        while (h->posted != 2)
            pthread_cond_wait(&h->cond, &h->lock);
        h->posted = 0;
        pthread_mutex_unlock(&h->lock);
    }
    pthread_mutex_unlock(&cw_helpers.busy);
}

static inline uint32_t cw_load(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

static inline void cw_store_wake(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
    syscall(SYS_futex, p, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline long cw_elapsed_ns(const struct timespec *start)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - start->tv_sec) * 1000000000L + (t.tv_nsec - start->tv_nsec);
}

/* 0 while the peer holds the socket, -1 (errno ECONNRESET) once it closed it or the connection broke. */
static int cw_ring_peer_alive(const cw_ring *r)
{
    if (r->fd < 0)
        return 0;
    struct pollfd p = {r->fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
        errno = ECONNRESET;
        return -1;
    }
    return 0;
}

/* Until the ring lets a writer (want_free) or the reader at slot r_next go on: 0, or -1 when the peer is
 * gone, or -2 when the counters cannot be (a peer that wrote nonsense). */
static int cw_ring_wait(cw_ring *r, int want_free)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int spins = 0;; spins++) {
        uint32_t filled = cw_load(&r->h->filled), freed = cw_load(&r->h->freed);
        uint32_t busy = filled - freed;
        if (busy > r->nslots)
            return -2;
        if (want_free ? busy < r->nslots : (int32_t)(filled - r->r_next) > 0)
            return 0;
        if (spins & 63 || cw_elapsed_ns(&start) < r->spin_ns)
            continue;
        if (cw_ring_peer_alive(r) != 0)
            return -1;
        /* sleep until the counter we wait on moves (or a while passes: then look at the socket again) */
        uint32_t *word = want_free ? &r->h->freed : &r->h->filled;
        uint32_t seen = want_free ? freed : filled;
        struct timespec timeout = {0, CW_RING_WAKE_CHECK_NS};
        syscall(SYS_futex, word, FUTEX_WAIT, seen, &timeout, NULL, 0);
    }
}

/* The ring in `size` bytes at base. create: lay it out (the server, which made the memory), slots of
 * slot_size; else check the layout the peer made. NULL when it does not fit or is not a ring. */
cw_ring *cw_ring_open(void *base, uint64_t size, int fd, int create, uint64_t slot_size, long spin_ns)
{
    struct cw_ring_header *h = base;
    if (!base || size < 4096)
        return NULL;
    if (create) {
        memset(h, 0, sizeof *h);
        uint64_t offset = 4096, n = slot_size ? (size - offset) / slot_size : 0;
        while (n && offset < sizeof *h + n * sizeof(uint64_t)) { /* the lengths must fit before the data */
            offset += 4096;
            n = (size - offset) / slot_size;
        }
        if (n == 0 || n > 4096)
            return NULL;
        h->nslots = (uint32_t)n;
        h->slot_size = slot_size;
        h->data_offset = offset;
        __atomic_store_n(&h->magic, CW_RING_MAGIC, __ATOMIC_RELEASE);
    }
    uint32_t n = h->nslots;
    uint64_t slot = h->slot_size, offset = h->data_offset;
    if (h->magic != CW_RING_MAGIC || n == 0 || n > 4096 || slot == 0 || offset < sizeof *h + n * sizeof(uint64_t)
        || offset > size || slot > (size - offset) / n)
        return NULL;
    cw_ring *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->h = h;
    r->data = (char *)base + offset;
    r->nslots = n;
    r->slot_size = slot;
    r->fd = fd;
    r->spin_ns = spin_ns;
    pthread_mutex_init(&r->cb_lock, NULL);
    r->cb_seen = cw_load(&h->cb_done);
    return r;
}

void cw_ring_close(cw_ring *r) { free(r); }

/* Where the slot lengths start in the shared header (tests write nonsense there). */
uint64_t cw_ring_lengths_offset(void) { return offsetof(struct cw_ring_header, lengths); }

uint32_t cw_ring_slots(const cw_ring *r) { return r->nslots; }

uint64_t cw_ring_slot_size(const cw_ring *r) { return r->slot_size; }

/* ---------------------------------------------------------------- host functions, run by the client */

/* Whether the peer is there for a host function: its socket is up, or hung up for less than resume_ns (the
 * session's connection is being resumed: the same descriptor holds the new one then). 0, or -1. */
static int cw_ring_peer_waited(cw_ring *r)
{
    if (cw_ring_peer_alive(r) == 0) {
        __atomic_store_n(&r->hup_since, 0, __ATOMIC_RELAXED);
        return 0;
    }
    int pid = __atomic_load_n(&r->peer_pid, __ATOMIC_RELAXED);
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) /* (a dead client's connection comes back never) */
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec, since = 0;
    __atomic_compare_exchange_n(&r->hup_since, &since, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    since = since ? since : t;
    return t - since < __atomic_load_n(&r->resume_ns, __ATOMIC_RELAXED) ? 0 : -1;
}

/* Until *word differs from `seen`, or the peer is gone (-1). */
static int cw_wait_word(cw_ring *r, uint32_t *word, uint32_t seen)
{
    while (cw_load(word) == seen) {
        if (cw_ring_peer_waited(r) != 0 || __atomic_load_n(&r->cb_stop, __ATOMIC_ACQUIRE))
            return -1;
        struct timespec timeout = {0, CW_RING_WAKE_CHECK_NS};
        syscall(SYS_futex, word, FUTEX_WAIT, seen, &timeout, NULL, 0);
    }
    return 0;
}

/* The server's side, on the thread the driver runs a stream's host function on: post the client's host
 * function `id` and wait until the client ran it, so the stream's later work waits for it, as natively.
 * 0, or -1 when the client is gone (the function is skipped). */
int cw_ring_post_callback(cw_ring *r, uint64_t id)
{
    pthread_mutex_lock(&r->cb_lock);
    uint32_t seq = r->h->cb_posted;
    int rc = 0;
    uint32_t done;
    while (rc == 0 && seq - (done = cw_load(&r->h->cb_done)) >= CW_CB_SLOTS) /* the mailbox is full */
        rc = cw_wait_word(r, &r->h->cb_done, done);
    if (rc == 0) {
        r->h->cb_ids[seq % CW_CB_SLOTS] = id;
        cw_store_wake(&r->h->cb_posted, seq + 1);
    }
    pthread_mutex_unlock(&r->cb_lock);
    while (rc == 0 && (int32_t)((done = cw_load(&r->h->cb_done)) - seq) <= 0)
        rc = cw_wait_word(r, &r->h->cb_done, done);
    return rc;
}

/* The client's side, on its callback thread: the next host function to run (its id), once posted. 0, or -1
 * when the server is gone. */
int cw_ring_next_callback(cw_ring *r, uint64_t *id)
{
    if (cw_wait_word(r, &r->h->cb_posted, r->cb_seen) != 0)
        return -1;
    *id = r->h->cb_ids[r->cb_seen % CW_CB_SLOTS];
    return 0;
}

/* The host function cw_ring_next_callback gave has run: the server's stream may go on. */
void cw_ring_callback_done(cw_ring *r) { cw_store_wake(&r->h->cb_done, ++r->cb_seen); }

/* The thread waiting in cw_ring_next_callback (the client's) or cw_ring_post_callback (the server's, when
 * its session ends) returns -1 within moments. */
void cw_ring_stop_callbacks(cw_ring *r)
{
    __atomic_store_n(&r->cb_stop, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &r->h->cb_posted, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    syscall(SYS_futex, &r->h->cb_done, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A resumable session (cuwire/wire/stream.py): host functions wait up to this long for a peer whose socket
 * hung up, as its connection may come back under the same descriptor; not for a peer_pid (> 0) that is gone.
 * Payloads do not wait: a copy in flight through the ring when the connection drops ends the session. */
void cw_ring_resume(cw_ring *r, uint64_t nanoseconds, int peer_pid)
{
    __atomic_store_n(&r->peer_pid, peer_pid, __ATOMIC_RELAXED);
    __atomic_store_n(&r->resume_ns, nanoseconds, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- host memory at one address on both sides */

/* The page-locked host memory a client shares with the server (ring.py) lies at the same address in both
 * processes when it can: the client reserves address space (cw_reserve) and names it in its hello, the
 * server maps the memory there if that range is free in its process, and the client then maps it over its
 * reservation. A pointer into it then means the same bytes to the program, to the server and (the server
 * registers it with the driver) to the GPU, as page-locked memory does natively with unified addressing. */

/* Address space for later (no access, no memory): its address, or 0. */
uint64_t cw_reserve(uint64_t size)
{
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? 0 : (uint64_t)(uintptr_t)p;
}

/* Address space at exactly `address` (no access, no memory), if nothing is there: `address`, or 0. */
uint64_t cw_reserve_at(uint64_t address, uint64_t size)
{
    void *p = mmap((void *)(uintptr_t)address, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    if ((uint64_t)(uintptr_t)p != address) { /* an older kernel took the address as a hint */
        munmap(p, size);
        return 0;
    }
    return address;
}

/* `size` bytes of the memory fd, shared, at `address` (replace: over a reservation of the caller's own;
 * else only if nothing is there) or, with address 0, wherever the kernel puts them: the address, or 0. */
uint64_t cw_map_shared(int fd, uint64_t size, uint64_t address, int replace)
{
    int flags = MAP_SHARED;
    if (address)
        flags |= replace ? MAP_FIXED : MAP_FIXED_NOREPLACE;
    void *p = mmap((void *)(uintptr_t)address, size, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (p == MAP_FAILED)
        return 0;
    if (address && (uint64_t)(uintptr_t)p != address) { /* an older kernel took the address as a hint */
        munmap(p, size);
        return 0;
    }
    return (uint64_t)(uintptr_t)p;
}

/* `size` bytes of the memory fd from `offset`, shared, at `address`, over what the caller has there (its own
 * hold, or its own memory whose bytes it moved there first): the address, or 0. */
uint64_t cw_map_shared_over(int fd, uint64_t offset, uint64_t size, uint64_t address)
{
    void *p = mmap((void *)(uintptr_t)address, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset);
    return p == MAP_FAILED ? 0 : (uint64_t)(uintptr_t)p;
}

/* Address space held again (no access, no memory) over what the caller has at `address`: 0, or -1. */
int cw_hold_over(uint64_t address, uint64_t size)
{
    void *p = mmap((void *)(uintptr_t)address, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}

/* Memory of this process's own (zeros) over what the caller has at `address`: 0, or -1. */
int cw_map_private_over(uint64_t address, uint64_t size)
{
    void *p = mmap((void *)(uintptr_t)address, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}

int cw_unmap(uint64_t address, uint64_t size) { return size ? munmap((void *)(uintptr_t)address, size) : 0; }

/* The pages of a freed allocation go back to the system (the memory stays mapped, reading zeros). */
int cw_release_pages(uint64_t address, uint64_t size)
{
    return madvise((void *)(uintptr_t)address, size, MADV_REMOVE);
}

/* ---------------------------------------------------------------- writing a payload */

static int cw_ring_publish_n(cw_ring *r, uint64_t n)
{
    uint32_t filled = cw_load(&r->h->filled);
    r->h->lengths[filled % r->nslots] = n;
    cw_store_wake(&r->h->filled, filled + 1);
    r->w_off = 0;
    return 0;
}

/* Copy n bytes into the ring, slot after slot, publishing each slot as it fills. 0 or as cw_ring_wait. */
int cw_ring_write(cw_ring *r, const char *src, uint64_t n)
{
    while (n) {
        if (r->w_off == 0) {
            int rc = cw_ring_wait(r, 1);
            if (rc)
                return rc;
        }
        uint32_t slot = cw_load(&r->h->filled) % r->nslots;
        uint64_t k = r->slot_size - r->w_off < n ? r->slot_size - r->w_off : n;
        cw_copy(r->data + slot * r->slot_size + r->w_off, src, k);
        r->w_off += k;
        src += k;
        n -= k;
        if (r->w_off == r->slot_size)
            cw_ring_publish_n(r, r->slot_size);
    }
    return 0;
}

/* Publish the slot being filled, if any bytes are in it: the end of a payload. */
int cw_ring_flush(cw_ring *r) { return r->w_off ? cw_ring_publish_n(r, r->w_off) : 0; }

/* A whole free slot to fill in place (the GPU copies into it): its address, in *ptr. 0 or as cw_ring_wait.
 * Only between payload parts written with cw_ring_write (nothing half-filled). */
int cw_ring_claim(cw_ring *r, char **ptr)
{
    if (r->w_off) {
        errno = EINVAL;
        return -2;
    }
    int rc = cw_ring_wait(r, 1);
    if (rc == 0)
        *ptr = r->data + (cw_load(&r->h->filled) % r->nslots) * r->slot_size;
    return rc;
}

/* The claimed slot holds n bytes now: the reader may have them. */
int cw_ring_publish(cw_ring *r, uint64_t n)
{
    if (n > r->slot_size || r->w_off) {
        errno = EINVAL;
        return -2;
    }
    return cw_ring_publish_n(r, n);
}

/* ---------------------------------------------------------------- reading a payload */

/* Before reading a payload: every slot before it was given back (the sides take turns). */
void cw_ring_begin_read(cw_ring *r)
{
    r->r_next = cw_load(&r->h->freed);
    r->r_off = r->r_len = 0;
}

static int cw_ring_next_length(cw_ring *r) /* the length of slot r_next, once published */
{
    int rc = cw_ring_wait(r, 0);
    if (rc)
        return rc;
    uint64_t len = r->h->lengths[r->r_next % r->nslots];
    if (len == 0 || len > r->slot_size)
        return -2;
    r->r_len = len;
    return 0;
}

/* Copy the payload's next n bytes out of the ring, giving each slot back once it is read. 0, -1 (the peer
 * is gone), -2 (the peer published a slot that cannot be). */
int cw_ring_read(cw_ring *r, char *dst, uint64_t n)
{
    while (n) {
        if (r->r_len == 0) {
            int rc = cw_ring_next_length(r);
            if (rc)
                return rc;
        }
        uint64_t k = r->r_len - r->r_off < n ? r->r_len - r->r_off : n;
        cw_copy(dst, r->data + (r->r_next % r->nslots) * r->slot_size + r->r_off, k);
        r->r_off += k;
        dst += k;
        n -= k;
        if (r->r_off == r->r_len) {
            r->r_next++;
            r->r_off = r->r_len = 0;
            cw_store_wake(&r->h->freed, cw_load(&r->h->freed) + 1);
        }
    }
    return 0;
}

/* The next published slot, to use in place (the GPU copies from it) until cw_ring_release: its address and
 * length. Only at a slot's start (not in the middle of one being read with cw_ring_read). */
int cw_ring_acquire(cw_ring *r, char **ptr, uint64_t *len)
{
    if (r->r_len) {
        errno = EINVAL;
        return -2;
    }
    int rc = cw_ring_next_length(r);
    if (rc)
        return rc;
    *ptr = r->data + (r->r_next % r->nslots) * r->slot_size;
    *len = r->r_len;
    r->r_next++;
    r->r_len = 0;
    return 0;
}

/* Give back the `count` oldest slots acquired and not given back yet. */
void cw_ring_release(cw_ring *r, uint32_t count)
{
    uint32_t freed = cw_load(&r->h->freed);
    if ((int32_t)(r->r_next - freed) < (int32_t)count) /* never past what was read */
        count = r->r_next - freed;
    if (count)
        cw_store_wake(&r->h->freed, freed + count);
}

#endif
