/* cuwire client: host memory of the client's own: memory shared with a server on this host (page-locked
 * allocations are carved from it, copies of it travel without their bytes), cuMemHostAlloc and friends,
 * memory the program registers (moved into the shared memory where it can be), and managed memory made
 * from the shared memory. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "frames.h"
#include "runtime.h"
#include "shm_ring.h"

/* ------------------------------------------------------------------ host memory shared with the server */

/* With a server on this host, the session shares host memory with it (cuwire/wire/ring.py): page-locked
 * allocations are carved from it (runtime.py, SharedHost), and a copy between such an allocation and one
 * of the session's device allocations names an offset in it (CopyShared; server/records.c): the GPU reads
 * and writes the program's buffer itself. An asynchronous copy is queued (the program may not touch the
 * buffer until the stream is past it, as natively); a synchronous one waits for the server's answer. */
static uint64_t shared_base, shared_size;
static uint64_t shared_server_base; /* where the server has it: the same address, when it could */
static int shared_known; /* the session said whether it has shared host memory */
static int shared_fd = -1; /* its descriptor: memory the program registers moves into it */

void cuwire_shared_host_set(uint64_t base, uint64_t size, uint64_t server_base, int fd)
{
    shared_base = base;
    shared_size = size;
    shared_server_base = server_base;
    shared_fd = fd;
    __atomic_store_n(&shared_known, 1, __ATOMIC_RELEASE);
}

static int shared_offset(const void *p, uint64_t n, uint64_t *offset)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (!p || !shared_size || a < shared_base || n > shared_size || a - shared_base > shared_size - n)
        return 0;
    *offset = a - shared_base;
    return 1;
}

/* Whether [p, p + n) lies in the shared memory: its offset there (calls.c, managed_hints.c). */
int cuwire_shared_offset(const void *p, uint64_t n, uint64_t *offset) { return shared_offset(p, n, offset); }

/* ------------------------------------------------------------------ page-locked host memory */

/* Each allocation: in the shared host memory (`shared`, through Python) or the client's own memory. */
struct host_alloc {
    void *ptr;
    size_t size;
    unsigned int flags;
    int shared;  /* in the memory shared with the server */
    int managed; /* cuMemAllocManaged's (the session's allocation map holds it too) */
    struct host_alloc *next;
};
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_alloc *host_allocs;
/* Registrations are made one at a time (their pages move outside host_lock, which copies consult), and so are
 * the server's mappings of page-locked memory for kernels (map_for_kernels). */
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;
/* Where the program's own page-locked memory lies, at most (allocations and registrations not in the shared
 * memory): a call's device address outside it is not such memory, which cuwire_host_reference says at once. */
static uint64_t own_lo = UINT64_MAX, own_hi;

static void note_own(const void *p, size_t size)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    pthread_mutex_lock(&host_lock);
    if (a < own_lo)
        __atomic_store_n(&own_lo, a, __ATOMIC_RELAXED);
    if (a + size > own_hi)
        __atomic_store_n(&own_hi, a + size, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&host_lock);
}

static uint64_t page_floor(uint64_t a) { return a / (uint64_t)sysconf(_SC_PAGESIZE) * (uint64_t)sysconf(_SC_PAGESIZE); }

static uint64_t page_ceil(uint64_t a)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (a + page - 1) / page * page;
}

/* Runs the server mapped for page-locked memory the program freed since (unmap_for_kernels), left mapped
 * there, oldest first: a program that frees such memory and allocates it again at the same address (XLA: a
 * 4 KiB buffer at each transfer, 574 in a run of tests/jax_apps/jax_programs.py over TCP) has it mapped again
 * without the round trips of an unmap and a map. While left so, a run is not kept in step (the program's
 * pages are not its own any more). One that a new run would overlap or touch, but not be, is unmapped first
 * (the server joins runs that touch). At most LEFT_MAX runs and LEFT_BYTES bytes: past that, the oldest
 * are unmapped. register_lock held. */
#define LEFT_MAX 32
#define LEFT_BYTES (64u << 20)
static struct {
    uint64_t lo, hi;
} left[LEFT_MAX];
static int n_left;
static uint64_t left_bytes;

static void drop_left(int i)
{
    left_bytes -= left[i].hi - left[i].lo;
    memmove(&left[i], &left[i + 1], sizeof left[0] * (size_t)(n_left - i - 1));
    n_left--;
}

static void unmap_left(int i)
{
    uint64_t lo = left[i].lo;
    drop_left(i);
    if (CUWIRE_READY())
        cuwire_py_host_unmap(lo);
}

static void leave_mapped(uint64_t lo, uint64_t hi)
{
    while (n_left && (n_left == LEFT_MAX || left_bytes + (hi - lo) > LEFT_BYTES))
        unmap_left(0);
    if (hi - lo > LEFT_BYTES) {
        if (CUWIRE_READY())
            cuwire_py_host_unmap(lo);
        return;
    }
    left[n_left].lo = lo, left[n_left].hi = hi;
    n_left++;
    left_bytes += hi - lo;
}

/* The run left mapped that is [lo, hi), taken (1), after the ones that overlap or touch it otherwise were unmapped. */
static int take_left_mapped(uint64_t lo, uint64_t hi)
{
    for (int i = 0; i < n_left;) {
        if (left[i].lo > hi || left[i].hi < lo) {
            i++;
        } else if (left[i].lo == lo && left[i].hi == hi) {
            drop_left(i);
            return 1;
        } else {
            unmap_left(i);
        }
    }
    return 0;
}

/* Page-locked memory of the program's own (over TCP) that a call passes to the server as a device address
 * (cuwire_host_reference: a kernel's parameter, a memset's destination, a copy's source...): the server maps
 * memory of its own at the same pages, in the client's address space it holds (address_space.py), and
 * registers it for the GPU, so that the program's pointer is the GPU's too, as natively with unified
 * addressing; managed.c keeps the two copies in step at calls from then on, as it does managed memory's over
 * TCP. Only then: page-locked memory is mostly the host side of copies, which the client makes itself, and
 * keeping a buffer in step costs a round trip at each synchronization.
 *
 * The pages of [p, p + size) are mapped as one run with the runs mapped before that they overlap or touch (a
 * page may hold two registrations, as small buffers of one heap block do, and a copy or a kernel may cross
 * from one into the next). 0, or the CUDA error (the call then names memory the server does not have, and
 * fails as it would). register_lock held. */
static int map_for_kernels(const void *p, size_t size)
{
    if (!size || !CUWIRE_READY())
        return size ? CUWIRE_NOT_READY : CUDA_ERROR_INVALID_VALUE;
    uint64_t lo, hi;
    if (!cuwire_host_mapped_span(page_floor((uint64_t)(uintptr_t)p), page_ceil((uint64_t)(uintptr_t)p + size), &lo,
                                 &hi))
        return 0;
    if (take_left_mapped(lo, hi)) {
        int again = cuwire_host_mapped_add_again(lo, hi - lo);
        if (again == 0 && cuwire_trace)
            fprintf(stderr, "cuwire trace: page-locked memory at %#llx the server still had mapped: mapped again "
                            "without asking\n", (unsigned long long)lo);
        if (again != 0 && CUWIRE_READY())
            cuwire_py_host_unmap(lo);
        return again;
    }
    int err = cuwire_py_host_map(lo, hi - lo);
    if (err && n_left) { /* (the server's room for such memory may be what the runs left mapped hold) */
        while (n_left)
            unmap_left(0);
        err = cuwire_py_host_map(lo, hi - lo);
    }
    if (err) {
        uint64_t at, n; /* the server may have let the runs it was to join go: so does the client */
        while (cuwire_host_mapped_within(lo, hi, &at, &n))
            cuwire_host_mapped_forget(at);
        cuwire_say_once_per_name("cuwire: the server did not map page-locked memory of the program's for the GPU "
                                 "(over TCP; its bound is CUWIRE_HOST_MEMORY, the server's log says why), so kernels "
                                 "and copies given that memory fail; the server answered",
                                 cuwire_error_name(err) ? cuwire_error_name(err) : "an unknown error");
        return err;
    }
    if ((err = cuwire_host_mapped_add(lo, hi - lo)) != 0)
        cuwire_py_host_unmap(lo);
    else if (cuwire_trace)
        fprintf(stderr, "cuwire trace: the server mapped %llu bytes of page-locked memory at %#llx for the GPU\n",
                (unsigned long long)(hi - lo), (unsigned long long)lo);
    return err;
}

static int own_range_overlaps(uint64_t lo, uint64_t hi); /* (below) */

/* ...and the end of that: the program frees or unregisters [p, p + size), no longer its page-locked memory;
 * the pages kept for it go, but those that other page-locked memory still lies in. register_lock held. */
static void unmap_for_kernels(const void *p, size_t size)
{
    uint64_t at, n, lo = page_floor((uint64_t)(uintptr_t)p), hi = page_ceil((uint64_t)(uintptr_t)p + size);
    while (cuwire_host_mapped_within(lo, hi, &at, &n)) {
        lo = at + n;
        if (own_range_overlaps(at, at + n))
            continue;
        if (cuwire_host_mapped_forget(at))
            leave_mapped(at, at + n);
    }
}

static int host_alloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return CUDA_ERROR_INVALID_VALUE;
    struct host_alloc *a = malloc(sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t address = 0;
    if (size && (!__atomic_load_n(&shared_known, __ATOMIC_ACQUIRE) || shared_size) && CUWIRE_READY())
        cuwire_py_host_alloc(size, &address); /* 0: none there (no shared memory, or it is full) */
    *pHost = (void *)(uintptr_t)address;
    if (!address && posix_memalign(pHost, 4096, size ? size : 1) != 0) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!address)
        note_own(*pHost, size);
    pthread_mutex_lock(&host_lock);
    *a = (struct host_alloc){*pHost, size, flags, address != 0, 0, host_allocs};
    host_allocs = a;
    pthread_mutex_unlock(&host_lock);
    return CUDA_SUCCESS;
}

static int host_free(void *ptr)
{
    if (!ptr)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc **p = &host_allocs; *p; p = &(*p)->next) {
        if ((*p)->ptr == ptr) {
            struct host_alloc *a = *p;
            *p = a->next;
            pthread_mutex_unlock(&host_lock);
            int err = 0;
            if (!a->shared) {
                pthread_mutex_lock(&register_lock);
                unmap_for_kernels(ptr, a->size);
                pthread_mutex_unlock(&register_lock);
                free(ptr);
            }
            else if (CUWIRE_READY())
                err = cuwire_py_host_free((uint64_t)(uintptr_t)ptr);
            free(a);
            return err;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

static int host_flags(unsigned int *pFlags, void *pHost)
{
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc *a = host_allocs; a; a = a->next) {
        if (a->ptr == pHost) {
            *pFlags = a->flags;
            pthread_mutex_unlock(&host_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuwire_local_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return (CUresult)host_alloc(pp, bytesize, Flags);
}

CUresult cuwire_local_cuMemAllocHost_v2(void **pp, size_t bytesize) { return (CUresult)host_alloc(pp, bytesize, 0); }

CUresult cuwire_local_cuMemFreeHost(void *p) { return (CUresult)host_free(p); }

CUresult cuwire_local_cuMemHostGetFlags(unsigned int *pFlags, void *p) { return (CUresult)host_flags(pFlags, p); }

/* The page-locked allocation holding p, or NULL; host_lock held. */
static struct host_alloc *host_alloc_of_locked(const void *p)
{
    for (struct host_alloc *a = host_allocs; a; a = a->next)
        if ((const char *)p >= (const char *)a->ptr && (const char *)p < (const char *)a->ptr + (a->size ? a->size : 1))
            return a;
    return NULL;
}

/* Whether p lies in one of the page-locked allocations (*shared: one in the memory shared with the server). */
static int host_alloc_holds_locked(const void *p, int *shared)
{
    struct host_alloc *a = host_alloc_of_locked(p);
    if (a)
        *shared = a->shared;
    return a != NULL;
}

static int host_alloc_holds(const void *p, int *shared)
{
    pthread_mutex_lock(&host_lock);
    int found = host_alloc_holds_locked(p, shared);
    pthread_mutex_unlock(&host_lock);
    return found;
}

/* For graph_copies.c: whether p lies in a page-locked allocation (*shared: in the memory shared with the
 * server), and whether this session has such memory at all. */
int cuwire_host_locked(const void *p, int *shared) { return host_alloc_holds(p, shared); }

int cuwire_shares_host_memory(void) { return __atomic_load_n(&shared_known, __ATOMIC_ACQUIRE) && shared_size; }

/* Memory the program registers itself (cuMemHostRegister) is the GPU's too, at its own address, with a
 * server on this host: its pages move into the host memory shared with the server (a copy of their bytes,
 * then that memory mapped over them), and the server maps the same memory at the same address, in the
 * client's address space it holds (address_space.py), and registers it. Only whole pages of ordinary
 * memory move (heap, stack, anonymous mappings): a page shared with other data moves with it. Writes of
 * another thread to those pages while they move (microseconds) would be lost: programs register memory
 * they are about to hand to the GPU, not memory other threads are writing. Unregistering moves the pages
 * back into memory of the process's own (but pages of the calling thread's stack: move_back). A shared
 * mapping of a memory file does not move: the server maps the same file there (map_file). Where neither
 * can be (over TCP, other files' pages, the server cannot map them), the memory stays the program's own:
 * copies from it work, kernels cannot reach it, and its device pointer is refused by name. */
struct registered {
    const char *lo, *hi;   /* as the program registered it */
    uint64_t at, size;     /* the pages that moved (size 0: none), or the file's pages the server mapped */
    uint64_t offset;       /* ...to this offset of the shared memory */
    int file;              /* a shared mapping of a memory file, which the server maps too (map_file) */
    struct registered *next;
};
static struct registered *registered;

static struct registered *registered_holding(const void *p)
{
    for (struct registered *r = registered; r; r = r->next)
        if ((const char *)p >= r->lo && (const char *)p < r->hi)
            return r;
    return NULL;
}

/* Whether every page of [lo, hi) is ordinary read-write private memory of this process (no file's). */
static int ordinary_memory(uint64_t lo, uint64_t hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    uint64_t at = lo;
    while (at < hi && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[8] = "", path[256] = "";
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %255s", &a, &b, perms, path) < 3 || b <= at)
            continue;
        if (a > at || strcmp(perms, "rw-p") != 0 || (path[0] && strcmp(path, "[heap]") && strcmp(path, "[stack]")))
            break;
        at = b;
    }
    fclose(f);
    return at >= hi;
}

/* Whether [lo, hi) may overlap this thread's own stack, which this very code runs on. The thread's stack
 * as pthread_getattr_np first said it (asked again, it would read /proc/self/maps, where a moved page of
 * the stack splits the main thread's [stack] and makes it look smaller), widened around the frame this
 * runs in: saying yes for a page that is not the stack costs only a page left in the shared memory. */
static __thread uint64_t own_stack_lo, own_stack_hi;

static int on_own_stack(uint64_t lo, uint64_t hi)
{
    uint64_t sp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
    if (!own_stack_hi) {
        pthread_attr_t attr;
        void *base;
        size_t size;
        own_stack_lo = sp - (8 << 20), own_stack_hi = sp + (8 << 20);
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &base, &size) == 0) {
                own_stack_lo = (uint64_t)(uintptr_t)base;
                own_stack_hi = (uint64_t)(uintptr_t)base + size;
            }
            pthread_attr_destroy(&attr);
        }
    }
    uint64_t below = sp - (256 << 10), above = sp + (8 << 20);
    uint64_t a = own_stack_lo < below ? own_stack_lo : below, b = own_stack_hi > above ? own_stack_hi : above;
    return lo < b && hi > a;
}

/* Memory files (NCCL's /dev/shm segments): [lo, hi) wholly in one shared read-write mapping of a file,
 * contiguous in it (one or more lines of /proc/self/maps): then the server maps the same file at the same
 * address (server/host_files.py), and the program and the GPU share its pages, as natively. A file the
 * program removed since it mapped it (NCCL removes a segment once both its ends mapped it) goes by its
 * device and inode, which the server finds among the files it holds for the session. 0, with the file's
 * path, the offset of lo in it, its device and inode; or -1. */
static int file_mapping(uint64_t lo, uint64_t hi, char *path, size_t cap, uint64_t *offset, uint64_t *dev,
                        uint64_t *ino)
{
    static const char removed[] = " (deleted)";
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[PATH_MAX + 128];
    uint64_t at = lo, inode = 0, start = 0;
    unsigned int major = 0, minor = 0;
    path[0] = 0;
    while (at < hi && fgets(line, sizeof line, f)) {
        unsigned long long a, b, off, node;
        unsigned int ma, mi;
        char perms[8] = "";
        int name = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &a, &b, perms, &off, &ma, &mi, &node, &name) < 7 ||
            b <= at)
            continue;
        char *p = line + name;
        p[strcspn(p, "\n")] = 0;
        if (a > at || strncmp(perms, "rw", 2) || perms[3] != 's' || !node || !name || p[0] != '/')
            break;
        if (at == lo) {
            if (strlen(p) >= cap)
                break;
            strcpy(path, p);
            inode = node, start = off + (lo - a), major = ma, minor = mi;
        } else if (node != inode || strcmp(p, path) || off + (at - a) != start + (at - lo))
            break;
        at = b;
    }
    fclose(f);
    if (at < hi || !path[0])
        return -1;
    size_t n = strlen(path), r = sizeof removed - 1;
    struct stat st;
    if (n > r && !strcmp(path + n - r, removed)) { /* removed: the server may hold it (host_files.Kept) */
        path[n - r] = 0;
        *dev = (uint64_t)makedev(major, minor);
    } else if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_ino != inode)
        return -1;
    else
        *dev = (uint64_t)st.st_dev;
    *offset = start, *ino = inode;
    return 0;
}

/* The server maps the memory file under [lo, hi) there too, and registers it: 0, or -1 (it cannot: the
 * memory stays the program's own). */
static int map_file(struct registered *r, uint64_t lo, uint64_t hi)
{
    char path[PATH_MAX];
    uint64_t offset, dev, ino;
    if (file_mapping(lo, hi, path, sizeof path, &offset, &dev, &ino) != 0 ||
        cuwire_py_host_register_file(lo, hi - lo, path, offset, dev, ino) != 0)
        return -1;
    r->at = lo, r->size = hi - lo, r->file = 1;
    return 0;
}

#if defined(__x86_64__)
/* The pages' bytes copied into the shared memory, then that memory mapped over them, with nothing written
 * to this thread's stack in between (one instruction sequence, no call): pages of the stack this code runs
 * on move too (a stack variable the program registers), the frames on them unchanged. The mmap's result. */
static long copy_then_map(uint64_t shared, uint64_t at, uint64_t size, int fd, uint64_t offset)
{
    long ret;
    void *dst = (void *)(uintptr_t)shared, *src = (void *)(uintptr_t)at;
    uint64_t n = size;
    register long flags __asm__("r10") = MAP_SHARED | MAP_FIXED;
    register long file __asm__("r8") = fd;
    register long from __asm__("r9") = (long)offset;
    __asm__ volatile("rep movsb\n\t"
                     "mov %[at], %%rdi\n\t"
                     "mov %[size], %%rsi\n\t"
                     "mov %[prot], %%edx\n\t"
                     "mov %[nr], %%eax\n\t"
                     "syscall"
                     : "=&a"(ret), "+&D"(dst), "+&S"(src), "+&c"(n) /* (no input may share their registers) */
                     : [at] "r"(at), [size] "r"(size), [prot] "i"(PROT_READ | PROT_WRITE), [nr] "i"(SYS_mmap),
                       "r"(flags), "r"(file), "r"(from)
                     : "rdx", "r11", "memory");
    return ret;
}
#endif

/* Move [at, at + size) into the shared memory: 0, or -1 (nothing moved, no room kept). */
static int move_pages(struct registered *r, uint64_t at, uint64_t size)
{
    int stack = on_own_stack(at, at + size);
#if !defined(__x86_64__)
    if (stack)
        return -1; /* (pages of the stack this code runs on move only where copy_then_map is written) */
#endif
    uint64_t offset;
    if (cuwire_py_host_register_at(at, size, &offset) != 0)
        return -1;
    int mapped;
#if defined(__x86_64__)
    if (stack) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old); /* (no handler's frame between the copy and the map) */
        mapped = copy_then_map(shared_base + offset, at, size, shared_fd, offset) == (long)at;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    } else
#endif
    {
        memcpy((void *)(uintptr_t)(shared_base + offset), (void *)(uintptr_t)at, size);
        mapped = cw_map_shared_over(shared_fd, offset, size, at) == at;
    }
    if (!mapped) {
        cuwire_py_host_free(shared_base + offset);
        return -1;
    }
    r->at = at, r->size = size, r->offset = offset;
    return 0;
}

/* Pages of a thread's own stack that stay in the shared memory after unregistering (parked, in a list of
 * their own; host_lock): registered again, they need no move (a program may register the same stack
 * variable call after call). */
static struct registered *parked;

static void park(struct registered *r)
{
    pthread_mutex_lock(&host_lock);
    r->lo = r->hi = NULL;
    r->next = parked;
    parked = r;
    pthread_mutex_unlock(&host_lock);
}

static struct registered *take_parked(uint64_t lo, uint64_t hi)
{
    for (struct registered **p = &parked; *p; p = &(*p)->next)
        if ((*p)->at <= lo && hi <= (*p)->at + (*p)->size) {
            struct registered *found = *p;
            *p = found->next;
            return found;
        }
    return NULL;
}

/* Back into memory of the process's own, and the shared room given back. Pages of this thread's own
 * stack stay in the shared memory (moving them back would pull the frames this code runs on from under
 * it): still the program's bytes, their room kept (parked) until the session ends; the server no longer
 * has them registered. Returns whether `r` was parked (kept). */
static int move_back(struct registered *r)
{
    if (on_own_stack(r->at, r->at + r->size)) {
        cuwire_py_host_unregister_at(r->offset);
        park(r);
        return 1;
    }
    /* (the bytes' copy is a mapping of its own: a malloc'd one may lie in the very pages moving back) */
    void *copy = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED)
        return 0; /* the pages stay in the shared memory: still the program's bytes, the room kept */
    memcpy(copy, (void *)(uintptr_t)r->at, r->size);
    if (mmap((void *)(uintptr_t)r->at, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != MAP_FAILED) {
        memcpy((void *)(uintptr_t)r->at, copy, r->size);
        cuwire_py_host_free(shared_base + r->offset);
    }
    munmap(copy, r->size);
    return 0;
}


CUresult cuwire_local_cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    if (!p || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), offset;
    uint64_t lo = (uint64_t)(uintptr_t)p / page * page;
    uint64_t hi = ((uint64_t)(uintptr_t)p + bytesize + page - 1) / page * page;
    struct registered *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r->lo = p, r->hi = (const char *)p + bytesize;
    pthread_mutex_lock(&register_lock);
    int overlaps = 0, pages_free = 1; /* (pages_free: no page of it moved already for another registration) */
    pthread_mutex_lock(&host_lock);
    for (struct registered *o = registered; o; o = o->next) {
        overlaps = overlaps || (r->lo < o->hi && r->hi > o->lo);
        pages_free = pages_free && (!o->size || o->at >= hi || o->at + o->size <= lo);
    }
    struct registered *again = overlaps || !pages_free ? NULL : take_parked(lo, hi);
    pthread_mutex_unlock(&host_lock);
    if (overlaps) {
        pthread_mutex_unlock(&register_lock);
        free(r);
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (again) { /* pages that moved before: the server registers them again where they are */
        if (cuwire_py_host_register_again(again->at, again->size, again->offset) == 0) {
            r->at = again->at, r->size = again->size, r->offset = again->offset;
            free(again);
        } else
            park(again); /* still shared memory, not the GPU's */
        pages_free = 0;
    }
    for (struct registered *o = parked; o && pages_free; o = o->next) /* (partly parked: shared pages) */
        pages_free = o->at >= hi || o->at + o->size <= lo;
    if (!__atomic_load_n(&shared_known, __ATOMIC_ACQUIRE) && CUWIRE_READY())
        cuwire_py_connect(); /* (whether the session shares host memory is known once it is open) */
    if (shared_size && shared_fd >= 0 && shared_server_base == shared_base && pages_free &&
        !shared_offset(p, bytesize, &offset) && CUWIRE_READY()) {
        if (ordinary_memory(lo, hi))
            move_pages(r, lo, hi - lo);
        else
            map_file(r, lo, hi);
    }
    if (!r->size && !r->file)
        note_own(p, bytesize);
    pthread_mutex_lock(&host_lock);
    r->next = registered;
    registered = r;
    pthread_mutex_unlock(&host_lock);
    pthread_mutex_unlock(&register_lock);
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuMemHostUnregister(void *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&register_lock);
    struct registered *gone = NULL;
    pthread_mutex_lock(&host_lock);
    for (struct registered **r = &registered; *r; r = &(*r)->next)
        if ((*r)->lo == p) {
            gone = *r;
            *r = gone->next;
            break;
        }
    pthread_mutex_unlock(&host_lock);
    if (gone && gone->file && CUWIRE_READY())
        cuwire_py_host_unregister_file(gone->at); /* (the file's pages stay where they are, the program's) */
    if (gone && !gone->size && !gone->file)
        unmap_for_kernels(gone->lo, (size_t)(gone->hi - gone->lo));
    int kept = gone && gone->size && !gone->file && CUWIRE_READY() && move_back(gone);
    pthread_mutex_unlock(&register_lock);
    if (!gone)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    if (!kept)
        free(gone);
    return CUDA_SUCCESS;
}

/* Page-locked memory in the memory shared with the server is the GPU's too (the server registered it mapped,
 * at the client's own address when it could): its device pointer is that address, as natively with unified
 * addressing. Memory of the client's own cannot be reached by the GPU: said by name. */
CUresult cuwire_local_cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    int shared = 0;
    uint64_t offset;
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&host_lock);
    int held = host_alloc_holds_locked(p, &shared);
    struct registered *r = held ? NULL : registered_holding(p);
    int moved = r && r->size, known = r != NULL;
    pthread_mutex_unlock(&host_lock);
    /* the GPU's at its own address: the server mapped and registered the same pages there, or, for memory of
     * the client's own (over TCP), maps them when a call first passes them to it (cuwire_host_reference) */
    if (moved || (!cuwire_shares_host_memory() && ((held && !shared) || (known && !r->file)))) {
        *pdptr = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
    }
    if (known) {
        cuwire_say_once_per_name("cuwire: not supported: the GPU cannot reach memory the program registered itself "
                                 "(cuMemHostRegister, cudaHostRegister): only page-locked memory it allocated "
                                 "(cuMemHostAlloc, cudaMallocHost) is mapped for kernels; refused:",
                                 "cuMemHostGetDevicePointer");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!held)
        return CUDA_ERROR_INVALID_VALUE;
    if (!shared || !shared_offset(p, 1, &offset)) {
        cuwire_say_once_per_name("cuwire: page-locked memory outside the host memory shared with the server (it was "
                                 "full: CUWIRE_HOST_MEMORY): the GPU cannot reach it, refused:",
                                 "cuMemHostGetDevicePointer");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *pdptr = shared_server_base + offset;
    return CUDA_SUCCESS;
}

/* The page-locked memory of the program's own that p lies in (an allocation not in the shared memory, or a
 * registration whose pages did not move and are no memory file's): 1 and its range, or 0. */
static int own_range_of(const void *p, const void **at, size_t *size)
{
    if ((uint64_t)(uintptr_t)p < __atomic_load_n(&own_lo, __ATOMIC_RELAXED) ||
        (uint64_t)(uintptr_t)p >= __atomic_load_n(&own_hi, __ATOMIC_RELAXED))
        return 0;
    pthread_mutex_lock(&host_lock);
    struct host_alloc *a = host_alloc_of_locked(p);
    struct registered *r = a ? NULL : registered_holding(p);
    int own = a ? !a->shared : r && !r->size && !r->file;
    if (own && a)
        *at = a->ptr, *size = a->size;
    else if (own)
        *at = r->lo, *size = (size_t)(r->hi - r->lo);
    pthread_mutex_unlock(&host_lock);
    return own;
}

/* A call is about to pass `v` to the server as a device address (a CUdeviceptr parameter: generated stubs; a
 * kernel's parameter: launches.c): when it lies in page-locked memory of the program's own (over TCP), the
 * server maps that memory at the same address (once), and managed.c keeps the two copies in step from now on
 * (the program's changes go first, the GPU's come back after each synchronization). */
void cuwire_host_reference(uint64_t v)
{
    if (v < __atomic_load_n(&own_lo, __ATOMIC_RELAXED) || v >= __atomic_load_n(&own_hi, __ATOMIC_RELAXED) ||
        cuwire_keeping_in_step() || cuwire_shares_host_memory() /* (with a server on this host: it shares) */
        || cuwire_in_allocation(v, 1)) /* (device memory: a launch's pointers mostly are, asked at once) */
        return;
    /* the whole of the memory v lies in mapped already (and kept in step)? Not only v's page: memory may start
     * in a page mapped for another's (two small buffers of one heap block) and go on past it */
    const void *at;
    size_t size;
    if (!own_range_of((const void *)(uintptr_t)v, &at, &size) || cuwire_host_mapped_holds((uintptr_t)at, size))
        return;
    pthread_mutex_lock(&register_lock); /* (one thread maps memory for kernels at a time) */
    if (own_range_of((const void *)(uintptr_t)v, &at, &size) && !cuwire_host_mapped_holds((uintptr_t)at, size))
        map_for_kernels(at, size);
    pthread_mutex_unlock(&register_lock);
}

/* Whether [lo, hi) overlaps page-locked memory of the program's own (an allocation or a registration):
 * pages mapped for one that another still lies in stay mapped. */
static int own_range_overlaps(uint64_t lo, uint64_t hi)
{
    int found = 0;
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc *a = host_allocs; a && !found; a = a->next)
        found = !a->shared && (uint64_t)(uintptr_t)a->ptr < hi && (uint64_t)(uintptr_t)a->ptr + a->size > lo;
    for (struct registered *r = registered; r && !found; r = r->next)
        found = !r->size && !r->file && (uint64_t)(uintptr_t)r->lo < hi && (uint64_t)(uintptr_t)r->hi > lo;
    pthread_mutex_unlock(&host_lock);
    return found;
}

/* Whether p lies in page-locked memory of the program's own, not shared with the server (over TCP): an
 * asynchronous copy from it reads it when the stream reaches the copy, natively (callbacks.c). */
int cuwire_own_page_locked(const void *p)
{
    const void *at;
    size_t size;
    return own_range_of(p, &at, &size);
}

/* ------------------------------------------------------------------ managed memory */

/* Managed memory, with a server on this host: page-locked memory shared with the server and mapped for the
 * GPU at the same address, as cuMemHostAlloc's is. The program and the GPU use one copy of it, coherently
 * (the GPU's accesses cross PCIe rather than migrating pages); prefetches and advice are hints, taken and
 * left at that. The session's allocation map holds it, so copies and memsets treat it as device memory, as
 * natively. Over TCP: managed memory on the server and a host copy here, kept in step at calls (managed.c). */
CUresult cuwire_local_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (!dptr || bytesize == 0 || (flags != 1 && flags != 2)) /* CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST */
        return CUDA_ERROR_INVALID_VALUE;
    struct host_alloc *a = malloc(sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t address = 0;
    if (CUWIRE_READY())
        cuwire_py_host_alloc(bytesize, &address);
    int same = shared_server_base == shared_base; /* else the server has the shared memory elsewhere (ring.py) */
    if (address && !same) { /* kernels would get an address that is not theirs: two copies kept in step instead */
        cuwire_py_host_free(address);
        address = 0;
    }
    if (!address) {
        free(a);
        if (shared_size && same)
            return CUDA_ERROR_OUT_OF_MEMORY; /* the shared memory is full (CUWIRE_HOST_MEMORY) */
        if (!CUWIRE_READY())
            return (CUresult)CUWIRE_NOT_READY;
        /* over TCP (or shared memory at another address in the server): two copies kept in step (managed.c) */
        return (CUresult)cuwire_managed_alloc((uint64_t *)dptr, bytesize, flags);
    }
    if (cuwire_track_alloc(address, bytesize) != 0) {
        free(a);
        cuwire_py_host_free(address);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&host_lock);
    *a = (struct host_alloc){(void *)(uintptr_t)address, bytesize, flags, 1, 1, host_allocs};
    host_allocs = a;
    pthread_mutex_unlock(&host_lock);
    *dptr = address;
    return CUDA_SUCCESS;
}

/* The size of the managed allocation at p; 0 for any other pointer. */
static size_t managed_size(CUdeviceptr p)
{
    size_t size = 0;
    pthread_mutex_lock(&host_lock);
    for (struct host_alloc *a = host_allocs; a; a = a->next)
        if (a->ptr == (void *)(uintptr_t)p) {
            size = a->managed ? a->size : 0;
            break;
        }
    pthread_mutex_unlock(&host_lock);
    return size;
}

/* The size of managed memory made in the shared memory at dptr (0: none such), for cuMemFree (managed_hints.c). */
size_t cuwire_shared_managed_size(CUdeviceptr dptr)
{
    uint64_t offset; /* managed memory lies in the shared memory: any other pointer goes on at once */
    return dptr && shared_offset((const void *)(uintptr_t)dptr, 1, &offset) ? managed_size(dptr) : 0;
}

/* ...and its freeing: the session's allocation map and the shared memory let it go. */
int cuwire_shared_managed_free(CUdeviceptr dptr)
{
    cuwire_untrack_alloc(dptr);
    return host_free((void *)(uintptr_t)dptr);
}
