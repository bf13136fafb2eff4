/* cuwire client: what the program's process answers itself, in C (no Python, no server).
 *
 * - start-up of the embedded Python, tracing, the loud "unimplemented" line
 * - the batch queue that async stubs append to (Python takes it with the next synchronous call)
 * - host memory of the client's own (cuMemHostAlloc and friends)
 * - driver entry points: cuGetProcAddress answered from the generated table
 * - queued kernel launches of functions whose parameter layout the client holds
 */
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
#include "runtime.h"
#include "shm_ring.h"

/* ------------------------------------------------------------------ start-up */

/* When a program reaches this library only through dlopen (RTLD_LOCAL), the libpython it links is local
 * too and Python's extension modules cannot find its symbols. Make it global, unless the process is
 * already a Python program (PyTorch), whose interpreter the embedded code then uses. */
__attribute__((constructor)) static void cuwire_promote_libpython(void)
{
#ifdef CUWIRE_LIBPYTHON
    if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized") || !((int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized"))())
        dlopen(CUWIRE_LIBPYTHON, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
#endif
}

/* Where this library is on disk (the path the loader used): an installed package's library finds the
 * environment it belongs to from it (client/build.py, init_code). */
const char *cuwire_library_path(void)
{
    static Dl_info info;
    return dladdr((void *)cuwire_library_path, &info) && info.dli_fname ? info.dli_fname : "";
}

int cuwire_python_ok;
int cuwire_finished; /* set once Python may no longer be called: see cuwire_python_gone */
int cuwire_forked; /* set in a child forked from this process: see forked_child() */
int cuwire_embedded(void); /* cffi's embedding entry point: running it starts Python (client/build.py) */

void cuwire_python_started(void) { __atomic_store_n(&cuwire_python_ok, 1, __ATOMIC_RELEASE); }

/* Whether the interpreter the client runs in can no longer be called by this thread. A Python program's
 * finalizes after its atexit handlers; its libraries' teardown (XLA's, PyTorch's) goes on in objects freed
 * then, on the thread that finalizes (the main thread), which may still take the GIL: another thread that
 * tried would be stopped by Python for good, so only one holding the GIL already may. Once finalized, Python
 * is gone for every thread. The embedded interpreter of a C program is never finalized. The session itself
 * lasts as long as the process (the server ends it when the connection closes), so calls made in C go on. */
static int (*py_is_initialized)(void), (*py_is_finalizing)(void), (*py_gil_held)(void);
static int py_state_found;

static void find_python_state(void) /* (once Python runs: its symbols are then in reach) */
{
    py_is_initialized = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    py_is_finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsFinalizing"); /* 3.13 */
    if (!py_is_finalizing)
        py_is_finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"); /* 3.11, 3.12 */
    py_gil_held = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
    __atomic_store_n(&py_state_found, 1, __ATOMIC_RELEASE);
}

int cuwire_python_gone(void)
{
    if (__atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE))
        return 1;
    if (!__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE))
        return 0; /* not started: cuwire_start_python decides */
    if (!__atomic_load_n(&py_state_found, __ATOMIC_ACQUIRE))
        find_python_state();
    if (py_is_initialized && !py_is_initialized()) {
        __atomic_store_n(&cuwire_finished, 1, __ATOMIC_RELEASE);
        return 1;
    }
    if (!py_is_finalizing || !py_is_finalizing())
        return 0;
    int main_thread = syscall(SYS_gettid) == getpid();
    return !main_thread && !(py_gil_held && py_gil_held());
}

/* Python's signal module, once imported, catches SIGINT to raise KeyboardInterrupt in Python code: in a C
 * program that embeds the client, that made Ctrl-C do nothing. The program's own dispositions (its
 * handlers, the default actions, what it ignores) are kept across the start, so every signal reaches the
 * program as natively. The init code imports signal (client/build.py), so no later import installs one.
 * A Python program (PyTorch) has its own interpreter's handlers already: they are kept the same way. */
static const int kept_signals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGPIPE, SIGXFSZ, SIGUSR1, SIGUSR2, SIGCHLD};
#define KEPT_SIGNALS (sizeof kept_signals / sizeof kept_signals[0])

static void keep_signals(struct sigaction *kept)
{
    for (size_t i = 0; i < KEPT_SIGNALS; i++)
        sigaction(kept_signals[i], NULL, &kept[i]);
}

static void restore_signals(const struct sigaction *kept)
{
    for (size_t i = 0; i < KEPT_SIGNALS; i++)
        sigaction(kept_signals[i], &kept[i], NULL);
}

int cuwire_start_python(void)
{
    static int said, tried;
    if (cuwire_python_gone())
        return 0; /* a Python program's teardown: calls that need Python fail quietly (DEINITIALIZED) */
    if (cuwire_forked) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "cuwire: this process was forked from a cuwire client; a forked child cannot open its "
                            "own session yet, so its CUDA calls fail (CUDA_ERROR_DEVICE_UNAVAILABLE)\n");
        return 0;
    }
    if (!__atomic_exchange_n(&tried, 1, __ATOMIC_ACQ_REL)) {
        struct sigaction kept[KEPT_SIGNALS];
        keep_signals(kept);
        cuwire_embedded(); /* one try: cffi does not retry a failed start */
        restore_signals(kept);
    }
    if (__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE))
        return 1;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: the client's Python runtime did not start (see the error above); "
                        "every CUDA call that needs the server fails with CUDA_ERROR_UNKNOWN\n");
    return 0;
}

/* C's exit: what is queued goes out and the statistics are printed (a C program's embedded Python never
 * finalizes: Python's atexit never runs there), then CUDA is deinitialized, as the driver's own exit handler
 * does it (registered at cuInit, as this one is at the first call): handlers and destructors that run after
 * it get CUDA_ERROR_DEINITIALIZED, as natively. The session ends when the process's connection closes. */
static int exit_hooked; /* exit_hook ran: CUDA is deinitialized, as the driver's is at its exit handler */

/* A call that releases something (cuEventDestroy, cuMemUnmap...) made once Python is gone at a Python
 * program's end, before C's exit handler (XLA's C++ static destructors, after the interpreter finalized):
 * it succeeds, as natively, and what it releases goes with the session, which ends with the process. */
int cuwire_released_at_end(void)
{
    return !__atomic_load_n(&exit_hooked, __ATOMIC_ACQUIRE) && !cuwire_forked && cuwire_python_gone();
}

static void exit_hook(void)
{
    if (cuwire_python_ok && !cuwire_forked && !cuwire_python_gone())
        cuwire_py_at_exit();
    __atomic_store_n(&exit_hooked, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&cuwire_finished, 1, __ATOMIC_RELEASE);
    cuwire_wire_set(-1); /* (the socket stays Python's to close: calls made in C stop using it) */
}

/* A child forked from a client (fork() from C, os.fork() from Python) must not touch the parent's
 * session: gRPC and the parent's stream do not survive fork, and waiting on them hangs. Python's own
 * at-fork hooks do not run for a fork() from C, so the mark is made here, in C. */
static void forked_child(void) { cuwire_forked = 1; }

void cuwire_hook_exit(void)
{
    atexit(exit_hook);
    pthread_atfork(NULL, NULL, forked_child);
}

/* ------------------------------------------------------------------ tracing */

int cuwire_trace;

/* A boolean setting as cuwire/settings.py parses it: 1, true, yes, on (any case). */
static int setting_true(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

__attribute__((constructor)) static void cuwire_trace_setting(void)
{
    const char *t = getenv("CUWIRE_TRACE");
    cuwire_trace = setting_true("CUWIRE_TRACE") ? 1 : t && !strcasecmp(t, "remote") ? CUWIRE_TRACE_REMOTE : 0;
}

/* CUWIRE_TRACE=1: each call as it starts, with the time since the first traced call (s) and the gap since
 * the previous call ended (what the program did in between), and as it ends, with its result's name and how
 * long it took; CUWIRE_TRACE=remote: only the calls the server serves. Calls may nest (a runtime function's
 * driver calls): each thread keeps its own stack of start times. */
#define TRACE_DEPTH 16
static __thread uint64_t trace_started[TRACE_DEPTH];
static __thread int trace_depth;
static uint64_t trace_origin, trace_last; /* ns: the first traced call's start, the last one's end */

static uint64_t trace_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static double trace_seconds(uint64_t now)
{
    uint64_t zero = 0;
    __atomic_compare_exchange_n(&trace_origin, &zero, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return (double)(now - __atomic_load_n(&trace_origin, __ATOMIC_RELAXED)) / 1e9;
}

/* A call whose result is no CUresult: named only. */
void cuwire_trace_note(const char *name)
{
    fprintf(stderr, "cuwire trace: %.6f %s\n", trace_seconds(trace_now_ns()), name);
}

void cuwire_trace_call(const char *name)
{
    uint64_t now = trace_now_ns(), last = __atomic_load_n(&trace_last, __ATOMIC_RELAXED);
    double at = trace_seconds(now);
    if (last && now > last)
        fprintf(stderr, "cuwire trace: %.6f %s (+%.1f us after the last call)\n", at, name, (double)(now - last) / 1e3);
    else
        fprintf(stderr, "cuwire trace: %.6f %s\n", at, name);
    if (trace_depth < TRACE_DEPTH)
        trace_started[trace_depth] = now;
    trace_depth++;
}

/* `cuda`: the result is a CUresult, said by its name (else NVML's, by its number). */
void cuwire_trace_result(const char *name, int result, int cuda)
{
    uint64_t now = trace_now_ns();
    double us = 0;
    if (trace_depth > 0 && --trace_depth < TRACE_DEPTH)
        us = (double)(now - trace_started[trace_depth]) / 1e3;
    __atomic_store_n(&trace_last, now, __ATOMIC_RELAXED);
    if (cuda)
        fprintf(stderr, "cuwire trace: %.6f %s -> %s in %.1f us\n", trace_seconds(now), name, cuwire_error_name(result),
                us);
    else
        fprintf(stderr, "cuwire trace: %.6f %s -> %d in %.1f us\n", trace_seconds(now), name, result, us);
}

/* ------------------------------------------------------------------ unimplemented functions */

int cuwire_unimplemented(const char *name, const char *header, int *warned)
{
    if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: unimplemented CUDA function %s (%s)\n", name, header);
    if (setting_true("CUWIRE_STRICT")) {
        fprintf(stderr, "cuwire: CUWIRE_STRICT=1, aborting at %s\n", name);
        abort();
    }
    return CUWIRE_NOT_SUPPORTED;
}

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
 * launches in a burst sends a frame every QUEUE_SEND_EVERY_NS (a send costs it a few microseconds). */
#define QUEUE_SEND_AT 16u
#define QUEUE_SEND_EVERY_NS 20000u
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
 * (driver_local.c); before a thread's calls go out, a switch record is put first when its context is
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
    struct __attribute__((packed)) {
        uint64_t context; /* 0: keep the current one */
        uint32_t capture_mode;
    } rec = {ctx && ctx != server_context ? ctx : 0, (uint32_t)mode};
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

/* Queues one record of two parts: a fixed head, and bytes that follow it (nb may be 0). */
static int enqueue2(uint32_t id, const void *a, uint32_t na, const void *b, uint32_t nb)
{
    if (cuwire_forked)
        return cuwire_start_python() ? 0 : CUWIRE_NOT_READY; /* says why, once; never queue in vain */
    if (__atomic_load_n(&queue_refused, __ATOMIC_RELAXED))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (__atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_DEINITIALIZED; /* after the process's exit handler (exit_hook) */
    int changed = cuwire_managed_before_call(); /* the program's changes to managed memory go first */
    if (changed)
        return changed;
    pthread_mutex_lock(&queue_lock);
    int err = follow_context_locked();
    if (!err)
        err = append2_locked(id, a, na, b, nb);
    int flush = !err && queue_len >= QUEUE_FLUSH_AT;
    int send = 0;
    if (!err)
        send = queue_count >= QUEUE_SEND_AT || monotonic_ns() - queue_taken >= QUEUE_SEND_EVERY_NS;
    pthread_mutex_unlock(&queue_lock);
    if (err)
        return err;
    if (flush && CUWIRE_READY())
        return cuwire_py_flush();
    if (!send || !CUWIRE_READY())
        return 0;
    int sent = cuwire_wire_send_queued();
    return sent >= 0 ? sent : cuwire_py_send_queued();
}

int cuwire_enqueue(uint32_t id, const void *payload, uint32_t size) { return enqueue2(id, payload, size, NULL, 0); }

/* ------------------------------------------------------------------ small copies to the device, queued */

/* A copy from host memory to the device returns once the driver has taken the host bytes (for pageable
 * memory: into its staging buffer), before the GPU has them. So a small one, whose destination lies in
 * one of the session's allocations (anything else the driver refuses at once: such copies wait for the
 * server's answer), is queued with its bytes: the program may reuse its buffer as soon as the call
 * returns, and the server makes the same call in stream order (server/records.c, CopyToDevice). Larger
 * copies stream beside the messages (client/runtime.py, server/bulk.py). */
#define INLINE_COPY_MAX (1u << 20)
extern const uint32_t cuwire_copy_record_id;

struct __attribute__((packed)) copy_head {
    uint64_t dst, stream;
    uint32_t sync, pad; /* sync: cuMemcpyHtoD (the null stream's synchronous copy), else ...Async */
};

static int queue_copy(CUdeviceptr dst, const void *src, size_t n, CUstream stream, uint32_t sync)
{
    int shared = cuwire_copy_shared(src, dst, n, stream, 1, (int)sync);
    if (shared >= 0)
        return shared;
    if (!src || n == 0 || n > INLINE_COPY_MAX || !cuwire_in_allocation(dst, n) || !cuwire_session_open())
        return -1; /* the call goes to the server and waits, which says what is wrong */
    struct copy_head head = {dst, (uint64_t)(uintptr_t)stream, sync, 0};
    return enqueue2(cuwire_copy_record_id, &head, sizeof head, src, (uint32_t)n);
}

int cuwire_fast_cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return queue_copy(dst, src, n, NULL, 1); }

int cuwire_fast_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream stream)
{
    return queue_copy(dst, src, n, stream, 0);
}

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

/* ------------------------------------------------------------------ host memory shared with the server */

/* With a server on this host, the session shares host memory with it (cuwire/wire/ring.py): page-locked
 * allocations are carved from it (runtime.py, SharedHost), and a copy between such an allocation and one
 * of the session's device allocations names an offset in it (CopyShared; server/records.c): the GPU reads
 * and writes the program's buffer itself. An asynchronous copy is queued (the program may not touch the
 * buffer until the stream is past it, as natively); a synchronous one waits for the server's answer. */
extern const uint32_t cuwire_copy_shared_record_id;
static uint64_t shared_base, shared_size;
static uint64_t shared_server_base; /* where the server has it: the same address, when it could */
static int shared_known; /* the session said whether it has shared host memory */
static int shared_fd = -1; /* its descriptor: memory the program registers moves into it */

void cuwire_shared_host_set(uint64_t base, uint64_t size, uint64_t server_base, int fd)
{
    shared_base = base;
    shared_size = size;
    shared_server_base = server_base;
    shared_fd = fd;
    __atomic_store_n(&shared_known, 1, __ATOMIC_RELEASE);
}

static int shared_offset(const void *p, uint64_t n, uint64_t *offset)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (!p || !shared_size || a < shared_base || n > shared_size || a - shared_base > shared_size - n)
        return 0;
    *offset = a - shared_base;
    return 1;
}

struct __attribute__((packed)) copy_shared {
    uint64_t device, offset, n, stream;
    uint32_t to_device, sync;
};

/* The copy as a CopyShared record when `host` is in the shared memory and `device` in one of the session's
 * allocations: its CUDA result, or -1 when the call takes its usual path. */
int cuwire_copy_shared(const void *host, uint64_t device, uint64_t n, void *stream, int to_device, int sync)
{
    struct copy_shared rec = {device, 0, n, (uint64_t)(uintptr_t)stream, (uint32_t)to_device, (uint32_t)sync};
    if (!sync) { /* captured into a graph, pageable memory gets a stand-in here (graph_copies.c) */
        int captured = cuwire_capture_copy(host, device, n, stream, to_device);
        if (captured >= 0)
            return captured;
    }
    uint64_t offset;
    if (n == 0 || !shared_offset(host, n, &offset) || !cuwire_in_allocation(device, n) || !cuwire_session_open())
        return -1;
    rec.offset = offset; /* (through a local: the record is packed) */
    if (sync)
        return cuwire_call(cuwire_copy_shared_record_id, &rec, sizeof rec, NULL, 0);
    return cuwire_enqueue(cuwire_copy_shared_record_id, &rec, sizeof rec);
}

/* cuMemcpy and cuMemcpyAsync (unified addresses) between shared host memory and the device. */
static int unified_shared(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, int sync)
{
    if (!shared_size)
        return -1;
    int r = cuwire_copy_shared((const void *)(uintptr_t)src, dst, n, stream, 1, sync);
    return r >= 0 ? r : cuwire_copy_shared((const void *)(uintptr_t)dst, src, n, stream, 0, sync);
}

int cuwire_fast_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return unified_shared(dst, src, n, NULL, 1); }

int cuwire_fast_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)
{
    return unified_shared(dst, src, n, stream, 0);
}

/* ------------------------------------------------------------------ page-locked host memory */

/* Each allocation: in the shared host memory (`shared`, through Python) or the client's own memory. */
struct host_alloc {
    void *ptr;
    size_t size;
    unsigned int flags;
    int shared;  /* in the memory shared with the server */
    int managed; /* cuMemAllocManaged's (the session's allocation map holds it too) */
    struct host_alloc *next;
};
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_alloc *host_allocs;

static int host_alloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return CUDA_ERROR_INVALID_VALUE;
    struct host_alloc *a = malloc(sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t address = 0;
    if (size && (!__atomic_load_n(&shared_known, __ATOMIC_ACQUIRE) || shared_size) && CUWIRE_READY())
        cuwire_py_host_alloc(size, &address); /* 0: none there (no shared memory, or it is full) */
    *pHost = (void *)(uintptr_t)address;
    if (!address && posix_memalign(pHost, 4096, size ? size : 1) != 0) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&host_lock);
    *a = (struct host_alloc){*pHost, size, flags, address != 0, 0, host_allocs};
    host_allocs = a;
    pthread_mutex_unlock(&host_lock);
    return CUDA_SUCCESS;
}

static int host_free(void *ptr)
{
    if (!ptr)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc **p = &host_allocs; *p; p = &(*p)->next) {
        if ((*p)->ptr == ptr) {
            struct host_alloc *a = *p;
            *p = a->next;
            pthread_mutex_unlock(&host_lock);
            int err = 0;
            if (!a->shared)
                free(ptr);
            else if (CUWIRE_READY())
                err = cuwire_py_host_free((uint64_t)(uintptr_t)ptr);
            free(a);
            return err;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

static int host_flags(unsigned int *pFlags, void *pHost)
{
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc *a = host_allocs; a; a = a->next) {
        if (a->ptr == pHost) {
            *pFlags = a->flags;
            pthread_mutex_unlock(&host_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuwire_local_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return (CUresult)host_alloc(pp, bytesize, Flags);
}

CUresult cuwire_local_cuMemAllocHost_v2(void **pp, size_t bytesize) { return (CUresult)host_alloc(pp, bytesize, 0); }

CUresult cuwire_local_cuMemFreeHost(void *p) { return (CUresult)host_free(p); }

CUresult cuwire_local_cuMemHostGetFlags(unsigned int *pFlags, void *p) { return (CUresult)host_flags(pFlags, p); }

/* Whether p lies in one of the page-locked allocations (*shared: one in the memory shared with the server). */
static int host_alloc_holds_locked(const void *p, int *shared)
{
    for (struct host_alloc *a = host_allocs; a; a = a->next)
        if ((const char *)p >= (const char *)a->ptr && (const char *)p < (const char *)a->ptr + (a->size ? a->size : 1)) {
            *shared = a->shared;
            return 1;
        }
    return 0;
}

static int host_alloc_holds(const void *p, int *shared)
{
    pthread_mutex_lock(&host_lock);
    int found = host_alloc_holds_locked(p, shared);
    pthread_mutex_unlock(&host_lock);
    return found;
}

/* For graph_copies.c: whether p lies in a page-locked allocation (*shared: in the memory shared with the
 * server), and whether this session has such memory at all. */
int cuwire_host_locked(const void *p, int *shared) { return host_alloc_holds(p, shared); }

int cuwire_shares_host_memory(void) { return __atomic_load_n(&shared_known, __ATOMIC_ACQUIRE) && shared_size; }

/* Memory the program registers itself (cuMemHostRegister) is the GPU's too, at its own address, with a
 * server on this host: its pages move into the host memory shared with the server (a copy of their bytes,
 * then that memory mapped over them), and the server maps the same memory at the same address, in the
 * client's address space it holds (address_space.py), and registers it. Only whole pages of ordinary
 * memory move (heap, stack, anonymous mappings; not files): a page shared with other data moves with it.
 * Writes of another thread to those pages while they move (microseconds) would be lost: programs register
 * memory they are about to hand to the GPU, not memory other threads are writing. Unregistering moves the
 * pages back into memory of the process's own (but pages of the calling thread's stack: move_back). Where they cannot move (over TCP, a file's pages, the
 * server cannot map them), the memory stays the program's own: copies from it work, kernels cannot reach
 * it, and its device pointer is refused by name. */
struct registered {
    const char *lo, *hi;   /* as the program registered it */
    uint64_t at, size;     /* the pages that moved (size 0: none) */
    uint64_t offset;       /* ...to this offset of the shared memory */
    struct registered *next;
};
static struct registered *registered;

static struct registered *registered_holding(const void *p)
{
    for (struct registered *r = registered; r; r = r->next)
        if ((const char *)p >= r->lo && (const char *)p < r->hi)
            return r;
    return NULL;
}

/* Whether every page of [lo, hi) is ordinary read-write private memory of this process (no file's). */
static int ordinary_memory(uint64_t lo, uint64_t hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    uint64_t at = lo;
    while (at < hi && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[8] = "", path[256] = "";
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %255s", &a, &b, perms, path) < 3 || b <= at)
            continue;
        if (a > at || strcmp(perms, "rw-p") != 0 || (path[0] && strcmp(path, "[heap]") && strcmp(path, "[stack]")))
            break;
        at = b;
    }
    fclose(f);
    return at >= hi;
}

/* Whether [lo, hi) may overlap this thread's own stack, which this very code runs on. The thread's stack
 * as pthread_getattr_np first said it (asked again, it would read /proc/self/maps, where a moved page of
 * the stack splits the main thread's [stack] and makes it look smaller), widened around the frame this
 * runs in: saying yes for a page that is not the stack costs only a page left in the shared memory. */
static __thread uint64_t own_stack_lo, own_stack_hi;

static int on_own_stack(uint64_t lo, uint64_t hi)
{
    uint64_t sp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
    if (!own_stack_hi) {
        pthread_attr_t attr;
        void *base;
        size_t size;
        own_stack_lo = sp - (8 << 20), own_stack_hi = sp + (8 << 20);
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &base, &size) == 0) {
                own_stack_lo = (uint64_t)(uintptr_t)base;
                own_stack_hi = (uint64_t)(uintptr_t)base + size;
            }
            pthread_attr_destroy(&attr);
        }
    }
    uint64_t below = sp - (256 << 10), above = sp + (8 << 20);
    uint64_t a = own_stack_lo < below ? own_stack_lo : below, b = own_stack_hi > above ? own_stack_hi : above;
    return lo < b && hi > a;
}

#if defined(__x86_64__)
/* The pages' bytes copied into the shared memory, then that memory mapped over them, with nothing written
 * to this thread's stack in between (one instruction sequence, no call): pages of the stack this code runs
 * on move too (a stack variable the program registers), the frames on them unchanged. The mmap's result. */
static long copy_then_map(uint64_t shared, uint64_t at, uint64_t size, int fd, uint64_t offset)
{
    long ret;
    void *dst = (void *)(uintptr_t)shared, *src = (void *)(uintptr_t)at;
    uint64_t n = size;
    register long flags __asm__("r10") = MAP_SHARED | MAP_FIXED;
    register long file __asm__("r8") = fd;
    register long from __asm__("r9") = (long)offset;
    __asm__ volatile("rep movsb\n\t"
                     "mov %[at], %%rdi\n\t"
                     "mov %[size], %%rsi\n\t"
                     "mov %[prot], %%edx\n\t"
                     "mov %[nr], %%eax\n\t"
                     "syscall"
                     : "=&a"(ret), "+&D"(dst), "+&S"(src), "+&c"(n) /* (no input may share their registers) */
                     : [at] "r"(at), [size] "r"(size), [prot] "i"(PROT_READ | PROT_WRITE), [nr] "i"(SYS_mmap),
                       "r"(flags), "r"(file), "r"(from)
                     : "rdx", "r11", "memory");
    return ret;
}
#endif

/* Move [at, at + size) into the shared memory: 0, or -1 (nothing moved, no room kept). */
static int move_pages(struct registered *r, uint64_t at, uint64_t size)
{
    int stack = on_own_stack(at, at + size);
#if !defined(__x86_64__)
    if (stack)
        return -1; /* (pages of the stack this code runs on move only where copy_then_map is written) */
#endif
    uint64_t offset;
    if (cuwire_py_host_register_at(at, size, &offset) != 0)
        return -1;
    int mapped;
#if defined(__x86_64__)
    if (stack) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old); /* (no handler's frame between the copy and the map) */
        mapped = copy_then_map(shared_base + offset, at, size, shared_fd, offset) == (long)at;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    } else
#endif
    {
        memcpy((void *)(uintptr_t)(shared_base + offset), (void *)(uintptr_t)at, size);
        mapped = cw_map_shared_over(shared_fd, offset, size, at) == at;
    }
    if (!mapped) {
        cuwire_py_host_free(shared_base + offset);
        return -1;
    }
    r->at = at, r->size = size, r->offset = offset;
    return 0;
}

/* Pages of a thread's own stack that stay in the shared memory after unregistering (parked, in a list of
 * their own; host_lock): registered again, they need no move (a program may register the same stack
 * variable call after call). */
static struct registered *parked;

static void park(struct registered *r)
{
    pthread_mutex_lock(&host_lock);
    r->lo = r->hi = NULL;
    r->next = parked;
    parked = r;
    pthread_mutex_unlock(&host_lock);
}

static struct registered *take_parked(uint64_t lo, uint64_t hi)
{
    for (struct registered **p = &parked; *p; p = &(*p)->next)
        if ((*p)->at <= lo && hi <= (*p)->at + (*p)->size) {
            struct registered *found = *p;
            *p = found->next;
            return found;
        }
    return NULL;
}

/* Back into memory of the process's own, and the shared room given back. Pages of this thread's own
 * stack stay in the shared memory (moving them back would pull the frames this code runs on from under
 * it): still the program's bytes, their room kept (parked) until the session ends; the server no longer
 * has them registered. Returns whether `r` was parked (kept). */
static int move_back(struct registered *r)
{
    if (on_own_stack(r->at, r->at + r->size)) {
        cuwire_py_host_unregister_at(r->offset);
        park(r);
        return 1;
    }
    /* (the bytes' copy is a mapping of its own: a malloc'd one may lie in the very pages moving back) */
    void *copy = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED)
        return 0; /* the pages stay in the shared memory: still the program's bytes, the room kept */
    memcpy(copy, (void *)(uintptr_t)r->at, r->size);
    if (mmap((void *)(uintptr_t)r->at, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != MAP_FAILED) {
        memcpy((void *)(uintptr_t)r->at, copy, r->size);
        cuwire_py_host_free(shared_base + r->offset);
    }
    munmap(copy, r->size);
    return 0;
}

/* Registrations are made one at a time (their pages move outside host_lock, which copies consult). */
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult cuwire_local_cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    if (!p || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), offset;
    uint64_t lo = (uint64_t)(uintptr_t)p / page * page;
    uint64_t hi = ((uint64_t)(uintptr_t)p + bytesize + page - 1) / page * page;
    struct registered *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r->lo = p, r->hi = (const char *)p + bytesize;
    pthread_mutex_lock(&register_lock);
    int overlaps = 0, pages_free = 1; /* (pages_free: no page of it moved already for another registration) */
    pthread_mutex_lock(&host_lock);
    for (struct registered *o = registered; o; o = o->next) {
        overlaps = overlaps || (r->lo < o->hi && r->hi > o->lo);
        pages_free = pages_free && (!o->size || o->at >= hi || o->at + o->size <= lo);
    }
    struct registered *again = overlaps || !pages_free ? NULL : take_parked(lo, hi);
    pthread_mutex_unlock(&host_lock);
    if (overlaps) {
        pthread_mutex_unlock(&register_lock);
        free(r);
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (again) { /* pages that moved before: the server registers them again where they are */
        if (cuwire_py_host_register_again(again->at, again->size, again->offset) == 0) {
            r->at = again->at, r->size = again->size, r->offset = again->offset;
            free(again);
        } else
            park(again); /* still shared memory, not the GPU's */
        pages_free = 0;
    }
    for (struct registered *o = parked; o && pages_free; o = o->next) /* (partly parked: shared pages) */
        pages_free = o->at >= hi || o->at + o->size <= lo;
    if (!__atomic_load_n(&shared_known, __ATOMIC_ACQUIRE) && CUWIRE_READY())
        cuwire_py_connect(); /* (whether the session shares host memory is known once it is open) */
    if (shared_size && shared_fd >= 0 && shared_server_base == shared_base && pages_free &&
        !shared_offset(p, bytesize, &offset) && ordinary_memory(lo, hi) && CUWIRE_READY())
        move_pages(r, lo, hi - lo);
    pthread_mutex_lock(&host_lock);
    r->next = registered;
    registered = r;
    pthread_mutex_unlock(&host_lock);
    pthread_mutex_unlock(&register_lock);
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuMemHostUnregister(void *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&register_lock);
    struct registered *gone = NULL;
    pthread_mutex_lock(&host_lock);
    for (struct registered **r = &registered; *r; r = &(*r)->next)
        if ((*r)->lo == p) {
            gone = *r;
            *r = gone->next;
            break;
        }
    pthread_mutex_unlock(&host_lock);
    int kept = gone && gone->size && CUWIRE_READY() && move_back(gone);
    pthread_mutex_unlock(&register_lock);
    if (!gone)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    if (!kept)
        free(gone);
    return CUDA_SUCCESS;
}

/* Page-locked memory in the memory shared with the server is the GPU's too (the server registered it mapped,
 * at the client's own address when it could): its device pointer is that address, as natively with unified
 * addressing. Memory of the client's own cannot be reached by the GPU: said by name. */
CUresult cuwire_local_cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    int shared = 0;
    uint64_t offset;
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&host_lock);
    int held = host_alloc_holds_locked(p, &shared);
    struct registered *r = held ? NULL : registered_holding(p);
    int moved = r && r->size, known = r != NULL;
    pthread_mutex_unlock(&host_lock);
    if (moved) { /* the GPU's at its own address (the server mapped and registered the same pages there) */
        *pdptr = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
    }
    if (known) {
        cuwire_say_once_per_name("cuwire: not supported: the GPU cannot reach memory the program registered itself "
                                 "(cuMemHostRegister, cudaHostRegister): only page-locked memory it allocated "
                                 "(cuMemHostAlloc, cudaMallocHost) is mapped for kernels; refused:",
                                 "cuMemHostGetDevicePointer");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!held)
        return CUDA_ERROR_INVALID_VALUE;
    if (!shared || !shared_offset(p, 1, &offset)) {
        cuwire_say_once_per_name("cuwire: mapped host memory needs a server on this host (the Unix socket and "
                                 "shared memory; CUWIRE_TRANSPORT=auto): the GPU cannot reach this client's memory, "
                                 "refused:", "cuMemHostGetDevicePointer");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *pdptr = shared_server_base + offset;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ cooperative launches */

/* cuLaunchCooperativeKernel is cuLaunchKernelEx with the cooperative attribute: queued the same way. */
CUresult cuwire_local_cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                void **kernelParams)
{
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    CUlaunchConfig config = {gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                             hStream, &attr, 1};
    return cuLaunchKernelEx(&config, f, kernelParams, NULL);
}

/* ------------------------------------------------------------------ managed memory */

/* Managed memory, with a server on this host: page-locked memory shared with the server and mapped for the
 * GPU at the same address, as cuMemHostAlloc's is. The program and the GPU use one copy of it, coherently
 * (the GPU's accesses cross PCIe rather than migrating pages); prefetches and advice are hints, taken and
 * left at that. The session's allocation map holds it, so copies and memsets treat it as device memory, as
 * natively. Over TCP: managed memory on the server and a host copy here, kept in step at calls (managed.c). */
CUresult cuwire_local_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (!dptr || bytesize == 0 || (flags != 1 && flags != 2)) /* CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST */
        return CUDA_ERROR_INVALID_VALUE;
    struct host_alloc *a = malloc(sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t address = 0;
    if (CUWIRE_READY())
        cuwire_py_host_alloc(bytesize, &address);
    int same = shared_server_base == shared_base; /* else the server has the shared memory elsewhere (ring.py) */
    if (address && !same) { /* kernels would get an address that is not theirs: two copies kept in step instead */
        cuwire_py_host_free(address);
        address = 0;
    }
    if (!address) {
        free(a);
        if (shared_size && same)
            return CUDA_ERROR_OUT_OF_MEMORY; /* the shared memory is full (CUWIRE_HOST_MEMORY) */
        if (!CUWIRE_READY())
            return (CUresult)CUWIRE_NOT_READY;
        /* over TCP (or shared memory at another address in the server): two copies kept in step (managed.c) */
        return (CUresult)cuwire_managed_alloc((uint64_t *)dptr, bytesize, flags);
    }
    if (cuwire_track_alloc(address, bytesize) != 0) {
        free(a);
        cuwire_py_host_free(address);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&host_lock);
    *a = (struct host_alloc){(void *)(uintptr_t)address, bytesize, flags, 1, 1, host_allocs};
    host_allocs = a;
    pthread_mutex_unlock(&host_lock);
    *dptr = address;
    return CUDA_SUCCESS;
}

/* The size of the managed allocation at p; 0 for any other pointer. */
static size_t managed_size(CUdeviceptr p)
{
    size_t size = 0;
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc *a = host_allocs; a; a = a->next)
        if (a->ptr == (void *)(uintptr_t)p) {
            size = a->managed ? a->size : 0;
            break;
        }
    pthread_mutex_unlock(&host_lock);
    return size;
}

/* cuMemFree of managed memory: the client's to free (the server never made it a device allocation). */
int cuwire_fast_cuMemFree_v2(CUdeviceptr dptr)
{
    if (dptr && cuwire_managed_free(dptr) == 0)
        return -1; /* managed memory made over TCP: its host copy is gone; the server frees its own */
    uint64_t offset; /* managed memory lies in the shared memory: any other pointer goes on at once */
    size_t size = dptr && shared_offset((const void *)(uintptr_t)dptr, 1, &offset) ? managed_size(dptr) : 0;
    if (!size)
        return -1;
    cuwire_hints_forget(dptr, size);
    cuwire_untrack_alloc(dptr);
    return host_free((void *)(uintptr_t)dptr);
}

/* Whether [p, p + count) is memory that managed-memory hints may name: CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE. */
CUresult cuwire_managed_range(CUdeviceptr p, size_t count)
{
    uint64_t offset;
    int known = shared_offset((const void *)(uintptr_t)p, count, &offset) || cuwire_managed_holds(p, count);
    return count && known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Prefetches and advice change nothing the GPU does here (managed memory is page-locked host memory): they
 * are noted, for cuMemRangeGetAttribute (client/managed_hints.c). */
CUresult cuwire_local_cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                            CUstream hStream)
{
    (void)flags, (void)hStream;
    CUresult status = cuwire_managed_range(devPtr, count);
    if (status == CUDA_SUCCESS)
        cuwire_hints_prefetched(devPtr, count, location);
    return status;
}

CUresult cuwire_local_cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    CUresult status = cuwire_managed_range(devPtr, count);
    if (status == CUDA_SUCCESS)
        cuwire_hints_advise(devPtr, count, advice, location);
    return status;
}

CUresult cuwire_local_cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
    (void)hStream, (void)flags;
    return cuwire_managed_range(dptr, length ? length : 1);
}

/* ------------------------------------------------------------------ driver entry points */

/* Names said once each (a library may ask for the same missing entry point many times). */
void cuwire_say_once_per_name(const char *what, const char *name)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char *said[512];
    static int n;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n; i++)
        if (strcmp(said[i], name) == 0) {
            pthread_mutex_unlock(&lock);
            return;
        }
    if (n < 512)
        said[n++] = strdup(name);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "%s %s\n", what, name);
}

/* cuGetProcAddress: the ABI variant of `symbol` current at `cudaVersion` (generated/client_procs.c). */
CUresult cuwire_local_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (cuwire_trace == 1)
        fprintf(stderr, "cuwire trace: cuGetProcAddress(%s, %d, %llu)\n", symbol, cudaVersion, (unsigned long long)flags);
    int found;
    *pfn = cuwire_proc_lookup(symbol, cudaVersion, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0,
                              &found);
    if (symbolStatus)
        *symbolStatus = found == 1   ? CU_GET_PROC_ADDRESS_SUCCESS
                        : found == 2 ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                     : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (found == 0 && symbol[0]) /* "" is a probe (cuBLAS makes it): the driver says not found, quietly */
        cuwire_say_once_per_name("cuwire: cuGetProcAddress: no driver entry point named", symbol);
    return found == 1 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuwire_local_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuwire_local_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------ queued kernel launches */

/* Functions and kernels (CUfunction, CUkernel) the client has looked up on the server, with their
 * parameter layout (driver.py hands it over from the lookup's answer). With it, a launch is checked
 * against the device's limits and queued as one record, in C, without Python or a round trip; its
 * errors surface at the next synchronising call, as a GPU's own launch errors do. The table belongs to
 * the current session. */
struct kernel_info {
    const void *key; /* the CUfunction or CUkernel handle the program holds */
    uint64_t handle; /* the server's */
    uint32_t n, size;
    uint32_t *offsets, *sizes;
};
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel_info *kernels; /* open addressing, power-of-two capacity */
static size_t kernels_cap, kernels_len;
static uint32_t max_threads, max_block[3], max_grid[3];
static int limits_set;
unsigned long long cuwire_fast_launches; /* for CUWIRE_STATS */
extern const uint32_t cuwire_launch_record_id, cuwire_launch_ex_record_id;

static size_t slot_of(const void *key, size_t cap)
{
    return ((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
}

void cuwire_set_launch_limits(uint32_t threads, const uint32_t *block, const uint32_t *grid)
{
    pthread_mutex_lock(&kernels_lock);
    max_threads = threads;
    memcpy(max_block, block, sizeof max_block);
    memcpy(max_grid, grid, sizeof max_grid);
    limits_set = 1;
    pthread_mutex_unlock(&kernels_lock);
}

void cuwire_forget_kernels(void)
{
    pthread_mutex_lock(&kernels_lock);
    for (size_t i = 0; i < kernels_cap; i++) {
        free(kernels[i].offsets);
        free(kernels[i].sizes);
    }
    free(kernels);
    kernels = NULL;
    kernels_cap = kernels_len = 0;
    limits_set = 0;
    pthread_mutex_unlock(&kernels_lock);
}

void cuwire_cache_kernel(const void *key, uint64_t handle, uint32_t n, const uint32_t *offsets,
                         const uint32_t *sizes)
{
    pthread_mutex_lock(&kernels_lock);
    if ((kernels_len + 1) * 2 > kernels_cap) {
        size_t cap = kernels_cap ? kernels_cap * 2 : 256;
        struct kernel_info *grown = calloc(cap, sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&kernels_lock);
            return; /* launches of this function simply keep taking the Python path */
        }
        for (size_t i = 0; i < kernels_cap; i++) {
            if (kernels[i].key) {
                size_t j = slot_of(kernels[i].key, cap);
                while (grown[j].key)
                    j = (j + 1) & (cap - 1);
                grown[j] = kernels[i];
            }
        }
        free(kernels);
        kernels = grown;
        kernels_cap = cap;
    }
    size_t j = slot_of(key, kernels_cap);
    while (kernels[j].key && kernels[j].key != key)
        j = (j + 1) & (kernels_cap - 1);
    if (!kernels[j].key) {
        struct kernel_info k = {key, handle, n, 0, malloc(n * sizeof(uint32_t) + 1),
                                malloc(n * sizeof(uint32_t) + 1)};
        if (!k.offsets || !k.sizes) {
            free(k.offsets);
            free(k.sizes);
            pthread_mutex_unlock(&kernels_lock);
            return;
        }
        for (uint32_t i = 0; i < n; i++) {
            k.offsets[i] = offsets[i];
            k.sizes[i] = sizes[i];
            if (offsets[i] + sizes[i] > k.size)
                k.size = offsets[i] + sizes[i];
        }
        kernels[j] = k;
        kernels_len++;
    }
    pthread_mutex_unlock(&kernels_lock);
}

/* The record: u64 kernel, u32 grid[3], u32 block[3], u64 shared memory, u64 stream, then the
 * parameters laid out at their offsets (server/custom.py, LAUNCH_HEAD). */
struct __attribute__((packed)) launch_head {
    uint64_t kernel;
    uint32_t grid[3], block[3];
    uint64_t shared_mem, stream;
};

/* A launch configuration the device cannot run gets CUDA_ERROR_INVALID_VALUE at once, before the GPU
 * sees it, as the driver answers; -1 while the device's limits are not known. */
int cuwire_launch_config_error(const uint32_t *g, const uint32_t *b)
{
    if (!__atomic_load_n(&limits_set, __ATOMIC_ACQUIRE))
        return -1;
    if ((uint64_t)b[0] * b[1] * b[2] > max_threads || !b[0] || !b[1] || !b[2] || !g[0] || !g[1] || !g[2])
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; i++)
        if (b[i] > max_block[i] || g[i] > max_grid[i])
            return CUDA_ERROR_INVALID_VALUE;
    return 0;
}

/* cuda.h's `extra` keys (macros, so not in generated/cuda_api.h). */
#define LAUNCH_PARAM_END ((void *)0)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)1)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)2)

/* Queue a launch of a known function; its parameters come as kernelParams or, from `extra`, as one
 * buffer already laid out at their offsets. -1: not known yet (Python looks it up and launches). */
static int launch_queued(CUfunction f, const uint32_t g[3], const uint32_t b[3], unsigned shmem, CUstream stream,
                         void **params, void **extra, const CUlaunchAttribute *attrs, uint32_t n_attrs)
{
    const void *buf = NULL;
    size_t buf_size = 0;
    for (void **e = extra; e && *e != LAUNCH_PARAM_END; e += 2) {
        if (e[0] == LAUNCH_PARAM_BUFFER_POINTER)
            buf = e[1];
        else if (e[0] == LAUNCH_PARAM_BUFFER_SIZE && e[1])
            buf_size = *(size_t *)e[1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (params && buf)
        return CUDA_ERROR_INVALID_VALUE;
    if (cuwire_forked || !__atomic_load_n(&limits_set, __ATOMIC_ACQUIRE))
        return -1;
    int bad = cuwire_launch_config_error(g, b);
    if (bad)
        return bad;
    pthread_mutex_lock(&kernels_lock);
    struct kernel_info k = {0};
    if (kernels_cap) {
        size_t j = slot_of(f, kernels_cap);
        while (kernels[j].key && kernels[j].key != (const void *)f)
            j = (j + 1) & (kernels_cap - 1);
        k = kernels[j];
    }
    if (!k.key) {
        pthread_mutex_unlock(&kernels_lock);
        return -1; /* first launch of this function: Python looks it up */
    }
    char small[4096], *rec = small;
    size_t attrs_len = n_attrs ? 8 + (size_t)n_attrs * sizeof(CUlaunchAttribute) : 0;
    size_t len = sizeof(struct launch_head) + attrs_len + k.size;
    if (len > sizeof small && !(rec = calloc(1, len))) {
        pthread_mutex_unlock(&kernels_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(rec, 0, len);
    struct launch_head head = {k.handle, {g[0], g[1], g[2]}, {b[0], b[1], b[2]}, shmem, (uint64_t)(uintptr_t)stream};
    memcpy(rec, &head, sizeof head);
    if (n_attrs) {
        memcpy(rec + sizeof head, &n_attrs, 4);
        memcpy(rec + sizeof head + 8, attrs, (size_t)n_attrs * sizeof(CUlaunchAttribute));
    }
    char *out = rec + sizeof head + attrs_len;
    if (params)
        for (uint32_t i = 0; i < k.n; i++)
            memcpy(out + k.offsets[i], params[i], k.sizes[i]);
    else if (buf)
        memcpy(out, buf, buf_size < k.size ? buf_size : k.size);
    else if (k.n) {
        pthread_mutex_unlock(&kernels_lock);
        if (rec != small)
            free(rec);
        return CUDA_ERROR_INVALID_VALUE; /* a kernel with parameters launched without them */
    }
    pthread_mutex_unlock(&kernels_lock);
    int err = cuwire_enqueue(n_attrs ? cuwire_launch_ex_record_id : cuwire_launch_record_id, rec, (uint32_t)len);
    if (rec != small)
        free(rec);
    if (!err)
        __atomic_add_fetch(&cuwire_fast_launches, 1, __ATOMIC_RELAXED);
    return err;
}

/* The parameters of f (kernelParams, or extra's one buffer) laid out at their offsets into out, as a
 * launch record carries them (for a graph's kernel node, client/graphs.py): their length, the server's
 * handle of f in *handle; -1 when f's layout is not known here, -2 when out (cap bytes) is too small,
 * -3 when the parameters are missing or malformed. */
long cuwire_pack_params(CUfunction f, void **params, void **extra, uint64_t *handle, char *out, size_t cap)
{
    const void *buf = NULL;
    size_t buf_size = 0;
    for (void **e = extra; e && *e != LAUNCH_PARAM_END; e += 2) {
        if (e[0] == LAUNCH_PARAM_BUFFER_POINTER)
            buf = e[1];
        else if (e[0] == LAUNCH_PARAM_BUFFER_SIZE && e[1])
            buf_size = *(size_t *)e[1];
        else
            return -3;
    }
    if (params && buf)
        return -3;
    long len = -1;
    pthread_mutex_lock(&kernels_lock);
    struct kernel_info k = {0};
    if (kernels_cap) {
        size_t j = slot_of(f, kernels_cap);
        while (kernels[j].key && kernels[j].key != (const void *)f)
            j = (j + 1) & (kernels_cap - 1);
        k = kernels[j];
    }
    if (k.key && k.size > cap)
        len = -2;
    else if (k.key && !params && !buf && k.n)
        len = -3;
    else if (k.key) {
        memset(out, 0, k.size);
        if (params)
            for (uint32_t i = 0; i < k.n; i++)
                memcpy(out + k.offsets[i], params[i], k.sizes[i]);
        else if (buf)
            memcpy(out, buf, buf_size < k.size ? buf_size : k.size);
        *handle = k.handle;
        len = (long)k.size;
    }
    pthread_mutex_unlock(&kernels_lock);
    return len;
}

/* cuLaunchKernel of a function or kernel whose layout the client holds (from its lookup). */
int cuwire_fast_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)
{
    uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    return launch_queued(f, g, b, shmem, stream, params, extra, NULL, 0);
}

/* cuLaunchKernelEx: its launch attributes (cluster dimensions, cooperative...) travel in the record. */
int cuwire_fast_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    uint32_t b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch_queued(f, g, b, config->sharedMemBytes, config->hStream, params, extra, config->attrs,
                         config->numAttrs);
}
