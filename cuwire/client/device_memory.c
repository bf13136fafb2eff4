/* cuwire client: the session's device allocations, as the server made them (cuMemAlloc and friends).
 *
 * Which addresses are device memory decides how a unified-address copy travels (client/driver.py), and
 * a small copy to the device is queued without waiting only when its whole range lies in one allocation
 * (local.c, the driver would refuse anything else at once). Sorted by base, searched by bisection.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static uint64_t *bases, *sizes;
static size_t count, cap;

/* The index of the last base <= address, or -1; lock held. */
static long last_at_or_below(uint64_t address)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bases[mid] <= address)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

/* Room for one more; lock held. 0, or -1 when out of memory. */
static int grow(void)
{
    if (count < cap)
        return 0;
    size_t n = cap ? cap * 2 : 64;
    uint64_t *b = realloc(bases, n * sizeof *b);
    if (!b)
        return -1;
    bases = b;
    uint64_t *s = realloc(sizes, n * sizeof *s);
    if (!s)
        return -1;
    sizes = s;
    cap = n;
    return 0;
}

/* A device allocation of `size` bytes at `base` (an existing one at that base takes the new size).
 * -1 when out of memory: the allocation is not known here, and its copies wait for the server. */
int cuwire_track_alloc(uint64_t base, uint64_t size)
{
    int err = 0;
    pthread_rwlock_wrlock(&lock);
    long i = last_at_or_below(base);
    if (i >= 0 && bases[i] == base) {
        sizes[i] = size ? size : 1;
    } else if (!(err = grow())) {
        size_t at = (size_t)(i + 1);
        memmove(bases + at + 1, bases + at, (count - at) * sizeof *bases);
        memmove(sizes + at + 1, sizes + at, (count - at) * sizeof *sizes);
        bases[at] = base;
        sizes[at] = size ? size : 1;
        count++;
    }
    pthread_rwlock_unlock(&lock);
    return err;
}

void cuwire_untrack_alloc(uint64_t base)
{
    pthread_rwlock_wrlock(&lock);
    long i = last_at_or_below(base);
    if (i >= 0 && bases[i] == base) {
        memmove(bases + i, bases + i + 1, (count - (size_t)i - 1) * sizeof *bases);
        memmove(sizes + i, sizes + i + 1, (count - (size_t)i - 1) * sizeof *sizes);
        count--;
    }
    pthread_rwlock_unlock(&lock);
}

/* After cuMemMap: the mapped range is device memory like an allocation (virtual memory management). */
void cuwire_note_mapped(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                        unsigned long long flags)
{
    (void)offset, (void)handle, (void)flags;
    cuwire_track_alloc(ptr, size);
}

/* After cuMemUnmap: every mapping in the range is gone. */
void cuwire_note_unmapped(CUdeviceptr ptr, size_t size)
{
    pthread_rwlock_wrlock(&lock);
    long first = last_at_or_below(ptr);
    if (first < 0 || bases[first] < ptr)
        first++;
    size_t end = (size_t)first;
    while (end < count && bases[end] - ptr < size)
        end++;
    memmove(bases + first, bases + end, (count - end) * sizeof *bases);
    memmove(sizes + first, sizes + end, (count - end) * sizeof *sizes);
    count -= end - (size_t)first;
    pthread_rwlock_unlock(&lock);
}

/* The base of the allocation holding `address` (its size in *size), or 0. */
uint64_t cuwire_allocation_of(uint64_t address, uint64_t *size)
{
    pthread_rwlock_rdlock(&lock);
    long i = last_at_or_below(address);
    uint64_t base = 0;
    if (i >= 0 && address - bases[i] < sizes[i]) {
        base = bases[i];
        *size = sizes[i];
    }
    pthread_rwlock_unlock(&lock);
    return base;
}

/* Whether [address, address + n) lies in one allocation. */
int cuwire_in_allocation(uint64_t address, uint64_t n)
{
    pthread_rwlock_rdlock(&lock);
    long i = last_at_or_below(address);
    int in = i >= 0 && address - bases[i] < sizes[i] && n <= sizes[i] - (address - bases[i]);
    pthread_rwlock_unlock(&lock);
    return in;
}

/* A forked child's calls are not its parent's session's. */
void cuwire_forget_allocations(void)
{
    pthread_rwlock_wrlock(&lock);
    count = 0;
    pthread_rwlock_unlock(&lock);
}
