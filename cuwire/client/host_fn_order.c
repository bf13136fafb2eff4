/* cuwire client: which host functions of the program's (cuLaunchHostFunc, cuStreamAddCallback) are queued and
 * not run yet, for a copy that must read page-locked memory after them.
 *
 * Natively an asynchronous copy from page-locked memory reads it when the stream reaches the copy, after the
 * host functions queued before it (XLA fills a staging buffer in one and copies it in the next call). Over
 * TCP the client reads that memory when the copy is made (calls.c), so it waits here until those functions
 * have run: callbacks.c says when each is queued and when it ran. The wait lets Python's other threads run
 * (a host function may need the GIL). A state file at the bottom of the client's C: it calls only the leaves
 * trace.c and start.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_api.h"
#include "runtime.h"

#define WAIT_S 30 /* a wait longer than this fails by name: a host function may wait for what the caller holds */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ran = PTHREAD_COND_INITIALIZER;
static uint64_t *unrun; /* the ids queued and not run yet (a graph's host nodes are not among them) */
static size_t n_unrun, cap_unrun;
static uint64_t last_queued;
static int stopped;              /* the session's host functions will not run (callbacks.c stopped) */
static __thread int in_host_fn; /* this thread runs a host function (which may not call CUDA) */
unsigned long long cuwire_host_fn_waits;   /* copies that waited (--stats) */
unsigned long long cuwire_host_fn_wait_ns; /* and how long */

void cuwire_host_fn_queued(uint64_t id)
{
    pthread_mutex_lock(&lock);
    if (n_unrun == cap_unrun) {
        size_t cap = cap_unrun ? 2 * cap_unrun : 64;
        uint64_t *grown = realloc(unrun, cap * sizeof *grown);
        if (!grown) { /* (not waited for: the copy reads the memory now, as before) */
            pthread_mutex_unlock(&lock);
            return;
        }
        unrun = grown, cap_unrun = cap;
    }
    unrun[n_unrun++] = id;
    last_queued = id > last_queued ? id : last_queued;
    stopped = 0;
    pthread_mutex_unlock(&lock);
}

/* The function of `id` ran (or never will: its record was not queued). */
void cuwire_host_fn_done(uint64_t id)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_unrun; i++)
        if (unrun[i] == id) {
            unrun[i] = unrun[--n_unrun];
            break;
        }
    pthread_cond_broadcast(&ran);
    pthread_mutex_unlock(&lock);
}

/* The calling thread (callbacks.c's) starts (1) or ends (0) running a host function. */
void cuwire_host_fn_running(int running) { in_host_fn = running; }

/* The session's host functions stop (callbacks.c): those not run will not be, and no one waits for them. */
void cuwire_host_fns_stopped(void)
{
    pthread_mutex_lock(&lock);
    n_unrun = 0;
    stopped = 1;
    pthread_cond_broadcast(&ran);
    pthread_mutex_unlock(&lock);
}

static int unrun_up_to(uint64_t last) /* (the lock held) */
{
    for (size_t i = 0; i < n_unrun; i++)
        if (unrun[i] <= last)
            return 1;
    return 0;
}

/* Wait until the host functions queued so far have run (the server runs the streams meanwhile: the records
 * were sent when queued). 0, or, when they have not run within WAIT_S, CUDA_ERROR_NOT_SUPPORTED, said by
 * name: not a hang. */
int cuwire_host_functions_wait(void)
{
    if (!__atomic_load_n(&n_unrun, __ATOMIC_RELAXED) || in_host_fn)
        return 0;
    void *gil = cuwire_gil_release(); /* (a host function may need the GIL this thread holds) */
    struct timespec began, ended;
    clock_gettime(CLOCK_MONOTONIC, &began);
    pthread_mutex_lock(&lock);
    uint64_t last = last_queued;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    int late = 0;
    while (!late && !stopped && unrun_up_to(last))
        late = pthread_cond_timedwait(&ran, &lock, &until) == ETIMEDOUT;
    pthread_mutex_unlock(&lock);
    cuwire_gil_restore(gil);
    clock_gettime(CLOCK_MONOTONIC, &ended);
    __atomic_add_fetch(&cuwire_host_fn_waits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&cuwire_host_fn_wait_ns,
                       (unsigned long long)((ended.tv_sec - began.tv_sec) * 1000000000LL + ended.tv_nsec - began.tv_nsec),
                       __ATOMIC_RELAXED);
    if (!late)
        return 0;
    cuwire_say_once_per_name("cuwire: not supported over TCP: a copy from page-locked memory queued after host "
                             "functions of the program's that did not run within 30 s (the client reads that memory "
                             "when the copy is made, after them; a server on this host reads it in stream order); "
                             "refused:", "cuMemcpyHtoDAsync");
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* In a forked child: the parent's host functions are not its own. */
void cuwire_host_fns_forget(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&ran, NULL);
    n_unrun = 0;
    stopped = 0;
}
