/* cuwire client: calls that wait for the server, made in C without the client's Python.
 *
 * A call whose arguments are scalars and handles (cuStreamSynchronize, cuEventQuery...) or a small copy
 * from the device goes out as a records frame (transport.py, magic CUW2): the queued calls, then the
 * call's own record, on the session's socket, which the Python side opened and hands over
 * (cuwire_wire_set). The server runs them in its C loop (server/records.c) and answers with the call's
 * status, the first error of the queued calls and the call's result bytes. Python's own exchanges hold
 * the same lock (cuwire_wire_acquire), so frames never interleave and calls go out in the order taken.
 * Anything unusual (no session yet, compression asked for, a broken connection) leaves the call to the
 * Python path, which knows how to say what is wrong.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "frames.h"
#include "runtime.h"
#include "socket_wait.h"
#define CW_RING_IMPLEMENTATION
#define CW_STREAM_IMPLEMENTATION
#pragma GCC visibility push(default) /* exported: the Python half (ring.py, stream.py) calls them too */
#include "shm_ring.h" /* shared memory for payloads: its functions live in this file's object (ring.py calls them) */
#include "stream.h"   /* the session's stream, kept for a resume (stream.py) */
#pragma GCC visibility pop

#define REPLY_MAX (CUWIRE_CALL_RESULT_MAX + 4096 + (64u << 10)) /* result, refusal text, printf output */

/* Each session's connection (routes.h: a program's own server, or each of a device list's). */
static struct wire {
    pthread_mutex_t lock; /* held for a whole exchange: frames never interleave */
    int fd;
    int kept;          /* fd is this file's own from the program's end on (cuwire_wire_keep) */
    cw_stream *stream; /* the session's stream (cuwire/wire/stream.py), or NULL: a break ends it */
} wires[CW_SESSIONS_MAX] = {[0 ... CW_SESSIONS_MAX - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1}};
static long spin_ns; /* how long a wait for the answer polls before it sleeps (socket_wait.h) */

static struct wire *wire_of(int session) { return &wires[session > 0 && session < CW_SESSIONS_MAX ? session : 0]; }

/* What --stats shows of these round trips, all sessions' (runtime.py folds them into its own): under
 * stats_lock, as the totals' counters. */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
#define TRIP_SLOTS 64
static struct {
    uint32_t id;
    uint64_t count, ns;
    uint64_t last_ns; /* the last round trip's: a wait that took longer than the poll sleeps at once */
} trips[TRIP_SLOTS];
/* ...and totals: bytes of frames sent and received, queued calls carried, frames of queued calls sent
 * without waiting, bytes of records and results (cuwire_wire_stats, in this order) */
static uint64_t bytes_out, bytes_in, carried, early, raw_out, raw_in;
static __thread uint64_t my_early; /* the early frames this thread sent (sender.c counts its own) */

/* The session's socket, or -1. Python sets -1 and closes the socket with the lock held (a number that
 * another file may take next must not be used here). Once the socket is kept here, Python's is no longer
 * the one used. */
void cuwire_wire_set(int session, int fd)
{
    struct wire *w = wire_of(session);
    if (!__atomic_load_n(&w->kept, __ATOMIC_ACQUIRE))
        __atomic_store_n(&w->fd, fd, __ATOMIC_RELAXED);
}

/* The program is ending (Python's atexit: runtime.py, at_exit): `fd`, a copy of the session's socket, is
 * this file's own from now on. Python finalizes next, and closes its socket with its objects; natively the
 * driver still works then, and after it, until its exit handler: XLA's teardown waits for its streams as
 * JAX ends. Calls made here go on through this copy until the process's exit handler (start.c). No resume
 * from now on (the session's stream was Python's): a break ends the session. Called with the lock held. */
void cuwire_wire_keep(int session, int fd)
{
    struct wire *w = wire_of(session);
    __atomic_store_n(&w->fd, fd, __ATOMIC_RELAXED);
    w->stream = NULL;
    __atomic_store_n(&w->kept, fd >= 0, __ATOMIC_RELEASE);
}

/* The session's socket for a call made here, or -1: none, or the process's exit handler ran (start.c, where
 * CUDA is deinitialized as the driver's exit handler does it), or Python finalized before the socket was
 * kept here (a program that never reached Python's atexit: a call then takes the path that says what it
 * gets, cuwire_released_at_end). */
static int usable_fd(struct wire *w)
{
    if (cuwire_exit_hook_ran())
        return -1;
    if (!__atomic_load_n(&w->kept, __ATOMIC_ACQUIRE) && cuwire_python_gone())
        return -1;
    return __atomic_load_n(&w->fd, __ATOMIC_RELAXED);
}

/* Whether calls made here go on without Python: the program's end, once the socket is kept here. */
int cuwire_wire_without_python(int session)
{
    struct wire *w = wire_of(session);
    return __atomic_load_n(&w->kept, __ATOMIC_ACQUIRE) && usable_fd(w) >= 0;
}

uint64_t cuwire_wire_my_early(void) { return my_early; }

int cuwire_wire_in_c(int session)
{
    struct wire *w = wire_of(session);
    return usable_fd(w) >= 0 && !__atomic_load_n(&w->kept, __ATOMIC_ACQUIRE);
}

/* The session broke: Python says so once and refuses what follows; once Python is gone, this says it. */
static void lost(struct wire *w, const char *why)
{
    char message[256];
    snprintf(message, sizeof message, "lost the cuwire server: %s", why);
    if (!__atomic_load_n(&w->kept, __ATOMIC_ACQUIRE)) {
        cuwire_py_wire_broken((int)(w - wires), message);
        return;
    }
    pthread_mutex_lock(&w->lock);
    int fd = __atomic_exchange_n(&w->fd, -1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&w->lock);
    if (fd >= 0) {
        close(fd);
        fprintf(stderr, "cuwire: %s\n", message);
    }
}

/* The session's stream, which the Python side made (stream.py; NULL: none). Set with the lock held. */
void cuwire_wire_stream(int session, void *s) { wire_of(session)->stream = s; }

/* How long, in microseconds, a wait for the server's answer polls the socket before it sleeps. */
void cuwire_wire_spin(long microseconds) { spin_ns = microseconds * 1000; }

/* In a forked child: the parent's socket is not its own, and a thread of the parent may have held the
 * lock at the fork. */
void cuwire_wire_forget(void)
{
    pthread_mutex_init(&stats_lock, NULL);
    for (int i = 0; i < CW_SESSIONS_MAX; i++) {
        pthread_mutex_init(&wires[i].lock, NULL);
        wires[i].fd = -1;
        wires[i].kept = 0;
        wires[i].stream = NULL; /* (the parent's: the Python side's object, which the child forgets too) */
    }
}

void cuwire_wire_acquire(int session) { pthread_mutex_lock(&wire_of(session)->lock); }

void cuwire_wire_release(int session) { pthread_mutex_unlock(&wire_of(session)->lock); }

/* Up to `max` (function id, round trips, nanoseconds waited) of calls made here; how many there are.
 * totals[6]: the totals above. */
int cuwire_wire_stats(uint32_t *ids, uint64_t *counts, uint64_t *ns, int max, uint64_t *totals)
{
    int n = 0;
    pthread_mutex_lock(&stats_lock);
    for (int i = 0; i < TRIP_SLOTS && n < max; i++)
        if (trips[i].count) {
            ids[n] = trips[i].id;
            counts[n] = trips[i].count;
            ns[n++] = trips[i].ns;
        }
    const uint64_t now[6] = {bytes_out, bytes_in, carried, early, raw_out, raw_in};
    memcpy(totals, now, sizeof now);
    pthread_mutex_unlock(&stats_lock);
    return n;
}

static void note_trip(uint32_t id, uint64_t ns) /* stats_lock held */
{
    for (int i = 0, j = (int)(id % TRIP_SLOTS); i < TRIP_SLOTS; i++, j = (j + 1) % TRIP_SLOTS)
        if (trips[j].id == id || !trips[j].count) {
            trips[j].id = id;
            trips[j].count++;
            trips[j].ns += ns;
            trips[j].last_ns = ns;
            return;
        }
}

/* How long the wait for the answer to a call of `id` polls: not at all when its last round trip took
 * longer than the poll would last (it waits for the GPU's work; polling would only take a core). */
static long spin_for(uint32_t id)
{
    pthread_mutex_lock(&stats_lock);
    long spin = spin_ns;
    for (int i = 0, j = (int)(id % TRIP_SLOTS); i < TRIP_SLOTS && trips[j].count; i++, j = (j + 1) % TRIP_SLOTS)
        if (trips[j].id == id) {
            spin = trips[j].last_ns > (uint64_t)spin_ns ? 0 : spin_ns;
            break;
        }
    pthread_mutex_unlock(&stats_lock);
    return spin;
}

static uint64_t now_ns(void) { return cw_now_ns(); }

/* Sends all of buf; 0, or -1 (errno) when the connection broke or the peer closed it meanwhile (a peer
 * whose window stays full and that then closes would otherwise hold the send for good). */
int cuwire_send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {fd, POLLOUT | POLLIN | POLLRDHUP, 0};
            if (poll(&p, 1, -1) < 0 && errno != EINTR)
                return -1;
            if (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
                errno = ECONNRESET;
                return -1;
            }
            continue;
        }
        return -1;
    }
    return 0;
}

/* Device printf output the server sent, to the program's stdout after what the program printed itself (its
 * stdio buffer flushed first), as the driver's own printing would have put it. */
void cuwire_write_output(const char *buf, size_t len)
{
    fflush(stdout);
    while (len) {
        ssize_t n = write(1, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}


/* The session's connection broke: 1 when its stream resumed it (the Python side: SocketTransport.resume;
 * the same descriptor now holds the new connection, and what the server lacked was sent again). errno is
 * the break's again when it did not. */
static int resumed(struct wire *w)
{
    int broke = errno;
    if (w->stream && cuwire_py_resume((int)(w - wires)))
        return 1;
    errno = broke;
    return 0;
}

/* A thread that sends for the program (sender.c) leaves a broken connection to the program's next call:
 * resuming or giving up goes through Python, whose lock a program's thread may hold while it waits for
 * the wire's, held here. What it sent is kept in the stream, so a resume sends it again. */
static __thread int quiet;

void cuwire_wire_quiet_thread(void) { quiet = 1; }

/* Send on the session's connection (its lock held): kept first, so that a resume sends what did not arrive. */
static int wire_send(struct wire *w, int fd, const char *buf, size_t len)
{
    cw_stream_sent(w->stream, buf, len);
    return cuwire_send_all(fd, buf, len) == 0 || (!quiet && resumed(w)) ? 0 : -1;
}

/* Receives len bytes into buf, polling up to spin ns before it sleeps (socket_wait.h); 0, or -1 when the
 * connection broke or ended (ECONNRESET). On the session's connection (`w` given, its lock held) each
 * byte is counted, and a break is resumed where it can be; on another (the host-function connection) a
 * break is the end. */
static int receive(struct wire *w, int fd, char *buf, size_t len, long spin)
{
    while (len) {
        ssize_t n = cw_recv_spin(fd, buf, len, spin);
        if (n > 0) {
            cw_stream_received(w ? w->stream : NULL, (uint64_t)n);
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (!(w && w->stream && resumed(w))) {
            if (n == 0)
                errno = ECONNRESET;
            return -1;
        }
    }
    return 0;
}

int cuwire_recv_all(int fd, char *buf, size_t len, long spin) { return receive(NULL, fd, buf, len, spin); }

/* (struct cw_frame_header: cuwire/wire/frames.h) */

/* The server's answer to a records frame (server/session.py, run_call). */
/* (struct cw_call_reply: cuwire/wire/frames.h) */

/* Make the call whose record is rec (function id fn) after the session's queued calls, in one round trip; its
 * result bytes (exactly result_len of them) go to `result`. The call's CUDA result, or -1 when the call
 * must take the Python path (nothing was sent then). */
int cuwire_call(int session, uint32_t fn, const void *rec, uint32_t size, void *result, uint32_t result_len)
{
    struct wire *w = wire_of(session);
    if (usable_fd(w) < 0 || result_len > CUWIRE_CALL_RESULT_MAX)
        return -1;
    int changed = cuwire_managed_before_call(); /* the program's changes to managed memory go first */
    if (changed)
        return changed;
    pthread_mutex_lock(&w->lock);
    int fd = usable_fd(w);
    if (fd < 0) {
        pthread_mutex_unlock(&w->lock);
        return -1;
    }
    char *queued;
    uint64_t count;
    size_t queued_len = cuwire_queue_take(session, &queued, &count);
    size_t len = sizeof(struct cw_frame_header) + queued_len + 8 + size;
    char *frame = malloc(len);
    if (!frame) {
        pthread_mutex_unlock(&w->lock);
        free(queued);
        return CUDA_ERROR_OUT_OF_MEMORY; /* the queued calls are lost with the memory: say so */
    }
    struct cw_frame_header h = {CW_MAGIC_RECORDS, (uint32_t)(len - sizeof h), 0};
    memcpy(frame, &h, sizeof h);
    if (queued_len)
        memcpy(frame + sizeof h, queued, queued_len);
    free(queued);
    memcpy(frame + sizeof h + queued_len, &fn, 4);
    memcpy(frame + sizeof h + queued_len + 4, &size, 4);
    memcpy(frame + sizeof h + queued_len + 8, rec, size);

    uint64_t t0 = now_ns();
    static char replies[CW_SESSIONS_MAX][REPLY_MAX]; /* (each under its session's lock) */
    char *reply = replies[w - wires];
    struct cw_frame_header rh;
    struct cw_call_reply r = {0};
    const char *why = NULL;
    long spin = spin_for(fn);
    cuwire_note_sent(1);
    if (wire_send(w, fd, frame, len) != 0 || receive(w, fd, (char *)&rh, sizeof rh, spin) != 0)
        why = strerror(errno);
    else if (rh.magic != CW_MAGIC_RECORDS || rh.payload || rh.size < sizeof r || rh.size > REPLY_MAX)
        why = "the server's answer to a records frame is not one";
    else if (receive(w, fd, reply, rh.size, spin_ns) != 0)
        why = strerror(errno);
    else {
        memcpy(&r, reply, sizeof r);
        if ((uint64_t)sizeof r + r.result_len + r.error_len + r.output_len != rh.size)
            why = "the server's answer to a records frame does not add up";
    }
    free(frame);
    int status = CUDA_ERROR_UNKNOWN;
    char refused[256] = "";
    if (!why) {
        pthread_mutex_lock(&stats_lock);
        note_trip(fn, now_ns() - t0);
        bytes_out += len;
        bytes_in += sizeof rh + rh.size;
        raw_out += len - sizeof h;
        raw_in += r.result_len;
        carried += count;
        pthread_mutex_unlock(&stats_lock);
        status = r.status == 0 && r.queued_error ? r.queued_error : r.status;
        if (r.error_len) /* the server refused the frame (a malformed record) */
            snprintf(refused, sizeof refused, "%.*s", (int)r.error_len, reply + sizeof r + r.result_len);
        else if (status == 0 && r.result_len != result_len)
            why = "the server's answer to a records frame carries a result of another size";
        else if (status == 0 && result_len)
            memcpy(result, reply + sizeof r, result_len);
    }
    if (!why && r.output_len) /* device printf output, in order with the program's own */
        cuwire_write_output(reply + sizeof r + r.result_len + r.error_len, r.output_len);
    pthread_mutex_unlock(&w->lock);

    if (why) { /* the session is gone */
        lost(w, why);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    if (refused[0]) { /* as runtime.py says it */
        fprintf(stderr, "cuwire: the server refused a call: %s\n", refused);
        return CUDA_ERROR_UNKNOWN;
    }
    return status;
}

#define SEND_AT_ONCE 16384 /* bytes of an early frame copied behind its header, to go in one send */

/* Send the queued calls now, without waiting for an answer (CW_MAGIC_QUEUED): the server, and the GPU with it,
 * starts on them while the program goes on. Their first error comes with the next answer, as CUDA's
 * asynchronous errors do. 0, or -1 when the Python path must send them (nothing was sent then), or
 * CUDA_ERROR_DEVICE_UNAVAILABLE when the connection broke. */
int cuwire_wire_send_queued(int session)
{
    struct wire *w = wire_of(session);
    if (usable_fd(w) < 0)
        return -1;
    pthread_mutex_lock(&w->lock);
    int fd = usable_fd(w);
    if (fd < 0) {
        pthread_mutex_unlock(&w->lock);
        return -1;
    }
    char *queued;
    uint64_t count;
    size_t queued_len = cuwire_queue_take(session, &queued, &count);
    if (!queued_len) {
        pthread_mutex_unlock(&w->lock);
        free(queued);
        return 0;
    }
    struct cw_frame_header h = {CW_MAGIC_QUEUED, (uint32_t)queued_len, 0};
    const char *why = NULL; /* (its records were counted as queued: client/completion.c) */
    /* One send for a frame of a few records, the usual early send: each send costs the program's thread the
     * kernel's whole TCP path (and a wake-up of the reader), so the header does not go alone */
    char one[SEND_AT_ONCE];
    int sent;
    if (sizeof h + queued_len <= sizeof one) {
        memcpy(one, &h, sizeof h);
        memcpy(one + sizeof h, queued, queued_len);
        sent = wire_send(w, fd, one, sizeof h + queued_len);
    } else {
        sent = wire_send(w, fd, (const char *)&h, sizeof h) == 0 ? wire_send(w, fd, queued, queued_len) : -1;
    }
    if (sent != 0)
        why = strerror(errno);
    else {
        pthread_mutex_lock(&stats_lock);
        bytes_out += sizeof h + queued_len;
        raw_out += queued_len;
        carried += count;
        early++;
        pthread_mutex_unlock(&stats_lock);
        my_early++;
    }
    free(queued);
    pthread_mutex_unlock(&w->lock);
    if (why) {
        if (!quiet)
            lost(w, why);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    return 0;
}
