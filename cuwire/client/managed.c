/* cuwire client: managed memory over TCP (cuMemAllocManaged with no host memory shared with the server).
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
    struct managed *next;
};
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
    *m = (struct managed){address, size, page_rounded(size), snapshot, NULL};
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
        if ((*p)->address == address) {
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

/* Whether [p, p + n) lies in managed memory made over TCP (a prefetch's or advice's range). */
int cuwire_managed_holds(uint64_t p, size_t n)
{
    int found = 0;
    pthread_mutex_lock(&managed_lock);
    for (struct managed *m = managed; m && !found; m = m->next)
        found = p >= m->address && n <= m->size && p - m->address <= m->size - n;
    pthread_mutex_unlock(&managed_lock);
    return found;
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
        memcpy(m->snapshot + at, host + at, end - at); /* before the copy: what it sends is what agrees */
        CUresult err = cuMemcpyHtoD_v2(m->address + at, m->snapshot + at, end - at);
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
            err = cuMemcpyDtoH_v2((void *)(uintptr_t)m->address, m->address, m->size);
            if (!err)
                memcpy(m->snapshot, (void *)(uintptr_t)m->address, m->size);
        }
        if (err)
            fprintf(stderr, "cuwire: managed memory could not be fetched after a synchronization (%s): the host "
                            "copy may be stale\n", cuwire_error_name(err));
        server_had_work = err != 0;
    }
    pthread_mutex_unlock(&managed_lock);
    in_step = 0;
}
