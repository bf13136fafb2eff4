/* cuwire client: host functions in streams (cuLaunchHostFunc, cuStreamAddCallback, graph host nodes), run
 * by a thread of the client's, in stream order.
 *
 * The function lives in the program, the stream on the server. The call queues a HostFunc record (the
 * stream and an id); the server puts a host function of its own in the stream, which, when the stream
 * reaches it, posts the id to the client and waits until this file's thread has run the program's
 * function: the stream's later work waits for it, as natively. A client on the server's host gets the ids
 * through the memory the session shares with it (cuwire/wire/shm_ring.h); one over TCP on a connection of the
 * session's own, opened at its first host function (Hello.callbacks): the server writes the id and the post's
 * number (struct cw_host_post), this thread runs the function and writes the number back. When that
 * connection drops, the thread opens it again (a resumable session) and the server posts again what waited.
 * A device list's sessions (all over TCP) each get a connection and a thread of their own, opened at the
 * first host function on one of that server's streams (routes.h); the ids are the client's, one series. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cuda_api.h"
#include "frames.h"
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
static cw_ring *ring;       /* the (first) session's shared memory, or NULL (cuwire_callbacks_ring) */
/* over TCP: each session's host-function connection, or -1 (cuwire_callbacks_socket), and its thread */
static int channel[CW_SESSIONS_MAX] = {[0 ... CW_SESSIONS_MAX - 1] = -1};
static pthread_t thread[CW_SESSIONS_MAX];
static int thread_running[CW_SESSIONS_MAX];

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

/* The next id the server posts: from the shared memory, or from the connection (struct cw_host_post). Over
 * the connection, a post numbered at or below *done was run already (its answer was lost when the
 * connection dropped, and the server posted it again on the new one): it is only answered again. 0, or -1
 * when the session ends. */
static int next_post(int route, cw_ring *r, int *fd, uint64_t *done, uint64_t *id, uint64_t *seq)
{
    if (r)
        return cw_ring_next_callback(r, id);
    for (;;) {
        struct cw_host_post post;
        if (*fd >= 0 && cuwire_recv_all(*fd, (char *)&post, sizeof post, 0) == 0) {
            if (post.seq > *done) {
                *id = post.id;
                *seq = post.seq;
                return 0;
            }
            if (cuwire_send_all(*fd, (const char *)&post.seq, sizeof post.seq) == 0)
                continue;
        }
        *fd = CUWIRE_READY() ? cuwire_py_callbacks_again(route) : -1; /* (the session's resume: transport.py) */
        if (*fd < 0)
            return -1;
        pthread_mutex_lock(&lock);
        channel[route] = *fd;
        pthread_mutex_unlock(&lock);
    }
}

static void *run(void *arg)
{
    int route = (int)(intptr_t)arg;
    pthread_mutex_lock(&lock);
    cw_ring *r = route == 0 ? ring : NULL; /* NULL: the ids come on the connection */
    int fd = channel[route];
    pthread_mutex_unlock(&lock);
    uint64_t id, seq = 0, done = 0;
    while (next_post(route, r, &fd, &done, &id, &seq) == 0) {
        struct pending *p = take(id);
        cuwire_graph_copies_back(0); /* what a graph's memcpy nodes wrote to pageable memory, before it runs */
        cuwire_host_fn_running(1);
        if (p && p->fn)
            p->fn(p->user);
        else if (p)
            p->callback(p->stream, CUDA_SUCCESS, p->user);
        cuwire_host_fn_running(0);
        if (p && !p->kept) {
            cuwire_host_fn_done(p->id); /* (a copy after it may read what it wrote: host_fn_order.c) */
            free(p);
        }
        /* an id we never gave is acknowledged too: the server's stream goes on */
        if (r)
            cw_ring_callback_done(r);
        else {
            done = seq;
            cuwire_send_all(fd, (const char *)&seq, sizeof seq); /* (lost with the connection: posted again) */
        }
    }
    return NULL;
}

/* Whether the route's session can reach this file's thread: its shared memory or its connection. Lock held. */
static int reachable(int route) { return (route == 0 && ring != NULL) || channel[route] >= 0; }

/* Start the thread that runs the route's host functions, once; the lock is held. 0, or
 * CUDA_ERROR_OUT_OF_MEMORY. The thread starts with the lock held: it reads the ring or connection after. */
static int start_thread(int route)
{
    if (thread_running[route])
        return 0;
    if (pthread_create(&thread[route], NULL, run, (void *)(intptr_t)route) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    thread_running[route] = 1;
    return 0;
}

/* Over TCP, before the route's first host function: ask Python for its session's host-function connection
 * (it says why not, once, on stderr). Called without the lock. */
static void want_channel(int route)
{
    pthread_mutex_lock(&lock);
    int have = reachable(route);
    pthread_mutex_unlock(&lock);
    if (!have && CUWIRE_READY())
        cuwire_py_callbacks(route);
}

/* The session's shared memory (Python, after the welcome), or NULL. */
void cuwire_callbacks_ring(void *r)
{
    pthread_mutex_lock(&lock);
    ring = r;
    pthread_mutex_unlock(&lock);
}

/* Over TCP: a session's host-function connection (Python, cuwire_py_callbacks; it keeps it open). */
void cuwire_callbacks_socket(int route, int fd)
{
    if (route < 0 || route >= CW_SESSIONS_MAX)
        return;
    pthread_mutex_lock(&lock);
    channel[route] = fd;
    pthread_mutex_unlock(&lock);
}

/* Before the session's shared memory or connection goes away: the thread ends (a host function it is running
 * finishes). */
void cuwire_callbacks_stop(void)
{
    pthread_mutex_lock(&lock);
    cw_ring *r = ring;
    int fds[CW_SESSIONS_MAX], running[CW_SESSIONS_MAX];
    for (int route = 0; route < CW_SESSIONS_MAX; route++) {
        fds[route] = channel[route], running[route] = thread_running[route];
        channel[route] = -1, thread_running[route] = 0;
    }
    ring = NULL;
    pthread_mutex_unlock(&lock);
    cuwire_host_fns_stopped();
    for (int route = 0; route < CW_SESSIONS_MAX; route++) {
        if (route == 0 && r && running[route])
            cw_ring_stop_callbacks(r);
        else if (fds[route] >= 0 && running[route])
            shutdown(fds[route], SHUT_RDWR);
    }
    for (int route = 0; route < CW_SESSIONS_MAX; route++)
        if (running[route])
            pthread_join(thread[route], NULL);
}

/* In a forked child: the parent's session and thread are not its own. */
void cuwire_callbacks_forget(void)
{
    pthread_mutex_init(&lock, NULL);
    ring = NULL;
    for (int route = 0; route < CW_SESSIONS_MAX; route++)
        channel[route] = -1, thread_running[route] = 0;
    pending = NULL;
    cuwire_host_fns_forget();
}

/* A host function of the program's, listed under a new id for the thread to run when the server posts it
 * (kept: a graph host node's, run at every launch); 0 and *err when the client's thread cannot be reached
 * (no shared memory with the server and no connection for host functions: said once, by name) or there is
 * no memory. */
static uint64_t add_pending(int route, CUhostFn fn, CUstreamCallback callback, CUstream stream, void *user,
                            int kept, const char *name, int *err)
{
    want_channel(route);
    struct pending *p = malloc(sizeof *p);
    if (!p) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return 0;
    }
    pthread_mutex_lock(&lock);
    *err = !reachable(route) ? CUDA_ERROR_NOT_SUPPORTED : start_thread(route);
    if (*err) {
        pthread_mutex_unlock(&lock);
        free(p);
        if (*err == CUDA_ERROR_NOT_SUPPORTED)
            cuwire_say_once_per_name("cuwire: host functions in streams need shared memory with the server or a "
                                     "connection of the session's for them, and it has neither; refused:", name);
        return 0;
    }
    *p = (struct pending){next_id++, fn, callback, stream, user, kept, pending};
    pending = p;
    uint64_t id = p->id;
    pthread_mutex_unlock(&lock);
    if (!kept)
        cuwire_host_fn_queued(id);
    return id;
}

static CUresult post(CUstream stream, CUhostFn fn, CUstreamCallback callback, void *user, const char *name)
{
    if (!fn && !callback)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cuwire_session_open() && CUWIRE_READY())
        cuwire_py_connect(); /* the session brings the shared memory */
    int route = cuwire_route_stream((uint64_t)(uintptr_t)stream);
    int err; /* captured into a graph, it runs at every launch of it: kept, as a graph's host node */
    uint64_t id = add_pending(route, fn, callback, stream, user, cuwire_capture_of(stream) != 0, name, &err);
    if (!id)
        return (CUresult)err;
    struct cw_host_func rec = {(uint64_t)(uintptr_t)stream, id};
    err = cuwire_enqueue(route, cuwire_host_func_record_id, &rec, sizeof rec);
    if (err) { /* never posted: not waited for */
        cuwire_host_fn_done(id);
        return (CUresult)err;
    }
    /* out now: the program may wait for what its function does without another CUDA call */
    int sent = cuwire_wire_send_queued(route);
    return (CUresult)(sent >= 0 ? sent : cuwire_py_send_queued(route));
}

/* A graph's host node (client/graphs.py): fn and its userData kept for every launch of the graph; the id
 * the server's host node posts, or 0 (*err says why: no way to reach the client's thread, or no memory). */
uint64_t cuwire_keep_host_fn(CUhostFn fn, void *user, int *err)
{
    *err = 0;
    if (!fn) {
        *err = CUDA_ERROR_INVALID_VALUE;
        return 0;
    }
    /* (the graph's server: the current context's, where its node is added) */
    return add_pending(cuwire_route_current(), fn, NULL, NULL, user, 1, "cuGraphAddHostNode", err);
}

/* The function and argument kept under `id` (a graph host node's): 0, or -1 when no such id is kept. */
int cuwire_host_fn_of(uint64_t id, void **fn, void **user)
{
    int found = -1;
    pthread_mutex_lock(&lock);
    for (struct pending *p = pending; p; p = p->next)
        if (p->id == id && p->kept && p->fn) {
            *fn = (void *)p->fn;
            *user = p->user;
            found = 0;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
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
