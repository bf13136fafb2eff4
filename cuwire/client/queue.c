/* cuwire client: the batch queue of calls that need no answer (calls.c appends to it; Python, or wire.c,
 * takes it with the next call that waits), and the record that keeps the session thread's context and
 * capture mode in step. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "frames.h"
#include "runtime.h"
#include "shm_ring.h"

/* ------------------------------------------------------------------ batch queue */

/* One queue per session (routes.c: a program's own server, or each of a device list's): its records go to
 * that session's server, in the order they were appended. */
#define CONTEXT_UNKNOWN ((uint64_t)-1)
static struct queue {
    pthread_mutex_t lock;
    char *data;
    size_t len, cap;
    uint64_t count;
    uint64_t taken;          /* when the queue last went out (cuwire_queue_take) */
    uint64_t server_context; /* the context the session's thread on the server has (follow_context_locked) */
    int server_capture_mode;
    int refused; /* the session is lost, or cannot be had: its queued calls fail at once */
} queues[CW_SESSIONS_MAX] = {[0 ... CW_SESSIONS_MAX - 1] = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .server_context = CONTEXT_UNKNOWN,
    .server_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL, /* a thread's mode at its start */
}};

/* The session's queue (a route, routes.c). */
static struct queue *queue_of(int session) { return &queues[session > 0 && session < CW_SESSIONS_MAX ? session : 0]; }
#define QUEUE_FLUSH_AT (4u << 20)
/* Queued calls go out, without waiting for an answer, once this many have gathered, or as they come when
 * the queue last went out this long ago: the server starts on them (the GPU with it) while the program
 * goes on. So a program that launches now and then has each launch sent at once (a kernel waiting in the
 * client's queue until the next call that waits would leave the GPU idle meanwhile), and one that
 * launches in a burst sends a frame every send_every_ns (a send costs it a few microseconds). */
#define QUEUE_SEND_AT 16u
static uint64_t send_every_ns = 20000u; /* CUWIRE_SEND_EVERY_US (cuwire_queue_send_every) */

static uint64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}


/* Appends one record, its bytes given in two parts (b may be empty); q->lock held. 0, or
 * CUDA_ERROR_OUT_OF_MEMORY. */
static int append2_locked(struct queue *q, uint32_t id, const void *a, uint32_t na, const void *b, uint32_t nb)
{
    uint32_t size = na + nb;
    size_t need = q->len + 8 + size;
    if (need > q->cap) {
        size_t cap = q->cap ? q->cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(q->data, cap);
        if (!p)
            return CUDA_ERROR_OUT_OF_MEMORY;
        q->data = p;
        q->cap = cap;
    }
    memcpy(q->data + q->len, &id, 4);
    memcpy(q->data + q->len + 4, &size, 4);
    memcpy(q->data + q->len + 8, a, na);
    if (nb)
        memcpy(q->data + q->len + 8 + na, b, nb);
    q->len = need;
    q->count++;
    cuwire_note_queued(a, nb ? UINT32_MAX : na);
    return 0;
}

/* The context the session's thread on the server has current, as far as the calls sent so far tell
 * (q->lock held to read or change it). Each client thread keeps its own current context
 * (session.c); before a thread's calls go out, a switch record is put first when its context is
 * another, so the server runs every call in its caller's context. A thread with no context changes
 * nothing (the server keeps the context it has), and neither does one whose context is another
 * session's (a call that names this session's stream or memory: the driver takes its context from
 * them). The same record carries the session thread's stream capture mode, while a capture runs, when
 * the calling thread needs another (cuwire_server_capture_mode). */
static int follow_context_locked(struct queue *q)
{
    uint64_t ctx = cuwire_current_context();
    if (ctx && &queues[cuwire_route_current()] != q)
        ctx = 0;
    int mode = cuwire_server_capture_mode();
    struct cw_set_context rec = {ctx && ctx != q->server_context ? ctx : 0, (uint32_t)mode}; /* 0: keep it */
    int mode_changes = mode >= 0 && mode != q->server_capture_mode;
    if (!rec.context && !mode_changes)
        return 0;
    /* the context alone is 8 bytes, as it was before capture modes travelled */
    int err = append2_locked(q, cuwire_set_context_record_id, &rec, mode_changes ? sizeof rec : sizeof rec.context,
                             NULL, 0);
    if (!err) {
        if (rec.context)
            q->server_context = ctx;
        if (mode_changes)
            q->server_capture_mode = mode;
    }
    return err;
}

/* The server of `session` changed its current context itself (cuCtxCreate makes the new one current;
 * cuCtxDestroy pops): CONTEXT_UNKNOWN when the client cannot say which it is. */
void cuwire_server_context_is(int session, uint64_t ctx)
{
    struct queue *q = queue_of(session);
    pthread_mutex_lock(&q->lock);
    q->server_context = ctx;
    pthread_mutex_unlock(&q->lock);
}

int cuwire_queue_refused(int session) { return __atomic_load_n(&queue_of(session)->refused, __ATOMIC_RELAXED); }

/* Set when the session is lost or cannot be had (runtime.py, give_up): its queued calls fail at once. */
void cuwire_queue_refuse(int session)
{
    struct queue *q = queue_of(session);
    pthread_mutex_lock(&q->lock);
    __atomic_store_n(&q->refused, 1, __ATOMIC_RELAXED);
    cuwire_forget_done();
    free(q->data);
    q->data = NULL;
    q->len = q->cap = 0;
    q->count = 0;
    pthread_mutex_unlock(&q->lock);
}

/* Appends one record of two parts, a fixed head and bytes that follow it (nb may be 0), to the session's
 * queue, after the switch to the calling thread's context when it needs one. 0 or a CUDA error; *due says
 * what the caller does next (calls.c): QUEUE_KEEP, QUEUE_SEND (send the queue now, without waiting) or
 * QUEUE_FLUSH (it is large: the Python path sends it). */
int cuwire_queue_append(int session, uint32_t id, const void *a, uint32_t na, const void *b, uint32_t nb, int *due)
{
    *due = QUEUE_KEEP;
    struct queue *q = queue_of(session);
    if (__atomic_load_n(&q->refused, __ATOMIC_RELAXED))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    pthread_mutex_lock(&q->lock);
    int err = follow_context_locked(q);
    if (!err)
        err = append2_locked(q, id, a, na, b, nb);
    if (!err && q->len >= QUEUE_FLUSH_AT)
        *due = QUEUE_FLUSH;
    else if (!err && (q->count >= QUEUE_SEND_AT || monotonic_ns() - q->taken >= send_every_ns))
        *due = QUEUE_SEND;
    pthread_mutex_unlock(&q->lock);
    return err;
}

void cuwire_queue_send_every(long microseconds) { send_every_ns = (uint64_t)microseconds * 1000u; }

/* Hands the session's queued records to the caller (who frees them with free()) and starts a new queue;
 * the caller's call follows them, so the switch to its thread's context goes last. */
size_t cuwire_queue_take(int session, char **data, uint64_t *count)
{
    struct queue *q = queue_of(session);
    pthread_mutex_lock(&q->lock);
    follow_context_locked(q);
    size_t len = q->len;
    *data = q->data;
    *count = q->count;
    q->data = NULL;
    q->len = q->cap = 0;
    q->count = 0;
    q->taken = monotonic_ns();
    pthread_mutex_unlock(&q->lock);
    return len;
}

/* Whether the session has queued records (the sending thread's round of the sessions, sender.c). */
int cuwire_queue_waiting(int session) { return __atomic_load_n(&queue_of(session)->count, __ATOMIC_RELAXED) != 0; }

void cuwire_free(void *p) { free(p); }
