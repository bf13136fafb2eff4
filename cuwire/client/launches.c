/* cuwire client: kernel launches queued in C, for functions whose parameter layout the client holds (from
 * their lookup), cooperative launches among them. */
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
#include "frames.h"
#include "kernel_nodes.h"
#include "runtime.h"

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
unsigned long long cuwire_fast_node_sets; /* ...and the kernel node sets queued */
extern const uint32_t cuwire_kernel_node_set_record_id; /* (generated/client_stubs.c) */
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
/* (struct cw_launch_head: cuwire/wire/frames.h) */

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

/* `extra`'s one parameter buffer (LAUNCH_PARAM_BUFFER_POINTER and _SIZE) into *buf and *size; -1 for a key
 * this library does not take, or for both kernelParams and a buffer (the driver refuses either). */
static int extra_buffer(void **params, void **extra, const void **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    for (void **e = extra; e && *e != LAUNCH_PARAM_END; e += 2) {
        if (e[0] == LAUNCH_PARAM_BUFFER_POINTER)
            *buf = e[1];
        else if (e[0] == LAUNCH_PARAM_BUFFER_SIZE && e[1])
            *size = *(size_t *)e[1];
        else
            return -1;
    }
    return params && *buf ? -1 : 0;
}

/* f's layout as the lookup told it (kernels_lock held); its key is NULL when f is not known here. */
static struct kernel_info known_kernel(CUfunction f)
{
    if (!kernels_cap)
        return (struct kernel_info){0};
    size_t j = slot_of(f, kernels_cap);
    while (kernels[j].key && kernels[j].key != (const void *)f)
        j = (j + 1) & (kernels_cap - 1);
    return kernels[j];
}

/* The parameters, from kernelParams or the buffer, at their offsets into out (k->size bytes, zeroed
 * first); -1 when a kernel with parameters comes without them. */
static int pack(const struct kernel_info *k, void **params, const void *buf, size_t buf_size, char *out)
{
    memset(out, 0, k->size);
    if (params)
        for (uint32_t i = 0; i < k->n; i++)
            memcpy(out + k->offsets[i], params[i], k->sizes[i]);
    else if (buf)
        memcpy(out, buf, buf_size < k->size ? buf_size : k->size);
    else if (k->n)
        return -1;
    return 0;
}

/* The parameters of 8 bytes, which may be addresses, laid out in `packed`: page-locked memory of the program's
 * own that one names is mapped by the server before the launch goes (cuwire_host_reference, called once
 * kernels_lock is let go: it may ask the server). Their count; kernels_lock held. */
#define POINTERS_MOST 32
static uint32_t may_be_pointers(const struct kernel_info *k, const char *packed, uint64_t *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k->n && n < POINTERS_MOST; i++)
        if (k->sizes[i] == 8)
            memcpy(&out[n++], packed + k->offsets[i], 8);
    return n;
}

/* Queue a launch of a known function; its parameters come as kernelParams or, from `extra`, as one
 * buffer already laid out at their offsets. -1: not known yet (Python looks it up and launches). */
static int launch_queued(CUfunction f, const uint32_t g[3], const uint32_t b[3], unsigned shmem, CUstream stream,
                         void **params, void **extra, const CUlaunchAttribute *attrs, uint32_t n_attrs)
{
    const void *buf;
    size_t buf_size;
    if (extra_buffer(params, extra, &buf, &buf_size) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (cuwire_forked || !__atomic_load_n(&limits_set, __ATOMIC_ACQUIRE))
        return -1;
    int bad = cuwire_launch_config_error(g, b);
    if (bad)
        return bad;
    pthread_mutex_lock(&kernels_lock);
    struct kernel_info k = known_kernel(f);
    if (!k.key) {
        pthread_mutex_unlock(&kernels_lock);
        return -1; /* first launch of this function: Python looks it up */
    }
    /* the stream's server (the current context's for the special streams), and the kernel as that server
     * knows it: a library's kernel is loaded on each server of a device list (routes.c); a function of
     * another server's context is not served: refused by name */
    int route = cuwire_route_stream((uint64_t)(uintptr_t)stream);
    uint64_t handle = cuwire_route_alias(k.handle, route);
    if (!handle) {
        pthread_mutex_unlock(&kernels_lock);
        return cuwire_route_split("cuLaunchKernel");
    }
    char small[4096], *rec = small;
    size_t attrs_len = n_attrs ? 8 + (size_t)n_attrs * sizeof(CUlaunchAttribute) : 0;
    size_t len = sizeof(struct cw_launch_head) + attrs_len + k.size;
    if (len > sizeof small && !(rec = calloc(1, len))) {
        pthread_mutex_unlock(&kernels_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(rec, 0, len);
    struct cw_launch_head head = {handle, {g[0], g[1], g[2]}, {b[0], b[1], b[2]}, shmem, (uint64_t)(uintptr_t)stream};
    memcpy(rec, &head, sizeof head);
    if (n_attrs) {
        memcpy(rec + sizeof head, &n_attrs, 4);
        memcpy(rec + sizeof head + 8, attrs, (size_t)n_attrs * sizeof(CUlaunchAttribute));
    }
    int missing = pack(&k, params, buf, buf_size, rec + sizeof head + attrs_len);
    uint64_t pointers[POINTERS_MOST];
    uint32_t n_pointers = missing ? 0 : may_be_pointers(&k, rec + sizeof head + attrs_len, pointers);
    pthread_mutex_unlock(&kernels_lock);
    for (uint32_t i = 0; i < n_pointers; i++)
        cuwire_host_reference(pointers[i]);
    int err = missing ? CUDA_ERROR_INVALID_VALUE /* a kernel with parameters launched without them */
                      : cuwire_enqueue(route, n_attrs ? cuwire_launch_ex_record_id : cuwire_launch_record_id, rec,
                                       (uint32_t)len);
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
    const void *buf;
    size_t buf_size;
    if (extra_buffer(params, extra, &buf, &buf_size) != 0)
        return -3;
    long len = -1;
    uint64_t pointers[POINTERS_MOST];
    uint32_t n_pointers = 0;
    pthread_mutex_lock(&kernels_lock);
    struct kernel_info k = known_kernel(f);
    if (k.key && k.size > cap)
        len = -2;
    else if (k.key && pack(&k, params, buf, buf_size, out) != 0)
        len = -3;
    else if (k.key) {
        *handle = k.handle;
        len = (long)k.size;
        n_pointers = may_be_pointers(&k, out, pointers);
    }
    pthread_mutex_unlock(&kernels_lock);
    for (uint32_t i = 0; i < n_pointers; i++)
        cuwire_host_reference(pointers[i]);
    return len;
}

/* cuGraphExecKernelNodeSetParams (`fast`): queued as record KernelNodeSet when it cannot fail, a set that
 * changes only the parameters and the grid of a kernel node the client knows (kernel_nodes.c), else -1 (the
 * server answers). */
int cuwire_fast_exec_kernel_node_set(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p || cuwire_forked || !CUWIRE_READY())
        return -1;
    uint32_t grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    uint32_t block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    if (cuwire_launch_config_error(grid, block) != 0)
        return -1;
    uint64_t node_kernel = 0;
    uint32_t node_block[3], node_shared;
    if (cuwire_kernel_node_of((uint64_t)(uintptr_t)exec, (uint64_t)(uintptr_t)node, &node_kernel, node_block,
                              &node_shared) != 0 ||
        memcmp(node_block, block, sizeof block) != 0 || node_shared != p->sharedMemBytes)
        return -1;
    const void *buf;
    size_t buf_size;
    if (extra_buffer(p->kernelParams, p->extra, &buf, &buf_size) != 0)
        return -1; /* (the server says what is wrong) */
    pthread_mutex_lock(&kernels_lock);
    struct kernel_info k = known_kernel(p->func ? p->func : (CUfunction)p->kern);
    char small[4096], *rec = small;
    size_t len = sizeof(struct cw_node_set_head) + k.size;
    if (!k.key || k.handle != node_kernel || (len > sizeof small && !(rec = malloc(len)))) {
        pthread_mutex_unlock(&kernels_lock);
        return -1; /* another kernel (its context may not change), or not known here: the server answers */
    }
    struct cw_node_set_head head = {(uint64_t)(uintptr_t)exec, (uint64_t)(uintptr_t)node, k.handle,
                                    {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, p->sharedMemBytes};
    memcpy(rec, &head, sizeof head);
    int missing = pack(&k, p->kernelParams, buf, buf_size, rec + sizeof head);
    pthread_mutex_unlock(&kernels_lock);
    int route = cuwire_route_handle((uint64_t)(uintptr_t)exec);
    int err = missing ? -1 : cuwire_enqueue(route >= 0 ? route : cuwire_route_current(), cuwire_kernel_node_set_record_id,
                                            rec, (uint32_t)len);
    if (!err)
        __atomic_add_fetch(&cuwire_fast_node_sets, 1, __ATOMIC_RELAXED);
    if (rec != small)
        free(rec);
    return err;
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
