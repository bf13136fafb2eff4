/* cuwire client: the process's session and the calling thread's context, kept here for every other part
 * to ask (it calls none of them): whether the session is open, what the server said of each device when
 * it opened (answered here: NVIDIA's runtime reads about a hundred attributes per device at start), the
 * primary contexts the session process holds, the contexts the program created, and each thread's
 * current context and context stack.
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

/* The calling thread's current context, for every part that needs it (and Python: cuPointerGetAttributes). */
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

/* ------------------------------------------------------------------ context stack */

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

/* A context the server made for the program (cuCtxCreate): its device kept, and it becomes the calling
 * thread's current context, the previous one pushed, as the driver does. */
void cuwire_context_made(CUcontext ctx, CUdevice dev)
{
    pthread_mutex_lock(&created_lock);
    for (int i = 0; i < MAX_CREATED; i++)
        if (!created[i].ctx) {
            created[i].ctx = ctx;
            created[i].dev = dev;
            break;
        }
    pthread_mutex_unlock(&created_lock);
    if (context_depth < CONTEXT_STACK)
        context_stack[context_depth++] = current_context;
    current_context = ctx;
}

/* A context the server destroyed: forgotten; if it was the calling thread's, popped, as the driver does. */
void cuwire_context_gone(CUcontext ctx)
{
    pthread_mutex_lock(&created_lock);
    for (int i = 0; i < MAX_CREATED; i++)
        if (created[i].ctx == ctx)
            created[i].ctx = NULL;
    pthread_mutex_unlock(&created_lock);
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
