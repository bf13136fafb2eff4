/* cuwire client: answers that cannot change, kept after the server gave them once.
 *
 * A kernel's attributes (cuKernelGetAttribute, cuFuncGetAttribute) and its occupancy for a block size
 * (cuOccupancyMaxActiveBlocksPerMultiprocessor*) are fixed once it is loaded, except through the calls
 * that set a function's attributes or cache preference; PyTorch asks them before many launches. Each
 * query's stub tries the cache first (annotation `fast`) and stores the server's answer (annotation
 * `after`). A setter that sets the value the cache already holds is answered here; any other set
 * clears the whole cache (annotation `fast`, returning -1 to go on as usual).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

#define SLOTS 4096 /* a power of two; a full cache just stops storing */
enum { KERNEL_ATTRIBUTE = 1, FUNCTION_ATTRIBUTE, OCCUPANCY, OCCUPANCY_FLAGS };

struct entry {
    uint64_t key[5]; /* the query and its arguments; key[0] == 0: empty */
    int value;
};
static struct entry slots[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot_of(const uint64_t key[5])
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 5; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return (unsigned)(h ^ (h >> 32)) & (SLOTS - 1);
}

/* 0 and the value when known; -1 when the server must be asked. */
static int lookup(const uint64_t key[5], int *out)
{
    if (!out)
        return -1; /* the server says what a NULL output is */
    int found = -1;
    pthread_mutex_lock(&lock);
    for (unsigned i = slot_of(key), n = 0; n < SLOTS && slots[i].key[0]; i = (i + 1) & (SLOTS - 1), n++)
        if (memcmp(slots[i].key, key, sizeof slots[i].key) == 0) {
            *out = slots[i].value;
            found = 0;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

static void store(const uint64_t key[5], int value)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = slot_of(key), n = 0; n < SLOTS; i = (i + 1) & (SLOTS - 1), n++)
        if (!slots[i].key[0] || memcmp(slots[i].key, key, sizeof slots[i].key) == 0) {
            memcpy(slots[i].key, key, sizeof slots[i].key);
            slots[i].value = value;
            break;
        }
    pthread_mutex_unlock(&lock);
}

/* A setter changed what some answers are: forget them all (setters are rare). */
static int forget_all(void)
{
    pthread_mutex_lock(&lock);
    memset(slots, 0, sizeof slots);
    pthread_mutex_unlock(&lock);
    return -1;
}

#define KEY(...) const uint64_t key[5] = {__VA_ARGS__}

int cuwire_cached_kernel_attribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    return lookup(key, pi);
}

void cuwire_keep_kernel_attribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    store(key, *pi);
}

int cuwire_cached_function_attribute(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    return lookup(key, pi);
}

void cuwire_keep_function_attribute(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    store(key, *pi);
}

int cuwire_cached_occupancy(int *blocks, CUfunction f, int block_size, size_t shared)
{
    KEY(OCCUPANCY, (uintptr_t)f, (uint64_t)(uint32_t)block_size, shared);
    return lookup(key, blocks);
}

void cuwire_keep_occupancy(int *blocks, CUfunction f, int block_size, size_t shared)
{
    KEY(OCCUPANCY, (uintptr_t)f, (uint64_t)(uint32_t)block_size, shared);
    store(key, *blocks);
}

int cuwire_cached_occupancy_flags(int *blocks, CUfunction f, int block_size, size_t shared, unsigned int flags)
{
    KEY(OCCUPANCY_FLAGS, (uintptr_t)f, (uint64_t)(uint32_t)block_size, shared, flags);
    return lookup(key, blocks);
}

void cuwire_keep_occupancy_flags(int *blocks, CUfunction f, int block_size, size_t shared, unsigned int flags)
{
    KEY(OCCUPANCY_FLAGS, (uintptr_t)f, (uint64_t)(uint32_t)block_size, shared, flags);
    store(key, *blocks);
}

/* Setting an attribute to the value it has changes nothing: answered here (libraries set the same
 * attributes before every launch). Any other value: forget what depends on it, and ask the server. */
int cuwire_forget_answers_kernel_attribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    int now;
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    if (lookup(key, &now) == 0 && now == val)
        return CUDA_SUCCESS;
    return forget_all();
}

int cuwire_forget_answers_function_attribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    int now;
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    if (lookup(key, &now) == 0 && now == value)
        return CUDA_SUCCESS;
    return forget_all();
}

/* ... and once the server has set it, the value is the answer (the next set of the same value is
 * answered here: libraries set the same attribute before every launch, and another kernel's set in
 * between clears the cache). */
void cuwire_keep_set_kernel_attribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    store(key, val);
}

void cuwire_keep_set_function_attribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    store(key, value);
}

int cuwire_forget_answers_function_cache(CUfunction f, CUfunc_cache config) { return forget_all(); }

int cuwire_forget_answers_kernel_cache(CUkernel kernel, CUfunc_cache config, CUdevice dev) { return forget_all(); }

int cuwire_forget_answers_context_cache(CUfunc_cache config) { return forget_all(); }
