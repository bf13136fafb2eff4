/* cuwire client: managed memory over TCP (cuMemAllocManaged with no host memory shared with the server), and
 * page-locked memory over TCP that kernels reach (cuMemHostGetDevicePointer, cuMemHostAlloc's DEVICEMAP).
 *
 * The server makes managed memory (server/custom.py, ManagedAlloc) and the client maps ordinary memory at
 * the same address as the program's host copy of it, so one pointer serves the host and kernels alike.
 * The two copies are kept in step at calls, not by pages:
 *  - before a call goes to the server (queued or waited), what the program changed in the host copy since
 *    the copies last agreed (found against a snapshot, CHUNK bytes at a time) is copied to the device,
 *    ahead of the call;
 *  - after a call that synchronizes the host with the GPU returns success (the annotations' `synchronizes`:
 *    cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize, synchronous copies...), the device copy is
 *    fetched into the host copy, when the server had work since the last fetch.
 * A program that touches managed memory on the host only between a synchronization and its next CUDA call
 * (every program written for GPUs without concurrent managed access, and most others) sees what it would
 * natively. What it does not see: host writes made while a kernel runs reach the device at the next call,
 * not at once; kernel writes reach the host at the next synchronization. The snapshot doubles the client's
 * memory for managed allocations, and each call compares the host copy with it (at memory speed).
 *
 * Page-locked memory that kernels are to reach (host_memory.c) is kept in step the same way, with two
 * differences. The server maps memory of its own at the program's address and registers it for the GPU
 * (RegisterHost's `anonymous`), so the program's pointer is the kernels' too. And the copies are made by the
 * server's CPU as the records come (HostCopy), in no stream: a kernel may be running that waits for the
 * program's write (XLA's delay kernel spins on a host flag until its host releases it).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_api.h"
#include "runtime.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define CHUNK (64u << 10)
#define TRIES 8 /* server addresses taken in this process before giving up */

struct managed {
    uint64_t address, size, mapped;
    unsigned char *snapshot; /* the host copy as the device copy last agreed with it */
    int host;                /* page-locked memory the server mapped at the program's address (HostCopy) */
    struct managed *next;
};
extern const uint32_t cuwire_host_copy_record_id;
static pthread_mutex_t managed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct managed *managed;
static int managed_count;
static int server_had_work; /* calls went to the server since the last fetch */
static __thread int in_step; /* this thread is keeping the copies in step: its own copies must not recurse */


static uint64_t page_rounded(uint64_t n)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* The host copy at the server's address: 0, or -1 when that address is taken in this process. */
static int map_at(uint64_t address, uint64_t size)
{
    /* a range this process guards for the server's device memory (device_memory.c) is its to take */
    int flags = cuwire_guarded(address, address + page_rounded(size)) ? MAP_FIXED : MAP_FIXED_NOREPLACE;
    void *p = mmap((void *)(uintptr_t)address, page_rounded(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    if (p == (void *)(uintptr_t)address)
        return 0;
    if (p != MAP_FAILED) /* a kernel that does not know MAP_FIXED_NOREPLACE put it elsewhere */
        munmap(p, page_rounded(size));
    return -1;
}

int cuwire_managed_alloc(uint64_t *dptr, size_t size, unsigned int flags)
{
    struct managed *m = calloc(1, sizeof *m);
    unsigned char *snapshot = calloc(1, size); /* a new host copy is zeros, as the device's first touch is */
    if (!m || !snapshot) {
        free(m);
        free(snapshot);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t taken[TRIES], address = 0;
    int n_taken = 0, err = 0, mapped = 0;
    while (n_taken < TRIES) {
        err = cuwire_py_managed_alloc(size, flags, &address);
        if (err)
            break;
        if (map_at(address, size) == 0) {
            mapped = 1;
            break;
        }
        taken[n_taken++] = address; /* kept until the end, so that the server gives another address */
    }
    for (int i = 0; i < n_taken; i++)
        cuMemFree_v2(taken[i]);
    if (!mapped) {
        free(m);
        free(snapshot);
        if (err)
            return err;
        cuwire_say_once_per_name("cuwire: managed memory over TCP: the addresses the server gave are taken in this "
                                 "process, refused:", "cuMemAllocManaged");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (cuwire_track_alloc(address, size) != 0) {
        munmap((void *)(uintptr_t)address, page_rounded(size));
        cuMemFree_v2(address);
        free(m);
        free(snapshot);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (struct managed){address, size, page_rounded(size), snapshot, 0, NULL};
    pthread_mutex_lock(&managed_lock);
    m->next = managed;
    managed = m;
    __atomic_add_fetch(&managed_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&managed_lock);
    *dptr = address;
    return CUDA_SUCCESS;
}

/* cuMemFree of managed memory made over TCP: the host copy goes; its size, or 0 for any other pointer
 * (managed_hints.c forgets the range's hints). The call then goes on to the server, which frees its copy. */
uint64_t cuwire_managed_free(uint64_t address)
{
    pthread_mutex_lock(&managed_lock);
    for (struct managed **p = &managed; *p; p = &(*p)->next) {
        if ((*p)->address == address && !(*p)->host) {
            struct managed *m = *p;
            *p = m->next;
            __atomic_sub_fetch(&managed_count, 1, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&managed_lock);
            munmap((void *)(uintptr_t)m->address, m->mapped);
            uint64_t size = m->size;
            free(m->snapshot);
            free(m);
            return size;
        }
    }
    pthread_mutex_unlock(&managed_lock);
    return 0;
}

/* The pages to map for [lo, hi) (page-aligned): widened over the runs the server mapped already that
 * overlap or touch it, which the server joins into one (session.py, map_host). 0 when one run holds all of
 * [lo, hi) already (nothing to map). */
int cuwire_host_mapped_span(uint64_t lo, uint64_t hi, uint64_t *span_lo, uint64_t *span_hi)
{
    pthread_mutex_lock(&managed_lock);
    for (struct managed *m = managed; m; m = m->next)
        if (m->host && m->address <= lo && hi <= m->address + m->size) {
            pthread_mutex_unlock(&managed_lock);
            return 0;
        }
    for (int widened = 1; widened;) {
        widened = 0;
        for (struct managed *m = managed; m; m = m->next)
            if (m->host && m->address <= hi && lo <= m->address + m->size &&
                (m->address < lo || m->address + m->size > hi)) {
                lo = m->address < lo ? m->address : lo;
                hi = m->address + m->size > hi ? m->address + m->size : hi;
                widened = 1;
            }
    }
    pthread_mutex_unlock(&managed_lock);
    *span_lo = lo, *span_hi = hi;
    return 1;
}

/* Whether this thread is keeping the copies in step now (its own copies are not the program's calls). */
int cuwire_keeping_in_step(void) { return in_step; }

/* Page-locked memory of the program's at [address, address + size) that the server mapped at the same
 * address for the GPU (host_memory.c), joining the runs it had mapped in it: kept in step from now on. Their
 * bytes as last agreed stay; the rest of the server's copy starts as zeros, so the next call sends what the
 * program has there. */
static int host_mapped_add(uint64_t address, uint64_t size, int stale)
{
    struct managed *m = calloc(1, sizeof *m);
    unsigned char *snapshot = calloc(1, size ? size : 1);
    if (!m || !snapshot) {
        free(m);
        free(snapshot);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (stale) /* every byte unlike the program's: the next call sends them all */
        for (uint64_t i = 0; i < size; i++)
            snapshot[i] = (unsigned char)~((const unsigned char *)(uintptr_t)address)[i];
    *m = (struct managed){address, size, 0, snapshot, 1, NULL};
    pthread_mutex_lock(&managed_lock);
    for (struct managed **p = &managed; *p;) { /* the runs joined */
        struct managed *old = *p;
        if (old->host && old->address >= address && old->address + old->size <= address + size) {
            memcpy(snapshot + (old->address - address), old->snapshot, old->size);
            *p = old->next;
            __atomic_sub_fetch(&managed_count, 1, __ATOMIC_RELEASE);
            free(old->snapshot);
            free(old);
        } else
            p = &old->next;
    }
    m->next = managed;
    managed = m;
    __atomic_add_fetch(&managed_count, 1, __ATOMIC_RELEASE);
    server_had_work = 1;
    pthread_mutex_unlock(&managed_lock);
    return 0;
}

int cuwire_host_mapped_add(uint64_t address, uint64_t size) { return host_mapped_add(address, size, 0); }

/* ...or a run the server mapped before, for memory the program freed since (host_memory.c, left mapped): what
 * the server's copy holds is not known, so the next call sends the whole run. */
int cuwire_host_mapped_add_again(uint64_t address, uint64_t size) { return host_mapped_add(address, size, 1); }

/* The first run of pages the server mapped that starts in [lo, hi): 1 and its address and size, or 0. */
int cuwire_host_mapped_within(uint64_t lo, uint64_t hi, uint64_t *at, uint64_t *size)
{
    int found = 0;
    pthread_mutex_lock(&managed_lock);
    for (struct managed *m = managed; m; m = m->next)
        if (m->host && m->address >= lo && m->address < hi && (!found || m->address < *at)) {
            *at = m->address, *size = m->size;
            found = 1;
        }
    pthread_mutex_unlock(&managed_lock);
    return found;
}

/* The program frees or unregisters page-locked memory the server mapped: it is no longer kept in step. 1
 * when [address...) was such memory (the caller then tells the server), else 0. */
int cuwire_host_mapped_forget(uint64_t address)
{
    pthread_mutex_lock(&managed_lock);
    for (struct managed **p = &managed; *p; p = &(*p)->next) {
        if ((*p)->address == address && (*p)->host) {
            struct managed *m = *p;
            *p = m->next;
            __atomic_sub_fetch(&managed_count, 1, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&managed_lock);
            free(m->snapshot);
            free(m);
            return 1;
        }
    }
    pthread_mutex_unlock(&managed_lock);
    return 0;
}

/* Whether [p, p + n) lies in memory kept in step here: managed memory made over TCP (a prefetch's or advice's
 * range), or, with `host`, page-locked memory the server mapped. */
static int holds(uint64_t p, size_t n, int host)
{
    int found = 0;
    pthread_mutex_lock(&managed_lock);
    for (struct managed *m = managed; m && !found; m = m->next)
        found = m->host == host && p >= m->address && n <= m->size && p - m->address <= m->size - n;
    pthread_mutex_unlock(&managed_lock);
    return found;
}

int cuwire_host_mapped_holds(uint64_t p, size_t n) { return holds(p, n, 1); }

int cuwire_managed_holds(uint64_t p, size_t n)
{
    return holds(p, n, 0);
}

/* The bytes of [at, end) that the program changed, to the server's copy: only those bytes, so that what
 * kernels wrote beside them there stays (a kernel writes part of a buffer, the program another part, and the
 * next synchronization brings both back). One queued HostCopy record of runs a chunk, written by the
 * server's CPU as it comes. */
static int push_host_runs(struct managed *m, uint64_t at, uint64_t end)
{
    const unsigned char *host = (const unsigned char *)(uintptr_t)m->address;
    char *buf = malloc(4 + 8 * (CHUNK / 2 + 1) + CHUNK); /* the most runs a chunk has, and its bytes */
    uint32_t *runs = malloc(8 * (CHUNK / 2 + 1));
    int err = buf && runs ? 0 : CUDA_ERROR_OUT_OF_MEMORY;
    for (uint64_t base = at; base < end && !err; base += CHUNK) {
        uint32_t span = end - base < CHUNK ? (uint32_t)(end - base) : CHUNK, count = 0, bytes = 0;
        for (uint32_t i = 0; i < span;) {
            while (i < span && host[base + i] == m->snapshot[base + i])
                i++;
            uint32_t j = i;
            while (j < span && host[base + j] != m->snapshot[base + j])
                j++;
            if (j > i) {
                runs[2 * count] = i, runs[2 * count + 1] = j - i;
                count++;
            }
            i = j;
        }
        if (!count)
            continue;
        memcpy(buf, &count, 4);
        memcpy(buf + 4, runs, 8 * (size_t)count);
        char *data = buf + 4 + 8 * (size_t)count;
        for (uint32_t r = 0; r < count; r++) {
            memcpy(data + bytes, host + base + runs[2 * r], runs[2 * r + 1]);
            memcpy(m->snapshot + base + runs[2 * r], host + base + runs[2 * r], runs[2 * r + 1]);
            bytes += runs[2 * r + 1];
        }
        struct cw_host_copy head = {m->address + base, span, CW_HOST_WRITE_RUNS};
        int due; /* (the queue goes with the call this change precedes) */
        int route = cuwire_route_value(m->address); /* (the server that mapped it, by its address) */
        err = cuwire_queue_append(route >= 0 ? route : cuwire_route_current(), cuwire_host_copy_record_id, &head,
                                  sizeof head, buf, 4 + 8 * count + bytes, &due);
    }
    free(buf);
    free(runs);
    return err;
}

/* The server's copy of page-locked memory it mapped, into the program's (a copy from it, which the driver
 * takes for the GPU's memory, as it is): only the bytes the server's copy changed since the two last agreed
 * (the GPU's writes), so that what another thread of the program writes meanwhile stays. */
static int fetch_host(struct managed *m)
{
    unsigned char *fresh = malloc(m->size ? m->size : 1), *host = (unsigned char *)(uintptr_t)m->address;
    if (!fresh)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int err = cuMemcpyDtoH_v2(fresh, m->address, m->size);
    for (uint64_t at = 0; at < m->size && !err; at += 64) {
        uint64_t n = m->size - at < 64 ? m->size - at : 64;
        if (memcmp(fresh + at, m->snapshot + at, n) == 0)
            continue;
        for (uint64_t i = at; i < at + n; i++)
            if (fresh[i] != m->snapshot[i])
                host[i] = m->snapshot[i] = fresh[i];
    }
    free(fresh);
    return err;
}

/* Copies the runs of chunks the program changed to the device; managed_lock held. */
static int push_changes(struct managed *m)
{
    const unsigned char *host = (const unsigned char *)(uintptr_t)m->address;
    uint64_t at = 0;
    while (at < m->size) {
        uint64_t n = m->size - at < CHUNK ? m->size - at : CHUNK;
        if (memcmp(host + at, m->snapshot + at, n) == 0) {
            at += n;
            continue;
        }
        uint64_t end = at + n; /* the run of changed chunks from here */
        while (end < m->size) {
            uint64_t k = m->size - end < CHUNK ? m->size - end : CHUNK;
            if (memcmp(host + end, m->snapshot + end, k) == 0)
                break;
            end += k;
        }
        CUresult err;
        if (m->host) {
            err = push_host_runs(m, at, end);
        } else {
            memcpy(m->snapshot + at, host + at, end - at); /* before the copy: what it sends is what agrees */
            err = cuMemcpyHtoD_v2(m->address + at, m->snapshot + at, end - at);
        }
        if (err)
            return err;
        at = end;
    }
    return 0;
}

/* Before a call goes to the server: the program's changes to managed memory go first. 0, or the error of
 * a copy that failed (the call then fails with it). */
int cuwire_managed_before_call(void)
{
    if (!__atomic_load_n(&managed_count, __ATOMIC_ACQUIRE) || in_step)
        return 0;
    in_step = 1;
    int err = 0;
    pthread_mutex_lock(&managed_lock);
    for (struct managed *m = managed; m && !err; m = m->next)
        err = push_changes(m);
    server_had_work = 1;
    pthread_mutex_unlock(&managed_lock);
    in_step = 0;
    return err;
}

/* After a call that synchronizes the host with the GPU: the device copies come back. */
void cuwire_managed_synced(void)
{
    if (!__atomic_load_n(&managed_count, __ATOMIC_ACQUIRE) || in_step)
        return;
    in_step = 1;
    pthread_mutex_lock(&managed_lock);
    if (server_had_work) {
        CUresult err = 0;
        for (struct managed *m = managed; m && !err; m = m->next) {
            if (m->host) { /* what the program wrote since the call (a copy into it) goes first, byte by byte */
                err = push_changes(m);
                if (!err)
                    err = fetch_host(m);
                continue;
            }
            err = cuMemcpyDtoH_v2((void *)(uintptr_t)m->address, m->address, m->size);
            if (!err)
                memcpy(m->snapshot, (void *)(uintptr_t)m->address, m->size);
        }
        if (err)
            fprintf(stderr, "cuwire: managed or mapped page-locked memory could not be fetched after a "
                            "synchronization (%s): the host copy may be stale\n", cuwire_error_name(err));
        server_had_work = err != 0;
    }
    pthread_mutex_unlock(&managed_lock);
    in_step = 0;
}
