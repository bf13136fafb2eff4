/* cuwire client: driver-API answers the client gives from its own state (no Python, no server), and what
 * the client notes after the server made or destroyed a context. The session, its devices and each
 * thread's context are session.c's; stream capture is capture.c's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"
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

/* The server driver's texts, kept here once Python had them (Python keeps each string for the process's
 * life): libraries ask again and again (cuDNN's attention, 9 times a call). */
#define ERROR_TEXTS 1024
static const char *error_texts[ERROR_TEXTS];

void cuwire_keep_error_string(int error, const char *text)
{
    if ((unsigned)error < ERROR_TEXTS)
        __atomic_store_n(&error_texts[error], text, __ATOMIC_RELEASE);
}

/* cuGetErrorString's fast path: the text kept here, else -1 (Python asks the server's driver); once Python
 * can no longer be called (a Python program's teardown, where libraries still print their errors), the
 * name. */
int cuwire_error_string_fast(CUresult error, const char **pStr)
{
    const char *kept = pStr && (unsigned)error < ERROR_TEXTS ? __atomic_load_n(&error_texts[error], __ATOMIC_ACQUIRE)
                                                              : NULL;
    if (kept) {
        *pStr = kept;
        return CUDA_SUCCESS;
    }
    return cuwire_python_gone() ? (int)cuwire_local_cuGetErrorName(error, pStr) : -1;
}

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
 * calling thread's current context, the previous one pushed, as the driver does (session.c). */
void cuwire_note_created_context(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    (void)params, (void)flags;
    cuwire_context_made(*pctx, dev);
    int route = cuwire_route_value((uint64_t)(uintptr_t)*pctx); /* the server that made it made it current too */
    cuwire_server_context_is(route >= 0 ? route : cuwire_route_current(), (uint64_t)(uintptr_t)*pctx);
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
    cuwire_forget_pools((uint64_t)(uintptr_t)ctx); /* its streams and events went with it */
    cuwire_forget_limits();                        /* and its limits */
    int route = cuwire_route_value((uint64_t)(uintptr_t)ctx); /* its server popped it: to which, it does not say */
    cuwire_server_context_is(route >= 0 ? route : cuwire_route_current(), (uint64_t)-1);
    cuwire_context_gone(ctx);
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
