/* cuwire client: what the client knows the GPU has finished, so that a synchronization or a query that
 * follows a finished one, with nothing sent to the server since, is answered here without a round trip.
 *
 * A program that reads a result (PyTorch's `loss.item()`: a copy to pageable memory, then
 * cudaStreamSynchronize) or polls an event it recorded before the copy asks the GPU twice for what the
 * first answer already told: at a distance each ask is a network round trip. So every request or queued
 * record the client sends is counted (cuwire_note_sent; wire.c, queue.c, runtime.py), and a call whose
 * annotation says what it `completes` (codegen/annotations.py) notes, once it waited for the server and
 * succeeded, the streams, events or context it finished, with the count it was sent at. While the count
 * has not moved since, the same waits and queries (`answered_when_done`) are answered CUDA_SUCCESS here:
 * nothing can have been queued on them, and no error of queued work can be pending, since nothing was
 * queued. Any call that goes to the server (a launch, a copy, a free) moves the count and ends what is
 * known; so does a call that sends nothing but returns without waiting (a queued copy into shared memory).
 * What is known covers the streams named in those calls, and the context's null stream; a context
 * synchronization covers itself too, and so does the null stream's while the program has made no
 * non-blocking stream (the null stream then waits for all the others).
 *
 * A copy to the device that the client queued with its bytes (calls.c) onto a stream known finished does
 * not end what is known: it cannot fail (its destination lies in one of the session's allocations, and no
 * work that could have failed was queued since), so the stream is only "finished but for copies". A
 * synchronization of such a stream (PyTorch's `tensor.to("cuda")` from pageable memory: a copy, then
 * cudaStreamSynchronize) is then queued as a barrier instead of waited for (cuwire_sync_after_copies, the
 * annotation's `queued_when`): the bytes are the client's already, and the server, which runs one
 * session's records in order, makes every later call after the stream finished. Not once the program has
 * shared memory with another process (IPC, shareable handles): that process's calls come on another
 * connection, and would not wait for the barrier.
 *
 * What is known holds to the process's exit handler (start.c), not only while Python runs: from Python's
 * atexit on, calls go on in C (wire.c keeps the session's socket), and XLA's teardown, after the
 * interpreter finalized, synchronizes and queries its streams one by one as JAX ends.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

static uint64_t sent;                /* requests and queued records sent, all threads */
static __thread uint64_t my_sent;     /* the count at this thread's last send */
static __thread uint64_t my_waited;   /* ...and at its last send whose answer it waited for */
static __thread uint64_t my_sends;    /* how many sends this thread made */
unsigned long long cuwire_answered_done; /* calls answered here (--stats) */

static __thread uint64_t releasing; /* a handle whose destroy this thread is queueing (cuwire_note_releasing) */

void cuwire_note_sent(int waits)
{
    uint64_t at = __atomic_add_fetch(&sent, 1, __ATOMIC_ACQ_REL);
    my_sent = at;
    my_sends++;
    if (waits)
        my_waited = at;
}

/* What a call saw before it went out: the count of everything sent, and of its thread's sends. */
void cuwire_done_before(uint64_t *all, uint64_t *mine)
{
    *all = __atomic_load_n(&sent, __ATOMIC_ACQUIRE);
    *mine = my_sends;
}

#define KNOWN_MAX 8
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint64_t at;  /* the count when this was known; valid while nothing more was sent (0: nothing known) */
    uint64_t context;
    int whole_context; /* a context synchronization: the context itself is finished */
    int n_streams, n_events, n_copying;
    uint64_t streams[KNOWN_MAX], events[KNOWN_MAX];
    uint64_t copying[KNOWN_MAX]; /* streams finished but for copies to the device queued since */
} known;

static int shares_memory; /* the program shared device memory with another process: no barriers */
static __thread uint64_t barrier_at; /* this thread queued a barrier when this many had been sent (0: none) */

/* Events the program recorded outside a capture: on which stream, in which context (for the null stream).
 * Direct-mapped: an event whose slot another took is simply not known. */
#define HANDLE_SLOTS 1024
static struct {
    uint64_t event, stream, context;
} recorded[HANDLE_SLOTS];

#define STREAM_LEGACY 0x1     /* CU_STREAM_LEGACY: the null stream, as 0 is */
#define STREAM_PER_THREAD 0x2 /* CU_STREAM_PER_THREAD */

static uint64_t stream_key(uint64_t stream) { return stream == STREAM_LEGACY ? 0 : stream; }

/* The null stream and the per-thread stream are the caller's context's; other handles are unique. */
static int special(uint64_t stream) { return stream == 0 || stream == STREAM_PER_THREAD; }

static size_t slot_of(uint64_t handle) { return (size_t)((handle >> 4) * 0x9E3779B97F4A7C15ull >> 54) % HANDLE_SLOTS; }

static int has(const uint64_t *list, int n, uint64_t value)
{
    for (int i = 0; i < n; i++)
        if (list[i] == value)
            return 1;
    return 0;
}

static void drop(uint64_t *list, int *n, uint64_t value)
{
    for (int i = 0; i < *n; i++)
        if (list[i] == value) {
            list[i] = list[--*n];
            return;
        }
}

/* Non-blocking streams the program created: while there is none, a synchronous copy on the null stream
 * (which waits for every blocking stream) has finished the whole context. */
static int nonblocking_streams;

int cuwire_note_stream_flags(CUstream *stream, unsigned int flags)
{
    if (flags & CU_STREAM_NON_BLOCKING)
        __atomic_store_n(&nonblocking_streams, 1, __ATOMIC_RELEASE);
    return -1; /* created by the server, as usual */
}

/* Streams handle_pools.c gave out and the program has not destroyed, with their context (direct-mapped:
 * a stream whose slot another took is simply not known). */
static struct {
    uint64_t stream, context;
} given[HANDLE_SLOTS];

/* handle_pools.c gave out `stream`, made in `context`. */
void cuwire_note_stream_given(uint64_t stream, uint64_t context)
{
    size_t slot = slot_of(stream);
    pthread_mutex_lock(&lock);
    given[slot].stream = stream;
    given[slot].context = context;
    pthread_mutex_unlock(&lock);
}

/* Lock held; `known` is valid. A context synchronization finished every stream of the context: those the
 * client gave out know theirs; of the others, those named since are known. */
static int stream_finished(uint64_t stream, uint64_t context)
{
    if (special(stream))
        return context == known.context && has(known.streams, known.n_streams, stream);
    if (has(known.streams, known.n_streams, stream))
        return 1;
    size_t slot = slot_of(stream);
    return known.whole_context && given[slot].stream == stream && given[slot].context == known.context;
}

static int valid_locked(void) { return known.at && known.at == __atomic_load_n(&sent, __ATOMIC_ACQUIRE); }

/* A `fast` answer: 0 (CUDA_SUCCESS) when what the call waits for is known finished, else -1. */
int cuwire_known_done(int kind, uint64_t handle)
{
    if (!__atomic_load_n(&known.at, __ATOMIC_ACQUIRE) || cuwire_forked || cuwire_exit_hook_ran())
        return -1; /* the usual path says what is wrong */
    uint64_t context = cuwire_current_context();
    int done = 0;
    pthread_mutex_lock(&lock);
    if (valid_locked()) {
        if (kind == CUWIRE_DONE_CONTEXT)
            done = known.whole_context && (handle ? handle : context) == known.context;
        else if (kind == CUWIRE_DONE_STREAM)
            done = stream_finished(stream_key(handle), context);
        else if (has(known.events, known.n_events, handle))
            done = 1;
        else {
            size_t slot = slot_of(handle);
            done = recorded[slot].event == handle && stream_finished(recorded[slot].stream, recorded[slot].context);
        }
    }
    pthread_mutex_unlock(&lock);
    if (done)
        __atomic_add_fetch(&cuwire_answered_done, 1, __ATOMIC_RELAXED);
    return done ? 0 : -1;
}

/* After a call that succeeded: it finished `handle` (of `kind`) if its last act was a wait for the server's
 * answer. all/mine: cuwire_done_before's, taken before the call. */
void cuwire_note_done(int kind, uint64_t handle, uint64_t all, uint64_t mine)
{
    uint64_t sends = my_sends - mine;
    int barrier = barrier_at && barrier_at == all && sends == 1; /* the call was queued as a barrier */
    barrier_at = 0;
    if (!sends || (my_waited != my_sent && !barrier))
        return; /* answered without the server, or it only queued (a copy into shared memory) */
    uint64_t context = cuwire_current_context();
    if (kind == CUWIRE_DONE_CONTEXT && handle && handle != context)
        return; /* another context than the caller's: its null stream is not the caller's (kept simple) */
    pthread_mutex_lock(&lock);
    if (__atomic_load_n(&sent, __ATOMIC_ACQUIRE) != my_sent) {
        pthread_mutex_unlock(&lock); /* another thread sent meanwhile: nothing can be said */
        return;
    }
    /* what was known before the call still holds if only the call's own sends came since: each call that
     * notes finishes whatever it queued itself */
    int keep = known.at && known.at == all && my_sent - all == sends && known.context == context;
    if (!keep) {
        known.whole_context = 0;
        known.n_streams = known.n_events = known.n_copying = 0;
    }
    known.at = my_sent;
    known.context = context;
    if (kind == CUWIRE_DONE_STREAM && stream_key(handle) == 0 && !__atomic_load_n(&nonblocking_streams, __ATOMIC_ACQUIRE))
        kind = CUWIRE_DONE_CONTEXT; /* the null stream waited for every stream there is */
    if (kind == CUWIRE_DONE_CONTEXT) {
        known.whole_context = 1;
        for (int i = 0; i < known.n_copying; i++) /* (every stream finished its copies too) */
            if (!has(known.streams, known.n_streams, known.copying[i]) && known.n_streams < KNOWN_MAX)
                known.streams[known.n_streams++] = known.copying[i];
        known.n_copying = 0;
        handle = 0; /* and its null stream */
        kind = CUWIRE_DONE_STREAM;
    }
    if (kind == CUWIRE_DONE_STREAM) {
        handle = stream_key(handle);
        drop(known.copying, &known.n_copying, handle);
        if (!has(known.streams, known.n_streams, handle) && known.n_streams < KNOWN_MAX)
            known.streams[known.n_streams++] = handle;
    } else if (!has(known.events, known.n_events, handle) && known.n_events < KNOWN_MAX) {
        known.events[known.n_events++] = handle;
    }
    pthread_mutex_unlock(&lock);
}

/* calls.c queued a copy to the device, with its bytes, into one of the session's allocations, on `stream`;
 * `all` is cuwire_done_before's count, taken before. When the stream was known finished and nothing else
 * was sent since, it is now finished but for copies (see the top); else what is known ended already. */
void cuwire_note_copy_queued(uint64_t stream, uint64_t all)
{
    uint64_t key = stream_key(stream), context = cuwire_current_context();
    pthread_mutex_lock(&lock);
    int copying = has(known.copying, known.n_copying, key);
    if (known.at && known.at == all && __atomic_load_n(&sent, __ATOMIC_ACQUIRE) == all + 1 &&
        !__atomic_load_n(&shares_memory, __ATOMIC_ACQUIRE) && (!special(key) || known.context == context) &&
        (copying || (has(known.streams, known.n_streams, key) && known.n_copying < KNOWN_MAX))) {
        drop(known.streams, &known.n_streams, key);
        if (!copying)
            known.copying[known.n_copying++] = key;
        known.whole_context = 0; /* (the context has work again) */
        known.at = all + 1;
    }
    pthread_mutex_unlock(&lock);
}

/* handle_pools.c queues the destroy of a stream or event it gave out and knows alive: it adds no work and
 * cannot fail, so when its record is the next this thread queues (cuwire_note_queued), what was known
 * finished still is, but for the handle itself. A record between them (a context switch put first) ends
 * what is known, as any other does. */
void cuwire_note_releasing(uint64_t handle)
{
    releasing = handle;
    cuwire_note_stream_gone(handle);
}

/* A stream handle_pools.c gave out is destroyed, or went with its context. */
void cuwire_note_stream_gone(uint64_t stream)
{
    size_t slot = slot_of(stream);
    pthread_mutex_lock(&lock);
    if (given[slot].stream == stream)
        given[slot].stream = 0;
    pthread_mutex_unlock(&lock);
}

/* queue.c appended a record (its bytes, or size UINT32_MAX for one of two parts): counted as sent. */
void cuwire_note_queued(const void *record, uint32_t size)
{
    uint64_t handle = releasing;
    releasing = 0;
    cuwire_note_sent(0);
    if (!handle || size != sizeof handle || memcmp(record, &handle, sizeof handle))
        return;
    pthread_mutex_lock(&lock);
    if (known.at && known.at + 1 == my_sent) { /* nothing else was sent since it was known */
        known.at = my_sent;
        drop(known.streams, &known.n_streams, handle);
        drop(known.events, &known.n_events, handle);
        drop(known.copying, &known.n_copying, handle);
        size_t slot = slot_of(handle);
        if (recorded[slot].event == handle)
            recorded[slot].event = 0;
    }
    pthread_mutex_unlock(&lock);
}

/* cuStreamSynchronize's `queued_when`: 1 when `stream` is finished but for copies queued since (see the
 * top), so that the synchronization is queued as a barrier and answered CUDA_SUCCESS at once. */
int cuwire_sync_after_copies(CUstream stream)
{
    if (!__atomic_load_n(&known.at, __ATOMIC_ACQUIRE) || cuwire_forked || cuwire_exit_hook_ran() ||
        __atomic_load_n(&shares_memory, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t key = stream_key((uint64_t)(uintptr_t)stream), context = cuwire_current_context();
    pthread_mutex_lock(&lock);
    int copying =
        valid_locked() && has(known.copying, known.n_copying, key) && (!special(key) || known.context == context);
    if (copying)
        barrier_at = known.at; /* (cuwire_note_done then notes the stream finished) */
    pthread_mutex_unlock(&lock);
    return copying;
}

/* The program shared device memory with another process (IPC, shareable handles, pool pointers): that
 * process's calls would not wait for a barrier of this one's, so synchronizations wait again. */
void cuwire_note_memory_shared(void) { __atomic_store_n(&shares_memory, 1, __ATOMIC_RELEASE); }

/* cuEventRecord outside a capture: the event's stream (an event recorded in a capture is forgotten). */
void cuwire_note_event_record(uint64_t e, uint64_t stream, int captured)
{
    uint64_t s = stream_key(stream);
    size_t slot = slot_of(e);
    pthread_mutex_lock(&lock);
    if (captured) {
        if (recorded[slot].event == e)
            recorded[slot].event = 0;
    } else {
        recorded[slot].event = e;
        recorded[slot].stream = s;
        recorded[slot].context = special(s) ? cuwire_current_context() : 0;
    }
    pthread_mutex_unlock(&lock);
}

/* The session ended (or a forked child starts over): nothing is known. */
void cuwire_forget_done(void)
{
    pthread_mutex_lock(&lock);
    memset(&known, 0, sizeof known);
    memset(recorded, 0, sizeof recorded);
    memset(given, 0, sizeof given);
    pthread_mutex_unlock(&lock);
}
