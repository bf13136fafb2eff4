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
#include "table.h"

struct node {
    uint64_t owner; /* the graph or executable graph (with node: the key, table.h) */
    uint64_t node;
    uint64_t graph;  /* the graph the node is of: owner itself, or the one the executable graph was made from */
    uint64_t kernel; /* the server's handle of its kernel (as its lookup gave it) */
    uint32_t block[3];
    uint32_t shared;
};
static cw_table nodes = CW_TABLE(struct node, 2, 1u << 17); /* past that, sets wait as before */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Lock held. */
static void keep(const struct node *n)
{
    struct node *at = cw_table_put(&nodes, &n->owner);
    if (at)
        *at = *n;
}

/* Lock held: every entry for which `which` holds removed. */
#define REMOVE_WHERE(which)                                                                                  \
    for (unsigned i_ = 0; i_ < nodes.cap; i_++) {                                                           \
        struct node *e = cw_table_at(&nodes, i_);                                                            \
        if (e && (which))                                                                                    \
            cw_table_remove(e);                                                                              \
    }

void cuwire_kernel_node_noted(uint64_t owner, int in_exec, uint64_t node, uint64_t kernel, const uint32_t *block,
                              uint32_t shared)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < nodes.cap && !owner; i++) { /* a set in a graph: the graph that holds the node */
        struct node *e = cw_table_at(&nodes, i);
        if (e && e->owner == e->graph && e->node == node)
            owner = e->owner;
    }
    uint64_t key[2] = {owner, node};
    struct node *known = owner && in_exec ? cw_table_find(&nodes, key) : NULL; /* (an executable graph's) */
    uint64_t graph = in_exec ? (known ? known->graph : 0) : owner;
    if (owner && graph)
        keep(&(struct node){owner, node, graph, kernel, {block[0], block[1], block[2]}, shared});
    pthread_mutex_unlock(&lock);
}

/* Lock held. The graph's kernel nodes, as executable graph exec's (gathered first: keeping one may make
 * the table again). */
static void copy_nodes(uint64_t graph, uint64_t exec)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nodes.cap; i++) {
        struct node *e = cw_table_at(&nodes, i);
        n += e && e->owner == graph && e->graph == graph;
    }
    struct node *copies = n ? malloc(n * sizeof *copies) : NULL;
    if (!copies)
        return; /* (none, or no memory: the sets wait, as before) */
    n = 0;
    for (unsigned i = 0; i < nodes.cap; i++) {
        struct node *e = cw_table_at(&nodes, i);
        if (e && e->owner == graph && e->graph == graph) {
            copies[n] = *e;
            copies[n++].owner = exec;
        }
    }
    for (unsigned k = 0; k < n; k++)
        keep(&copies[k]);
    free(copies);
}

void cuwire_kernel_nodes_instantiated(uint64_t graph, uint64_t exec)
{
    pthread_mutex_lock(&lock);
    REMOVE_WHERE(e->owner == exec)
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
    for (unsigned i = 0; i < nodes.cap && !from; i++) {
        struct node *e = cw_table_at(&nodes, i);
        if (e && e->owner == exec)
            from = e->graph;
    }
    REMOVE_WHERE(e->owner == exec)
    if (from == graph)
        copy_nodes(graph, exec);
    pthread_mutex_unlock(&lock);
}

/* A graph or executable graph destroyed: its nodes, and a graph's nodes in the executable graphs made from
 * it (a node of a destroyed graph is no handle to set). */
void cuwire_kernel_nodes_gone(uint64_t owner)
{
    pthread_mutex_lock(&lock);
    REMOVE_WHERE(e->owner == owner || e->graph == owner)
    pthread_mutex_unlock(&lock);
}

/* cuGraphDestroyNode (`after`): the node is no longer its graph's, nor settable in the executable graphs. */
void cuwire_after_graph_destroy_node(CUgraphNode node)
{
    pthread_mutex_lock(&lock);
    REMOVE_WHERE(e->node == (uint64_t)(uintptr_t)node)
    pthread_mutex_unlock(&lock);
}

/* The kernel, block and shared memory of node in executable graph `exec`, as the client knows them: 0, or -1
 * when it does not. */
int cuwire_kernel_node_of(uint64_t exec, uint64_t node, uint64_t *kernel, uint32_t *block, uint32_t *shared)
{
    uint64_t key[2] = {exec, node};
    pthread_mutex_lock(&lock);
    struct node *e = cw_table_find(&nodes, key);
    if (e) {
        *kernel = e->kernel;
        memcpy(block, e->block, sizeof e->block);
        *shared = e->shared;
    }
    pthread_mutex_unlock(&lock);
    return e ? 0 : -1;
}
