/* The server's loop over queued calls, in C: Python costs several microseconds per record (unpacking,
 * handle checks, a cffi call), the driver call itself about one.
 *
 * A batch's records come as (u32 function id, u32 size, size bytes) each, packed by the client's C
 * (generated/client_stubs.c, client/queue.c). Generated functions are unpacked by
 * generated/server_records.c; cuwire's own records (a kernel launch, with or without attributes, and
 * the switch of the session thread's context) are here. Nothing from the wire reaches CUDA unchecked:
 * every handle must be one the session made, which the Python session tells this loop as it makes them
 * (Session.owns_handle, custom._describe); a record that does not parse refuses the batch.
 *
 * The CUDA functions are called through a table the Python side fills (server/records.py): the real
 * library's functions, or the emulated device's as cffi callbacks, so CI runs this same loop.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "frames.h"
#include "cuda_api.h"
#include "socket_wait.h"
#include "shm_ring.h" /* cw_ring: host functions are posted through it (the implementation follows, records_build.py) */
#include "stream.h"   /* cw_stream: the session's connection, kept for a resume */

#define CW_INVALID_HANDLE 400 /* CUDA_ERROR_INVALID_HANDLE */
#define CW_INVALID_VALUE 1    /* CUDA_ERROR_INVALID_VALUE */
#define CW_OUT_OF_MEMORY 2    /* CUDA_ERROR_OUT_OF_MEMORY */

typedef struct cw_records cw_records;

/* The service-time histogram's upper bounds, in microseconds (the last bucket: beyond them all). */
#define CW_LATENCY_BUCKETS 11
static const uint64_t CW_LATENCY_BOUNDS[CW_LATENCY_BUCKETS - 1] = {10, 30, 100, 300, 1000, 3000, 10000,
                                                                    100000, 1000000, 10000000};

/* The handle kinds the loop checks (struct tags, as the model names them). */
#define CW_KINDS(X)                                                                                         \
    X(CUstream_st) X(CUevent_st) X(CUctx_st) X(CUmemPoolHandle_st) X(CUgraphExec_st) X(CUgraphNode_st)    \
        X(CUarray_st) X(CUfunc_st) X(CUkern_st)
enum {
#define CW_KIND_ENUM(k) CW_KIND_##k,
    CW_KINDS(CW_KIND_ENUM)
    CW_N_KINDS
};

/* A set of handles: open addressing on the value, 0 marks a free slot, a removed one becomes TOMB. */
#define TOMB UINT64_MAX
typedef struct {
    uint64_t *slots;
    size_t cap, used; /* used counts live and removed slots */
    size_t live;      /* ...and live the handles in it */
} cw_set;

/* A kernel or function the session looked up: launches name it by the handle the client holds. */
typedef struct {
    uint64_t key;
    CUfunction func;
    int is_kernel;    /* a CUkernel (a graph's kernel node takes it as `kern`), else a CUfunction */
    uint32_t n, size; /* parameters; bytes of the parameter buffer (the last offset + size) */
    char *buf;        /* the parameters are copied here... */
    void **argv;      /* ...and argv[i] points at parameter i, as cuLaunchKernel takes them */
} cw_kernel;

#include "server_records.h"

/* Over TCP: the session's host-function connection (Hello.callbacks): the server writes a host function's
 * id (u64), the client runs it and writes the id back. One host function at a time. */
typedef struct cw_callback_socket {
    int fd; /* -1: none */
    pthread_mutex_t lock;
    pthread_cond_t replaced; /* the client's new connection took the broken one's place (cw_records_callbacks) */
    uint64_t seq;            /* posts so far (struct cw_host_post) */
    long resume_ms;          /* how long a post whose connection broke waits for a new one (0: it is skipped) */
    int stopped;             /* the session ends: posts are skipped */
} cw_callback_socket;

struct cw_records {
    struct {
#define CW_FN_MEMBER(name) __typeof__(name) *name;
        CW_GENERATED_FUNCTIONS(CW_FN_MEMBER)
        CW_FN_MEMBER(cuCtxSetCurrent)
        CW_FN_MEMBER(cuLaunchKernel)
        CW_FN_MEMBER(cuLaunchKernelEx)
        CW_FN_MEMBER(cuMemcpyHtoD_v2)
        CW_FN_MEMBER(cuMemcpyHtoDAsync_v2)
        CW_FN_MEMBER(cuMemcpyDtoH_v2)
        CW_FN_MEMBER(cuMemcpyDtoHAsync_v2)
        CW_FN_MEMBER(cuLaunchHostFunc)
        CW_FN_MEMBER(cuStreamIsCapturing)
        CW_FN_MEMBER(cuThreadExchangeStreamCaptureMode)
        CW_FN_MEMBER(cuGraphExecKernelNodeSetParams_v2)
    } fn;
    /* cuwire's own records (cw_records_ops) */
    uint32_t launch_id, launch_ex_id, set_context_id, copy_id, copy_from_id, copy_shared_id, host_func_id,
        node_set_id, host_copy_id;
    /* page-locked memory of a client over TCP that this process maps at the client's addresses (cw_records_host_add) */
    uint64_t host_at[CW_HOST_RANGES_MOST], host_size[CW_HOST_RANGES_MOST];
    int host_count;
    uint64_t refused_address, refused_size; /* the last device range a record named outside the session's */
    int refused_range;                      /* ... set until the session asks (cw_records_refused_range) */
    int own_context; /* the session has a process and a context of its own (cw_records_own_context) */
    cw_ring *ring;        /* shared memory with a client on this host: host functions are posted there */
    cw_callback_socket callbacks; /* ...or, over TCP, on this connection */
    char *shared;         /* host memory shared with a client on this host (cw_records_shared)... */
    uint64_t shared_size; /* ...of this many bytes; copies to and from it name offsets in it */
    char *out;          /* where the call of a records frame puts its result (cw_records_call)... */
    uint32_t out_cap, out_len; /* ...of at most out_cap bytes */
    cw_set handles[CW_N_KINDS];
    uint64_t *bases, *sizes; /* the session's device memory, sorted by base (cw_records_memory) */
    size_t memory_count, memory_cap;
    cw_kernel *kernels; /* open addressing on key */
    size_t kernels_cap, kernels_used;
    long spin_ns;  /* how long a wait for the next frame polls before it sleeps (socket_wait.h) */
    long idle_ms;  /* a client that sends nothing for this long ends its session (CUWIRE_IDLE_TIMEOUT; 0: never) */
    uint64_t gap_ns; /* how long the last frame after an answer took to come */
    /* what the session's metrics show (cw_records_figures): bytes of frames in and out, and how long
     * each call took from its frame's arrival to its answer's departure, by CW_LATENCY_BOUNDS */
    uint64_t bytes_in, bytes_out, latency_ns, latency[CW_LATENCY_BUCKETS];
    cw_stream *stream;  /* the session's stream, counted and kept for a resume (cuwire/wire/stream.py)... */
    void *resume_arg;   /* ...and what cw_records_resume is given when the connection breaks (NULL: never) */
    void **host_nodes; /* the arguments of the session's graph host nodes (cw_records_host_node) */
    size_t host_nodes_len;
    char why[256]; /* why the last batch was refused */
};

static int cw_refuse(cw_records *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cw_refuse(cw_records *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t cw_hash(uint64_t v, size_t cap)
{
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    v ^= v >> 33;
    return (size_t)v & (cap - 1);
}

static int cw_set_grow(cw_set *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    uint64_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    size_t used = 0;
    for (size_t i = 0; i < t->cap; i++) {
        uint64_t v = t->slots[i];
        if (v && v != TOMB) {
            size_t j = cw_hash(v, cap);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = v;
            used++;
        }
    }
    free(t->slots);
    t->used = used;
    t->slots = slots;
    t->cap = cap;
    return 0;
}

static int cw_set_has(const cw_set *t, uint64_t v)
{
    if (!t->cap || !v || v == TOMB)
        return 0;
    for (size_t j = cw_hash(v, t->cap);; j = (j + 1) & (t->cap - 1)) {
        if (t->slots[j] == v)
            return 1;
        if (!t->slots[j])
            return 0;
    }
}

static int cw_set_add(cw_set *t, uint64_t v)
{
    if (!v || v == TOMB || cw_set_has(t, v))
        return 0;
    if ((t->used + 1) * 2 > t->cap && cw_set_grow(t))
        return -1;
    size_t j = cw_hash(v, t->cap);
    while (t->slots[j] && t->slots[j] != TOMB)
        j = (j + 1) & (t->cap - 1);
    if (!t->slots[j])
        t->used++;
    t->slots[j] = v;
    t->live++;
    return 0;
}

static void cw_set_remove(cw_set *t, uint64_t v)
{
    if (!t->cap || !v || v == TOMB)
        return;
    for (size_t j = cw_hash(v, t->cap); t->slots[j]; j = (j + 1) & (t->cap - 1))
        if (t->slots[j] == v) {
            t->slots[j] = TOMB;
            t->live--;
            return;
        }
}

/* Whether the session may pass `v` as a handle of this kind: NULL and the special streams
 * (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) always. */
static int cw_owns(const cw_records *s, int kind, uint64_t v)
{
    if (!v || (kind == CW_KIND_CUstream_st && (v == 1 || v == 2)))
        return 1;
    return cw_set_has(&s->handles[kind], v);
}

static cw_kernel *cw_kernel_find(const cw_records *s, uint64_t key)
{
    if (!s->kernels_cap || !key)
        return NULL;
    for (size_t j = cw_hash(key, s->kernels_cap);; j = (j + 1) & (s->kernels_cap - 1)) {
        if (s->kernels[j].key == key)
            return &s->kernels[j];
        if (!s->kernels[j].key)
            return NULL;
    }
}

/* The driver's handle for `v`: itself, or, for a kernel the client named (CW_NAME_TAG: Session.give_name),
 * the kernel its key stands for. An unknown name stays itself, which the session owns no handle of. */
static uint64_t cw_real(const cw_records *s, uint64_t v)
{
    if (!(v & CW_NAME_TAG))
        return v;
    cw_kernel *k = cw_kernel_find(s, v);
    return k ? (uint64_t)(uintptr_t)k->func : v;
}

static int cw_kernels_grow(cw_records *s)
{
    size_t cap = s->kernels_cap ? s->kernels_cap * 2 : 64;
    cw_kernel *k = calloc(cap, sizeof *k);
    if (!k)
        return -1;
    for (size_t i = 0; i < s->kernels_cap; i++)
        if (s->kernels[i].key) {
            size_t j = cw_hash(s->kernels[i].key, cap);
            while (k[j].key)
                j = (j + 1) & (cap - 1);
            k[j] = s->kernels[i];
        }
    free(s->kernels);
    s->kernels = k;
    s->kernels_cap = cap;
    return 0;
}

int cw_records_in_memory(const cw_records *s, uint64_t address, uint64_t size);
void cw_records_observe(cw_records *s, uint64_t ns, uint64_t in, uint64_t out);

/* A device range a generated record names (annotations: `range`, computed without overflow): none, or
 * all of it the session's. A refused one is kept, for the session's log. */
static int cw_device_range(cw_records *s, uint64_t address, unsigned __int128 size)
{
    if (size == 0 || (size <= UINT64_MAX && cw_records_in_memory(s, address, (uint64_t)size)))
        return 1;
    s->refused_address = address;
    s->refused_size = size <= UINT64_MAX ? (uint64_t)size : UINT64_MAX;
    s->refused_range = 1;
    return 0;
}

/* A device range a record names for work on `stream`. A stream that captures puts the range in its graph's
 * node, unread until the graph runs; the driver takes any address there (XLA captures with placeholder
 * addresses while it compiles, and sets the nodes' real ones later). So does the server, where the session has
 * a process and a context of its own: an address outside its memory can then only fault that context. With
 * sessions sharing a context, only the session's own memory, captured or not. */
static int cw_stream_range(cw_records *s, uint64_t address, unsigned __int128 size, uint64_t stream)
{
    if (cw_device_range(s, address, size))
        return 1;
    CUstreamCaptureStatus captured = CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->own_context && s->fn.cuStreamIsCapturing((CUstream)(uintptr_t)stream, &captured) == CUDA_SUCCESS &&
        captured == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        s->refused_range = 0;
        return 1;
    }
    return 0;
}

void cw_records_own_context(cw_records *s, int own) { s->own_context = own; }

/* The last device range a queued record named outside the session's memory, once: 1 and the range, or 0. */
int cw_records_refused_range(cw_records *s, uint64_t *address, uint64_t *size)
{
    if (!s->refused_range)
        return 0;
    s->refused_range = 0;
    *address = s->refused_address;
    *size = s->refused_size;
    return 1;
}

#include "server_records.c"

/* ------------------------------------------------------------------ what the Python session calls */

cw_records *cw_records_new(void)
{
    cw_records *s = calloc(1, sizeof(cw_records));
    if (s) {
        s->callbacks.fd = -1;
        pthread_mutex_init(&s->callbacks.lock, NULL);
        pthread_cond_init(&s->callbacks.replaced, NULL);
    }
    return s;
}

void cw_records_free(cw_records *s)
{
    if (!s)
        return;
    for (int k = 0; k < CW_N_KINDS; k++)
        free(s->handles[k].slots);
    for (size_t i = 0; i < s->kernels_cap; i++) {
        free(s->kernels[i].buf);
        free(s->kernels[i].argv);
    }
    free(s->kernels);
    free(s->bases);
    free(s->sizes);
    for (size_t i = 0; i < s->host_nodes_len; i++)
        free(s->host_nodes[i]);
    free(s->host_nodes);
    free(s);
}

/* The ids of cuwire's own records (generated OP_IDS). */
void cw_records_ops(cw_records *s, uint32_t launch, uint32_t launch_ex, uint32_t set_context, uint32_t copy,
                    uint32_t copy_from, uint32_t node_set)
{
    s->node_set_id = node_set;
    s->launch_id = launch;
    s->launch_ex_id = launch_ex;
    s->set_context_id = set_context;
    s->copy_id = copy;
    s->copy_from_id = copy_from;
}

/* A client on this host: its host functions (HostFunc records) are posted through this shared memory. */
void cw_records_ring(cw_records *s, uint32_t host_func, cw_ring *ring)
{
    s->host_func_id = host_func;
    s->ring = ring;
}

/* A client over TCP: its host functions (HostFunc records) are posted on this connection (the caller keeps
 * it open until the session's streams are done, after cw_records_callbacks_stop). */
void cw_records_callbacks(cw_records *s, uint32_t host_func, int fd, long resume_ms)
{
    s->host_func_id = host_func;
    pthread_mutex_lock(&s->callbacks.lock); /* (a post waiting for a new connection takes this one) */
    s->callbacks.fd = fd;
    s->callbacks.resume_ms = resume_ms;
    pthread_cond_broadcast(&s->callbacks.replaced);
    pthread_mutex_unlock(&s->callbacks.lock);
}

/* The session ends: a host function waiting for the client returns at once (it is skipped), and so does
 * every later one. */
void cw_records_callbacks_stop(cw_records *s)
{
    __atomic_store_n(&s->callbacks.stopped, 1, __ATOMIC_RELAXED);
    int fd = s->callbacks.fd;
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    pthread_mutex_lock(&s->callbacks.lock);
    pthread_cond_broadcast(&s->callbacks.replaced);
    pthread_mutex_unlock(&s->callbacks.lock);
}

/* Host memory shared with the client (its page-locked allocations, cuwire/wire/ring.py): CopyShared records
 * name offsets in it. */
void cw_records_shared(cw_records *s, uint32_t copy_shared, uintptr_t base, uint64_t size)
{
    s->copy_shared_id = copy_shared;
    s->shared = (char *)base;
    s->shared_size = size;
}

/* Page-locked memory of a client over TCP, which this process mapped at the client's address `at` and
 * registered for the GPU (session.py, map_host): HostCopy records (id host_copy) keep it in step with the
 * client's copy. 0, or -1 when the session has CW_HOST_RANGES_MOST of them already. */
int cw_records_host_add(cw_records *s, uint32_t host_copy, uint64_t at, uint64_t size)
{
    if (s->host_count == CW_HOST_RANGES_MOST)
        return -1;
    s->host_copy_id = host_copy;
    s->host_at[s->host_count] = at;
    s->host_size[s->host_count++] = size;
    return 0;
}

void cw_records_host_remove(cw_records *s, uint64_t at)
{
    for (int i = 0; i < s->host_count; i++)
        if (s->host_at[i] == at) {
            s->host_at[i] = s->host_at[--s->host_count];
            s->host_size[i] = s->host_size[s->host_count];
            return;
        }
}

static int cw_in_host(const cw_records *s, uint64_t address, uint64_t n)
{
    for (int i = 0; i < s->host_count; i++)
        if (address >= s->host_at[i] && address - s->host_at[i] <= s->host_size[i] &&
            n <= s->host_size[i] - (address - s->host_at[i]))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ the session's device memory */

/* The index of the last base <= address, or -1. */
static long cw_memory_at(const cw_records *s, uint64_t address)
{
    size_t lo = 0, hi = s->memory_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->bases[mid] <= address)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

/* Device memory of the session (an allocation, a module's global) of `size` bytes at `base`; one already
 * at that base takes the new size. -1 when out of memory. */
int cw_records_memory_add(cw_records *s, uint64_t base, uint64_t size)
{
    long i = cw_memory_at(s, base);
    if (i >= 0 && s->bases[i] == base) {
        s->sizes[i] = size;
        return 0;
    }
    if (s->memory_count == s->memory_cap) {
        size_t cap = s->memory_cap ? s->memory_cap * 2 : 64;
        uint64_t *b = realloc(s->bases, cap * sizeof *b);
        if (!b)
            return -1;
        s->bases = b;
        uint64_t *z = realloc(s->sizes, cap * sizeof *z);
        if (!z)
            return -1;
        s->sizes = z;
        s->memory_cap = cap;
    }
    size_t at = (size_t)(i + 1), n = s->memory_count - at;
    memmove(s->bases + at + 1, s->bases + at, n * sizeof *s->bases);
    memmove(s->sizes + at + 1, s->sizes + at, n * sizeof *s->sizes);
    s->bases[at] = base;
    s->sizes[at] = size;
    s->memory_count++;
    return 0;
}

void cw_records_memory_remove(cw_records *s, uint64_t base)
{
    long i = cw_memory_at(s, base);
    if (i >= 0 && s->bases[i] == base) {
        size_t n = s->memory_count - (size_t)i - 1;
        memmove(s->bases + i, s->bases + i + 1, n * sizeof *s->bases);
        memmove(s->sizes + i, s->sizes + i + 1, n * sizeof *s->sizes);
        s->memory_count--;
    }
}

/* Whether [address, address + size) lies in one piece of the session's device memory: anything else
 * the driver would take for memory of the server's own. */
int cw_records_in_memory(const cw_records *s, uint64_t address, uint64_t size)
{
    long i = cw_memory_at(s, address);
    return i >= 0 && address - s->bases[i] <= s->sizes[i] && size <= s->sizes[i] - (address - s->bases[i]);
}

/* The names of the functions the loop calls, in table order; NULL after the last. */
const char *cw_records_function(int i)
{
    static const char *const names[] = {
#define CW_FN_NAME(name) #name,
        CW_GENERATED_FUNCTIONS(CW_FN_NAME) CW_FN_NAME(cuCtxSetCurrent) CW_FN_NAME(cuLaunchKernel)
            CW_FN_NAME(cuLaunchKernelEx) CW_FN_NAME(cuMemcpyHtoD_v2) CW_FN_NAME(cuMemcpyHtoDAsync_v2)
                CW_FN_NAME(cuMemcpyDtoH_v2) CW_FN_NAME(cuMemcpyDtoHAsync_v2) CW_FN_NAME(cuLaunchHostFunc)
                    CW_FN_NAME(cuStreamIsCapturing) CW_FN_NAME(cuThreadExchangeStreamCaptureMode)
                        CW_FN_NAME(cuGraphExecKernelNodeSetParams_v2) NULL};
    return i >= 0 && i < (int)(sizeof names / sizeof *names) ? names[i] : NULL;
}

/* Function i of the table (in cw_records_function's order) is at `address`. */
void cw_records_set_function(cw_records *s, int i, uintptr_t address)
{
    void **table = (void **)&s->fn;
    if (i >= 0 && (size_t)i < sizeof s->fn / sizeof(void *))
        table[i] = (void *)address;
}

/* The index of a handle kind the loop checks, or -1. */
int cw_records_kind(const char *name)
{
#define CW_KIND_MATCH(k) if (!strcmp(name, #k)) return CW_KIND_##k;
    CW_KINDS(CW_KIND_MATCH)
    return -1;
}

int cw_records_own(cw_records *s, int kind, uint64_t v)
{
    return kind >= 0 && kind < CW_N_KINDS ? cw_set_add(&s->handles[kind], v) : -1;
}

void cw_records_disown(cw_records *s, int kind, uint64_t v)
{
    if (kind >= 0 && kind < CW_N_KINDS)
        cw_set_remove(&s->handles[kind], v);
}

/* The session's handles of a kind the loop checks: this loop's sets are the one list of them (a queued
 * destroy takes its handle out here, records.py). */
int cw_records_owns(const cw_records *s, int kind, uint64_t v)
{
    return kind >= 0 && kind < CW_N_KINDS && cw_set_has(&s->handles[kind], v);
}

size_t cw_records_count(const cw_records *s, int kind)
{
    return kind >= 0 && kind < CW_N_KINDS ? s->handles[kind].live : 0;
}

/* Up to `max` of them into out; how many. */
size_t cw_records_handles(const cw_records *s, int kind, uint64_t *out, size_t max)
{
    size_t n = 0;
    if (kind < 0 || kind >= CW_N_KINDS)
        return 0;
    const cw_set *t = &s->handles[kind];
    for (size_t i = 0; i < t->cap && n < max; i++)
        if (t->slots[i] && t->slots[i] != TOMB)
            out[n++] = t->slots[i];
    return n;
}

/* Launches naming `key` run `func` (a CUkernel when is_kernel) with this parameter layout. -1 if out of
 * memory. */
int cw_records_kernel(cw_records *s, uint64_t key, uintptr_t func, int is_kernel, uint32_t n,
                      const uint32_t *offsets, const uint32_t *sizes)
{
    if (!key)
        return -1;
    uint32_t size = 0;
    for (uint32_t i = 0; i < n; i++)
        if (offsets[i] + sizes[i] > size)
            size = offsets[i] + sizes[i];
    char *buf = calloc(1, size ? size : 1);
    void **argv = calloc(n ? n : 1, sizeof *argv);
    if (!buf || !argv) {
        free(buf);
        free(argv);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        argv[i] = buf + offsets[i];
    cw_kernel *k = cw_kernel_find(s, key);
    if (!k) {
        if ((s->kernels_used + 1) * 2 > s->kernels_cap && cw_kernels_grow(s)) {
            free(buf);
            free(argv);
            return -1;
        }
        size_t j = cw_hash(key, s->kernels_cap);
        while (s->kernels[j].key)
            j = (j + 1) & (s->kernels_cap - 1);
        k = &s->kernels[j];
        s->kernels_used++;
    } else {
        free(k->buf);
        free(k->argv);
    }
    *k = (cw_kernel){key, (CUfunction)func, is_kernel, n, size, buf, argv};
    return 0;
}

/* A kernel launch: the parameters (`len` bytes, at their offsets) and, for cuLaunchKernelEx, `n_attrs`
 * launch attributes. The CUDA result, or -1 when the parameters do not fit the kernel (s->why). */
int cw_records_launch(cw_records *s, uint64_t kernel, const uint32_t *grid, const uint32_t *block,
                      uint32_t shared_mem, uint64_t stream, const char *params, size_t len,
                      const CUlaunchAttribute *attrs, uint32_t n_attrs)
{
    cw_kernel *k = cw_kernel_find(s, kernel);
    if (!k)
        return CW_INVALID_HANDLE;
    if (len != k->size)
        return cw_refuse(s, "kernel parameters: sent %zu bytes, the kernel takes %u", len, k->size);
    if (!cw_owns(s, CW_KIND_CUstream_st, stream))
        return CW_INVALID_HANDLE;
    /* the driver has copied the parameters when the launch returns: one buffer per kernel, reused */
    memcpy(k->buf, params, len);
    void **argv = k->n ? k->argv : NULL;
    CUstream st = (CUstream)(uintptr_t)stream;
    if (!n_attrs)
        return s->fn.cuLaunchKernel(k->func, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem,
                                    st, argv, NULL);
    CUlaunchAttribute copy[16];
    if (n_attrs > sizeof copy / sizeof *copy)
        return cw_refuse(s, "a launch with %u attributes (at most %zu)", n_attrs, sizeof copy / sizeof *copy);
    memcpy(copy, attrs, n_attrs * sizeof *copy); /* attrs may lie unaligned in the record */
    CUlaunchConfig config = {grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem, st, copy,
                             n_attrs};
    return s->fn.cuLaunchKernelEx(&config, k->func, argv, NULL);
}

/* A queued launch (client/launches.c): kernel, grid[3], block[3], shared memory, stream, then for
 * LaunchKernelEx u32 count, u32 pad and the attributes, then the parameters. */
/* (struct cw_launch_head: cuwire/wire/frames.h) */

static int cw_launch_record(cw_records *s, const char *p, uint32_t size, int with_attrs, int *err)
{
    struct cw_launch_head h;
    if (size < sizeof h)
        return cw_refuse(s, "queued launch of %u bytes, shorter than its %zu-byte head", size, sizeof h);
    memcpy(&h, p, sizeof h);
    size_t at = sizeof h;
    uint32_t n_attrs = 0;
    if (with_attrs) {
        if (size < at + 8)
            return cw_refuse(s, "queued launch with attributes of %u bytes is too short", size);
        memcpy(&n_attrs, p + at, 4);
        if ((uint64_t)n_attrs * sizeof(CUlaunchAttribute) > size - at - 8)
            return cw_refuse(s, "queued launch: %u launch attributes run past the record", n_attrs);
        at += 8 + (size_t)n_attrs * sizeof(CUlaunchAttribute);
    }
    if (h.shared_mem > UINT32_MAX)
        return cw_refuse(s, "queued launch: %llu bytes of shared memory", (unsigned long long)h.shared_mem);
    uint32_t grid[3], block[3];
    memcpy(grid, h.grid, sizeof grid);
    memcpy(block, h.block, sizeof block);
    int r = cw_records_launch(s, h.kernel, grid, block, (uint32_t)h.shared_mem, h.stream, p + at, size - at,
                              (const CUlaunchAttribute *)(p + sizeof h + 8), n_attrs);
    if (r < 0)
        return -1;
    *err = r;
    return 1;
}

/* A kernel node's parameters set in an executable graph (struct cw_node_set_head, then the parameters):
 * its graph and node the session's, its kernel one the session looked up. */
static int cw_node_set_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_node_set_head h;
    if (size < sizeof h)
        return cw_refuse(s, "queued kernel node set of %u bytes, shorter than its %zu-byte head", size, sizeof h);
    memcpy(&h, p, sizeof h);
    cw_kernel *k = cw_kernel_find(s, h.kernel);
    if (!k || !cw_owns(s, CW_KIND_CUgraphExec_st, h.exec) || !cw_owns(s, CW_KIND_CUgraphNode_st, h.node)) {
        *err = CW_INVALID_HANDLE;
        return 1;
    }
    if (size - sizeof h != k->size)
        return cw_refuse(s, "kernel node parameters: sent %zu bytes, the kernel takes %u", size - sizeof h, k->size);
    if (h.shared_mem > UINT32_MAX)
        return cw_refuse(s, "queued kernel node set: %llu bytes of shared memory", (unsigned long long)h.shared_mem);
    memcpy(k->buf, p + sizeof h, k->size); /* (the driver copies the parameters before it returns) */
    CUDA_KERNEL_NODE_PARAMS params = {0};
    if (k->is_kernel)
        params.kern = (CUkernel)k->func;
    else
        params.func = k->func;
    params.gridDimX = h.grid[0], params.gridDimY = h.grid[1], params.gridDimZ = h.grid[2];
    params.blockDimX = h.block[0], params.blockDimY = h.block[1], params.blockDimZ = h.block[2];
    params.sharedMemBytes = (unsigned)h.shared_mem;
    params.kernelParams = k->n ? k->argv : NULL;
    *err = s->fn.cuGraphExecKernelNodeSetParams_v2((CUgraphExec)(uintptr_t)h.exec, (CUgraphNode)(uintptr_t)h.node,
                                                   &params);
    return 1;
}

/* A small copy to the device, queued with its bytes (client/queue.c): dst, stream, u32 sync, u32 pad,
 * the bytes. The driver has taken pageable bytes when the call returns, so the batch may go. */
/* (struct cw_copy_head: cuwire/wire/frames.h) */

static int cw_copy_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_copy_head h;
    if (size < sizeof h)
        return cw_refuse(s, "queued copy of %u bytes, shorter than its %zu-byte head", size, sizeof h);
    memcpy(&h, p, sizeof h);
    size_t n = size - sizeof h;
    if (!cw_records_in_memory(s, h.dst, n))
        *err = CW_INVALID_VALUE;
    else if (h.sync)
        *err = s->fn.cuMemcpyHtoD_v2(h.dst, p + sizeof h, n);
    else if (!cw_owns(s, CW_KIND_CUstream_st, h.stream))
        *err = CW_INVALID_HANDLE;
    else
        *err = s->fn.cuMemcpyHtoDAsync_v2(h.dst, p + sizeof h, n, (CUstream)(uintptr_t)h.stream);
    return 1;
}

/* A small copy from the device, the call of a records frame (client/wire.c): src, stream, u32 sync,
 * u32 n; the bytes go to the frame's result. Into pageable memory, the driver returns once they are
 * there. */
/* (struct cw_copy_from: cuwire/wire/frames.h) */

static int cw_copy_from_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_copy_from h;
    if (size != sizeof h)
        return cw_refuse(s, "queued copy from the device of %u bytes, expected %zu", size, sizeof h);
    memcpy(&h, p, sizeof h);
    if (!s->out || h.n > s->out_cap)
        return cw_refuse(s, "a copy from the device of %u bytes, outside a call or larger than %u", h.n,
                         s->out_cap);
    if (!cw_records_in_memory(s, h.src, h.n))
        *err = CW_INVALID_VALUE;
    else if (h.sync)
        *err = s->fn.cuMemcpyDtoH_v2(s->out, h.src, h.n);
    else if (!cw_owns(s, CW_KIND_CUstream_st, h.stream))
        *err = CW_INVALID_HANDLE;
    else
        *err = s->fn.cuMemcpyDtoHAsync_v2(s->out, h.src, h.n, (CUstream)(uintptr_t)h.stream);
    s->out_len = *err ? 0 : h.n;
    return 1;
}

/* The program's changes to its page-locked memory over TCP, to this process's copy of it (struct cw_host_copy:
 * cuwire/wire/frames.h), written by this thread at once, in no stream: a kernel may be running that waits
 * for them. */
static int cw_host_copy_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_host_copy h;
    if (size < sizeof h)
        return cw_refuse(s, "host copy of %u bytes, shorter than its %zu-byte head", size, sizeof h);
    memcpy(&h, p, sizeof h);
    const char *at = p + sizeof h, *end = p + size;
    if ((h.kind != CW_HOST_WRITE && h.kind != CW_HOST_WRITE_RUNS) ||
        (h.kind == CW_HOST_WRITE && (size_t)(end - at) != h.n))
        return cw_refuse(s, "host copy of %u bytes for %u bytes (kind %u)", size, h.n, h.kind);
    uint32_t count = 0;
    if (h.kind == CW_HOST_WRITE_RUNS) { /* each run lies in [0, n), and their bytes are all that follows */
        if (end - at < 4)
            return cw_refuse(s, "host copy of runs without their count");
        memcpy(&count, at, 4);
        at += 4;
        if ((size_t)(end - at) / 8 < count)
            return cw_refuse(s, "host copy of %u runs in %zu bytes", count, (size_t)(end - at));
        uint64_t total = 0;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t run[2];
            memcpy(run, at + 8 * (size_t)i, 8);
            if (run[0] > h.n || run[1] > h.n - run[0])
                return cw_refuse(s, "host copy run %u of %u bytes at %u, outside %u bytes", i, run[1], run[0], h.n);
            total += run[1];
        }
        if (total != (uint64_t)(end - at) - 8 * (uint64_t)count)
            return cw_refuse(s, "host copy of runs of %llu bytes with %zu bytes", (unsigned long long)total,
                             (size_t)(end - at) - 8 * (size_t)count);
    }
    if (!cw_in_host(s, h.address, h.n)) {
        *err = CW_INVALID_VALUE;
        return 1;
    }
    if (h.kind == CW_HOST_WRITE)
        memcpy((void *)(uintptr_t)h.address, at, h.n);
    else {
        const char *bytes = at + 8 * (size_t)count;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t run[2];
            memcpy(run, at + 8 * (size_t)i, 8);
            memcpy((char *)(uintptr_t)h.address + run[0], bytes, run[1]);
            bytes += run[1];
        }
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* before what follows (a kernel reads it across PCIe) */
    return 1;
}

/* A copy between the GPU and host memory shared with the client (its page-locked allocations, client/host_memory.c):
 * device address, offset in the shared memory, bytes, stream, u32 to_device, u32 sync. Queued when
 * asynchronous (the program may not touch the buffer until the stream is past the copy, as natively); the
 * call of a records frame when synchronous (the driver returns when the copy is done). No bytes travel. */
/* (struct cw_copy_shared: cuwire/wire/frames.h) */

static int cw_copy_shared_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_copy_shared h;
    if (size != sizeof h)
        return cw_refuse(s, "copy of shared memory of %u bytes, expected %zu", size, sizeof h);
    memcpy(&h, p, sizeof h);
    if (!s->shared)
        return cw_refuse(s, "a copy of shared memory in a session that has none");
    if (h.offset > s->shared_size || h.n > s->shared_size - h.offset || !cw_records_in_memory(s, h.device, h.n)) {
        *err = CW_INVALID_VALUE;
        return 1;
    }
    char *host = s->shared + h.offset;
    CUstream stream = (CUstream)(uintptr_t)h.stream;
    if (!h.sync && !cw_owns(s, CW_KIND_CUstream_st, h.stream))
        *err = CW_INVALID_HANDLE;
    else if (h.to_device)
        *err = h.sync ? s->fn.cuMemcpyHtoD_v2(h.device, host, h.n) : s->fn.cuMemcpyHtoDAsync_v2(h.device, host, h.n, stream);
    else
        *err = h.sync ? s->fn.cuMemcpyDtoH_v2(host, h.device, h.n) : s->fn.cuMemcpyDtoHAsync_v2(host, h.device, h.n, stream);
    return 1;
}

/* A host function of the client's (cuLaunchHostFunc, cuStreamAddCallback: client/callbacks.c) in a stream:
 * u64 stream, u64 id. The server puts a host function of its own in the stream, which posts the id to the
 * client through shared memory and waits until a thread of the client's ran it: the stream's later work
 * waits for it, as natively. */
/* (struct cw_host_func: cuwire/wire/frames.h) */

struct cw_host_call {
    cw_ring *ring;                 /* the client's shared memory, or NULL and */
    cw_callback_socket *socket;    /* its host-function connection */
    uint64_t id;
};

static int send_all(int fd, const char *buf, size_t len);
static int take(cw_records *s, int fd, const char **pending, size_t *pending_len, char *buf, size_t n,
                long spin_ns);

/* Write the post on the connection, wait for the client to write its number back (it ran the function).
 * When the connection breaks (or the client answers out of step), the post waits up to resume_ms for the
 * client's new connection and goes again there; past that, or once the session ends, this and later host
 * functions are skipped. */
static void cw_socket_post_callback(cw_callback_socket *c, uint64_t id)
{
    pthread_mutex_lock(&c->lock);
    struct cw_host_post post = {id, ++c->seq};
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += c->resume_ms / 1000;
    deadline.tv_nsec += (c->resume_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    for (;;) {
        int fd = c->fd;
        uint64_t ack = ~post.seq;
        const char *none = "";
        size_t nothing = 0;
        if (fd >= 0 && !c->stopped && send_all(fd, (const char *)&post, sizeof post) == 0 &&
            take(NULL, fd, &none, &nothing, (char *)&ack, sizeof ack, 0) == 0 && ack == post.seq)
            break;
        if (fd < 0 || c->stopped)
            break;
        shutdown(fd, SHUT_RDWR);
        int waited = 0;
        while (c->fd == fd && !c->stopped && waited != ETIMEDOUT && c->resume_ms > 0)
            waited = pthread_cond_timedwait(&c->replaced, &c->lock, &deadline);
        if (c->fd == fd) /* none came: skipped */
            break;
    }
    pthread_mutex_unlock(&c->lock);
}

static void cw_post(struct cw_host_call *c)
{
    if (c->ring)
        cw_ring_post_callback(c->ring, c->id); /* a client that is gone: skipped */
    else
        cw_socket_post_callback(c->socket, c->id);
}

static void cw_host_trampoline(void *p)
{
    cw_post(p);
    free(p);
}

/* A graph's host node (server/graphs.py, or a host function captured into a graph): it posts the client's
 * id at every launch of the graph, so its argument lives as long as the session (cw_keep_host_call). */
static void cw_host_node_trampoline(void *p) { cw_post(p); }

/* c lives as long as the session (a graph's host node's argument): 0, or -1 without memory. */
static int cw_keep_host_call(cw_records *s, struct cw_host_call *c)
{
    void **grown = realloc(s->host_nodes, (s->host_nodes_len + 1) * sizeof *grown);
    if (!grown)
        return -1;
    s->host_nodes = grown;
    s->host_nodes[s->host_nodes_len++] = c;
    return 0;
}

/* The client's id a host node's argument posts, or 0 when it is not one of this session's host nodes'
 * arguments (a node some other code made). */
uint64_t cw_records_host_node_id(const cw_records *s, const void *arg)
{
    for (size_t i = 0; i < s->host_nodes_len; i++)
        if (s->host_nodes[i] == arg)
            return ((const struct cw_host_call *)arg)->id;
    return 0;
}

/* The function and argument a host node of this session's runs for the client's host function `id`;
 * NULL argument without a way to post it (shared memory, or a host-function connection) or memory. The
 * arguments are freed with the session. */
void *cw_records_host_node(cw_records *s, uint64_t id, void **fn)
{
    *fn = (void *)cw_host_node_trampoline;
    if (!s->ring && s->callbacks.fd < 0)
        return NULL;
    struct cw_host_call *c = malloc(sizeof *c);
    if (!c || cw_keep_host_call(s, c) != 0) {
        free(c);
        return NULL;
    }
    *c = (struct cw_host_call){s->ring, s->ring ? NULL : &s->callbacks, id};
    return c;
}

static int cw_host_func_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_host_func h;
    if (size != sizeof h)
        return cw_refuse(s, "host function record of %u bytes, expected %zu", size, sizeof h);
    memcpy(&h, p, sizeof h);
    if (!s->ring && s->callbacks.fd < 0)
        return cw_refuse(s, "a host function in a session without shared memory or a host-function connection");
    struct cw_host_call *c = malloc(sizeof *c);
    if (!c) {
        *err = CW_OUT_OF_MEMORY;
        return 1;
    }
    *c = (struct cw_host_call){s->ring, s->ring ? NULL : &s->callbacks, h.id};
    CUstream stream = (CUstream)(uintptr_t)h.stream;
    CUstreamCaptureStatus captured = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!cw_owns(s, CW_KIND_CUstream_st, h.stream)) {
        *err = CW_INVALID_HANDLE;
    } else if (s->fn.cuStreamIsCapturing(stream, &captured) == 0 && captured != CU_STREAM_CAPTURE_STATUS_NONE) {
        /* captured: a host node of the graph, run at every launch, so its argument stays (the client keeps
         * the function under the id likewise) */
        if (cw_keep_host_call(s, c) != 0) {
            free(c);
            *err = CW_OUT_OF_MEMORY;
        } else {
            *err = s->fn.cuLaunchHostFunc(stream, cw_host_node_trampoline, c); /* (c: freed with the session) */
        }
        return 1;
    } else {
        *err = s->fn.cuLaunchHostFunc(stream, cw_host_trampoline, c);
    }
    if (*err)
        free(c);
    return 1;
}

/* One record: 1 when it ran (its CUDA result in *err), -1 when it is malformed or unknown (s->why). */
/* SetContext: the session thread takes the calling program thread's context (u64; 0: keeps its own) and,
 * when the record has 4 bytes more, the stream capture mode the client chose for that thread's calls
 * (client/capture.c, cuwire_server_capture_mode). */
static int cw_set_context_record(cw_records *s, const char *p, uint32_t size, int *err)
{
    struct cw_set_context r; /* (cuwire/wire/frames.h; the context alone, 8 bytes, keeps the mode) */
    if (size != sizeof r.context && size != sizeof r)
        return cw_refuse(s, "queued context switch of %u bytes, expected %zu or %zu", size, sizeof r.context,
                         sizeof r);
    memcpy(&r, p, size);
    if (r.context)
        *err = cw_owns(s, CW_KIND_CUctx_st, r.context) ? s->fn.cuCtxSetCurrent((CUcontext)(uintptr_t)r.context)
                                                        : CW_INVALID_HANDLE;
    if (size == sizeof r && !*err) {
        CUstreamCaptureMode m = (CUstreamCaptureMode)r.capture_mode; /* the driver refuses a mode it does not know */
        *err = s->fn.cuThreadExchangeStreamCaptureMode(&m);
    }
    return 1;
}

static int cw_run_one(cw_records *s, uint32_t fn, const char *p, uint32_t size, int *err)
{
    int done;
    if (fn == s->launch_id || fn == s->launch_ex_id) {
        done = cw_launch_record(s, p, size, fn == s->launch_ex_id, err);
    } else if (fn == s->copy_id) {
        done = cw_copy_record(s, p, size, err);
    } else if (fn == s->copy_from_id) {
        done = cw_copy_from_record(s, p, size, err);
    } else if (fn == s->copy_shared_id && fn) {
        done = cw_copy_shared_record(s, p, size, err);
    } else if (fn == s->host_func_id && fn) {
        done = cw_host_func_record(s, p, size, err);
    } else if (fn == s->set_context_id) {
        done = cw_set_context_record(s, p, size, err);
    } else if (fn == s->node_set_id && fn) {
        done = cw_node_set_record(s, p, size, err);
    } else if (fn == s->host_copy_id && fn) {
        done = cw_host_copy_record(s, p, size, err);
    } else {
        done = cw_run_generated(s, fn, p, size, err);
    }
    if (done == 0)
        return cw_refuse(s, "unknown queued function id %#x", fn);
    return done;
}

/* Run records in order, the last one as the call of a records frame when `call` is set (its result in
 * *status, its bytes in out, *out_len of them). Returns 0, or -1 when a record is malformed (s->why;
 * the records before it ran). *first_error and *first_fn: the first queued record that failed, and its
 * function id; *count: how many records ran. */
static int cw_run(cw_records *s, const char *data, size_t len, int call, int *status, int *first_error,
                  uint32_t *first_fn, uint64_t *count)
{
    size_t pos = 0;
    *first_error = 0;
    *first_fn = 0;
    *count = 0;
    while (pos < len) {
        uint32_t head[2];
        if (len - pos < sizeof head)
            return cw_refuse(s, "truncated queued-call record");
        memcpy(head, data + pos, sizeof head);
        pos += sizeof head;
        uint32_t fn = head[0], size = head[1];
        if (size > len - pos)
            return cw_refuse(s, "queued call %#x: record of %u bytes runs past the batch", fn, size);
        int err = 0, last = pos + size == len;
        if (cw_run_one(s, fn, data + pos, size, &err) < 0)
            return -1;
        pos += size;
        ++*count;
        if (call && last)
            *status = err;
        else if (err && !*first_error) {
            *first_error = err;
            *first_fn = fn;
        }
    }
    if (call && !*count)
        return cw_refuse(s, "a records frame without its call");
    return 0;
}

int cw_records_run(cw_records *s, const char *data, size_t len, int *first_error, uint32_t *first_fn,
                   uint64_t *count)
{
    int status;
    s->out = NULL;
    return cw_run(s, data, len, 0, &status, first_error, first_fn, count);
}

/* A records frame: the queued calls, then the call the client waits for, whose result bytes (at most
 * out_cap) go to out. */
int cw_records_call(cw_records *s, const char *data, size_t len, char *out, uint32_t out_cap, uint32_t *out_len,
                    int *status, int *first_error, uint32_t *first_fn, uint64_t *count)
{
    s->out = out;
    s->out_cap = out_cap;
    s->out_len = 0;
    *status = 0;
    int r = cw_run(s, data, len, 1, status, first_error, first_fn, count);
    *out_len = s->out_len;
    s->out = NULL;
    return r;
}

/* ------------------------------------------------------------------ records frames, served here */

#define FRAME_MAX CW_MESSAGE_MAX /* (cuwire/wire/frames.h) */
#define RESULT_MAX CW_CALL_RESULT_MAX

/* (struct cw_frame_header: cuwire/wire/frames.h) */

/* (struct cw_call_reply: cuwire/wire/frames.h) */

/* ------------------------------------------------------------------ device printf output */

/* A kernel's printf reaches the session process's stdout, written by the driver when the work synchronises.
 * In a session process of its own, stdout is a pipe (records.capture_output) that a thread here drains into
 * a buffer; each answer takes what gathered (cw_output_take: a read of the pipe, well under a microsecond
 * when it is empty), and the client writes it to the program's stdout: the output appears in the
 * program's, in order with its calls. */
#define OUTPUT_MAX (64u << 10)     /* what one answer carries; the rest goes with the next */
#define OUTPUT_KEEP (16u << 20)    /* what waits for an answer, at most (more is dropped, and said) */
static struct {
    pthread_mutex_t lock;
    int fd, on;
    char *buf;
    size_t len, dropped;
} cw_out = {PTHREAD_MUTEX_INITIALIZER, -1, 0, NULL, 0, 0};

static void cw_output_read(void) /* what the pipe holds now, into the buffer; lock held */
{
    char chunk[16384];
    for (;;) {
        ssize_t n = read(cw_out.fd, chunk, sizeof chunk);
        if (n <= 0)
            return;
        if (cw_out.len + (size_t)n > OUTPUT_KEEP) {
            cw_out.dropped += (size_t)n;
            continue;
        }
        char *b = realloc(cw_out.buf, cw_out.len + (size_t)n);
        if (!b) {
            cw_out.dropped += (size_t)n;
            continue;
        }
        cw_out.buf = b;
        memcpy(cw_out.buf + cw_out.len, chunk, (size_t)n);
        cw_out.len += (size_t)n;
    }
}

static void *cw_output_drain(void *unused) /* keeps the pipe from filling while nobody asks */
{
    (void)unused;
    for (;;) {
        struct pollfd p = {cw_out.fd, POLLIN, 0};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return NULL;
        if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
            return NULL;
        pthread_mutex_lock(&cw_out.lock);
        cw_output_read();
        pthread_mutex_unlock(&cw_out.lock);
    }
}

/* The read end of the pipe that is this process's stdout (non-blocking): drained from now on. 0 or -1. */
int cw_output_start(int fd)
{
    pthread_t t;
    cw_out.fd = fd;
    if (pthread_create(&t, NULL, cw_output_drain, NULL) != 0)
        return -1;
    pthread_detach(t);
    __atomic_store_n(&cw_out.on, 1, __ATOMIC_RELEASE);
    return 0;
}

/* Up to cap bytes of the output gathered so far (what the driver wrote by now included), for an answer. */
size_t cw_output_take(char *out, size_t cap)
{
    if (!__atomic_load_n(&cw_out.on, __ATOMIC_ACQUIRE))
        return 0;
    fflush(stdout); /* what the driver printed through stdio by now (no system call when there is none) */
    pthread_mutex_lock(&cw_out.lock);
    cw_output_read();
    if (cw_out.dropped && cw_out.len + 96 <= OUTPUT_KEEP) {
        char note[96];
        int k = snprintf(note, sizeof note, "\n[cuwire: %zu bytes of device printf output were dropped]\n",
                         cw_out.dropped);
        char *b = realloc(cw_out.buf, cw_out.len + (size_t)k);
        if (b) {
            cw_out.buf = b;
            memcpy(cw_out.buf + cw_out.len, note, (size_t)k);
            cw_out.len += (size_t)k;
            cw_out.dropped = 0;
        }
    }
    size_t n = cw_out.len < cap ? cw_out.len : cap;
    if (n) {
        memcpy(out, cw_out.buf, n);
        memmove(cw_out.buf, cw_out.buf + n, cw_out.len - n);
        cw_out.len -= n;
    }
    pthread_mutex_unlock(&cw_out.lock);
    return n;
}


static int send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

/* The session's connection broke: 1 when it resumed (server/resume.py: the same descriptor now holds the
 * client's new connection, and what the client lacked was sent again), so the receive or send goes on. */
static int cw_records_resume(void *arg); /* (Python: records.py) */

static int resumed(cw_records *s)
{
    int broke = errno; /* (the break's, again, when it did not) */
    if (s->resume_arg && cw_records_resume(s->resume_arg))
        return 1;
    errno = broke;
    return 0;
}

/* Receive n bytes into buf, the first from `pending` (bytes read ahead, counted when Python read them):
 * 0, or -1 (errno 0: the peer closed). On the session's connection (s given) each byte is counted, and a
 * break waits for the client's resume; on the host-function connection (s NULL) a break is the end. */
static int take(cw_records *s, int fd, const char **pending, size_t *pending_len, char *buf, size_t n,
                long spin_ns)
{
    size_t k = n < *pending_len ? n : *pending_len;
    memcpy(buf, *pending, k);
    *pending += k;
    *pending_len -= k;
    while (k < n) {
        ssize_t r = cw_recv_spin(fd, buf + k, n - k, spin_ns);
        if (r > 0) {
            if (s)
                cw_stream_received(s->stream, (uint64_t)r);
            k += (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (!(s && resumed(s))) {
            if (r == 0)
                errno = 0;
            return -1;
        }
    }
    return 0;
}

/* send_all() on the session's connection: kept first, so that a resume sends what did not arrive. */
static int session_send(cw_records *s, int fd, const char *buf, size_t len)
{
    cw_stream_sent(s->stream, buf, len);
    return send_all(fd, buf, len) == 0 || resumed(s) ? 0 : -1;
}

/* The session's stream, and the argument of its resume (NULL: a broken connection ends the session). */
void cw_records_stream(cw_records *s, cw_stream *stream, void *resume_arg)
{
    s->stream = stream;
    s->resume_arg = resume_arg;
}

/* Serve records frames (client/wire.c) on fd, one after the other, without Python: each one's records
 * run here, then its answer goes back; a frame of queued calls only (CW_MAGIC_QUEUED) gets no answer, and
 * its first error (or its refusal, a malformed record: CUDA_ERROR_UNKNOWN and why) goes with the next
 * answer. `pending`: bytes Python had read ahead (*used: how many were taken). Returns 1 when a frame
 * of another kind comes (its 16-byte header in header_out; Python reads the rest), 0 at the end of the
 * stream, -1 when the connection broke or a frame is over the limit (s->why). *deferred_error (and
 * *deferred_fn, its function id or 0), when set, goes with the first answer as its queued error, and is
 * cleared; what no answer took is left there. *count: the records run. */
int cw_records_serve(cw_records *s, int fd, const char *pending, size_t pending_len, size_t *used,
                     char *header_out, int *deferred_error, uint32_t *deferred_fn, uint64_t *count)
{
    size_t given = pending_len;
    char *message = NULL, *reply = malloc(sizeof(struct cw_frame_header) + sizeof(struct cw_call_reply) + RESULT_MAX +
                                          sizeof s->why + OUTPUT_MAX);
    char refused[sizeof s->why] = ""; /* why a frame of queued calls was refused, for the next answer */
    size_t message_cap = 0;
    int r = -1;
    *count = 0;
    s->why[0] = 0;
    if (!reply) {
        cw_refuse(s, "no memory to serve records frames");
        goto out;
    }
    /* The wait for the next frame polls only after an answer, when a program that waits on the GPU (a
     * loop of cuStreamQuery, say) may well ask again at once. After a frame of queued calls it sleeps:
     * a program that queues work in a steady stream would otherwise keep a core of the server's busy
     * polling, and a program whose threads use every core (PyTorch's CPU ops do) pays for it. Nor does it
     * poll after an answer when the last frame after an answer came later than the poll would have lasted
     * (a program that computes between its calls): the poll would only burn a core it needs. */
    int after_answer = 1; /* Python answered the frame before this call */
    for (;;) {
        struct cw_frame_header h;
        long wait_ns = after_answer && s->gap_ns <= (uint64_t)s->spin_ns ? s->spin_ns : 0;
        uint64_t asked = after_answer ? cw_now_ns() : 0;
        if (s->idle_ms > 0 && !pending_len) {
            struct pollfd p = {fd, POLLIN, 0};
            int ready;
            while ((ready = poll(&p, 1, (int)s->idle_ms)) < 0 && errno == EINTR)
                ;
            if (ready == 0) {
                cw_refuse(s, "the client sent nothing for %ld s (CUWIRE_IDLE_TIMEOUT): its session ends",
                          s->idle_ms / 1000);
                goto out;
            }
        }
        if (take(s, fd, &pending, &pending_len, (char *)&h, sizeof h, wait_ns) != 0) {
            r = errno ? -1 : 0;
            if (errno)
                cw_refuse(s, "the connection broke (%s)", strerror(errno));
            goto out;
        }
        uint64_t arrived = cw_now_ns();
        if (asked)
            s->gap_ns = arrived - asked;
        if (h.magic != CW_MAGIC_RECORDS && h.magic != CW_MAGIC_QUEUED) {
            memcpy(header_out, &h, sizeof h);
            r = 1;
            goto out;
        }
        if (h.size > FRAME_MAX || h.payload) {
            cw_refuse(s, "a records frame of %u + %llu bytes is over the limit", h.size,
                      (unsigned long long)h.payload);
            goto out;
        }
        /* the buffer grows as the frame's bytes arrive (at most twice what came, and 64 KiB): a header that
         * announces a large frame and sends little costs little */
        int broke = 0;
        for (uint32_t got = 0; got < h.size && !broke;) {
            if (got == message_cap) {
                uint32_t cap = message_cap * 2 > 64u << 10 ? message_cap * 2 : 64u << 10; /* max(2 cap, 64K) */
                cap = cap < h.size ? cap : h.size;                                          /* min(, size) */
                char *m = realloc(message, cap);
                if (!m) {
                    cw_refuse(s, "no memory for a records frame of %u bytes", h.size);
                    goto out;
                }
                message = m;
                message_cap = cap;
            }
            uint32_t piece = (h.size < message_cap ? h.size : message_cap) - got;
            broke = take(s, fd, &pending, &pending_len, message + got, piece, s->spin_ns) != 0;
            got += piece;
        }
        if (broke) {
            cw_refuse(s, "the connection closed in the middle of a frame");
            goto out;
        }
        int status = 0, queued_error = 0;
        uint32_t queued_fn = 0, result_len = 0, error_len = 0;
        uint64_t n = 0;
        if (h.magic == CW_MAGIC_QUEUED) {
            if (cw_records_run(s, message, h.size, &queued_error, &queued_fn, &n) != 0) {
                queued_error = CUDA_ERROR_UNKNOWN;
                queued_fn = 0;
                if (!*deferred_error)
                    snprintf(refused, sizeof refused, "queued calls refused: %.200s", s->why);
            }
            *count += n;
            if (queued_error && !*deferred_error) {
                *deferred_error = queued_error;
                *deferred_fn = queued_fn;
            }
            s->bytes_in += sizeof h + h.size;
            after_answer = 0;
            continue;
        }
        char *result = reply + sizeof h + sizeof(struct cw_call_reply);
        if (cw_records_call(s, message, h.size, result, RESULT_MAX, &result_len, &status, &queued_error, &queued_fn,
                            &n) != 0) {
            error_len = (uint32_t)strlen(s->why);
            memcpy(result, s->why, error_len);
            result_len = 0;
        }
        *count += n;
        if (*deferred_error) {
            if (!queued_error) {
                queued_error = *deferred_error;
                queued_fn = *deferred_fn;
                if (refused[0] && !error_len) { /* the refusal goes as the answer's error */
                    error_len = (uint32_t)strlen(refused);
                    memcpy(result, refused, error_len);
                    result_len = 0;
                }
            }
            *deferred_error = 0;
            *deferred_fn = 0;
            refused[0] = 0;
        }
        uint32_t output_len = (uint32_t)cw_output_take(result + result_len + error_len, OUTPUT_MAX);
        struct cw_call_reply cr = {status, queued_error, queued_fn, result_len, error_len, output_len};
        struct cw_frame_header rh = {CW_MAGIC_RECORDS, (uint32_t)(sizeof cr + result_len + cr.error_len + output_len), 0};
        memcpy(reply, &rh, sizeof rh);
        memcpy(reply + sizeof rh, &cr, sizeof cr);
        if (session_send(s, fd, reply, sizeof rh + rh.size) != 0) {
            cw_refuse(s, "the connection broke (%s)", strerror(errno));
            goto out;
        }
        cw_records_observe(s, cw_now_ns() - arrived, sizeof h + h.size, sizeof rh + rh.size);
        after_answer = 1;
    }
out:
    if (r >= 0) /* a refusal no answer took (else nothing): Python says it with its reply */
        snprintf(s->why, sizeof s->why, "%s", refused);
    *used = given - pending_len;
    free(message);
    free(reply);
    return r;
}

/* A call served, for the metrics: its frames' bytes and its time from arrival to answer. */
void cw_records_observe(cw_records *s, uint64_t ns, uint64_t in, uint64_t out)
{
    int i = 0;
    while (i < CW_LATENCY_BUCKETS - 1 && ns > CW_LATENCY_BOUNDS[i] * 1000)
        i++;
    s->latency[i]++;
    s->latency_ns += ns;
    s->bytes_in += in;
    s->bytes_out += out;
}

/* out: bytes in, bytes out, the calls' total time in ns, then the CW_LATENCY_BUCKETS counts (not
 * cumulative). */
void cw_records_figures(const cw_records *s, uint64_t *out)
{
    out[0] = s->bytes_in;
    out[1] = s->bytes_out;
    out[2] = s->latency_ns;
    memcpy(out + 3, s->latency, sizeof s->latency);
}

/* How long, in milliseconds, a client may send nothing before cw_records_serve ends its session (0: for
 * ever). */
void cw_records_idle(cw_records *s, long milliseconds)
{
    s->idle_ms = milliseconds;
}

/* How long, in microseconds, cw_records_serve polls for the next frame before it sleeps. */
void cw_records_spin(cw_records *s, long microseconds)
{
    s->spin_ns = microseconds * 1000;
}

const char *cw_records_why(const cw_records *s)
{
    return s->why;
}
