/* cuwire client: host functions in streams (cuLaunchHostFunc, cuStreamAddCallback), run by a thread of the
 * client's, in stream order.
 *
 * The function lives in the program, the stream on the server. The call queues a HostFunc record (the
 * stream and an id); the server puts a host function of its own in the stream, which, when the stream
 * reaches it, posts the id through the memory the session shares with the client (cuwire/shm_ring.h) and
 * waits until this file's thread has run the program's function: the stream's later work waits for it, as
 * natively. So host functions need a server on this host (the Unix socket and its shared memory); over
 * TCP they are refused by name. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda_api.h"
#include "runtime.h"
#include "shm_ring.h"

extern const uint32_t cuwire_host_func_record_id;

struct pending { /* a host function queued and not run yet */
    uint64_t id;
    CUhostFn fn;                 /* cuLaunchHostFunc's, or */
    CUstreamCallback callback;   /* cuStreamAddCallback's */
    CUstream stream;
    void *user;
    int kept;                    /* a graph's host node: runs at every launch, never taken */
    struct pending *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *pending;
static uint64_t next_id = 1;
static cw_ring *ring;       /* the session's shared memory, or NULL (cuwire_callbacks_ring) */
static pthread_t thread;
static int thread_running;

static struct pending *take(uint64_t id)
{
    pthread_mutex_lock(&lock);
    struct pending *found = NULL;
    for (struct pending **p = &pending; *p; p = &(*p)->next)
        if ((*p)->id == id) {
            found = *p;
            if (!found->kept)
                *p = found->next;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

static void *run(void *arg)
{
    cw_ring *r = arg;
    uint64_t id;
    while (cw_ring_next_callback(r, &id) == 0) {
        struct pending *p = take(id);
        if (p && p->fn)
            p->fn(p->user);
        else if (p)
            p->callback(p->stream, CUDA_SUCCESS, p->user);
        if (p && !p->kept)
            free(p);
        cw_ring_callback_done(r); /* an id we never gave is acknowledged too: the server's stream goes on */
    }
    return NULL;
}

/* The session's shared memory (Python, after the welcome), or NULL. */
void cuwire_callbacks_ring(void *r)
{
    pthread_mutex_lock(&lock);
    ring = r;
    pthread_mutex_unlock(&lock);
}

/* Before the session's shared memory goes away: the thread ends (a host function it is running finishes). */
void cuwire_callbacks_stop(void)
{
    pthread_mutex_lock(&lock);
    cw_ring *r = ring;
    int running = thread_running;
    ring = NULL;
    thread_running = 0;
    pthread_mutex_unlock(&lock);
    if (r && running) {
        cw_ring_stop_callbacks(r);
        pthread_join(thread, NULL);
    }
}

/* In a forked child: the parent's session and thread are not its own. */
void cuwire_callbacks_forget(void)
{
    pthread_mutex_init(&lock, NULL);
    ring = NULL;
    thread_running = 0;
    pending = NULL;
}

static CUresult post(CUstream stream, CUhostFn fn, CUstreamCallback callback, void *user, const char *name)
{
    if (!fn && !callback)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuwire_session_open() && CUWIRE_READY())
        cuwire_py_connect(); /* the session brings the shared memory */
    struct pending *p = malloc(sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (!ring) {
        pthread_mutex_unlock(&lock);
        free(p);
        cuwire_say_once_per_name("cuwire: host functions in streams need a server on this host (the Unix socket "
                                 "and shared memory; CUWIRE_TRANSPORT=auto), refused:", name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!thread_running) {
        if (pthread_create(&thread, NULL, run, ring) != 0) {
            pthread_mutex_unlock(&lock);
            free(p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        thread_running = 1;
    }
    *p = (struct pending){next_id++, fn, callback, stream, user, 0, pending};
    pending = p;
    struct __attribute__((packed)) {
        uint64_t stream, id;
    } rec = {(uint64_t)(uintptr_t)stream, p->id};
    pthread_mutex_unlock(&lock);
    int err = cuwire_enqueue(cuwire_host_func_record_id, &rec, sizeof rec);
    if (err)
        return (CUresult)err;
    /* out now: the program may wait for what its function does without another CUDA call */
    int sent = cuwire_wire_send_queued();
    return (CUresult)(sent >= 0 ? sent : cuwire_py_send_queued());
}

/* A graph's host node (client/driver.py): fn and its userData kept for every launch of the graph; the id
 * the server's host node posts, or 0 (*err says why: no shared memory with the server, or no memory). */
uint64_t cuwire_keep_host_fn(CUhostFn fn, void *user, int *err)
{
    *err = 0;
    if (!fn) {
        *err = CUDA_ERROR_INVALID_VALUE;
        return 0;
    }
    struct pending *p = malloc(sizeof *p);
    if (!p) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return 0;
    }
    pthread_mutex_lock(&lock);
    if (!ring) {
        pthread_mutex_unlock(&lock);
        free(p);
        cuwire_say_once_per_name("cuwire: host functions in streams need a server on this host (the Unix socket "
                                 "and shared memory; CUWIRE_TRANSPORT=auto), refused:", "cuGraphAddHostNode");
        *err = CUDA_ERROR_NOT_SUPPORTED;
        return 0;
    }
    if (!thread_running) {
        if (pthread_create(&thread, NULL, run, ring) != 0) {
            pthread_mutex_unlock(&lock);
            free(p);
            *err = CUDA_ERROR_OUT_OF_MEMORY;
            return 0;
        }
        thread_running = 1;
    }
    *p = (struct pending){next_id++, fn, NULL, NULL, user, 1, pending};
    pending = p;
    pthread_mutex_unlock(&lock);
    return p->id;
}

CUresult cuwire_local_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    return post(hStream, fn, NULL, userData, "cuLaunchHostFunc");
}

CUresult cuwire_local_cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                          unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE; /* reserved: must be 0 */
    return post(hStream, NULL, callback, userData, "cuStreamAddCallback");
}
