/* cuwire client: what the program's process answers itself, in C (no Python, no server).
 *
 * - the batch queue that async stubs append to (Python takes it with the next synchronous call)
 * - the last error per thread
 * - fatbinary, kernel and variable registration, run from static constructors and dlopen: record only
 * - the <<<>>> call configuration stack
 * - host memory of the client's own (cudaMallocHost and friends)
 * - driver entry points: cuwire's own exported stubs
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

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

int cuwire_python_ok;
int cuwire_finished; /* set when the process's session ended at exit: see CUWIRE_NOT_READY */
int cuwire_forked; /* set in a child forked from this process: see forked_child() */
int cuwire_embedded(void); /* cffi's embedding entry point: running it starts Python (client/build.py) */

void cuwire_python_started(void) { __atomic_store_n(&cuwire_python_ok, 1, __ATOMIC_RELEASE); }

void cuwire_session_finished(void) { __atomic_store_n(&cuwire_finished, 1, __ATOMIC_RELEASE); }

int cuwire_start_python(void)
{
    static int said, tried;
    if (__atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE))
        return 0; /* the process is exiting: calls after the session ended fail quietly */
    if (cuwire_forked) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "cuwire: this process was forked from a cuwire client; a forked child cannot open its "
                            "own session yet, so its CUDA calls fail (cudaErrorDevicesUnavailable)\n");
        return 0;
    }
    if (!__atomic_exchange_n(&tried, 1, __ATOMIC_ACQ_REL))
        cuwire_embedded(); /* one try: cffi does not retry a failed start */
    if (__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE))
        return 1;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: the client's Python runtime did not start (see the error above); "
                        "every CUDA call that needs the server fails with cudaErrorUnknown\n");
    return 0;
}

static void exit_hook(void)
{
    int (*is_initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    if (is_initialized && is_initialized() && cuwire_python_ok && !cuwire_forked)
        cuwire_py_at_exit();
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

__attribute__((constructor)) static void cuwire_trace_setting(void)
{
    const char *t = getenv("CUWIRE_TRACE");
    cuwire_trace = t && strcmp(t, "1") == 0;
}

void cuwire_trace_call(const char *name) { fprintf(stderr, "cuwire trace: %s\n", name); }

void cuwire_trace_result(const char *name, int result)
{
    if (result)
        fprintf(stderr, "cuwire trace: %s -> %d\n", name, result);
}

/* ------------------------------------------------------------------ errors */

static __thread int last_error;

int cuwire_rt_status(int err)
{
    if (err != 0)
        last_error = err;
    return err;
}

void cuwire_set_last_error(int err) { cuwire_rt_status(err); }

cudaError_t cuwire_local_cudaGetLastError(void)
{
    int e = last_error;
    last_error = 0;
    return (cudaError_t)e;
}

cudaError_t cuwire_local_cudaPeekAtLastError(void) { return (cudaError_t)last_error; }

const char *cuwire_local_cudaGetErrorName(cudaError_t error) { return cuwire_error_name((int)error); }

int cuwire_unimplemented(const char *name, const char *header, int *warned)
{
    if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: unimplemented CUDA function %s (%s)\n", name, header);
    const char *strict = getenv("CUWIRE_STRICT");
    if (strict && strcmp(strict, "1") == 0) {
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


/* Appends one record; queue_lock held. 0, or cudaErrorMemoryAllocation. */
static int append_locked(uint32_t id, const void *payload, uint32_t size)
{
    size_t need = queue_len + 8 + size;
    if (need > queue_cap) {
        size_t cap = queue_cap ? queue_cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(queue_data, cap);
        if (!p)
            return 2; /* cudaErrorMemoryAllocation */
        queue_data = p;
        queue_cap = cap;
    }
    memcpy(queue_data + queue_len, &id, 4);
    memcpy(queue_data + queue_len + 4, &size, 4);
    memcpy(queue_data + queue_len + 8, payload, size);
    queue_len = need;
    queue_count++;
    return 0;
}

/* The context the session's thread on the server has current, as far as the calls sent so far tell
 * (queue_lock held to read or change it). Each client thread keeps its own current context
 * (driver_local.c); before a thread's calls go out, a switch record is put first when its context is
 * another, so the server runs every call in its caller's context. A thread with no context changes
 * nothing (the server keeps the context it has). */
#define CONTEXT_UNKNOWN ((uint64_t)-1)
static uint64_t server_context = CONTEXT_UNKNOWN;

static int follow_context_locked(void)
{
    uint64_t ctx = cuwire_current_context();
    if (!ctx || ctx == server_context)
        return 0;
    int err = append_locked(cuwire_set_context_record_id, &ctx, sizeof ctx);
    if (!err)
        server_context = ctx;
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

int cuwire_enqueue(uint32_t id, const void *payload, uint32_t size)
{
    if (cuwire_forked)
        return cuwire_start_python() ? 0 : CUWIRE_NOT_READY; /* says why, once; never queue in vain */
    pthread_mutex_lock(&queue_lock);
    int err = follow_context_locked();
    if (!err)
        err = append_locked(id, payload, size);
    int flush = !err && queue_len >= QUEUE_FLUSH_AT;
    pthread_mutex_unlock(&queue_lock);
    if (err)
        return err;
    return flush && CUWIRE_READY() ? cuwire_py_flush() : 0;
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
    pthread_mutex_unlock(&queue_lock);
    return len;
}

void cuwire_free(void *p) { free(p); }

/* ------------------------------------------------------------------ registration */

/* The fatbinary wrapper nvcc emits (__fatBinC_Wrapper_t) and the header of the fatbinary it points to. */
struct fatbin_wrapper {
    int magic;
    int version;
    const unsigned long long *data;
    void *filename_or_fatbins;
};
struct fatbin_header {
    unsigned int magic;
    unsigned short version;
    unsigned short header_size;
    unsigned long long fat_size;
};
#define FATBIN_WRAPPER_MAGIC 0x466243b1
#define FATBIN_MAGIC 0xBA55ED50u

struct fatbin_rec {
    const void *data;
    size_t size;
    int index;
};
struct symbol_rec {
    const void *host; /* host stub (kernels) or host shadow variable */
    int fatbin;
    const char *name;
    size_t size;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fatbin_rec **fatbins;
static int n_fatbins, cap_fatbins;
static struct symbol_rec *functions, *variables;
static int n_functions, cap_functions, n_variables, cap_variables;

static void *grow(void *arr, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return arr;
    *cap = *cap ? *cap * 2 : 64;
    void *p = realloc(arr, (size_t)*cap * elem);
    if (!p) {
        fprintf(stderr, "cuwire: out of memory while registering CUDA code\n");
        abort();
    }
    return p;
}

void **cuwire_local___cudaRegisterFatBinary(void *fatCubin)
{
    const struct fatbin_wrapper *w = fatCubin;
    struct fatbin_rec *rec = calloc(1, sizeof *rec);
    if (!rec)
        abort();
    if (w && w->magic == FATBIN_WRAPPER_MAGIC && w->data) {
        const struct fatbin_header *h = (const void *)w->data;
        if (h->magic == FATBIN_MAGIC) {
            rec->data = h;
            rec->size = h->header_size + h->fat_size;
        }
    }
    pthread_mutex_lock(&reg_lock);
    fatbins = grow(fatbins, &cap_fatbins, n_fatbins, sizeof *fatbins);
    rec->index = n_fatbins;
    fatbins[n_fatbins++] = rec;
    pthread_mutex_unlock(&reg_lock);
    return (void **)rec;
}

void cuwire_local___cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

void cuwire_local___cudaUnregisterFatBinary(void **fatCubinHandle) { (void)fatCubinHandle; }

char cuwire_local___cudaInitModule(void **fatCubinHandle)
{
    (void)fatCubinHandle;
    return 1;
}

static void add_symbol(struct symbol_rec **arr, int *n, int *cap, void **handle, const void *host,
                       const char *name, size_t size)
{
    pthread_mutex_lock(&reg_lock);
    *arr = grow(*arr, cap, *n, sizeof **arr);
    (*arr)[*n] = (struct symbol_rec){host, ((struct fatbin_rec *)handle)->index, name, size};
    (*n)++;
    pthread_mutex_unlock(&reg_lock);
}

void cuwire_local___cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                         const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                         dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    add_symbol(&functions, &n_functions, &cap_functions, fatCubinHandle, hostFun, deviceName, 0);
}

void cuwire_local___cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                    const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)deviceAddress, (void)ext, (void)constant, (void)global;
    add_symbol(&variables, &n_variables, &cap_variables, fatCubinHandle, hostVar, deviceName, size);
}

static int lookup(const struct symbol_rec *arr, int n, const void *host, int *fatbin, const char **name,
                  size_t *size)
{
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < n; i++) {
        if (arr[i].host == host) {
            *fatbin = arr[i].fatbin;
            *name = arr[i].name;
            *size = arr[i].size;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return found;
}

int cuwire_lookup_function(const void *host, int *fatbin, const char **name)
{
    size_t size;
    return lookup(functions, n_functions, host, fatbin, name, &size);
}

int cuwire_lookup_variable(const void *host, int *fatbin, const char **name, size_t *size)
{
    return lookup(variables, n_variables, host, fatbin, name, size);
}

int cuwire_fatbin(int index, const void **data, size_t *size)
{
    int ok = 0;
    pthread_mutex_lock(&reg_lock);
    if (index >= 0 && index < n_fatbins && fatbins[index]->data) {
        *data = fatbins[index]->data;
        *size = fatbins[index]->size;
        ok = 1;
    }
    pthread_mutex_unlock(&reg_lock);
    return ok;
}

/* A kernel handle is the host stub's address: the client's registry maps it to the server's kernel. */
cudaError_t cuwire_local___cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (!kernel)
        return cudaErrorInvalidValue;
    *kernel = (cudaKernel_t)hostFun;
    return cudaSuccess;
}

cudaError_t cuwire_local_cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
    return cuwire_local___cudaGetKernel(kernelPtr, entryFuncAddr);
}

/* ------------------------------------------------------------------ <<<grid, block, shmem, stream>>> */

struct call_config {
    dim3 grid, block;
    size_t shmem;
    void *stream;
};
#define CONFIG_DEPTH 16
static __thread struct call_config configs[CONFIG_DEPTH];
static __thread int n_configs;

unsigned cuwire_local___cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                  struct CUstream_st *stream)
{
    if (n_configs >= CONFIG_DEPTH)
        return 1;
    configs[n_configs++] = (struct call_config){gridDim, blockDim, sharedMem, stream};
    return 0;
}

cudaError_t cuwire_local___cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                    void *stream)
{
    if (n_configs == 0)
        return cudaErrorMissingConfiguration;
    struct call_config c = configs[--n_configs];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shmem;
    *(void **)stream = c.stream;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ host memory of the client's own */

struct host_alloc {
    void *ptr;
    unsigned int flags;
    struct host_alloc *next;
};
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_alloc *host_allocs;

/* The runtime's and the driver's host allocations share these; their error codes are the same
 * numbers in both APIs (1 invalid value, 2 out of memory). */
static int host_alloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return cudaErrorInvalidValue;
    struct host_alloc *a = malloc(sizeof *a);
    if (!a || posix_memalign(pHost, 4096, size ? size : 1) != 0) {
        free(a);
        return cudaErrorMemoryAllocation;
    }
    pthread_mutex_lock(&host_lock);
    *a = (struct host_alloc){*pHost, flags, host_allocs};
    host_allocs = a;
    pthread_mutex_unlock(&host_lock);
    return cudaSuccess;
}

static int host_free(void *ptr)
{
    if (!ptr)
        return cudaSuccess;
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc **p = &host_allocs; *p; p = &(*p)->next) {
        if ((*p)->ptr == ptr) {
            struct host_alloc *a = *p;
            *p = a->next;
            pthread_mutex_unlock(&host_lock);
            free(a);
            free(ptr);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return cudaErrorInvalidValue;
}

static int host_flags(unsigned int *pFlags, void *pHost)
{
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc *a = host_allocs; a; a = a->next) {
        if (a->ptr == pHost) {
            *pFlags = a->flags;
            pthread_mutex_unlock(&host_lock);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return cudaErrorInvalidValue;
}

cudaError_t cuwire_local_cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    return cuwire_rt_status(host_alloc(pHost, size, flags));
}

cudaError_t cuwire_local_cudaMallocHost(void **ptr, size_t size) { return cuwire_rt_status(host_alloc(ptr, size, 0)); }

cudaError_t cuwire_local_cudaFreeHost(void *ptr) { return cuwire_rt_status(host_free(ptr)); }

cudaError_t cuwire_local_cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
    return cuwire_rt_status(host_flags(pFlags, pHost));
}

cudaError_t cuwire_local_cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    (void)size, (void)flags;
    return ptr ? cudaSuccess : cuwire_rt_status(cudaErrorInvalidValue);
}

cudaError_t cuwire_local_cudaHostUnregister(void *ptr)
{
    return ptr ? cudaSuccess : cuwire_rt_status(cudaErrorInvalidValue);
}

CUresult cuwire_local_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return (CUresult)host_alloc(pp, bytesize, Flags);
}

CUresult cuwire_local_cuMemAllocHost_v2(void **pp, size_t bytesize) { return (CUresult)host_alloc(pp, bytesize, 0); }

CUresult cuwire_local_cuMemFreeHost(void *p) { return (CUresult)host_free(p); }

CUresult cuwire_local_cuMemHostGetFlags(unsigned int *pFlags, void *p) { return (CUresult)host_flags(pFlags, p); }

/* Registering host memory changes nothing here: every copy from client memory goes over the wire. */
CUresult cuwire_local_cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    (void)bytesize, (void)Flags;
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuwire_local_cuMemHostUnregister(void *p) { return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

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
    if (cuwire_trace)
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

cudaError_t cuwire_local_cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                          unsigned int cudaVersion, unsigned long long flags,
                                                          enum cudaDriverEntryPointQueryResult *driverStatus)
{
    if (!symbol || !funcPtr)
        return cuwire_rt_status(cudaErrorInvalidValue);
    int found;
    *funcPtr = cuwire_proc_lookup(symbol, (int)cudaVersion, (flags & cudaEnablePerThreadDefaultStream) != 0, &found);
    if (driverStatus)
        *driverStatus = found == 1   ? cudaDriverEntryPointSuccess
                        : found == 2 ? cudaDriverEntryPointVersionNotSufficent
                                     : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

cudaError_t cuwire_local_cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                                 enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return cuwire_local_cudaGetDriverEntryPointByVersion(symbol, funcPtr, 13000, flags, driverStatus);
}

/* ------------------------------------------------------------------ queued kernel launches */

/* Kernels the Python side has looked up on the server (first launch), by host stub: their server
 * handle and parameter layout. With it, a launch is checked against the device's limits and queued
 * as one record, in C, without Python or a round trip; its errors surface at the next synchronising
 * call, as a GPU's own launch errors do. The table belongs to the current session. */
struct kernel_info {
    const void *host;
    uint64_t handle;
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

static size_t slot_of(const void *host, size_t cap)
{
    return ((uintptr_t)host >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
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

void cuwire_cache_kernel(const void *host, uint64_t handle, uint32_t n, const uint32_t *offsets,
                         const uint32_t *sizes)
{
    pthread_mutex_lock(&kernels_lock);
    if ((kernels_len + 1) * 2 > kernels_cap) {
        size_t cap = kernels_cap ? kernels_cap * 2 : 256;
        struct kernel_info *grown = calloc(cap, sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&kernels_lock);
            return; /* launches of this kernel simply keep taking the Python path */
        }
        for (size_t i = 0; i < kernels_cap; i++) {
            if (kernels[i].host) {
                size_t j = slot_of(kernels[i].host, cap);
                while (grown[j].host)
                    j = (j + 1) & (cap - 1);
                grown[j] = kernels[i];
            }
        }
        free(kernels);
        kernels = grown;
        kernels_cap = cap;
    }
    size_t j = slot_of(host, kernels_cap);
    while (kernels[j].host && kernels[j].host != host)
        j = (j + 1) & (kernels_cap - 1);
    if (!kernels[j].host) {
        struct kernel_info k = {host, handle, n, 0, malloc(n * sizeof(uint32_t) + 1),
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

/* A launch configuration the device cannot run gets cudaErrorInvalidValue at once, before the GPU sees
 * it, as the CUDA 13 runtime answers (seen on an H100); -1 while the device's limits are not known. */
int cuwire_launch_config_error(const uint32_t *g, const uint32_t *b)
{
    if (!__atomic_load_n(&limits_set, __ATOMIC_ACQUIRE))
        return -1;
    if ((uint64_t)b[0] * b[1] * b[2] > max_threads || !b[0] || !b[1] || !b[2] || !g[0] || !g[1] || !g[2])
        return cudaErrorInvalidValue;
    for (int i = 0; i < 3; i++)
        if (b[i] > max_block[i] || g[i] > max_grid[i])
            return cudaErrorInvalidValue;
    return 0;
}

/* Queue a launch of a known kernel; its parameters come as kernelParams (args) or, from the driver's
 * `extra`, as one buffer already laid out at their offsets (buf, buf_size). */
static int launch_queued_from(const void *host, dim3 grid, dim3 block, void **args, const void *buf,
                              size_t buf_size, size_t shmem, void *stream, const CUlaunchAttribute *attrs,
                              uint32_t n_attrs)
{
    if (cuwire_forked || !__atomic_load_n(&limits_set, __ATOMIC_ACQUIRE))
        return -1;
    uint32_t g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
    int bad = cuwire_launch_config_error(g, b);
    if (bad)
        return bad;
    pthread_mutex_lock(&kernels_lock);
    struct kernel_info k = {0};
    if (kernels_cap) {
        size_t j = slot_of(host, kernels_cap);
        while (kernels[j].host && kernels[j].host != host)
            j = (j + 1) & (kernels_cap - 1);
        k = kernels[j];
    }
    if (!k.host) {
        pthread_mutex_unlock(&kernels_lock);
        return -1; /* first launch of this kernel: Python looks it up (and uploads its module) */
    }
    char small[4096], *rec = small;
    size_t attrs_len = n_attrs ? 8 + (size_t)n_attrs * sizeof(CUlaunchAttribute) : 0;
    size_t len = sizeof(struct launch_head) + attrs_len + k.size;
    if (len > sizeof small && !(rec = calloc(1, len))) {
        pthread_mutex_unlock(&kernels_lock);
        return cudaErrorMemoryAllocation;
    }
    memset(rec, 0, len);
    struct launch_head head = {k.handle, {g[0], g[1], g[2]}, {b[0], b[1], b[2]}, shmem, (uint64_t)(uintptr_t)stream};
    memcpy(rec, &head, sizeof head);
    if (n_attrs) {
        memcpy(rec + sizeof head, &n_attrs, 4);
        memcpy(rec + sizeof head + 8, attrs, (size_t)n_attrs * sizeof(CUlaunchAttribute));
    }
    char *params = rec + sizeof head + attrs_len;
    if (args)
        for (uint32_t i = 0; i < k.n; i++)
            memcpy(params + k.offsets[i], args[i], k.sizes[i]);
    else if (buf)
        memcpy(params, buf, buf_size < k.size ? buf_size : k.size);
    else if (k.n) {
        pthread_mutex_unlock(&kernels_lock);
        if (rec != small)
            free(rec);
        return cudaErrorInvalidValue; /* a kernel with parameters launched without them */
    }
    pthread_mutex_unlock(&kernels_lock);
    int err = cuwire_enqueue(n_attrs ? cuwire_launch_ex_record_id : cuwire_launch_record_id, rec, (uint32_t)len);
    if (rec != small)
        free(rec);
    if (!err)
        __atomic_add_fetch(&cuwire_fast_launches, 1, __ATOMIC_RELAXED);
    return err;
}

static int launch_queued(const void *host, dim3 grid, dim3 block, void **args, size_t shmem, void *stream)
{
    return launch_queued_from(host, grid, block, args, NULL, 0, shmem, stream, NULL, 0);
}

/* cuda.h's `extra` keys (macros, so not in generated/cuda_api.h). */
#define LAUNCH_PARAM_END ((void *)0)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)1)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)2)

static int launch_driver(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shmem, CUstream stream, void **params, void **extra, const CUlaunchAttribute *attrs,
                         uint32_t n_attrs);

/* cuLaunchKernel of a function or kernel whose layout the client holds (from its lookup). */
int cuwire_fast_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)
{
    return launch_driver(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra, NULL, 0);
}

static int launch_driver(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shmem, CUstream stream, void **params, void **extra, const CUlaunchAttribute *attrs,
                         uint32_t n_attrs)
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
    dim3 grid = {gx, gy, gz}, block = {bx, by, bz};
    return launch_queued_from((const void *)f, grid, block, params, buf, buf_size, shmem, stream, attrs, n_attrs);
}

/* cuLaunchKernelEx: its launch attributes (cluster dimensions, cooperative...) travel in the record. */
int cuwire_fast_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch_driver(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                         config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra,
                         config->attrs, config->numAttrs);
}

int cuwire_fast_cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                 cudaStream_t stream)
{
    return launch_queued(func, gridDim, blockDim, args, sharedMem, stream);
}

int cuwire_fast___cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                   cudaStream_t stream)
{
    return launch_queued((const void *)kernel, gridDim, blockDim, args, sharedMem, stream);
}
