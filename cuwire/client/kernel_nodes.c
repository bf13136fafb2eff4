/* cuwire client: the kernel nodes the client knows, for a kernel node's parameters set in an executable
 * graph, queued when the set cannot fail (launches.c, cuwire_fast_exec_kernel_node_set).
 *
 * XLA updates its command buffers (CUDA graphs) at every run whose buffers moved: a
 * cuGraphExecKernelNodeSetParams for each of their kernel nodes, one round trip each (661 in the JAX test
 * programs). The driver refuses such a set for a node that is not a kernel node of the graph the
 * executable graph was made from, or a function it may not change to; it takes new parameters and a
 * new grid. So the client keeps, for the kernel nodes it added (client/graphs.py) and for the executable
 * graphs made from their graphs (instantiated or updated), each node's kernel, block and shared memory;
 * a set that changes only the parameters and the grid (within the device's limits) of such a node is
 * queued as record KernelNodeSet (server/records.c), answered CUDA_SUCCESS. Anything else goes to the
 * server and gets its answer there. This file keeps the table; it calls no other.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "kernel_nodes.h"

struct node {
    uint64_t owner; /* the graph or executable graph; 0: empty, GONE: forgotten */
    uint64_t graph; /* the graph the node is of (an executable graph's: the one it was made from) */
    uint64_t node;
    uint64_t kernel; /* the server's handle of its kernel (cuwire_pack_params) */
    uint32_t block[3];
    uint32_t shared;
    int in_exec; /* owner is an executable graph */
};
#define GONE UINT64_MAX
#define MOST (1u << 16) /* nodes kept; past that, sets wait as before */

static struct node *nodes;
static unsigned cap, used; /* used: slots not empty, forgotten ones too */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot_of(uint64_t owner, uint64_t node, unsigned n)
{
    return (unsigned)(((owner * 0x9e3779b97f4a7c15ull) ^ node) * 0xff51afd7ed558ccdull >> 40) & (n - 1);
}

/* The entry of (owner, node), or NULL. Lock held. */
static struct node *find(uint64_t owner, uint64_t node)
{
    for (unsigned i = cap ? slot_of(owner, node, cap) : 0, n = 0; n < cap && nodes[i].owner;
         i = (i + 1) & (cap - 1), n++)
        if (nodes[i].owner == owner && nodes[i].node == node)
            return &nodes[i];
    return NULL;
}

/* Room for one more: the table made, or made again without forgotten entries, twice as large when the kept
 * ones fill half of it. 0, or -1 (full: not kept). Lock held. */
static int make_room(void)
{
    if ((used + 1) * 2 <= cap)
        return 0;
    unsigned kept = 0, n = cap ? cap : 1024;
    for (unsigned i = 0; i < cap; i++)
        kept += nodes[i].owner && nodes[i].owner != GONE;
    while ((kept + 1) * 2 > n && n < MOST)
        n *= 2;
    if ((kept + 1) * 2 > n)
        return -1;
    struct node *table = calloc(n, sizeof *table);
    if (!table)
        return -1;
    for (unsigned i = 0; i < cap; i++)
        if (nodes[i].owner && nodes[i].owner != GONE) {
            unsigned j = slot_of(nodes[i].owner, nodes[i].node, n);
            while (table[j].owner)
                j = (j + 1) & (n - 1);
            table[j] = nodes[i];
        }
    free(nodes);
    nodes = table;
    cap = n;
    used = kept;
    return 0;
}

/* Lock held. */
static void keep(struct node e)
{
    struct node *at = find(e.owner, e.node);
    if (!at && make_room() == 0) {
        unsigned j = slot_of(e.owner, e.node, cap);
        while (nodes[j].owner && nodes[j].owner != GONE)
            j = (j + 1) & (cap - 1);
        used += !nodes[j].owner;
        at = &nodes[j];
    }
    if (at)
        *at = e;
}

/* Lock held. */
static void forget_owner(uint64_t owner)
{
    for (unsigned i = 0; i < cap; i++)
        if (nodes[i].owner == owner)
            nodes[i].owner = GONE;
}

void cuwire_kernel_node_noted(uint64_t owner, int in_exec, uint64_t node, uint64_t kernel, const uint32_t *block,
                              uint32_t shared)
{
    pthread_mutex_lock(&lock);
    if (!owner) /* a set in a graph: the graph that holds the node */
        for (unsigned i = 0; i < cap && !owner; i++)
            if (nodes[i].owner && nodes[i].owner != GONE && !nodes[i].in_exec && nodes[i].node == node)
                owner = nodes[i].owner;
    struct node *known = owner && in_exec ? find(owner, node) : NULL; /* (an executable graph's: its graph) */
    uint64_t graph = in_exec ? (known ? known->graph : 0) : owner;
    if (owner && graph)
        keep((struct node){owner, graph, node, kernel, {block[0], block[1], block[2]}, shared, in_exec});
    pthread_mutex_unlock(&lock);
}

/* Lock held. The graph's kernel nodes, as executable graph exec's (gathered first: keeping one may make
 * the table again). */
static void copy_nodes(uint64_t graph, uint64_t exec)
{
    unsigned n = 0;
    for (unsigned i = 0; i < cap; i++)
        n += nodes[i].owner == graph && !nodes[i].in_exec;
    struct node *copies = n ? malloc(n * sizeof *copies) : NULL;
    if (!copies)
        return; /* (none, or no memory: the sets wait, as before) */
    n = 0;
    for (unsigned i = 0; i < cap; i++)
        if (nodes[i].owner == graph && !nodes[i].in_exec) {
            copies[n] = nodes[i];
            copies[n].owner = exec;
            copies[n++].in_exec = 1;
        }
    for (unsigned k = 0; k < n; k++)
        keep(copies[k]);
    free(copies);
}

void cuwire_kernel_nodes_instantiated(uint64_t graph, uint64_t exec)
{
    pthread_mutex_lock(&lock);
    forget_owner(exec);
    copy_nodes(graph, exec);
    pthread_mutex_unlock(&lock);
}

/* cuGraphExecUpdate: the executable graph takes the parameters of `graph`'s nodes. From the graph it was
 * made from, its nodes are that graph's as they are now; from another, its sets name the nodes of its own
 * graph still, whose parameters the client no longer knows: forgotten (they wait for the server). */
void cuwire_kernel_nodes_updated(uint64_t graph, uint64_t exec)
{
    pthread_mutex_lock(&lock);
    uint64_t from = 0;
    for (unsigned i = 0; i < cap && !from; i++)
        if (nodes[i].owner == exec)
            from = nodes[i].graph;
    forget_owner(exec);
    if (from == graph)
        copy_nodes(graph, exec);
    pthread_mutex_unlock(&lock);
}

/* A graph or executable graph destroyed: its nodes, and a graph's nodes in the executable graphs made from
 * it (a node of a destroyed graph is no handle to set). */
void cuwire_kernel_nodes_gone(uint64_t owner)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < cap; i++)
        if (nodes[i].owner == owner || (nodes[i].owner && nodes[i].owner != GONE && nodes[i].graph == owner))
            nodes[i].owner = GONE;
    pthread_mutex_unlock(&lock);
}

/* cuGraphDestroyNode (`after`): the node is no longer its graph's, nor settable in the executable graphs. */
void cuwire_after_graph_destroy_node(CUgraphNode node)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < cap; i++)
        if (nodes[i].owner && nodes[i].owner != GONE && nodes[i].node == (uint64_t)(uintptr_t)node)
            nodes[i].owner = GONE;
    pthread_mutex_unlock(&lock);
}

/* The kernel, block and shared memory of node in executable graph `exec`, as the client knows them: 0, or -1
 * when it does not. */
int cuwire_kernel_node_of(uint64_t exec, uint64_t node, uint64_t *kernel, uint32_t *block, uint32_t *shared)
{
    pthread_mutex_lock(&lock);
    struct node *e = find(exec, node);
    if (e) {
        *kernel = e->kernel;
        memcpy(block, e->block, sizeof e->block);
        *shared = e->shared;
    }
    pthread_mutex_unlock(&lock);
    return e ? 0 : -1;
}
