/* cuwire client: graph node calls that are other graph node calls in another form.
 *
 * cuGraphAddNode takes every kind of node in one struct (CUgraphNodeParams). The kinds that have a call of
 * their own (kernel, memcpy, memset, host, child graph, batch memory operations) go through that call, which
 * knows how to carry the kind over the wire (a kernel's parameters, a host function kept in the client,
 * an array of operations); the others travel as
 * cuwire.GraphNode (client/graphs.py). The reverse holds for memory nodes: cuGraphAddMemAllocNode and
 * cuGraphAddMemFreeNode are cuGraphAddNode of those kinds. cuGraphNodeSetParams and cuGraphExecNodeSetParams
 * go through their kind's own SetParams call likewise.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"

/* Edge data of the default kind on every edge is the same as none. */
static int default_edges(const CUgraphEdgeData *data, size_t n)
{
    static const CUgraphEdgeData none;
    for (size_t i = 0; data && i < n; i++)
        if (memcmp(&data[i], &none, sizeof none) != 0)
            return 0;
    return 1;
}

static CUresult add_by_kind(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                            CUgraphNodeParams *p);

/* cuGraphAddNode's fast path: the node through its kind's own call, or -1 (cuwire.GraphNode). Edges that
 * carry data (XLA's programmatic launches between kernel nodes, say) are added after the node, with their
 * data (cuGraphAddDependencies_v2): the same graph, and the kind's call needs no edge data. */
int cuwire_graph_node_by_kind(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                              const CUgraphEdgeData *edges, size_t n, CUgraphNodeParams *p)
{
    if (!p)
        return -1;
    if (default_edges(edges, n))
        return add_by_kind(node, graph, deps, n, p);
    if (!node || (n && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    int status = add_by_kind(node, graph, NULL, 0, p);
    if (status != CUDA_SUCCESS)
        return status; /* (-1 too: the kind travels as cuwire.GraphNode, edge data and all) */
    CUgraphNode *to = malloc(n * sizeof *to);
    status = to ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; to && i < n; i++)
        to[i] = *node;
    if (to)
        status = cuGraphAddDependencies_v2(graph, deps, to, edges, n);
    free(to);
    if (status != CUDA_SUCCESS)
        cuGraphDestroyNode(*node); /* as if never made: the driver makes no node when its edges are refused */
    return status;
}

static CUresult add_by_kind(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                            CUgraphNodeParams *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k;
        memcpy(&k, &p->kernel, sizeof k); /* (v3 and v2 have one layout) */
        return cuGraphAddKernelNode_v2(node, graph, deps, n, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return cuGraphAddMemcpyNode(node, graph, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS v1 = {m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
        return cuGraphAddMemsetNode(node, graph, deps, n, &v1, m->ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
        return cuGraphAddHostNode(node, graph, deps, n, &h);
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        CUDA_BATCH_MEM_OP_NODE_PARAMS b;
        memcpy(&b, &p->memOp, sizeof b); /* (v2 and v1 have one layout) */
        return cuGraphAddBatchMemOpNode(node, graph, deps, n, &b);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return -1; /* (moving a graph into its node: cuwire.GraphNode says it is not served) */
        return cuGraphAddChildGraphNode(node, graph, deps, n, p->graph.graph);
    default:
        return -1;
    }
}

/* cuGraphAddNode of CUDA 12.2 and 12.3's headers: no edge data. */
CUresult cuwire_local_cuGraphAddNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                                     CUgraphNodeParams *params)
{
    return cuGraphAddNode_v2(node, graph, deps, NULL, n, params);
}

CUresult cuwire_local_cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                                             CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    memcpy(&p.alloc, params, sizeof *params); /* (v1 and v2 have one layout) */
    CUresult status = cuGraphAddNode_v2(node, graph, deps, NULL, n, &p);
    if (status == CUDA_SUCCESS)
        params->dptr = p.alloc.dptr;
    return status;
}

CUresult cuwire_local_cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t n,
                                            CUdeviceptr dptr)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    p.free.dptr = dptr;
    return cuGraphAddNode_v2(node, graph, deps, NULL, n, &p);
}

/* cuGraphNodeSetParams and cuGraphExecNodeSetParams (exec NULL: the graph's node): through the kind's own
 * call; a kind with none served says so by name and is refused. */
static CUresult set_by_kind(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *p, const char *name)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k;
        memcpy(&k, &p->kernel, sizeof k); /* (v3 and v2 have one layout) */
        return exec ? cuGraphExecKernelNodeSetParams_v2(exec, node, &k) : cuGraphKernelNodeSetParams_v2(node, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return exec ? cuGraphExecMemcpyNodeSetParams(exec, node, &p->memcpy.copyParams, p->memcpy.copyCtx)
                    : cuGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS v1 = {m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
        return exec ? cuGraphExecMemsetNodeSetParams(exec, node, &v1, m->ctx) : cuGraphMemsetNodeSetParams(node, &v1);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
        return exec ? cuGraphExecHostNodeSetParams(exec, node, &h) : cuGraphHostNodeSetParams(node, &h);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return exec ? cuGraphExecEventRecordNodeSetEvent(exec, node, p->eventRecord.event)
                    : cuGraphEventRecordNodeSetEvent(node, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return exec ? cuGraphExecEventWaitNodeSetEvent(exec, node, p->eventWait.event)
                    : cuGraphEventWaitNodeSetEvent(node, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        CUDA_BATCH_MEM_OP_NODE_PARAMS b;
        memcpy(&b, &p->memOp, sizeof b); /* (v2 and v1 have one layout) */
        return exec ? cuGraphExecBatchMemOpNodeSetParams(exec, node, &b) : cuGraphBatchMemOpNodeSetParams(node, &b);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (exec)
            return cuGraphExecChildGraphNodeSetParams(exec, node, p->graph.graph);
        break;
    default:
        break;
    }
    cuwire_say_once_per_name("cuwire: not supported: setting the parameters of this kind of node (served: kernel, "
                             "memcpy, memset, host, event record and wait, batch memory operation nodes, and child "
                             "graph nodes in an executable graph); refused:", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuwire_local_cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams *params)
{
    return set_by_kind(NULL, node, params, "cuGraphNodeSetParams");
}

CUresult cuwire_local_cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *params)
{
    return set_by_kind(exec, node, params, "cuGraphExecNodeSetParams");
}
