/* cuwire client: the session's device allocations, as the server made them (cuMemAlloc and friends).
 *
 * Which addresses are device memory decides how a unified-address copy travels (client/driver.py), and
 * a small copy to the device is queued without waiting only when its whole range lies in one allocation
 * (queue.c, the driver would refuse anything else at once). Sorted by base, searched by bisection.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_api.h"
#include "runtime.h"

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static uint64_t *bases, *sizes;
static size_t count, cap;

/* The index of the first of the n sorted values in a that is above x (n when none is). */
static size_t first_above(const uint64_t *a, size_t n, uint64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The index of the last base <= address, or -1; lock held. */
static long last_at_or_below(uint64_t address) { return (long)first_above(bases, count, address) - 1; }

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

void cuwire_guard_device_range(uint64_t base, uint64_t size);

/* After cuMemMap: the mapped range is device memory like an allocation (virtual memory management), and
 * guarded like one (below). */
void cuwire_note_mapped(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                        unsigned long long flags)
{
    (void)offset, (void)handle, (void)flags;
    cuwire_track_alloc(ptr, size);
    cuwire_guard_device_range(ptr, size);
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

/* ------------------------------------------------------------------ guards
 *
 * The server's device addresses and this process's host addresses come from two address spaces that
 * overlap (both in the 0x7f... range): a host buffer of the program's at an address where its session has
 * device memory would be taken for device memory, and a copy from it would copy the wrong bytes. So each
 * device range the server gives is reserved here too (PROT_NONE, no memory behind it), and no host
 * allocation of the program can come to lie there later. Guards are never released (the server may give
 * the range again; a guard costs address space only). A range where the program already has memory of its
 * own cannot be guarded: that is said, once, loudly. */

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define USER_SPACE_END (1ull << 47)
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *guard_lo, *guard_hi; /* sorted, disjoint */
static size_t n_guards, guard_cap;

/* The index of the first guard that ends after `at`; guard_lock held. */
static size_t guard_after(uint64_t at) { return first_above(guard_hi, n_guards, at); }

/* [lo, hi) is a guard now; guard_lock held. */
static void add_guard(uint64_t lo, uint64_t hi)
{
    if (n_guards == guard_cap) {
        size_t n = guard_cap ? guard_cap * 2 : 64;
        uint64_t *a = realloc(guard_lo, n * sizeof *a);
        if (!a)
            return;
        guard_lo = a;
        uint64_t *b = realloc(guard_hi, n * sizeof *b);
        if (!b)
            return;
        guard_hi = b;
        guard_cap = n;
    }
    size_t at = guard_after(lo);
    memmove(guard_lo + at + 1, guard_lo + at, (n_guards - at) * sizeof *guard_lo);
    memmove(guard_hi + at + 1, guard_hi + at, (n_guards - at) * sizeof *guard_hi);
    guard_lo[at] = lo;
    guard_hi[at] = hi;
    n_guards++;
}

static void guard(uint64_t lo, uint64_t hi)
{
    void *p = mmap((void *)(uintptr_t)lo, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                   MAP_FIXED_NOREPLACE, -1, 0);
    if (p == (void *)(uintptr_t)lo) {
        add_guard(lo, hi);
        return;
    }
    if (p != MAP_FAILED) { /* a kernel without MAP_FIXED_NOREPLACE put it elsewhere: no guard */
        munmap(p, hi - lo);
        return;
    }
    static int said;
    if (errno == EEXIST && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: the server's device memory at %#llx lies where this program has memory of its "
                        "own: copies between that memory and the GPU cannot be told apart from copies of device "
                        "memory, and may go wrong (please report it)\n", (unsigned long long)lo);
}

/* Device memory at [base, base + size): its pages not guarded yet are reserved in this process. */
void cuwire_guard_device_range(uint64_t base, uint64_t size)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = base / page * page, hi = (base + size + page - 1) / page * page;
    if (!size || hi <= lo || hi > USER_SPACE_END) /* (the emulated device's addresses lie above it) */
        return;
    pthread_mutex_lock(&guard_lock);
    uint64_t at = lo;
    while (at < hi) {
        size_t i = guard_after(at);
        if (i < n_guards && guard_lo[i] <= at) { /* inside a guard: on past it */
            at = guard_hi[i];
            continue;
        }
        uint64_t next = i < n_guards && guard_lo[i] < hi ? guard_lo[i] : hi; /* the gap up to the next guard */
        guard(at, next);
        at = next;
    }
    pthread_mutex_unlock(&guard_lock);
}

/* After cuIpcOpenMemHandle: the memory another process of the program's exported is this session's device
 * memory now, for copies to tell apart and guarded like the session's own. Its size leads the handle's
 * bytes (server/ipc.py), as the call itself does not say it. */
void cuwire_after_ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    (void)flags;
    uint64_t size;
    memcpy(&size, handle.reserved, sizeof size);
    if (!size)
        size = 1;
    cuwire_track_alloc(*pdptr, size);
    cuwire_guard_device_range(*pdptr, size);
}

/* Whether [lo, hi) lies in guards (managed memory made over TCP may take such a range for its host copy). */
int cuwire_guarded(uint64_t lo, uint64_t hi)
{
    pthread_mutex_lock(&guard_lock);
    uint64_t at = lo;
    while (at < hi) {
        size_t i = guard_after(at);
        if (i == n_guards || guard_lo[i] > at)
            break;
        at = guard_hi[i];
    }
    pthread_mutex_unlock(&guard_lock);
    return at >= hi;
}
