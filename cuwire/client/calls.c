/* cuwire client: the calls the generated stubs make in C: a call queued (sent with the next call that
 * waits, or earlier, without waiting: queue.c keeps the queue, wire.c sends it), and the copies answered by
 * a record of their own: small copies to the device queued with their bytes, small copies from the device
 * in one round trip, and copies between the device and host memory shared with the server.
 *
 * This file is the top of the client's C call path: it calls the queue, the wire, the shared host memory
 * and the stand-ins of copies into stream captures; none of them calls back into it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "frames.h"
#include "runtime.h"

/* ------------------------------------------------------------------ queued calls */

/* Queues one record of two parts for the session's server: a fixed head, and bytes that follow it (nb may
 * be 0); the session's queue then goes out now when it is due (queue.c says when). */
static int enqueue2(int session, uint32_t id, const void *a, uint32_t na, const void *b, uint32_t nb)
{
    if (cuwire_forked)
        return cuwire_start_python() ? 0 : CUWIRE_NOT_READY; /* says why, once; never queue in vain */
    if (cuwire_queue_refused(session))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    int without_python = cuwire_wire_without_python(session); /* the program's end, Python finalized or not */
    if (__atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE) && !without_python)
        return CUDA_ERROR_DEINITIALIZED; /* after the process's exit handler (exit_hook) */
    int changed = cuwire_managed_before_call(); /* the program's changes to managed memory go first */
    if (changed)
        return changed;
    int due;
    int err = cuwire_queue_append(session, id, a, na, b, nb, &due);
    if (err)
        return err;
    if (due == QUEUE_FLUSH && CUWIRE_READY() && !without_python)
        return cuwire_py_flush(session);
    if (due == QUEUE_KEEP || (!CUWIRE_READY() && !without_python) || (!without_python && cuwire_sender_poke(session)))
        return 0;
    int sent = cuwire_wire_send_queued(session);
    return sent >= 0 ? sent : without_python ? CUDA_ERROR_DEINITIALIZED : cuwire_py_send_queued(session);
}

int cuwire_enqueue(int session, uint32_t id, const void *payload, uint32_t size)
{
    return enqueue2(session, id, payload, size, NULL, 0);
}

/* The session of a copy of device memory: its memory's server, which an asynchronous copy's stream must
 * be on (a special stream: the current context's); CW_ROUTE_SPLIT when it is another's. A synchronous one
 * goes to the memory's server, as the driver copies unified addresses of another context's device. */
static int route_memory(uint64_t device, void *stream, int sync)
{
    uint64_t s = (uint64_t)(uintptr_t)stream;
    int route = cuwire_route_also(sync ? cuwire_route_handle(s) : cuwire_route_stream(s), cuwire_route_value(device));
    return route == -1 ? cuwire_route_current() : route;
}

/* ------------------------------------------------------------------ copies through the shared host memory */

extern const uint32_t cuwire_copy_shared_record_id;

/* (struct cw_copy_shared: cuwire/wire/frames.h) */

/* The copy as a CopyShared record when `host` is in the shared memory and `device` in one of the session's
 * allocations: its CUDA result, or -1 when the call takes its usual path. */
static int shared_record(const void *host, uint64_t device, uint64_t n, void *stream, int to_device, int sync)
{
    uint64_t offset;
    if (n == 0 || !cuwire_shared_offset(host, n, &offset) || !cuwire_in_allocation(device, n) ||
        !cuwire_session_open())
        return -1;
    struct cw_copy_shared rec = {device, offset, n, (uint64_t)(uintptr_t)stream, (uint32_t)to_device, (uint32_t)sync};
    int route = route_memory(device, stream, sync);
    if (route == CW_ROUTE_SPLIT)
        return -1; /* (the usual path refuses it by name) */
    if (sync)
        return cuwire_call(route, cuwire_copy_shared_record_id, &rec, sizeof rec, NULL, 0);
    return cuwire_enqueue(route, cuwire_copy_shared_record_id, &rec, sizeof rec);
}

int cuwire_copy_shared(const void *host, uint64_t device, uint64_t n, void *stream, int to_device, int sync)
{
    if (!sync) { /* captured into a graph, pageable memory gets a stand-in in the shared memory (graph_copies.c) */
        const void *standin = cuwire_capture_standin(host, device, n, stream, to_device);
        int captured = standin ? shared_record(standin, device, n, stream, to_device, 0) : -1;
        if (captured >= 0)
            return captured;
    }
    return shared_record(host, device, n, stream, to_device, sync);
}

/* cuMemcpy and cuMemcpyAsync (unified addresses) between shared host memory and the device. */
static int unified_shared(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, int sync)
{
    if (!cuwire_shares_host_memory())
        return -1;
    int r = cuwire_copy_shared((const void *)(uintptr_t)src, dst, n, stream, 1, sync);
    return r >= 0 ? r : cuwire_copy_shared((const void *)(uintptr_t)dst, src, n, stream, 0, sync);
}

/* cuMemcpy and cuMemcpyAsync: two servers' device memory server to server (peers.c), shared host memory as a
 * record, else their usual path (-1). cudaMemcpy between two devices comes this way. */
int cuwire_fast_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    int across = cuwire_copy_across(dst, src, n);
    return across >= 0 ? across : unified_shared(dst, src, n, NULL, 1);
}

int cuwire_fast_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)
{
    int across = cuwire_copy_across(dst, src, n); /* (done when it returns, as peers.c's split copies) */
    return across >= 0 ? across : unified_shared(dst, src, n, stream, 0);
}

/* ------------------------------------------------------------------ small copies to the device, queued */

/* A copy from host memory to the device returns once the driver has taken the host bytes (for pageable
 * memory: into its staging buffer), before the GPU has them. So a small one, whose destination lies in
 * one of the session's allocations (anything else the driver refuses at once: such copies wait for the
 * server's answer), is queued with its bytes: the program may reuse its buffer as soon as the call
 * returns, and the server makes the same call in stream order (server/records.c, CopyToDevice). Larger
 * copies stream beside the messages (client/runtime.py, server/bulk.py). */
#define INLINE_COPY_MAX (1u << 20)
extern const uint32_t cuwire_copy_record_id;

/* (struct cw_copy_head: cuwire/wire/frames.h) */

static int queue_copy(CUdeviceptr dst, const void *src, size_t n, CUstream stream, uint32_t sync)
{
    int shared = cuwire_copy_shared(src, dst, n, stream, 1, (int)sync);
    if (shared >= 0)
        return shared;
    if (cuwire_own_page_locked(src)) { /* (its bytes are read now: after the host functions queued before) */
        int late = cuwire_host_functions_wait();
        if (late)
            return late;
    }
    if (!src || n == 0 || n > INLINE_COPY_MAX || !cuwire_in_allocation(dst, n) || !cuwire_session_open())
        return -1; /* the call goes to the server and waits, which says what is wrong */
    struct cw_copy_head head = {dst, (uint64_t)(uintptr_t)stream, sync, 0};
    uint64_t all, mine;
    cuwire_done_before(&all, &mine);
    int route = route_memory(dst, stream, (int)sync);
    if (route == CW_ROUTE_SPLIT)
        return -1; /* (the usual path refuses it by name) */
    int status = enqueue2(route, cuwire_copy_record_id, &head, sizeof head, src, (uint32_t)n);
    if (status == 0) /* (it cannot fail: a stream finished before it stays so but for copies, completion.c) */
        cuwire_note_copy_queued((uint64_t)(uintptr_t)stream, all);
    return status;
}

int cuwire_fast_cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return queue_copy(dst, src, n, NULL, 1); }

int cuwire_fast_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream stream)
{
    return queue_copy(dst, src, n, stream, 0);
}


/* ------------------------------------------------------------------ small copies from the device */

/* cuMemcpyDtoH and cuMemcpyDtoHAsync of up to CUWIRE_CALL_RESULT_MAX bytes from one of the session's
 * allocations, in one round trip made here (op CopyFromDevice; server/records.c). */
extern const uint32_t cuwire_copy_from_record_id;

/* (struct cw_copy_from: cuwire/wire/frames.h) */

static int copy_from_device(void *dst, CUdeviceptr src, size_t n, CUstream stream, uint32_t sync)
{
    int shared = cuwire_copy_shared(dst, src, n, stream, 0, (int)sync); /* into shared host memory */
    if (shared >= 0)
        return shared;
    if (!dst || n == 0 || n > CUWIRE_CALL_RESULT_MAX || !cuwire_in_allocation(src, n) || !cuwire_session_open())
        return -1;
    struct cw_copy_from rec = {src, (uint64_t)(uintptr_t)stream, sync, (uint32_t)n};
    int route = route_memory(src, stream, (int)sync);
    if (route == CW_ROUTE_SPLIT)
        return -1; /* (the usual path refuses it by name) */
    return cuwire_call(route, cuwire_copy_from_record_id, &rec, sizeof rec, dst, (uint32_t)n);
}

int cuwire_fast_cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy_from_device(dst, src, n, NULL, 1); }

int cuwire_fast_cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream stream)
{
    return copy_from_device(dst, src, n, stream, 0);
}
