/* cuwire client: kernel nodes' parameter sets in executable graphs, queued when they cannot fail
 * (kernel_nodes.c). */
#ifndef CUWIRE_KERNEL_NODES_H
#define CUWIRE_KERNEL_NODES_H
#include "python.h"
#include <stdint.h>

/* A kernel node the program added or set (client/graphs.py, once the server said yes): in graph `owner`
 * (0: the graph that holds the node), or in executable graph `owner` with in_exec; its kernel (the server's
 * handle), block and shared memory. */
CW_FROM_PYTHON void cuwire_kernel_node_noted(uint64_t owner, int in_exec, uint64_t node, uint64_t kernel,
                                             const uint32_t *block, uint32_t shared);
/* An executable graph made, or updated, from a graph (graph_copies.c's `after` hooks). */
void cuwire_kernel_nodes_instantiated(uint64_t graph, uint64_t exec);
void cuwire_kernel_nodes_updated(uint64_t graph, uint64_t exec);
/* A graph or executable graph destroyed. */
void cuwire_kernel_nodes_gone(uint64_t owner);
/* What the client knows of node in executable graph `exec` (0), or -1. */
int cuwire_kernel_node_of(uint64_t exec, uint64_t node, uint64_t *kernel, uint32_t *block, uint32_t *shared);

#endif
