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

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static char *queue_data;
static size_t queue_len, queue_cap;
static uint64_t queue_count;
#define QUEUE_FLUSH_AT (4u << 20)
/* Queued calls go out, without waiting for an answer, once this many have gathered, or as they come when
 * the queue last went out this long ago: the server starts on them (the GPU with it) while the program
 * goes on. So a program that launches now and then has each launch sent at once (a kernel waiting in the
 * client's queue until the next call that waits would leave the GPU idle meanwhile), and one that
 * launches in a burst sends a frame every send_every_ns (a send costs it a few microseconds). */
#define QUEUE_SEND_AT 16u
static uint64_t send_every_ns = 20000u; /* CUWIRE_SEND_EVERY_US (cuwire_queue_send_every) */
static uint64_t queue_taken; /* when the queue last went out (cuwire_queue_take) */

static uint64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}


/* Appends one record, its bytes given in two parts (b may be empty); queue_lock held. 0, or
 * CUDA_ERROR_OUT_OF_MEMORY. */
static int append2_locked(uint32_t id, const void *a, uint32_t na, const void *b, uint32_t nb)
{
    uint32_t size = na + nb;
    size_t need = queue_len + 8 + size;
    if (need > queue_cap) {
        size_t cap = queue_cap ? queue_cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(queue_data, cap);
        if (!p)
            return CUDA_ERROR_OUT_OF_MEMORY;
        queue_data = p;
        queue_cap = cap;
    }
    memcpy(queue_data + queue_len, &id, 4);
    memcpy(queue_data + queue_len + 4, &size, 4);
    memcpy(queue_data + queue_len + 8, a, na);
    if (nb)
        memcpy(queue_data + queue_len + 8 + na, b, nb);
    queue_len = need;
    queue_count++;
    cuwire_note_sent(0);
    return 0;
}

static int append_locked(uint32_t id, const void *payload, uint32_t size)
{
    return append2_locked(id, payload, size, NULL, 0);
}

/* The context the session's thread on the server has current, as far as the calls sent so far tell
 * (queue_lock held to read or change it). Each client thread keeps its own current context
 * (session.c); before a thread's calls go out, a switch record is put first when its context is
 * another, so the server runs every call in its caller's context. A thread with no context changes
 * nothing (the server keeps the context it has). The same record carries the session thread's stream
 * capture mode, while a capture runs, when the calling thread needs another (cuwire_server_capture_mode). */
#define CONTEXT_UNKNOWN ((uint64_t)-1)
static uint64_t server_context = CONTEXT_UNKNOWN;
static int server_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL; /* a thread's mode at its start */

static int follow_context_locked(void)
{
    uint64_t ctx = cuwire_current_context();
    int mode = cuwire_server_capture_mode();
    struct cw_set_context rec = {ctx && ctx != server_context ? ctx : 0, (uint32_t)mode}; /* 0: keep it */
    int mode_changes = mode >= 0 && mode != server_capture_mode;
    if (!rec.context && !mode_changes)
        return 0;
    /* the context alone is 8 bytes, as it was before capture modes travelled */
    int err = append_locked(cuwire_set_context_record_id, &rec, mode_changes ? sizeof rec : sizeof rec.context);
    if (!err) {
        if (rec.context)
            server_context = ctx;
        if (mode_changes)
            server_capture_mode = mode;
    }
    return err;
}

/* The server changed its current context itself (cuCtxCreate makes the new one current; cuCtxDestroy
 * pops): CONTEXT_UNKNOWN when the client cannot say which it is. */
void cuwire_server_context_is(uint64_t ctx)
{
    pthread_mutex_lock(&queue_lock);
    server_context = ctx;
    pthread_mutex_unlock(&queue_lock);
}

/* Set when the session is lost or cannot be had (runtime.py, give_up): queued calls fail at once. */
static int queue_refused;

int cuwire_queue_refused(void) { return __atomic_load_n(&queue_refused, __ATOMIC_RELAXED); }

void cuwire_queue_refuse(void)
{
    pthread_mutex_lock(&queue_lock);
    queue_refused = 1;
    cuwire_forget_done();
    free(queue_data);
    queue_data = NULL;
    queue_len = queue_cap = 0;
    queue_count = 0;
    pthread_mutex_unlock(&queue_lock);
}

/* Appends one record of two parts, a fixed head and bytes that follow it (nb may be 0), after the switch
 * to the calling thread's context when it needs one. 0 or a CUDA error; *due says what the caller does
 * next (calls.c): QUEUE_KEEP, QUEUE_SEND (send the queue now, without waiting) or QUEUE_FLUSH (it is large:
 * the Python path sends it). */
int cuwire_queue_append(uint32_t id, const void *a, uint32_t na, const void *b, uint32_t nb, int *due)
{
    *due = QUEUE_KEEP;
    if (cuwire_queue_refused())
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    pthread_mutex_lock(&queue_lock);
    int err = follow_context_locked();
    if (!err)
        err = append2_locked(id, a, na, b, nb);
    if (!err && queue_len >= QUEUE_FLUSH_AT)
        *due = QUEUE_FLUSH;
    else if (!err && (queue_count >= QUEUE_SEND_AT || monotonic_ns() - queue_taken >= send_every_ns))
        *due = QUEUE_SEND;
    pthread_mutex_unlock(&queue_lock);
    return err;
}

void cuwire_queue_send_every(long microseconds) { send_every_ns = (uint64_t)microseconds * 1000u; }

/* Hands the queued records to the caller (who frees them with free()) and starts a new queue; the
 * caller's call follows them, so the switch to its thread's context goes last. */
size_t cuwire_queue_take(char **data, uint64_t *count)
{
    pthread_mutex_lock(&queue_lock);
    follow_context_locked();
    size_t len = queue_len;
    *data = queue_data;
    *count = queue_count;
    queue_data = NULL;
    queue_len = queue_cap = 0;
    queue_count = 0;
    queue_taken = monotonic_ns();
    pthread_mutex_unlock(&queue_lock);
    return len;
}

void cuwire_free(void *p) { free(p); }
