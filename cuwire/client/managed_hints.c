/* cuwire client: what the program told the driver about its managed memory, for cuMemRangeGetAttribute,
 * and the managed-memory calls answered here with it (prefetches, advice, ranges, cuMemFree of managed
 * memory, which forgets a range's hints).
 *
 * Through cuwire managed memory is page-locked host memory shared with the server (or, over TCP, a host
 * copy kept in step with the server's: client/managed.c), so advice and prefetches change nothing the GPU
 * does: cuMemAdvise and cuMemPrefetchAsync are hints, taken and left at that. What they
 * said is kept here, by page, so that the program reads back what it set, as natively: read-mostly, the
 * preferred location, the devices that access a range, and where it was last prefetched to. A range the
 * program frees forgets its hints.
 *
 * The pages form a sorted list of segments, each a run of pages with the same hints; pages in no segment
 * have none (CUDA's defaults).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

#define PAGE 4096u
#define HOST_BIT 31 /* accessed_by: devices 0-30, and the host */
#define DEVICE_CPU (-1)     /* cuda.h's CU_DEVICE_CPU */
#define DEVICE_INVALID (-2) /* cuda.h's CU_DEVICE_INVALID */

struct hints {
    int read_mostly;
    CUmemLocation preferred, prefetched; /* type CU_MEM_LOCATION_TYPE_INVALID: none */
    uint32_t accessed_by;
};

struct segment {
    uint64_t start, end; /* page-aligned, [start, end) */
    struct hints h;
    struct segment *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct segment *segments;

static const struct hints NONE = {0};

/* The segment list cut so that no segment straddles `at`; 0, or -1 without memory. */
static int cut_at(uint64_t at)
{
    for (struct segment *s = segments; s; s = s->next)
        if (s->start < at && at < s->end) {
            struct segment *rest = malloc(sizeof *rest);
            if (!rest)
                return -1;
            *rest = *s;
            rest->start = at;
            s->end = at;
            s->next = rest;
            return 0;
        }
    return 0;
}

/* Every page of [start, end) in a segment of its own run (those with no hints get segments of NONE);
 * 0, or -1 without memory. */
static int cover(uint64_t start, uint64_t end)
{
    if (cut_at(start) || cut_at(end))
        return -1;
    struct segment **link = &segments;
    uint64_t at = start;
    while (at < end) {
        while (*link && (*link)->end <= at)
            link = &(*link)->next;
        uint64_t gap_end = *link && (*link)->start < end ? (*link)->start : end;
        if (at < gap_end) { /* pages with no segment: one of no hints */
            struct segment *s = malloc(sizeof *s);
            if (!s)
                return -1;
            *s = (struct segment){at, gap_end, NONE, *link};
            *link = s;
        }
        at = (*link)->end;
        link = &(*link)->next;
    }
    return 0;
}

static int same_location(CUmemLocation a, CUmemLocation b) { return a.type == b.type && a.id == b.id; }

static uint32_t location_bit(CUmemLocation l)
{
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE && l.id >= 0 && l.id < HOST_BIT)
        return 1u << l.id;
    return l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                   l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
               ? 1u << HOST_BIT
               : 0;
}

/* Apply advice (CUmem_advise) or a prefetch (advice 0) to the pages of [p, p + n). */
static void note(uint64_t p, size_t n, int advice, CUmemLocation location)
{
    uint64_t start = p / PAGE * PAGE, end = (p + n + PAGE - 1) / PAGE * PAGE;
    pthread_mutex_lock(&lock);
    if (cover(start, end) == 0)
        for (struct segment *s = segments; s && s->start < end; s = s->next) {
            if (s->end <= start)
                continue;
            struct hints *h = &s->h;
            switch (advice) {
            case 0: h->prefetched = location; break;
            case CU_MEM_ADVISE_SET_READ_MOSTLY: h->read_mostly = 1; break;
            case CU_MEM_ADVISE_UNSET_READ_MOSTLY: h->read_mostly = 0; break;
            case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: h->preferred = location; break;
            case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: h->preferred = NONE.preferred; break;
            case CU_MEM_ADVISE_SET_ACCESSED_BY: h->accessed_by |= location_bit(location); break;
            case CU_MEM_ADVISE_UNSET_ACCESSED_BY: h->accessed_by &= ~location_bit(location); break;
            }
        }
    pthread_mutex_unlock(&lock);
}

void cuwire_hints_advise(uint64_t p, size_t n, int advice, CUmemLocation location)
{
    if (advice)
        note(p, n, advice, location);
}

void cuwire_hints_prefetched(uint64_t p, size_t n, CUmemLocation location) { note(p, n, 0, location); }

/* Managed memory freed: its pages forget their hints. */
void cuwire_hints_forget(uint64_t p, size_t n)
{
    uint64_t start = p / PAGE * PAGE, end = (p + n + PAGE - 1) / PAGE * PAGE;
    pthread_mutex_lock(&lock);
    if (segments && cut_at(start) == 0 && cut_at(end) == 0)
        for (struct segment **link = &segments; *link;) {
            struct segment *s = *link;
            if (s->start >= start && s->end <= end) {
                *link = s->next;
                free(s);
            } else {
                link = &s->next;
            }
        }
    pthread_mutex_unlock(&lock);
}

static void merge(struct hints *all, const struct hints *h, int *first)
{
    if (*first) {
        *all = *h;
        *first = 0;
        return;
    }
    all->read_mostly &= h->read_mostly;
    all->accessed_by &= h->accessed_by;
    if (!same_location(all->preferred, h->preferred))
        all->preferred = NONE.preferred;
    if (!same_location(all->prefetched, h->prefetched))
        all->prefetched = NONE.prefetched;
}

/* What holds for every page of [p, p + n): read-mostly where all are, the preferred and the last prefetched
 * location where all agree (else none), the accessors all share. */
static struct hints range_hints(uint64_t p, size_t n)
{
    uint64_t start = p / PAGE * PAGE, end = (p + n + PAGE - 1) / PAGE * PAGE, at = start;
    struct hints all = NONE;
    int first = 1;
    pthread_mutex_lock(&lock);
    for (struct segment *s = segments; s && s->start < end; s = s->next) {
        if (s->end <= at)
            continue;
        if (s->start > at) /* pages before it with no hints */
            merge(&all, &NONE, &first);
        merge(&all, &s->h, &first);
        at = s->end;
    }
    pthread_mutex_unlock(&lock);
    if (at < end)
        merge(&all, &NONE, &first);
    return all;
}

/* ------------------------------------------------------------------ the calls answered here */

/* cuMemFree of managed memory: the client's to free (the server never made it a device allocation). */
int cuwire_fast_cuMemFree_v2(CUdeviceptr dptr)
{
    uint64_t size = dptr ? cuwire_managed_free(dptr) : 0;
    if (size) { /* managed memory made over TCP: its host copy is gone; the server frees its own */
        cuwire_hints_forget(dptr, size);
        return -1;
    }
    size = cuwire_shared_managed_size(dptr); /* in the shared memory: the client's own */
    if (!size)
        return -1;
    cuwire_hints_forget(dptr, size);
    return cuwire_shared_managed_free(dptr);
}

/* Whether [p, p + count) is memory that managed-memory hints may name: CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE. */
CUresult cuwire_managed_range(CUdeviceptr p, size_t count)
{
    uint64_t offset;
    int known = cuwire_shared_offset((const void *)(uintptr_t)p, count, &offset) || cuwire_managed_holds(p, count);
    return count && known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Prefetches and advice change nothing the GPU does here (managed memory is page-locked host memory): they
 * are noted, for cuMemRangeGetAttribute (below). */
CUresult cuwire_local_cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                            CUstream hStream)
{
    (void)flags, (void)hStream;
    CUresult status = cuwire_managed_range(devPtr, count);
    if (status == CUDA_SUCCESS)
        cuwire_hints_prefetched(devPtr, count, location);
    return status;
}

CUresult cuwire_local_cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    CUresult status = cuwire_managed_range(devPtr, count);
    if (status == CUDA_SUCCESS)
        cuwire_hints_advise(devPtr, count, advice, location);
    return status;
}

CUresult cuwire_local_cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
    (void)hStream, (void)flags;
    return cuwire_managed_range(dptr, length ? length : 1);
}

/* A location as the legacy attributes give it: a device's ordinal, CU_DEVICE_CPU or CU_DEVICE_INVALID. */
static int legacy_device(CUmemLocation l)
{
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE)
        return l.id;
    return location_bit(l) == 1u << HOST_BIT ? DEVICE_CPU : DEVICE_INVALID;
}

static CUresult range_attribute(void *data, size_t size, CUmem_range_attribute attribute, CUdeviceptr p, size_t n)
{
    if (!data || (attribute == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY ? size == 0 || size % 4 : size != 4))
        return CUDA_ERROR_INVALID_VALUE;
    struct hints h = range_hints(p, n);
    int *out = data;
    switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: *out = h.read_mostly; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: *out = legacy_device(h.preferred); return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: *out = legacy_device(h.prefetched); return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: *out = h.preferred.type; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: *out = h.preferred.id; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: *out = h.prefetched.type; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: *out = h.prefetched.id; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        size_t i = 0;
        for (int d = 0; d < HOST_BIT && i < size / 4; d++)
            if (h.accessed_by & 1u << d)
                out[i++] = d;
        if (h.accessed_by & 1u << HOST_BIT && i < size / 4)
            out[i++] = DEVICE_CPU;
        for (; i < size / 4; i++)
            out[i] = DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuwire_local_cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
                                             CUdeviceptr devPtr, size_t count)
{
    CUresult status = cuwire_managed_range(devPtr, count);
    return status ? status : range_attribute(data, dataSize, attribute, devPtr, count);
}

CUresult cuwire_local_cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                              size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    CUresult status = cuwire_managed_range(devPtr, count);
    if (!data || !dataSizes || !attributes || !numAttributes)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttributes && !status; i++)
        status = range_attribute(data[i], dataSizes[i], attributes[i], devPtr, count);
    return status;
}

/* ------------------------------------------------------------------ batches of prefetches and discards */

/* Every range of a batch managed memory (else CUDA_ERROR_INVALID_VALUE). */
static CUresult batch_ranges(const CUdeviceptr *dptrs, const size_t *sizes, size_t count, unsigned long long flags)
{
    if (!dptrs || !sizes || !count || flags)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult status = cuwire_managed_range(dptrs[i], sizes[i]);
        if (status)
            return status;
    }
    return CUDA_SUCCESS;
}

/* A batch's prefetches: location j applies from range prefetchLocIdxs[j] on, until the next one's; the
 * indices start at 0 and rise. Noted for cuMemRangeGetAttribute, as a single prefetch is. */
static CUresult batch_prefetch(const CUdeviceptr *dptrs, const size_t *sizes, size_t count, const CUmemLocation *locs,
                               const size_t *idxs, size_t nlocs, unsigned long long flags)
{
    CUresult status = batch_ranges(dptrs, sizes, count, flags);
    if (status)
        return status;
    if (!locs || !idxs || !nlocs || nlocs > count || idxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 1; j < nlocs; j++)
        if (idxs[j] <= idxs[j - 1] || idxs[j] >= count)
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0, j = 0; i < count; i++) {
        while (j + 1 < nlocs && idxs[j + 1] <= i)
            j++;
        cuwire_hints_prefetched(dptrs[i], sizes[i], locs[j]);
    }
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                              CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                              size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
    (void)hStream;
    return batch_prefetch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags);
}

/* Discarded managed memory's contents are undefined until written again: keeping them is one way to be so. */
CUresult cuwire_local_cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags,
                                             CUstream hStream)
{
    (void)hStream;
    return batch_ranges(dptrs, sizes, count, flags);
}

CUresult cuwire_local_cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                        CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                                        size_t numPrefetchLocs, unsigned long long flags,
                                                        CUstream hStream)
{
    (void)hStream;
    return batch_prefetch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags);
}
