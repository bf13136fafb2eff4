/* cuwire client: graph copies of the program's pageable host memory, through stand-ins.
 *
 * A graph runs on the server, which cannot reach the program's own memory. With a server on this host, a
 * memcpy node whose host side is pageable (malloc'd, on the stack) gets a stand-in: page-locked memory
 * carved from the memory shared with the server (cuMemHostAlloc), which the node copies to or from instead.
 * The program's bytes and the stand-in's are kept in step at the points where CUDA makes them visible:
 *  - a stand-in the node reads (host to device) takes the program's bytes at every launch of a graph
 *    holding the node (cuGraphLaunch), before the launch is queued;
 *  - a stand-in the node writes (device to host) gives its bytes to the program after the host catches up
 *    with the GPU (a synchronizing call, client_stubs.c's `synchronizes`) and before a host function runs
 *    (a graph's host node that reads what a memcpy node wrote), where the node wrote since: until it does,
 *    the stand-in holds a mark, each byte the opposite of the one there before, which any bytes the node
 *    writes (the same as last time included) differ from. Launches queued one after another each get
 *    their bytes to the program: after one launch's bytes went, the mark is set again for the next.
 * Only the bytes a node touches are copied: a pitched copy's bytes between rows stay the program's.
 * Stand-ins belong to the graphs and executable graphs that hold their nodes (node added, graph cloned or
 * used as a child, executable graph instantiated or updated from it) and are freed with the last of them.
 * Over TCP there is no shared memory: such nodes are refused by name (server/graphs.py).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "kernel_nodes.h"
#include "runtime.h"

struct standin {
    char *program;        /* the program's bytes: the first the node touches */
    char *shared;         /* the stand-in, in the memory shared with the server */
    size_t span;          /* from the first byte the node touches to the last */
    size_t width, pitch;  /* the bytes it touches: rows of `width` bytes, `pitch` bytes apart, */
    size_t rows, slice;   /* `rows` of them in each slice, slices `slice` bytes apart, */
    size_t depth;         /* `depth` slices (a 1D copy: one row) */
    int to_device;        /* the node reads the host side (else writes it) */
    unsigned launches;    /* (device to host) launches whose bytes the program has not got yet */
    int pinned;           /* an owner could not be noted: kept for the session's life */
    unsigned char *mark;  /* (device to host) what the stand-in holds until the node writes it */
    uint64_t *owners;     /* graphs and executable graphs holding the node */
    int n_owners, cap_owners;
    struct standin *next;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct standin *standins;

static int owned_by(const struct standin *s, uint64_t owner)
{
    for (int i = 0; i < s->n_owners; i++)
        if (s->owners[i] == owner)
            return 1;
    return 0;
}

/* 0, or -1 when there was no memory for it (the caller then keeps the stand-in alive for good: better a
 * leak than a node copying freed memory). */
static int add_owner(struct standin *s, uint64_t owner)
{
    if (owned_by(s, owner))
        return 0;
    if (s->n_owners == s->cap_owners) {
        int cap = s->cap_owners ? 2 * s->cap_owners : 4;
        uint64_t *grown = realloc(s->owners, cap * sizeof *grown);
        if (!grown)
            return -1;
        s->owners = grown;
        s->cap_owners = cap;
    }
    s->owners[s->n_owners++] = owner;
    return 0;
}

/* `owner` holds s too; if that cannot be noted, s is kept for good. */
static void hold(struct standin *s, uint64_t owner)
{
    if (add_owner(s, owner) != 0)
        s->pinned = 1;
}

/* What `from` holds, `to` holds too (a clone, a child graph's parent, an executable graph); lock held. */
static void share(uint64_t from, uint64_t to)
{
    for (struct standin *s = standins; s; s = s->next)
        if (owned_by(s, from))
            hold(s, to);
}

static void drop(struct standin *s)
{
    if (s) {
        if (s->shared)
            cuMemFreeHost(s->shared);
        free(s->mark);
        free(s->owners);
        free(s);
    }
}

/* A new stand-in, held by `owner`, joins the list. */
static void list(struct standin *s, uint64_t owner)
{
    pthread_mutex_lock(&lock);
    hold(s, owner);
    s->next = standins;
    __atomic_store_n(&standins, s, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

/* `owner` went: stand-ins no one holds any more are freed. */
static void release(uint64_t owner)
{
    pthread_mutex_lock(&lock);
    for (struct standin **p = &standins; *p;) {
        struct standin *s = *p;
        for (int i = 0; i < s->n_owners; i++)
            if (s->owners[i] == owner)
                s->owners[i--] = s->owners[--s->n_owners];
        if (s->n_owners == 0 && !s->pinned) {
            *p = s->next;
            drop(s);
        } else
            p = &s->next;
    }
    pthread_mutex_unlock(&lock);
}

/* Where the i-th row the node touches starts, from its first byte. */
static size_t row_at(const struct standin *s, size_t i) { return i / s->rows * s->slice + i % s->rows * s->pitch; }

/* The bytes the node touches, from `from` to `to` (the program's or the stand-in's). */
static void copy_rows(const struct standin *s, char *to, const char *from)
{
    for (size_t i = 0; i < s->rows * s->depth; i++)
        memcpy(to + row_at(s, i), from + row_at(s, i), s->width);
}

/* (device to host) The stand-in holds a mark until the node writes it: each byte the opposite of before. */
static void set_mark(struct standin *s)
{
    for (size_t i = 0; i < s->rows * s->depth; i++)
        for (size_t at = row_at(s, i), end = at + s->width; at < end; at++)
            s->shared[at] = (char)(s->mark[at] = (unsigned char)~s->shared[at]);
}

/* (device to host) Whether the node wrote the stand-in since its mark was set. */
static int written(const struct standin *s)
{
    for (size_t i = 0; i < s->rows * s->depth; i++)
        if (memcmp(s->shared + row_at(s, i), s->mark + row_at(s, i), s->width) != 0)
            return 1;
    return 0;
}

/* A stand-in (not yet listed) for the bytes a node touches at `program`: rows of `width` bytes, `pitch`
 * apart, `rows` of them in each of `depth` slices `slice` bytes apart; or NULL when none can be made. */
static struct standin *make_standin(char *program, size_t width, size_t pitch, size_t rows, size_t slice,
                                    size_t depth, int to_device)
{
    int shared = 0;
    size_t span = (depth - 1) * slice + (rows - 1) * pitch + width;
    struct standin *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    void *p = NULL;
    if (cuMemHostAlloc(&p, span, 0) == CUDA_SUCCESS)
        s->shared = p;
    if (!s->shared || !cuwire_host_locked(p, &shared) || !shared || (!to_device && !(s->mark = calloc(1, span)))) {
        drop(s);
        return NULL;
    }
    *s = (struct standin){program, s->shared, span, width, pitch, rows, slice, depth, to_device, 0, 0, s->mark};
    if (to_device)
        copy_rows(s, s->shared, program);
    return s;
}

/* One host side of a node's copy `c`: its pointer, the offset of the first byte the copy touches, and its
 * pitch and rows per slice, CUDA's defaults filled in (0: the copy's width, its height). */
struct host_side {
    const void *host;
    size_t first, pitch, rows;
};

static struct host_side host_side(const void *host, size_t x, size_t y, size_t z, size_t pitch, size_t height,
                                  const CUDA_MEMCPY3D *c)
{
    size_t p = pitch ? pitch : c->WidthInBytes, rows = height ? height : c->Height;
    return (struct host_side){host, (z * (c->Depth > 1 ? rows : 0) + y) * p + x, p, rows};
}

#define SRC_SIDE(c) host_side((c)->srcHost, (c)->srcXInBytes, (c)->srcY, (c)->srcZ, (c)->srcPitch, (c)->srcHeight, c)
#define DST_SIDE(c) host_side((c)->dstHost, (c)->dstXInBytes, (c)->dstY, (c)->dstZ, (c)->dstPitch, (c)->dstHeight, c)

/* Whether one host side of a copy is memory a stand-in would have to take the place of. */
static int pageable(const void *host)
{
    int shared = 0;
    return host && !(cuwire_host_locked(host, &shared) && shared);
}

/* A stand-in for host side `h` of a node's copy `c`, when that side is not page-locked memory the server
 * shares already; *base is then what the node takes as its host pointer. */
static struct standin *side_standin(struct host_side h, const CUDA_MEMCPY3D *c, int to_device, const void **base)
{
    if (!pageable(h.host))
        return NULL;
    struct standin *s = make_standin((char *)h.host + h.first, c->WidthInBytes, h.pitch, c->Height, h.rows * h.pitch,
                                     c->Depth, to_device);
    if (s)
        *base = s->shared - h.first;
    return s;
}

/* cuGraphAddMemcpyNode's fast path: a node with a pageable host side is added with stand-ins in its place;
 * its CUDA result, or -1 (the node goes as it is: no host side the server cannot reach, or no shared memory,
 * which the server then refuses by name). */
int cuwire_graph_copy_node(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                           const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    if (!c || !node || !c->WidthInBytes || !c->Height || !c->Depth || !cuwire_shares_host_memory())
        return -1;
    CUDA_MEMCPY3D copy = *c;
    struct standin *src = NULL, *dst = NULL;
    if (c->srcMemoryType == CU_MEMORYTYPE_HOST)
        src = side_standin(SRC_SIDE(c), c, 1, &copy.srcHost);
    if (c->dstMemoryType == CU_MEMORYTYPE_HOST)
        dst = side_standin(DST_SIDE(c), c, 0, (const void **)&copy.dstHost);
    if (!src && !dst)
        return -1;
    CUresult status = cuGraphAddMemcpyNode(node, graph, deps, n, &copy, ctx);
    if (status != CUDA_SUCCESS) {
        drop(src);
        drop(dst);
        return status;
    }
    if (src)
        list(src, (uint64_t)(uintptr_t)graph);
    if (dst)
        list(dst, (uint64_t)(uintptr_t)graph);
    return CUDA_SUCCESS;
}

/* A memcpy node's parameters set (cuGraphMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams): to device or
 * array memory, or page-locked memory the server shares, they go on as they are (-1); to pageable memory
 * they are refused by name, as no stand-in is made for a node's new parameters. */
static int copy_set(const CUDA_MEMCPY3D *c, const char *name)
{
    if (!c || !c->WidthInBytes || !c->Height || !c->Depth || !cuwire_shares_host_memory())
        return -1;
    if (!(c->srcMemoryType == CU_MEMORYTYPE_HOST && pageable(c->srcHost)) &&
        !(c->dstMemoryType == CU_MEMORYTYPE_HOST && pageable(c->dstHost)))
        return -1;
    cuwire_say_once_per_name("cuwire: not supported: a memcpy node's parameters set to pageable host memory "
                             "(page-locked memory, cudaMallocHost, is; so is a new node):", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

int cuwire_graph_copy_set(CUgraphNode node, const CUDA_MEMCPY3D *c)
{
    (void)node;
    return copy_set(c, "cuGraphMemcpyNodeSetParams");
}

int cuwire_graph_exec_copy_set(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    (void)exec, (void)node, (void)ctx;
    return copy_set(c, "cuGraphExecMemcpyNodeSetParams");
}

/* The program's pointer for host side `h` of a node's copy, where it names a stand-in; its own pointer else. */
static const void *program_side(struct host_side h)
{
    if (!h.host || !__atomic_load_n(&standins, __ATOMIC_ACQUIRE))
        return h.host;
    const void *program = h.host;
    pthread_mutex_lock(&lock);
    for (struct standin *s = standins; s; s = s->next)
        if (s->shared == (const char *)h.host + h.first) {
            program = s->program - h.first;
            break;
        }
    pthread_mutex_unlock(&lock);
    return program;
}

/* cuGraphMemcpyNodeGetParams: a host side that is a stand-in reads back as the program's memory it stands in
 * for, as the program made the node (the server gave its shared memory as the client's addresses). */
void cuwire_after_memcpy_node_params(CUgraphNode node, CUDA_MEMCPY3D *c)
{
    (void)node;
    if (!c || !c->WidthInBytes || !c->Height || !c->Depth)
        return;
    if (c->srcMemoryType == CU_MEMORYTYPE_HOST)
        c->srcHost = program_side(SRC_SIDE(c));
    if (c->dstMemoryType == CU_MEMORYTYPE_HOST)
        c->dstHost = (void *)program_side(DST_SIDE(c));
}

#define CAPTURE_OWNER (1ull << 63) /* a stream capture's id, as an owner (graphs and executables are addresses) */

/* An asynchronous copy between pageable memory and the device, made while its stream captures: the
 * capture takes a copy of a stand-in instead (which the launches of its graph keep in step). The stand-in
 * in the shared memory, for the caller to copy (calls.c), or NULL for the usual path (no capture, no
 * shared memory, or memory that needs none). */
const void *cuwire_capture_standin(const void *host, uint64_t device, uint64_t n, void *stream, int to_device)
{
    uint64_t capture = n && host ? cuwire_capture_of(stream) : 0, address = (uint64_t)(uintptr_t)host;
    int shared = 0;
    if (!capture || cuwire_host_locked(host, &shared) || cuwire_in_allocation(address, 1) ||
        cuwire_managed_holds(address, n) || !cuwire_in_allocation(device, n))
        return NULL;
    if (!cuwire_shares_host_memory()) {
        cuwire_say_once_per_name("cuwire: a copy of pageable host memory into a stream capture needs a server on "
                                 "this host, sharing memory with it (CUWIRE_TRANSPORT=auto); the capture refuses",
                                 to_device ? "a copy to the device" : "a copy from the device");
        return NULL;
    }
    struct standin *s = make_standin((char *)host, n, n, 1, n, 1, to_device);
    if (!s)
        return NULL;
    list(s, CAPTURE_OWNER | capture);
    return s->shared;
}

/* The capture ended in `graph`: its stand-ins are the graph's. */
static void capture_became(uint64_t capture, uint64_t graph)
{
    if (!__atomic_load_n(&standins, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&lock);
    share(CAPTURE_OWNER | capture, graph);
    pthread_mutex_unlock(&lock);
    release(CAPTURE_OWNER | capture);
}

/* After cuStreamEndCapture gave its graph: what the capture's copies of pageable memory stood in with is
 * the graph's now. */
void cuwire_after_end_capture(CUstream stream, CUgraph *graph)
{
    (void)stream;
    uint64_t id = cuwire_capture_ended();
    if (id && graph)
        capture_became(id, (uint64_t)(uintptr_t)*graph);
}

/* cuGraphLaunch's fast path: the launched graph's stand-ins take the program's bytes now; those it writes
 * get a mark, unless an earlier launch's bytes are still to come. Always -1: the launch is then queued as
 * usual. */
int cuwire_graph_launch_copies(CUgraphExec exec, CUstream stream)
{
    (void)stream;
    if (!__atomic_load_n(&standins, __ATOMIC_ACQUIRE))
        return -1;
    uint64_t owner = (uint64_t)(uintptr_t)exec;
    pthread_mutex_lock(&lock);
    for (struct standin *s = standins; s; s = s->next)
        if (owned_by(s, owner)) {
            if (s->to_device)
                copy_rows(s, s->shared, s->program);
            else if (s->launches++ == 0)
                set_mark(s);
        }
    pthread_mutex_unlock(&lock);
    return -1;
}

/* What nodes wrote into stand-ins since their launch goes to the program's memory: once the host caught up
 * with the GPU (caught_up: every launch's bytes are there), or before a host function runs (one launch's:
 * the mark is set again for the next launch queued, whose node cannot run before the host function
 * returns when it is in the same stream). */
void cuwire_graph_copies_back(int caught_up)
{
    if (!__atomic_load_n(&standins, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&lock);
    for (struct standin *s = standins; s; s = s->next) {
        if (s->to_device || !s->launches)
            continue;
        if (written(s)) {
            copy_rows(s, s->program, s->shared);
            s->launches = caught_up ? 0 : s->launches - 1;
            if (s->launches)
                set_mark(s);
        } else if (caught_up)
            s->launches = 0; /* (a launch that failed: the program's bytes stay as they were) */
    }
    pthread_mutex_unlock(&lock);
}

/* The host has caught up with the GPU (client_stubs.c, after a call annotated `synchronizes`). */
void cuwire_synced(void)
{
    cuwire_graph_copies_back(1);
    cuwire_user_objects_synced();
    cuwire_managed_synced();
}

/* Who holds a graph's stand-ins (and its user objects, user_objects.c): after calls that make a graph or
 * executable graph from another. */
static void shared_with(uint64_t from, uint64_t to)
{
    if (!__atomic_load_n(&standins, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&lock);
    share(from, to);
    pthread_mutex_unlock(&lock);
}

void cuwire_after_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    (void)flags;
    shared_with((uint64_t)(uintptr_t)graph, (uint64_t)(uintptr_t)*exec);
    cuwire_user_objects_share((uint64_t)(uintptr_t)graph, (uint64_t)(uintptr_t)*exec);
    cuwire_kernel_nodes_instantiated((uint64_t)(uintptr_t)graph, (uint64_t)(uintptr_t)*exec);
}

void cuwire_after_graph_clone(CUgraph *clone, CUgraph original)
{
    shared_with((uint64_t)(uintptr_t)original, (uint64_t)(uintptr_t)*clone);
    cuwire_user_objects_share((uint64_t)(uintptr_t)original, (uint64_t)(uintptr_t)*clone);
}

void cuwire_after_child_graph_node(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                                   CUgraph child)
{
    (void)node, (void)deps, (void)n;
    shared_with((uint64_t)(uintptr_t)child, (uint64_t)(uintptr_t)graph);
    cuwire_user_objects_share((uint64_t)(uintptr_t)child, (uint64_t)(uintptr_t)graph);
}

void cuwire_after_exec_child_graph_set(CUgraphExec exec, CUgraphNode node, CUgraph child)
{
    (void)node;
    shared_with((uint64_t)(uintptr_t)child, (uint64_t)(uintptr_t)exec);
}

void cuwire_after_graph_exec_update(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info)
{
    (void)info;
    shared_with((uint64_t)(uintptr_t)graph, (uint64_t)(uintptr_t)exec);
    cuwire_kernel_nodes_updated((uint64_t)(uintptr_t)graph, (uint64_t)(uintptr_t)exec);
}

void cuwire_after_graph_destroy(CUgraph graph)
{
    release((uint64_t)(uintptr_t)graph);
    cuwire_user_objects_release((uint64_t)(uintptr_t)graph, 0);
    cuwire_kernel_nodes_gone((uint64_t)(uintptr_t)graph);
}

void cuwire_after_graph_exec_destroy(CUgraphExec exec)
{
    release((uint64_t)(uintptr_t)exec);
    cuwire_user_objects_release((uint64_t)(uintptr_t)exec, 1);
    cuwire_kernel_nodes_gone((uint64_t)(uintptr_t)exec);
}
