/* cuwire client: driver-API answers the client gives from its own state (no Python, no server).
 *
 * NVIDIA's runtime asks the driver for the current context before most of its calls; the answer is
 * the calling thread's own, so it is kept here per thread, and changes are queued to the server.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

static __thread CUcontext current_context;

/* The thread's context changes here only; the server's session thread is switched to it when this
 * thread next sends a call (cuwire_enqueue, cuwire_queue_take), so calls from threads with different
 * contexts each run in their own. */
CUresult cuwire_local_cuCtxSetCurrent(CUcontext ctx)
{
    current_context = ctx;
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current_context;
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    const char *env = getenv("CUDA_MODULE_LOADING");
    *mode = env && strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}

/* Libraries and modules stay loaded on the server, in its module cache, shared by later sessions. */
CUresult cuwire_local_cuLibraryUnload(CUlibrary library)
{
    return library ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuwire_local_cuModuleUnload(CUmodule module)
{
    return module ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Errors' names are the headers' (generated); a code they do not name is refused, as the driver does. */
CUresult cuwire_local_cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = cuwire_error_name_or_null((int)error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* cuGetErrorString's fast path: -1 (the server driver's text, which Python keeps); once Python can no
 * longer be called (a Python program's teardown, where libraries still print their errors), the name. */
int cuwire_error_string_fast(CUresult error, const char **pStr)
{
    return cuwire_python_gone() ? (int)cuwire_local_cuGetErrorName(error, pStr) : -1;
}

/* For the Python side (cuPointerGetAttributes): the calling thread's current context. */
uint64_t cuwire_current_context(void) { return (uint64_t)(uintptr_t)current_context; }

/* ------------------------------------------------------------------ devices: one snapshot per session */

/* What the server's driver said of each device when the session opened (Welcome.devices): every
 * attribute, name, UUID and memory size. NVIDIA's runtime reads about a hundred attributes per device
 * at start, each a round trip if it were asked for. */
#define MAX_DEVICES 64
#define ATTRIBUTE_UNSUPPORTED INT32_MIN
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_devices = -1, n_attributes, driver_version;
static int32_t *attributes; /* n_devices * n_attributes */
static char names[MAX_DEVICES][256];
static CUuuid uuids[MAX_DEVICES];
static size_t total_memory[MAX_DEVICES];
static CUcontext primary[MAX_DEVICES];
static unsigned int primary_flags[MAX_DEVICES];
static int primary_refs[MAX_DEVICES];

void cuwire_set_devices(int count, int n_attrs, const int32_t *attrs, const char *const *device_names,
                        const uint8_t *device_uuids, const uint64_t *memory, const uint64_t *contexts,
                        const uint32_t *flags, int driver)
{
    if (count > MAX_DEVICES)
        count = MAX_DEVICES;
    int32_t *copy = malloc((size_t)(count * n_attrs + 1) * sizeof *copy);
    if (!copy)
        return;
    memcpy(copy, attrs, (size_t)count * n_attrs * sizeof *copy);
    pthread_mutex_lock(&devices_lock);
    free(attributes);
    attributes = copy, n_attributes = n_attrs, driver_version = driver;
    for (int i = 0; i < count; i++) {
        snprintf(names[i], sizeof names[i], "%s", device_names[i]);
        memcpy(uuids[i].bytes, device_uuids + 16 * i, 16);
        total_memory[i] = memory[i];
        primary[i] = (CUcontext)(uintptr_t)contexts[i];
        primary_flags[i] = flags[i];
    }
    __atomic_store_n(&n_devices, count, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&devices_lock);
}

int cuwire_session_open(void) { return __atomic_load_n(&n_devices, __ATOMIC_ACQUIRE) >= 0; }

/* The snapshot, connecting first if this is the process's first question: 0, or the error to return. */
static CUresult devices_known(void)
{
    if (__atomic_load_n(&n_devices, __ATOMIC_ACQUIRE) >= 0)
        return CUDA_SUCCESS;
    if (!CUWIRE_READY())
        return CUWIRE_NOT_READY;
    int err = cuwire_py_connect();
    if (err)
        return (CUresult)err;
    return __atomic_load_n(&n_devices, __ATOMIC_ACQUIRE) >= 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

#define CHECK_DEVICE(dev)                                                                                  \
    do {                                                                                                   \
        CUresult e = devices_known();                                                                      \
        if (e)                                                                                             \
            return e;                                                                                      \
        if ((dev) < 0 || (dev) >= n_devices)                                                               \
            return CUDA_ERROR_INVALID_DEVICE;                                                              \
    } while (0)

CUresult cuwire_local_cuInit(unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    return devices_known();
}

CUresult cuwire_local_cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult e = devices_known();
    if (!e)
        *version = driver_version;
    return e;
}

CUresult cuwire_local_cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult e = devices_known();
    if (!e)
        *count = n_devices;
    return e;
}

CUresult cuwire_local_cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(ordinal);
    *device = ordinal; /* a CUdevice is its ordinal */
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    if ((int)attrib < 0 || (int)attrib >= n_attributes || attributes[dev * n_attributes + attrib] == ATTRIBUTE_UNSUPPORTED)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = attributes[dev * n_attributes + attrib];
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    snprintf(name, (size_t)len, "%s", names[dev]);
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    *uuid = uuids[dev];
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    *bytes = total_memory[dev];
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult e = cuwire_local_cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    return e ? e : cuwire_local_cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

/* ------------------------------------------------------------------ context stack, stream capture */

#define CONTEXT_STACK 64
static __thread CUcontext context_stack[CONTEXT_STACK];
static __thread int context_depth;

CUresult cuwire_local_cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (context_depth == CONTEXT_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    context_stack[context_depth++] = current_context;
    return cuCtxSetCurrent(ctx);
}

CUresult cuwire_local_cuCtxPopCurrent_v2(CUcontext *pctx)
{
    if (!current_context)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx)
        *pctx = current_context;
    return cuCtxSetCurrent(context_depth ? context_stack[--context_depth] : NULL);
}

/* Stream capture runs on the server, where the streams are (cuStreamBeginCapture and cuStreamEndCapture are
 * forwarded); the client keeps which streams capture, so the capture status PyTorch asks before most of its
 * work costs nothing here. A capture spreads as natively: an event recorded in a capturing stream carries
 * the capture to a stream that waits for it (the other streams of a multi-stream capture), and they all
 * leave it when the stream that began it ends it. */
#define CAPTURES_MAX 64
#define CAPTURE_EVENTS 256
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUstream stream;
    cuuint64_t id;
    int origin;   /* the stream that began the capture (else one that joined it) */
    int to_graph; /* into a graph the program made (cuStreamBeginCaptureToGraph) */
    const void *thread;       /* (origin) the program thread that began it: its this_thread */
    CUstreamCaptureMode mode; /* (origin) the mode it began in */
} captures[CAPTURES_MAX];
static struct {
    CUevent event;
    cuuint64_t id; /* the capture it was last recorded in */
} capture_events[CAPTURE_EVENTS];
static cuuint64_t capture_ids;
static int capturing; /* streams in a capture now: no lock taken while none is */

/* The row of `stream`'s capture, or -1; the lock is held. */
static int capture_row(CUstream stream)
{
    for (int i = 0; i < CAPTURES_MAX; i++)
        if (captures[i].id && captures[i].stream == stream)
            return i;
    return -1;
}

static __thread char this_thread; /* its address names the calling thread */

/* `stream` is in capture `id`; the lock is held. The row, or -1 when the table is full. */
static int note_capture(CUstream stream, cuuint64_t id, int origin, int to_graph)
{
    for (int i = 0; i < CAPTURES_MAX; i++)
        if (!captures[i].id) {
            captures[i].stream = stream;
            captures[i].id = id;
            captures[i].origin = origin;
            captures[i].to_graph = to_graph;
            __atomic_add_fetch(&capturing, 1, __ATOMIC_RELAXED);
            return i;
        }
    return -1;
}

static void begin_capture(CUstream stream, int to_graph, CUstreamCaptureMode mode)
{
    pthread_mutex_lock(&capture_lock);
    int row = note_capture(stream, ++capture_ids, 1, to_graph);
    if (row >= 0) {
        captures[row].thread = &this_thread;
        captures[row].mode = mode;
    }
    pthread_mutex_unlock(&capture_lock);
}

void cuwire_after_cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode)
{
    begin_capture(stream, 0, mode);
}

/* Capturing into a graph the program made is capturing all the same. */
void cuwire_after_cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode *dependencies,
                                              const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                              CUstreamCaptureMode mode)
{
    (void)graph, (void)dependencies, (void)dependencyData, (void)numDependencies;
    begin_capture(stream, 1, mode);
}

/* cuEventRecord's fast path (and cuEventRecordWithFlags'): which capture, if any, the event now carries.
 * Always -1: the call is then queued as usual. */
int cuwire_capture_event_record(CUevent event, CUstream stream)
{
    uint64_t e = (uint64_t)(uintptr_t)event, s = (uint64_t)(uintptr_t)stream;
    if (!__atomic_load_n(&capturing, __ATOMIC_RELAXED)) {
        cuwire_note_event_record(e, s, 0); /* what a query of it may answer (completion.c) */
        return -1; /* (events carry captures only while one runs: they are forgotten when it ends) */
    }
    pthread_mutex_lock(&capture_lock);
    int row = capture_row(stream), free_slot = -1, slot = -1;
    for (int i = 0; i < CAPTURE_EVENTS && slot < 0; i++)
        if (capture_events[i].id && capture_events[i].event == event)
            slot = i;
        else if (!capture_events[i].id && free_slot < 0)
            free_slot = i;
    if (slot < 0)
        slot = row >= 0 ? free_slot : -1;
    if (slot >= 0) {
        capture_events[slot].event = event;
        capture_events[slot].id = row >= 0 ? captures[row].id : 0;
    }
    pthread_mutex_unlock(&capture_lock);
    cuwire_note_event_record(e, s, row >= 0);
    return -1;
}

int cuwire_capture_event_record_with_flags(CUevent event, CUstream stream, unsigned int flags)
{
    (void)flags;
    return cuwire_capture_event_record(event, stream);
}

/* cuStreamWaitEvent's fast path: a stream waiting for an event recorded in a capture joins the capture.
 * Always -1: the wait is then queued as usual (the server's driver joins its stream likewise). */
int cuwire_capture_stream_wait(CUstream stream, CUevent event, unsigned int flags)
{
    (void)flags;
    if (!__atomic_load_n(&capturing, __ATOMIC_RELAXED))
        return -1;
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < CAPTURE_EVENTS; i++)
        if (capture_events[i].id && capture_events[i].event == event) {
            int row = capture_row(stream);
            if (row < 0) {
                for (int j = 0; j < CAPTURES_MAX; j++)
                    if (captures[j].id == capture_events[i].id && captures[j].origin) {
                        note_capture(stream, captures[j].id, 0, captures[j].to_graph);
                        break;
                    }
            }
            break;
        }
    pthread_mutex_unlock(&capture_lock);
    return -1;
}

/* Before cuStreamEndCapture goes to the server: the capture ends, whether or not the graph comes out, for
 * the stream that began it and every stream that joined it. A capture into the program's own graph may be
 * ended without asking for the graph back (NULL, as CUDA's graphConditionalNodes sample does): the server
 * is asked with a place for it, which the program does not need. Ended from a stream that only joined the
 * capture, it goes to the server as it is (which refuses it, as CUDA does). */
static __thread cuuint64_t ending_capture; /* the capture cuStreamEndCapture is ending, for its after */

int cuwire_fast_cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    int to_graph = 0;
    pthread_mutex_lock(&capture_lock);
    int row = capture_row(stream);
    if (row >= 0 && captures[row].origin) {
        cuuint64_t id = captures[row].id;
        to_graph = captures[row].to_graph;
        ending_capture = id;
        for (int i = 0; i < CAPTURES_MAX; i++)
            if (captures[i].id == id) {
                captures[i].id = 0;
                __atomic_sub_fetch(&capturing, 1, __ATOMIC_RELAXED);
            }
        for (int i = 0; i < CAPTURE_EVENTS; i++)
            if (capture_events[i].id == id)
                capture_events[i].id = 0;
    }
    pthread_mutex_unlock(&capture_lock);
    if (!graph && to_graph) {
        CUgraph unused;
        return cuStreamEndCapture(stream, &unused);
    }
    return -1;
}

/* The capture `stream` is in, or 0 (no lock taken while nothing ever captured: PyTorch asks before most of
 * its work). */
static cuuint64_t capture_of(CUstream stream)
{
    if (!__atomic_load_n(&capturing, __ATOMIC_RELAXED))
        return 0;
    pthread_mutex_lock(&capture_lock);
    int row = capture_row(stream);
    cuuint64_t id = row >= 0 ? captures[row].id : 0;
    pthread_mutex_unlock(&capture_lock);
    return id;
}

/* The capture `stream` is in (0: none), for graph_copies.c. */
uint64_t cuwire_capture_of(void *stream) { return capture_of((CUstream)stream); }

/* After cuStreamEndCapture gave its graph: what the capture's copies of pageable memory stood in with is
 * the graph's now (graph_copies.c). */
void cuwire_after_end_capture(CUstream stream, CUgraph *graph)
{
    (void)stream;
    cuuint64_t id = ending_capture;
    ending_capture = 0;
    if (id && graph)
        cuwire_capture_became(id, (uint64_t)(uintptr_t)*graph);
}

CUresult cuwire_local_cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = capture_of(stream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus *status)
{
    return cuwire_local_cuStreamIsCapturing(stream, status);
}

/* The status and id are the client's; the capture's graph and last nodes, asked for while it captures, are
 * the server's (graphs built into a capture by hand: cuGraphAddNode on that graph, then
 * cuStreamUpdateCaptureDependencies, as CUDA's graphConditionalNodes sample does). */
CUresult cuwire_local_cuStreamGetCaptureInfo_v3(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps,
                                               const CUgraphEdgeData **edges, size_t *n_deps)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t capture = capture_of(stream);
    if (capture && (graph || deps || edges)) {
        size_t count = 0;
        int err = cuwire_py_capture_info((uint64_t)(uintptr_t)stream, graph, deps, edges, &count);
        if (err)
            return (CUresult)err;
        if (n_deps)
            *n_deps = count;
    } else {
        if (graph)
            *graph = NULL;
        if (deps)
            *deps = NULL;
        if (edges)
            *edges = NULL;
        if (n_deps)
            *n_deps = 0;
    }
    if (id)
        *id = capture;
    *status = capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps, size_t *n_deps)
{
    return cuwire_local_cuStreamGetCaptureInfo_v3(stream, status, id, graph, deps, NULL, n_deps);
}

/* cuGraphInstantiateWithParams: cuGraphInstantiateWithFlags (the server's), then cuGraphUpload to the stream
 * the parameters name when they ask for it. The result says success or a plain error: the driver's finer
 * reason and the node it names stay on the server. */
CUresult cuwire_local_cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t upload = params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    CUresult r = cuGraphInstantiateWithFlags(phGraphExec, hGraph, params->flags & ~upload);
    if (r == CUDA_SUCCESS && upload)
        r = cuGraphUpload(*phGraphExec, params->hUploadStream);
    params->hErrNode_out = NULL;
    params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

/* cuStreamGetCtx_v2: the stream's context (the server's answer); green contexts are not served, so no
 * stream has one. */
CUresult cuwire_local_cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    if (!pCtx || !pGreenCtx)
        return CUDA_ERROR_INVALID_VALUE;
    *pGreenCtx = NULL;
    return cuStreamGetCtx(hStream, pCtx);
}

/* Each program thread's capture mode is its own, as natively; the server runs every thread's calls on the
 * session's one thread, which began every capture. So what the driver would decide for the calling thread
 * is decided here, from the captures the client knows (who began each, in which mode), and the session
 * thread is put in the mode that makes the driver decide the same (local.c puts it before the thread's
 * calls): global where the caller may not make potentially unsafe calls (cuMemAlloc, say: they then fail
 * and invalidate the capture, as natively), relaxed where it may.
 *   relaxed: may.  thread-local: not while a capture it began (not in relaxed mode) runs.
 *   global: not while a capture it began (not relaxed) runs, nor one another thread began in global mode. */
static __thread CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult cuwire_local_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

int cuwire_server_capture_mode(void)
{
    if (!__atomic_load_n(&capturing, __ATOMIC_RELAXED))
        return -1; /* no capture: no call is prohibited, whatever the session thread's mode */
    if (capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CU_STREAM_CAPTURE_MODE_RELAXED;
    int prohibited = 0;
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < CAPTURES_MAX && !prohibited; i++) {
        if (!captures[i].id || !captures[i].origin)
            continue;
        if (captures[i].thread == &this_thread)
            prohibited = captures[i].mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        else
            prohibited = capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                         captures[i].mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    }
    pthread_mutex_unlock(&capture_lock);
    return prohibited ? CU_STREAM_CAPTURE_MODE_GLOBAL : CU_STREAM_CAPTURE_MODE_RELAXED;
}

/* ------------------------------------------------------------------ primary contexts */

/* The session process holds each device's primary context for its whole life, so retaining and
 * releasing it here only counts (the state PyTorch polls thousands of times per run). */
CUresult cuwire_local_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    __atomic_add_fetch(&primary_refs[dev], 1, __ATOMIC_RELAXED);
    *pctx = primary[dev];
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CHECK_DEVICE(dev);
    int refs = __atomic_load_n(&primary_refs[dev], __ATOMIC_RELAXED);
    while (refs > 0 && !__atomic_compare_exchange_n(&primary_refs[dev], &refs, refs - 1, 0, __ATOMIC_RELAXED,
                                                    __ATOMIC_RELAXED))
        ;
    return refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuwire_local_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEVICE(dev);
    *flags = __atomic_load_n(&primary_flags[dev], __ATOMIC_RELAXED);
    *active = __atomic_load_n(&primary_refs[dev], __ATOMIC_RELAXED) > 0;
    return CUDA_SUCCESS;
}

/* cuDevicePrimaryCtxSetFlags_v2's fast path: note the flags, then let the stub ask the server. */
int cuwire_note_primary_flags(CUdevice dev, unsigned int flags)
{
    if (dev >= 0 && dev < MAX_DEVICES)
        __atomic_store_n(&primary_flags[dev], flags, __ATOMIC_RELAXED);
    return -1;
}

/* ------------------------------------------------------------------ contexts the program creates */

/* cuCtxCreate's contexts live on the server; the client keeps each one's device (for cuCtxGetDevice,
 * which libraries ask often) in a small table. */
#define MAX_CREATED 256
static struct { CUcontext ctx; CUdevice dev; } created[MAX_CREATED];
static pthread_mutex_t created_lock = PTHREAD_MUTEX_INITIALIZER;

/* cuCtxCreate_v4's fast path: the creation parameters (execution affinity, CIG) are not served. Empty
 * parameters (`CUctxCreateParams p = {}`, what CUDA 13's samples and helpers pass) ask for nothing and go
 * on as NULL (the annotations send NULL either way). */
int cuwire_check_context_params(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    (void)pctx, (void)flags, (void)dev;
    if (!params || (!params->execAffinityParams && params->numExecAffinityParams == 0 && !params->cigParams))
        return -1;
    static int warned;
    return cuwire_unimplemented("cuCtxCreate_v4 with CUctxCreateParams (execution affinity, CIG)", "cuda.h",
                                &warned);
}

/* After the server made the context (and made it current there): note its device, and make it the
 * calling thread's current context, the previous one pushed, as the driver does. */
void cuwire_note_created_context(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    (void)params, (void)flags;
    pthread_mutex_lock(&created_lock);
    for (int i = 0; i < MAX_CREATED; i++)
        if (!created[i].ctx) {
            created[i].ctx = *pctx;
            created[i].dev = dev;
            break;
        }
    pthread_mutex_unlock(&created_lock);
    if (context_depth < CONTEXT_STACK)
        context_stack[context_depth++] = current_context;
    current_context = *pctx;
    cuwire_server_context_is((uint64_t)(uintptr_t)*pctx); /* the server made it current too */
}

/* The same for cuCtxCreate_v2 (the ABI programs built with CUDA 12 call). */
void cuwire_note_created_context_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    cuwire_note_created_context(pctx, NULL, flags, dev);
}

/* After the server destroyed it: forget it; if it was the calling thread's, pop it, as the driver does
 * (the next call tells the server which context is current). */
void cuwire_note_destroyed_context(CUcontext ctx)
{
    pthread_mutex_lock(&created_lock);
    for (int i = 0; i < MAX_CREATED; i++)
        if (created[i].ctx == ctx)
            created[i].ctx = NULL;
    pthread_mutex_unlock(&created_lock);
    cuwire_forget_pools((uint64_t)(uintptr_t)ctx); /* its streams and events went with it */
    cuwire_forget_limits();                        /* and its limits */
    cuwire_server_context_is((uint64_t)-1); /* the server popped it: which one it has now, it does not say */
    if (ctx == current_context)
        cuCtxSetCurrent(context_depth ? context_stack[--context_depth] : NULL);
}

/* The device of a context: a device's primary context, or one the program created. */
CUresult cuwire_local_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult e = devices_known();
    if (e)
        return e;
    if (!ctx)
        ctx = current_context;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < n_devices; i++)
        if (primary[i] == ctx) {
            *device = i;
            return CUDA_SUCCESS;
        }
    e = CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&created_lock);
    for (int i = 0; i < MAX_CREATED; i++)
        if (created[i].ctx == ctx) {
            *device = created[i].dev;
            e = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&created_lock);
    return e;
}

CUresult cuwire_local_cuCtxGetDevice(CUdevice *device) { return cuwire_local_cuCtxGetDevice_v2(device, NULL); }

/* cuTensorMapEncode*'s fast paths: the rank says how long the arrays the call reads are, so it is checked
 * (the driver's limits: 1 to 5 dimensions, im2col 3 to 5), and the arrays with it, before any is read:
 * CUDA_ERROR_INVALID_VALUE, as the driver answers, or -1 for the usual path (the server's driver encodes). */
static int tensor_map_shape(const CUtensorMap *map, cuuint32_t rank, cuuint32_t least, const void *dims,
                            const void *strides, const void *element_strides)
{
    if (!map || rank < least || rank > 5 || !dims || !element_strides || (rank > 1 && !strides))
        return CUDA_ERROR_INVALID_VALUE;
    return -1;
}

int cuwire_check_tensor_map_tiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                  void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                  const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                  CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    (void)tensorDataType, (void)globalAddress, (void)interleave, (void)swizzle, (void)l2Promotion, (void)oobFill;
    return boxDim ? tensor_map_shape(tensorMap, tensorRank, 1, globalDim, globalStrides, elementStrides)
                  : CUDA_ERROR_INVALID_VALUE;
}

int cuwire_check_tensor_map_im2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                   void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                   const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                   cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                   const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                   CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                   CUtensorMapFloatOOBfill oobFill)
{
    (void)tensorDataType, (void)globalAddress, (void)channelsPerPixel, (void)pixelsPerColumn, (void)interleave,
        (void)swizzle, (void)l2Promotion, (void)oobFill;
    if (!pixelBoxLowerCorner || !pixelBoxUpperCorner)
        return CUDA_ERROR_INVALID_VALUE;
    return tensor_map_shape(tensorMap, tensorRank, 3, globalDim, globalStrides, elementStrides);
}

int cuwire_check_tensor_map_im2col_wide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
                                        int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
                                        cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    (void)tensorDataType, (void)globalAddress, (void)pixelBoxLowerCornerWidth, (void)pixelBoxUpperCornerWidth,
        (void)channelsPerPixel, (void)pixelsPerColumn, (void)interleave, (void)mode, (void)swizzle, (void)l2Promotion,
        (void)oobFill;
    return tensor_map_shape(tensorMap, tensorRank, 3, globalDim, globalStrides, elementStrides);
}

int cuwire_check_tensor_map_address(CUtensorMap *tensorMap, void *globalAddress)
{
    (void)globalAddress;
    return tensorMap ? -1 : CUDA_ERROR_INVALID_VALUE;
}

/* cuMemcpyBatchAsync_v2: a batch of copies in stream order, each made as cuMemcpyAsync makes it (host or
 * device memory on either side, as unified addressing tells): the same bytes in the same stream order, and
 * a host source is read before the call returns, which every access order allows. The driver's checks
 * come first: copies and attributes counted, the attribute indices from 0 and rising, each a valid source
 * access order, not the legacy NULL stream. */
CUresult cuwire_local_cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                            CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                            CUstream hStream)
{
    if (!dsts || !srcs || !sizes || !attrs || !attrsIdxs || count == 0 || numAttrs == 0 || numAttrs > count ||
        hStream == NULL || hStream == (CUstream)0x1 /* CU_STREAM_LEGACY */)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < numAttrs; k++) {
        CUmemcpySrcAccessOrder order = attrs[k].srcAccessOrder;
        if (attrsIdxs[k] >= count || (k == 0 ? attrsIdxs[k] != 0 : attrsIdxs[k] <= attrsIdxs[k - 1]) ||
            (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
             order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY))
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) {
        CUresult r = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], hStream);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* cuOccupancyMaxPotentialBlockSize(WithFlags): the block size that keeps the most threads resident, and the
 * smallest grid that fills the device with it. The program's callback (dynamic shared memory for a block
 * size) is a function of its own, so the search runs here, as cuda_runtime.h's
 * cudaOccupancyMaxPotentialBlockSizeVariableSMemWithFlags does it: every block size from the limit down,
 * a warp at a time, asked of the occupancy query (remoted, each answer kept: answers_cache.c). */
CUresult cuwire_local_cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                                CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                                size_t dynamicSMemSize, int blockSizeLimit,
                                                                unsigned int flags)
{
    if (!minGridSize || !blockSize || !func)
        return CUDA_ERROR_INVALID_VALUE;
    CUdevice dev;
    int per_sm, warp, device_limit, sms, function_limit;
    CUresult r = cuCtxGetDevice(&dev);
    if (!r)
        r = cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
    if (!r)
        r = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    if (!r)
        r = cuDeviceGetAttribute(&device_limit, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
    if (!r)
        r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (!r)
        r = cuFuncGetAttribute(&function_limit, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
    if (r)
        return r;
    if (warp <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (blockSizeLimit == 0 || device_limit < blockSizeLimit)
        blockSizeLimit = device_limit;
    if (function_limit < blockSizeLimit)
        blockSizeLimit = function_limit;
    int best_block = 0, best_blocks = 0, best_threads = 0;
    for (int aligned = (blockSizeLimit + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
        int size = blockSizeLimit < aligned ? blockSizeLimit : aligned, blocks = 0;
        size_t shared = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(size) : dynamicSMemSize;
        r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, size, shared, flags);
        if (r)
            return r;
        if (size * blocks > best_threads) {
            best_block = size;
            best_blocks = blocks;
            best_threads = size * blocks;
        }
        if (best_threads == per_sm)
            break;
    }
    *minGridSize = best_blocks * sms;
    *blockSize = best_block;
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                       CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                       size_t dynamicSMemSize, int blockSizeLimit)
{
    return cuwire_local_cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func,
                                                                  blockSizeToDynamicSMemSize, dynamicSMemSize,
                                                                  blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}

/* ------------------------------------------------------------------ driver entry points */

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
