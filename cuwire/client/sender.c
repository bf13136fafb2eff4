/* cuwire client: a thread that sends the queued calls (CUWIRE_SEND_THREAD), so that the program's thread only
 * queues them. A queued call that is due to go early (queue.c says when) costs the thread that sends it the
 * kernel's whole TCP path, several microseconds; PyTorch issues a call every 15-45 us, and at the default
 * interval most of them go alone (docs/speed.md). With this thread the program's thread pokes it (an atomic
 * store while the thread polls, a wake-up after it slept) and goes on; what is queued while it sends goes
 * with its next send.
 *
 * Order is kept: the sender takes a session's queue under its wire's lock (wire.c, cuwire_wire_send_queued),
 * as a call that waits does, so a call that waits either goes after the sender's frame or takes the queue
 * itself.
 * Only while the C wire is in use (plain TCP or the Unix socket, no compression or TLS) and Python lives:
 * otherwise the program's thread sends as before (calls.c). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "cuda_api.h"
#include "runtime.h"

#define SENDER_POLL_NS 200000u /* after a send, the thread polls this long for the next before it sleeps */

static int running;          /* the thread was started in this process */
static int pending;          /* a poke it has not taken yet */
static int sleeping;         /* it waits on `wake` */
static uint64_t sent;        /* the frames it sent (--stats) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

static uint64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Waits for a poke: polls SENDER_POLL_NS, then sleeps. A poke after `sleeping` is set finds it set and
 * signals under the lock, so none is lost between the check and the wait. */
static void take_poke(void)
{
    uint64_t until = monotonic_ns() + SENDER_POLL_NS;
    while (!__atomic_exchange_n(&pending, 0, __ATOMIC_SEQ_CST)) {
        if (monotonic_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause(); /* (a spin-wait hint: the core's other thread runs meanwhile) */
#endif
            continue;
        }
        pthread_mutex_lock(&lock);
        __atomic_store_n(&sleeping, 1, __ATOMIC_SEQ_CST);
        while (!__atomic_load_n(&pending, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&wake, &lock);
        __atomic_store_n(&sleeping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&lock);
    }
}

static void *send_loop(void *arg)
{
    (void)arg;
    cuwire_wire_quiet_thread(); /* a break is left to the program's next call: it resumes or says so */
    for (;;) {
        take_poke();
        for (int session = 0; session < cuwire_route_sessions(); session++) /* (a device list: each its own) */
            if (cuwire_queue_waiting(session))
                cuwire_wire_send_queued(session);
        __atomic_store_n(&sent, cuwire_wire_my_early(), __ATOMIC_RELEASE);
    }
    return NULL;
}

static void forked_child(void) { running = 0; } /* (the thread is the parent's) */

void cuwire_sender_start(void)
{
    if (__atomic_load_n(&running, __ATOMIC_ACQUIRE))
        return;
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, send_loop, NULL) == 0) {
        pthread_setname_np(thread, "cuwire-send");
        static int registered;
        if (!registered++)
            pthread_atfork(NULL, NULL, forked_child);
        __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
    }
    pthread_attr_destroy(&attr);
}

uint64_t cuwire_sender_sent(void) { return __atomic_load_n(&sent, __ATOMIC_ACQUIRE); }

int cuwire_sender_poke(int session)
{
    if (!__atomic_load_n(&running, __ATOMIC_ACQUIRE) || !cuwire_wire_in_c(session))
        return 0;
    __atomic_store_n(&pending, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&lock);
        pthread_cond_signal(&wake);
        pthread_mutex_unlock(&lock);
    }
    return 1;
}
