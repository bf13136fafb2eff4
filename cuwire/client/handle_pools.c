/* cuwire client: streams and events made ahead, given out as the program asks for them.
 *
 * PyTorch makes 32 streams of each priority in a row, and events by eights; each cuStreamCreate or
 * cuEventCreate would be a round trip of its own. The first one the program asks for, of given flags (and
 * priority) in a context, has the server make 4 of them at once (cuwire.MakeHandles, client/launches.py);
 * each time those are given out, the next batch is twice as large, up to 64 (a program's next run asks at
 * once as many as its last run made, from its list: load_lists.Run.handle_batch). What is made and never asked
 * for is released with the session, as the program's own handles are: at most as many as were asked for.
 * A stream or event made ahead is the one the driver would make: the same call with the same flags, in
 * the same context. The pools of a context are forgotten when it is destroyed or reset, and all of them
 * when the session is lost or in a forked child (each then takes the usual path, which says what fails).
 *
 * The client also keeps which of them it gave out and the program has not destroyed: a destroy of one of
 * those cannot fail, so it is queued instead of waited for (annotation queued_when; JAX destroys an event
 * after most transfers, and XLA destroys them all as JAX ends, after Python finalized: can_queue), and
 * what the client knew finished holds over it (completion.c). A destroy of anything else (a handle made
 * otherwise, destroyed already, of a context gone) waits for the server, which says what is wrong. Each
 * stream given out, with its context, is told to completion.c: a context synchronization finished it.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "capture.h"
#include "cuda_api.h"
#include "runtime.h"
#include "table.h"

#define POOLS 32    /* (context, kind, flags, priority) at once; more take the usual path */
#define FIRST 4     /* handles of a pool's first batch */
#define MOST CW_MAKE_AT_ONCE /* and of its largest (cuwire/wire/frames.h: the server makes no more at once) */
enum { STREAMS = 0, EVENTS = 1 }; /* MakeHandles_Args.kind */

struct pool {
    uint64_t context; /* 0: unused */
    uint32_t kind, flags;
    int32_t priority;
    uint32_t next_batch;
    uint32_t n;            /* handles[0..n) not given out yet */
    uint64_t handles[MOST];
};

static struct pool pools[POOLS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The handles given out and alive (table.h: up to 2^16 slots; past that, destroys wait as before). */
struct given {
    uint64_t handle, kind; /* the key */
    uint64_t context;
};
static cw_table given = CW_TABLE(struct given, 2, 1u << 16);

/* Lock held. */
static void keep_given(uint64_t handle, uint64_t context, uint32_t kind)
{
    uint64_t key[2] = {handle, kind};
    struct given *g = cw_table_put(&given, key);
    if (g)
        g->context = context;
    if (kind == STREAMS)
        cuwire_note_stream_given(handle, context); /* (which streams a context synchronization finished) */
}

/* Whether a destroy can be queued now: while Python runs, and at the program's end while calls go on in C
 * (from Python's atexit to the process's exit handler wire.c keeps the session's socket: XLA destroys its
 * streams and events after the interpreter finalized, as JAX ends). */
static int can_queue(uint64_t handle)
{
    if (cuwire_forked || cuwire_exit_hook_ran())
        return 0;
    int route = cuwire_route_handle(handle); /* (the destroy's, as its stub routes it) */
    if (route < 0)
        route = cuwire_route_current();
    return cuwire_wire_without_python(route) || CUWIRE_READY();
}

/* Whether `handle` was given out as `kind` and is alive: then it is taken out (it is being destroyed). */
static int take_given(uint64_t handle, uint32_t kind)
{
    if (!handle || handle == CW_GONE || !can_queue(handle))
        return 0;
    uint64_t key[2] = {handle, kind};
    pthread_mutex_lock(&lock);
    struct given *g = cw_table_find(&given, key);
    if (g)
        cw_table_remove(g);
    pthread_mutex_unlock(&lock);
    if (g)
        cuwire_note_releasing(handle); /* (what the client knew finished holds over it: completion.c) */
    return g != NULL;
}

/* The pool of these, made if there is room, or NULL. Lock held. */
static struct pool *pool_of(uint64_t context, uint32_t kind, uint32_t flags, int32_t priority)
{
    struct pool *free_one = NULL;
    for (int i = 0; i < POOLS; i++) {
        struct pool *p = &pools[i];
        if (p->context == context && p->kind == kind && p->flags == flags && p->priority == priority)
            return p;
        if (!p->context && !free_one)
            free_one = p;
    }
    if (free_one)
        *free_one = (struct pool){.context = context, .kind = kind, .flags = flags, .priority = priority,
                                  .next_batch = FIRST};
    return free_one;
}

/* A `fast` answer: CUDA_SUCCESS with a handle from the pool (refilled from the server when empty), the
 * server's error when it could make none, or -1 to take the usual path. */
static int give(uint32_t kind, uint32_t flags, int32_t priority, uint64_t *out)
{
    if (!out || cuwire_forked || __atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE) || !CUWIRE_READY())
        return -1; /* the usual path says what is wrong */
    uint64_t context = cuwire_current_context();
    if (!context)
        return -1; /* no context: CUDA_ERROR_INVALID_CONTEXT, as the driver says it */
    pthread_mutex_lock(&lock);
    struct pool *p = pool_of(context, kind, flags, priority);
    if (!p) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    if (p->n) {
        *out = p->handles[--p->n];
        keep_given(*out, context, kind);
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    uint32_t batch = p->next_batch;
    p->next_batch = batch * 2 > MOST ? MOST : batch * 2;
    pthread_mutex_unlock(&lock); /* not held across the round trip, which needs Python's lock */

    uint64_t made_now[MOST];
    uint32_t made = 0;
    int err = cuwire_py_make_handles(kind, flags, priority, batch, made_now, &made);
    if (err || !made)
        return err ? err : -1;
    *out = made_now[0];
    pthread_mutex_lock(&lock);
    p = pool_of(context, kind, flags, priority);
    /* the rest, given out in the order made; any beyond the pool's room stay the session's unused */
    for (uint32_t i = made; p && i-- > 1;)
        if (p->n < MOST)
            p->handles[p->n++] = made_now[i];
    keep_given(*out, context, kind);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

int cuwire_pooled_event(CUevent *phEvent, unsigned int Flags)
{
    return give(EVENTS, Flags, 0, (uint64_t *)phEvent);
}

int cuwire_pooled_stream_priority(CUstream *phStream, unsigned int flags, int priority)
{
    cuwire_note_stream_flags(phStream, flags);
    return give(STREAMS, flags, priority, (uint64_t *)phStream);
}

int cuwire_pooled_stream(CUstream *phStream, unsigned int Flags)
{
    /* cuStreamCreate makes the stream of priority 0, as cuStreamCreateWithPriority(0) does */
    return cuwire_pooled_stream_priority(phStream, Flags, 0);
}

/* cuEventDestroy and cuStreamDestroy (queued_when): the handle is one given out here and alive (a stream
 * not being captured: the server says what its destroy does to the capture). */
int cuwire_release_pooled_event(CUevent event) { return take_given((uint64_t)(uintptr_t)event, EVENTS); }

int cuwire_release_pooled_stream(CUstream stream)
{
    return !cuwire_capture_of(stream) && take_given((uint64_t)(uintptr_t)stream, STREAMS);
}

/* A context's streams and events went with it (context 0: every context's; the session's loss). */
void cuwire_forget_pools(uint64_t context)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < POOLS; i++)
        if (!context || pools[i].context == context)
            pools[i].context = 0;
    for (unsigned i = 0; i < given.cap; i++) {
        struct given *g = cw_table_at(&given, i);
        if (g && (!context || g->context == context)) {
            if (g->kind == STREAMS)
                cuwire_note_stream_gone(g->handle);
            cw_table_remove(g);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* cuDevicePrimaryCtxReset destroys what the primary context held (`after`). */
void cuwire_forget_pools_reset(CUdevice dev)
{
    (void)dev; /* the client does not keep which context is whose here: forget them all */
    cuwire_forget_pools(0);
    cuwire_forget_limits(); /* the context comes back with the default limits */
}
