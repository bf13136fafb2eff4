/* cuwire client: stream capture as the client keeps it. The capture runs on the server, where the
 * streams are; the client knows which streams capture (PyTorch asks before most of its work), which
 * events carry a capture to other streams, and each thread's capture mode, which decides the mode the
 * session's thread needs for that thread's calls (cuwire_server_capture_mode, queue.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

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

/* The capture the calling thread's cuStreamEndCapture just ended (0: none), taken once: for its after
 * (graph_copies.c, cuwire_after_end_capture). */
uint64_t cuwire_capture_ended(void)
{
    cuuint64_t id = ending_capture;
    ending_capture = 0;
    return id;
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

