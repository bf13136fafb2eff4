"""Server halves of graphs built node by node: hand-written because every graph, node, event, kernel and
memory range a node names must be the session's own, which the annotations' roles cannot say of an
array of nodes or of a struct's pointers.

Nodes are handles the session owns (CUgraphNode); they go with their graph, so the session never destroys
one itself; neither does it destroy a conditional node's body graphs, which go with the node. A memory
allocation node's address range is the session's from the node's creation (other nodes may use it).

A kernel node comes as cuwire.KernelNode: the kernel as the client's lookup named it and its parameters laid
out at the offsets that lookup described (custom._describe), as a queued launch's. A memcpy node may name
host memory only where the client's page-locked allocations are shared with this server (on the same host;
the client puts stand-ins there for pageable memory, client/graph_copies.c): other host memory is the
program's, which a graph running here cannot reach; it is refused by name.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.server import memops
from cuwire.server.errors import INVALID_HANDLE, INVALID_VALUE, NOT_SUPPORTED, CudaFail, WireError

GRAPH, NODE, EXEC, EVENT, CONTEXT, ARRAY = ("CUgraph_st", "CUgraphNode_st", "CUgraphExec_st", "CUevent_st", "CUctx_st",
                                            "CUarray_st")
HOST, DEVICE, ARRAY_MEMORY, UNIFIED = (cu.CU_MEMORYTYPE_HOST, cu.CU_MEMORYTYPE_DEVICE, cu.CU_MEMORYTYPE_ARRAY,
                                       cu.CU_MEMORYTYPE_UNIFIED)
ADD, SET, EXEC_SET, GET = 0, 1, 2, 3  # KernelNode_Args.action, BatchMemOpNode_Args.action
EMPTY, WAIT_EVENT, EVENT_RECORD = (cu.CU_GRAPH_NODE_TYPE_EMPTY, cu.CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                                   cu.CU_GRAPH_NODE_TYPE_EVENT_RECORD)
MEM_ALLOC, MEM_FREE, CONDITIONAL = (cu.CU_GRAPH_NODE_TYPE_MEM_ALLOC, cu.CU_GRAPH_NODE_TYPE_MEM_FREE,
                                    cu.CU_GRAPH_NODE_TYPE_CONDITIONAL)
MAX_ACCESS_DESCS = 64  # a memory allocation node's access descriptors: one a device, and then some
NODE_KINDS = {EMPTY: "empty", WAIT_EVENT: "event wait", EVENT_RECORD: "event record", MEM_ALLOC: "memory allocation",
              MEM_FREE: "memory free", CONDITIONAL: "conditional"}
MAX_BODIES = 1 << 16  # a switch node's body graphs, at most


@dataclass
class Parts:
    """What a session's graphs hold beside nodes: conditional handles, and the graphs the session may build
    but not destroy (conditional bodies, child nodes' graphs)."""

    conditionals: set[int] = field(default_factory=set)
    bodies: set[int] = field(default_factory=set)


def _parts(s) -> Parts:
    if s.graph_parts is None:
        s.graph_parts = Parts()
    return s.graph_parts


def close(s) -> None:
    """Bodies go with their conditional nodes' graphs: the session's end must not destroy them itself."""
    if s.graph_parts is not None:
        for body in s.graph_parts.bodies:
            s.disowns_handle(GRAPH, body)
        s.graph_parts = None


def _nodes(s, data: bytes, count: int):
    """An array of this session's nodes from the wire (count of them, 8 bytes each)."""
    if len(data) != 8 * count:
        raise WireError(f"{count} nodes in {len(data)} bytes")
    return s.handles_in(NODE, "CUgraphNode", data, len(data))


def _new_node(s, out) -> int:
    """The node CUDA put in `out` (a CUgraphNode *), now the session's."""
    node = int(s.ffi.cast("uintptr_t", out[0]))
    s.owns_handle(NODE, node)
    return node


def _added(s, add, graph: int, dependencies: bytes, count: int, *params) -> tuple[int, int]:
    """add(out, graph, dependencies, count, *params) for a graph and dependencies of the session's: (its
    status, the new node, now the session's too, or 0)."""
    out = s.ffi.new("CUgraphNode *")
    status = add(out, s.handle(GRAPH, "CUgraph", graph), _nodes(s, dependencies, count), count, *params)
    return status, _new_node(s, out) if status == 0 else 0


def _add_node(s, add, a, result, *params):
    """_added for a generated call's arguments (hGraph, dependencies, numDependencies) and result."""
    result.status, node = _added(s, add, a.hGraph, a.dependencies, a.numDependencies, *params)
    if node:
        result.phGraphNode = node
    return result


def _memset_params(s, data: bytes):
    """A memset node's parameters from the wire, checked: what it sets lies in the session's memory."""
    p = s.struct_in("CUDA_MEMSET_NODE_PARAMS", data)
    if p.elementSize not in (1, 2, 4) or p.height > 1 and p.width * p.elementSize > p.pitch:
        raise CudaFail(INVALID_VALUE, f"a memset node of {p.height} rows of {p.width} elements of {p.elementSize} "
                                      f"bytes, {p.pitch} bytes apart")
    if p.width and p.height:
        s.device(p.dst, p.pitch * (p.height - 1) + p.width * p.elementSize)
    return p


def cuGraphAddMemsetNode(s, a: pb.cuGraphAddMemsetNode_Args) -> pb.cuGraphAddMemsetNode_Result:
    return _add_node(s, s.lib.cuGraphAddMemsetNode, a, pb.cuGraphAddMemsetNode_Result(),
                     _memset_params(s, a.memsetParams), s.handle(CONTEXT, "CUcontext", a.ctx))


def cuGraphMemsetNodeSetParams(s, a: pb.cuGraphMemsetNodeSetParams_Args) -> pb.cuGraphMemsetNodeSetParams_Result:
    p = _memset_params(s, a.nodeParams)
    return pb.cuGraphMemsetNodeSetParams_Result(status=s.lib.cuGraphMemsetNodeSetParams(
        s.handle(NODE, "CUgraphNode", a.hNode), p))


def cuGraphExecMemsetNodeSetParams(s, a: pb.cuGraphExecMemsetNodeSetParams_Args
                                   ) -> pb.cuGraphExecMemsetNodeSetParams_Result:
    p = _memset_params(s, a.memsetParams)
    return pb.cuGraphExecMemsetNodeSetParams_Result(status=s.lib.cuGraphExecMemsetNodeSetParams(
        s.handle(EXEC, "CUgraphExec", a.hGraphExec), s.handle(NODE, "CUgraphNode", a.hNode), p,
        s.handle(CONTEXT, "CUcontext", a.ctx)))


def _copy_side(s, kind: int, device: int, host, array, x: int, y: int, z: int, pitch: int, rows: int, c):
    """One side of a memcpy node, checked: for host memory, where this server has it (or NULL)."""
    if kind == ARRAY_MEMORY:
        s.handle(ARRAY, "CUarray", int(s.ffi.cast("uintptr_t", array)))
    elif kind in (DEVICE, UNIFIED):
        s.pitched_device(device, x, y, z, pitch, rows, c.WidthInBytes, c.Height, c.Depth)
    elif kind == HOST:
        address = int(s.ffi.cast("uintptr_t", host))
        first = address + s.pitched_offset(x, y, z, pitch, rows, c.Depth)
        here = s.shared_host(first, s.pitched_length(pitch, rows, c.WidthInBytes, c.Height, c.Depth))
        if here is None:
            raise CudaFail(NOT_SUPPORTED, "a memcpy node with host memory the server cannot reach: a graph runs on "
                                          "the server, so its copies of host memory need a server on the "
                                          "program's host, sharing memory with it (CUWIRE_TRANSPORT=auto) "
                                          "(cuwire)")
        return s.ffi.cast("void *", address + here - first)
    else:
        raise CudaFail(INVALID_VALUE, f"memory type {kind}")
    return s.ffi.NULL


def _memcpy_params(s, data: bytes):
    """A memcpy node's CUDA_MEMCPY3D between the session's device memory, its arrays, and the client's
    page-locked memory that this server shares (its address here put in the node: the GPU reaches it as
    natively)."""
    c = s.struct_in("CUDA_MEMCPY3D", data)
    src = dst = s.ffi.NULL  # (host addresses are the client's: meaningless here unless shared)
    if c.WidthInBytes and c.Height and c.Depth:
        src = _copy_side(s, c.srcMemoryType, c.srcDevice, c.srcHost, c.srcArray, c.srcXInBytes, c.srcY, c.srcZ,
                         c.srcPitch, c.srcHeight, c)
        dst = _copy_side(s, c.dstMemoryType, c.dstDevice, c.dstHost, c.dstArray, c.dstXInBytes, c.dstY, c.dstZ,
                         c.dstPitch, c.dstHeight, c)
    c.srcHost, c.dstHost = src, dst
    return c


def cuGraphAddMemcpyNode(s, a: pb.cuGraphAddMemcpyNode_Args) -> pb.cuGraphAddMemcpyNode_Result:
    return _add_node(s, s.lib.cuGraphAddMemcpyNode, a, pb.cuGraphAddMemcpyNode_Result(),
                     _memcpy_params(s, a.copyParams), s.handle(CONTEXT, "CUcontext", a.ctx))


def cuGraphMemcpyNodeSetParams(s, a: pb.cuGraphMemcpyNodeSetParams_Args) -> pb.cuGraphMemcpyNodeSetParams_Result:
    return pb.cuGraphMemcpyNodeSetParams_Result(status=s.lib.cuGraphMemcpyNodeSetParams(
        s.handle(NODE, "CUgraphNode", a.hNode), _memcpy_params(s, a.nodeParams)))


def cuGraphExecMemcpyNodeSetParams(s, a: pb.cuGraphExecMemcpyNodeSetParams_Args
                                   ) -> pb.cuGraphExecMemcpyNodeSetParams_Result:
    return pb.cuGraphExecMemcpyNodeSetParams_Result(status=s.lib.cuGraphExecMemcpyNodeSetParams(
        s.handle(EXEC, "CUgraphExec", a.hGraphExec), s.handle(NODE, "CUgraphNode", a.hNode),
        _memcpy_params(s, a.copyParams), s.handle(CONTEXT, "CUcontext", a.ctx)))


def cuGraphMemcpyNodeGetParams(s, a: pb.cuGraphMemcpyNodeGetParams_Args) -> pb.cuGraphMemcpyNodeGetParams_Result:
    """A memcpy node's parameters, its host sides as the client has them (the server's address of the shared
    memory back to the client's)."""
    c = s.ffi.new("CUDA_MEMCPY3D *")
    r = pb.cuGraphMemcpyNodeGetParams_Result(status=s.lib.cuGraphMemcpyNodeGetParams(s.handle(NODE, "CUgraphNode",
                                                                                              a.hNode), c))
    if r.status == 0:
        if c.srcMemoryType == HOST and c.srcHost != s.ffi.NULL:
            c.srcHost = s.ffi.cast("void *", s.client_host(int(s.ffi.cast("uintptr_t", c.srcHost))))
        if c.dstMemoryType == HOST and c.dstHost != s.ffi.NULL:
            c.dstHost = s.ffi.cast("void *", s.client_host(int(s.ffi.cast("uintptr_t", c.dstHost))))
        r.nodeParams = s.take(c)
    return r


def cuGraphAddChildGraphNode(s, a: pb.cuGraphAddChildGraphNode_Args) -> pb.cuGraphAddChildGraphNode_Result:
    """A graph as its own child is refused: the driver, asked to clone a graph into itself, ended the session
    process (seen on an H200), and with sessions in threads (--isolation thread) every session with it."""
    if a.childGraph == a.hGraph:
        return pb.cuGraphAddChildGraphNode_Result(status=INVALID_VALUE)
    return _add_node(s, s.lib.cuGraphAddChildGraphNode, a, pb.cuGraphAddChildGraphNode_Result(),
                     s.handle(GRAPH, "CUgraph", a.childGraph))


def host_node(s, a: pb.HostNode_Args) -> pb.HostNode_Result:
    """cuwire.HostNode: a node that posts the client's host function `id` (through the shared memory, or
    over TCP on the session's host-function connection) at every launch, and waits until a thread of the
    client's ran it (server/records.c)."""
    ffi = s.ffi
    if a.action == pb.GET:  # the id the node posts: the client knows the function and argument under it
        params = ffi.new("CUDA_HOST_NODE_PARAMS *")
        status = s.lib.cuGraphHostNodeGetParams(s.handle(NODE, "CUgraphNode", a.node), params)
        if status != 0:
            return pb.HostNode_Result(status=status)
        host_id = s.records.host_node_id(int(ffi.cast("uintptr_t", params.userData)))
        if not host_id:
            raise CudaFail(INVALID_VALUE, f"node {a.node:#x} is not a host node of this session's")
        return pb.HostNode_Result(status=0, id=host_id)
    fn, arg = s.records.host_node(a.id)
    if not arg:
        raise CudaFail(NOT_SUPPORTED, "a graph host node needs shared memory with the client or its host-function "
                                      "connection")
    params = ffi.new("CUDA_HOST_NODE_PARAMS *")
    params.fn = ffi.cast("CUhostFn", fn)
    params.userData = ffi.cast("void *", arg)
    if a.action == pb.SET_IN_GRAPH:
        return pb.HostNode_Result(status=s.lib.cuGraphHostNodeSetParams(s.handle(NODE, "CUgraphNode", a.node), params))
    if a.action == pb.SET_IN_EXEC:
        return pb.HostNode_Result(status=s.lib.cuGraphExecHostNodeSetParams(
            s.handle(EXEC, "CUgraphExec", a.exec), s.handle(NODE, "CUgraphNode", a.node), params))
    status, node = _added(s, s.lib.cuGraphAddHostNode, a.graph, a.dependencies, len(a.dependencies) // 8, params)
    return pb.HostNode_Result(status=status, node=node)


def cuGraphConditionalHandleCreate(s, a: pb.cuGraphConditionalHandleCreate_Args
                                   ) -> pb.cuGraphConditionalHandleCreate_Result:
    out = s.ffi.new("CUgraphConditionalHandle *")
    r = pb.cuGraphConditionalHandleCreate_Result(status=s.lib.cuGraphConditionalHandleCreate(
        out, s.handle(GRAPH, "CUgraph", a.hGraph), s.handle(CONTEXT, "CUcontext", a.ctx), a.defaultLaunchValue,
        a.flags))
    if r.status == 0:
        r.pHandle_out = out[0]
        _parts(s).conditionals.add(r.pHandle_out)
    return r


CAPTURE_ACTIVE = cu.CU_STREAM_CAPTURE_STATUS_ACTIVE


def capture_info(s, a: pb.CaptureInfo_Args) -> pb.CaptureInfo_Result:
    """cuwire.CaptureInfo (cuStreamGetCaptureInfo with the graph or dependencies asked for): the capture's
    graph is the session's to build (nodes added to it by hand, cuStreamUpdateCaptureDependencies), never
    to destroy itself, as a conditional node's bodies (it goes with the capture, or with the program's
    cuGraphDestroy once the capture gave it); its last nodes become the session's."""
    ffi = s.ffi
    status, graph = ffi.new("CUstreamCaptureStatus *"), ffi.new("CUgraph *")
    deps, count = ffi.new("const CUgraphNode **"), ffi.new("size_t *")
    edges = ffi.new("const CUgraphEdgeData **") if a.edge_data else ffi.NULL
    r = pb.CaptureInfo_Result(status=s.lib.cuStreamGetCaptureInfo_v3(
        s.handle("CUstream_st", "CUstream", a.stream), status, ffi.NULL, graph, deps, edges, count))
    if r.status != 0:
        return r
    r.capture_status = status[0]
    if status[0] != CAPTURE_ACTIVE:
        return r
    r.graph = int(ffi.cast("uintptr_t", graph[0]))
    s.owns_handle(GRAPH, r.graph)
    _parts(s).bodies.add(r.graph)
    nodes = [int(ffi.cast("uintptr_t", deps[0][i])) for i in range(count[0])]
    for node in nodes:
        s.owns_handle(NODE, node)
    r.dependencies = b"".join(v.to_bytes(8, "little") for v in nodes)
    if a.edge_data and edges[0] != ffi.NULL:
        r.edge_data = bytes(ffi.buffer(edges[0], 8 * count[0]))
    return r


def cuGraphChildGraphNodeGetGraph(s, a: pb.cuGraphChildGraphNodeGetGraph_Args
                                  ) -> pb.cuGraphChildGraphNodeGetGraph_Result:
    """The graph a child node holds (its copy of the graph it was made from): the session's to change, but it
    goes with the node, like a conditional node's bodies."""
    out = s.ffi.new("CUgraph *")
    r = pb.cuGraphChildGraphNodeGetGraph_Result(
        status=s.lib.cuGraphChildGraphNodeGetGraph(s.handle(NODE, "CUgraphNode", a.hNode), out))
    if r.status == 0:
        r.phGraph = int(s.ffi.cast("uintptr_t", out[0]))
        s.owns_handle(GRAPH, r.phGraph)
        _parts(s).bodies.add(r.phGraph)
    return r


def graph_node(s, a: pb.GraphNode_Args) -> pb.GraphNode_Result:
    """cuwire.GraphNode (cuGraphAddNode): a node whose parameters name only the session's own events, memory,
    contexts and conditional handles; the pointers in them are replaced with the server's."""
    ffi, parts = s.ffi, _parts(s)
    if len(a.params) != ffi.sizeof("CUgraphNodeParams"):
        raise WireError(f"node parameters of {len(a.params)} bytes")
    p = ffi.new("CUgraphNodeParams *")
    ffi.memmove(p, a.params, len(a.params))
    keep = []  # what the parameters point to, alive for the call
    if p.type in (WAIT_EVENT, EVENT_RECORD):
        event = p.eventWait.event if p.type == WAIT_EVENT else p.eventRecord.event
        s.handle(EVENT, "CUevent", int(ffi.cast("uintptr_t", event)))
    elif p.type == MEM_ALLOC:
        alloc = p.alloc
        count = alloc.accessDescCount
        if len(a.access) != count * ffi.sizeof("CUmemAccessDesc"):
            raise WireError(f"{count} access descriptors in {len(a.access)} bytes")
        descs = ffi.new("CUmemAccessDesc[]", count) if count else ffi.NULL
        if count:
            ffi.memmove(descs, a.access, len(a.access))
        keep.append(descs)
        alloc.accessDescs = descs
        alloc.poolProps.win32SecurityAttributes = ffi.NULL
        s.reserve(alloc.bytesize)
    elif p.type == MEM_FREE:
        s.device(p.free.dptr, 1)
    elif p.type == CONDITIONAL:
        c = p.conditional
        if c.handle not in parts.conditionals:
            raise CudaFail(INVALID_VALUE, f"conditional handle {c.handle:#x} was not created by this session")
        if not 0 < c.size <= MAX_BODIES:
            raise CudaFail(INVALID_VALUE, f"a conditional node of {c.size} bodies")
        s.handle(CONTEXT, "CUcontext", int(ffi.cast("uintptr_t", c.ctx)))
        c.phGraph_out = ffi.NULL  # CUDA fills it with its own array
    elif p.type != EMPTY:
        raise CudaFail(NOT_SUPPORTED, f"cuGraphAddNode of a node of type {p.type}: served for "
                                      f"{', '.join(NODE_KINDS.values())} nodes; add the others with their own "
                                      "cuGraphAdd*Node (cuwire)")
    n = len(a.dependencies) // 8
    data = ffi.NULL
    if a.edge_data:
        if len(a.dependency_data) != 8 * n:
            raise WireError(f"edge data of {len(a.dependency_data)} bytes for {n} dependencies")
        data = ffi.new("CUgraphEdgeData[]", n or 1)
        ffi.memmove(data, a.dependency_data, len(a.dependency_data))
    out = ffi.new("CUgraphNode *")
    r = pb.GraphNode_Result(status=s.lib.cuGraphAddNode_v2(out, s.handle(GRAPH, "CUgraph", a.graph),
                                                           _nodes(s, a.dependencies, n), data, n, p))
    if r.status != 0:
        return r
    r.node = _new_node(s, out)
    if p.type == MEM_ALLOC:
        r.dptr = p.alloc.dptr
        s.owns(r.dptr, p.alloc.bytesize)  # (counted against the budget; its graph frees it, not the session)
        s.graph_memory[r.dptr] = p.alloc.bytesize
    elif p.type == CONDITIONAL:
        bodies = [int(ffi.cast("uintptr_t", p.conditional.phGraph_out[i])) for i in range(p.conditional.size)]
        for body in bodies:
            s.owns_handle(GRAPH, body)
            parts.bodies.add(body)
        r.bodies = b"".join(b.to_bytes(8, "little") for b in bodies)
    return r


def alloc_node_params(s, a: pb.AllocNodeParams_Args) -> pb.AllocNodeParams_Result:
    """cuwire.AllocNodeParams (cuGraphMemAllocNodeGetParams): the parameters, their access descriptors beside
    them; the pointers in them, the server's, go as NULL."""
    ffi = s.ffi
    p = ffi.new("CUDA_MEM_ALLOC_NODE_PARAMS *")
    r = pb.AllocNodeParams_Result(status=s.lib.cuGraphMemAllocNodeGetParams(s.handle(NODE, "CUgraphNode", a.node), p))
    if r.status != 0:
        return r
    count = p.accessDescCount
    if count > MAX_ACCESS_DESCS:
        raise CudaFail(INVALID_VALUE, f"a memory allocation node with {count} access descriptors")
    r.access = bytes(ffi.buffer(p.accessDescs, count * ffi.sizeof("CUmemAccessDesc"))) if count else b""
    p.accessDescs = ffi.NULL
    p.poolProps.win32SecurityAttributes = ffi.NULL
    r.params = bytes(ffi.buffer(p))
    return r


def _query(s, a: pb.GraphNodes_Args):
    """The driver call that answers a's query: call(nodes, to, edge_data, count) with NULL arrays for the
    total alone."""
    lib, what = s.lib, a.what
    if what in (pb.NODES, pb.ROOTS, pb.EDGES):
        graph = s.handle(GRAPH, "CUgraph", a.graph)
        if what == pb.NODES:
            return lambda nodes, to, data, count: lib.cuGraphGetNodes(graph, nodes, count)
        if what == pb.ROOTS:
            return lambda nodes, to, data, count: lib.cuGraphGetRootNodes(graph, nodes, count)
        return lambda nodes, to, data, count: lib.cuGraphGetEdges_v2(graph, nodes, to, data, count)
    node = s.handle(NODE, "CUgraphNode", a.node)
    if what == pb.DEPENDENCIES:
        return lambda nodes, to, data, count: lib.cuGraphNodeGetDependencies_v2(node, nodes, data, count)
    if what == pb.DEPENDENTS:
        return lambda nodes, to, data, count: lib.cuGraphNodeGetDependentNodes_v2(node, nodes, data, count)
    raise WireError(f"graph query {what}")


def graph_nodes(s, a: pb.GraphNodes_Args) -> pb.GraphNodes_Result:
    """cuwire.GraphNodes: a graph's nodes, roots or edges, or a node's dependencies or dependents; the nodes
    named become the session's (a captured graph's were never named to it)."""
    ffi, call = s.ffi, _query(s, a)
    total = ffi.new("size_t *")
    r = pb.GraphNodes_Result(status=call(ffi.NULL, ffi.NULL, ffi.NULL, total))
    if r.status != 0:
        return r
    r.total = total[0]
    if not (a.capacity and total[0]):
        return r
    count = ffi.new("size_t *", min(a.capacity, total[0]))
    nodes, to = ffi.new("CUgraphNode[]", count[0]), ffi.new("CUgraphNode[]", count[0])
    data = ffi.new("CUgraphEdgeData[]", count[0]) if a.edge_data else ffi.NULL
    r.status = call(nodes, to if a.what == pb.EDGES else ffi.NULL, data, count)
    if r.status != 0:
        return r
    for array, name in ((nodes, "nodes"), *(((to, "to"),) if a.what == pb.EDGES else ())):
        values = [int(ffi.cast("uintptr_t", array[i])) for i in range(count[0])]
        for v in values:
            s.owns_handle(NODE, v)
        setattr(r, name, b"".join(v.to_bytes(8, "little") for v in values))
    if a.edge_data:
        r.edge_data = bytes(ffi.buffer(data, 8 * count[0]))
    return r


MAX_DOT = 256 << 20  # the largest drawing of a graph the server sends back


def graph_dot(s, a: pb.GraphDot_Args) -> pb.GraphDot_Result:
    """cuwire.GraphDot (cuGraphDebugDotPrint): the driver draws into a file of a folder of the server's own,
    whose bytes go back (the program's path names a file on the client's side)."""
    graph = s.handle(GRAPH, "CUgraph", a.graph)
    with tempfile.TemporaryDirectory(prefix="cuwire-dot-") as folder:
        path = Path(folder) / "graph.dot"
        r = pb.GraphDot_Result(status=s.lib.cuGraphDebugDotPrint(graph, str(path).encode(), a.flags))
        if r.status == 0:
            if path.stat().st_size > MAX_DOT:
                raise CudaFail(NOT_SUPPORTED, f"a graph's drawing of {path.stat().st_size} bytes (cuwire sends "
                                              f"{MAX_DOT} at most)")
            r.dot = path.read_bytes()
    return r


def batch_node(s, a: pb.BatchMemOpNode_Args) -> pb.BatchMemOpNode_Result:
    """cuwire.BatchMemOpNode: add a batch memory operation node, set one's parameters in its graph or an
    executable graph, or read them back."""
    ffi, lib = s.ffi, s.lib
    p = ffi.new("CUDA_BATCH_MEM_OP_NODE_PARAMS *")
    r = pb.BatchMemOpNode_Result()
    if a.action == GET:
        r.status = lib.cuGraphBatchMemOpNodeGetParams(s.handle(NODE, "CUgraphNode", a.node), p)
        if r.status == 0:
            r.ctx, r.count, r.flags = int(ffi.cast("uintptr_t", p.ctx)), p.count, p.flags
            r.ops = bytes(ffi.buffer(p.paramArray, p.count * memops.PARAMS)) if p.count else b""
        return r
    ops = memops.checked_ops(s, a.ops, a.count)
    p.ctx, p.count, p.paramArray, p.flags = s.handle(CONTEXT, "CUcontext", a.ctx), a.count, ops, a.flags
    if a.action == ADD:
        r.status, r.node = _added(s, lib.cuGraphAddBatchMemOpNode, a.graph, a.dependencies,
                                  len(a.dependencies) // 8, p)
    elif a.action == SET:
        r.status = lib.cuGraphBatchMemOpNodeSetParams(s.handle(NODE, "CUgraphNode", a.node), p)
    elif a.action == EXEC_SET:
        r.status = lib.cuGraphExecBatchMemOpNodeSetParams(s.handle(EXEC, "CUgraphExec", a.exec),
                                                          s.handle(NODE, "CUgraphNode", a.node), p)
    else:
        raise WireError(f"batch memory operation node action {a.action}")
    return r


def kernel_node(s, a: pb.KernelNode_Args) -> pb.KernelNode_Result:
    """cuwire.KernelNode: add a kernel node, or set one's parameters in its graph or an executable graph."""
    kernel = s.real(a.kernel)  # (one the client named: the driver's)
    layout = s.layouts.get(kernel)
    if layout is None:
        raise CudaFail(INVALID_HANDLE, f"kernel {a.kernel:#x} was not looked up by this session")
    if len(a.grid) != 3 or len(a.block) != 3:
        raise WireError("grid and block need three dimensions each")
    offsets, sizes = layout
    if len(a.params) < max((o + n for o, n in zip(offsets, sizes, strict=True)), default=0):
        raise WireError(f"{len(a.params)} bytes of parameters for a kernel that takes more")
    ffi = s.ffi
    buffer = ffi.new("char[]", a.params or b"\0")
    pointers = ffi.new("void *[]", [buffer + o for o in offsets] or [ffi.NULL])
    p = ffi.new("CUDA_KERNEL_NODE_PARAMS *")
    if s.kernel_kind.get(kernel) == "kernel":  # a node takes a CUkernel as `kern` only (launches take it as func)
        p.kern = ffi.cast("CUkernel", kernel)
    else:
        p.func = s.kernels[kernel]
    p.gridDimX, p.gridDimY, p.gridDimZ = a.grid
    p.blockDimX, p.blockDimY, p.blockDimZ = a.block
    p.sharedMemBytes = a.shared_mem
    p.kernelParams = pointers
    r = pb.KernelNode_Result()
    if a.action == ADD:
        r.status, r.node = _added(s, s.lib.cuGraphAddKernelNode_v2, a.graph, a.dependencies,
                                  len(a.dependencies) // 8, p)
    elif a.action == SET:
        r.status = s.lib.cuGraphKernelNodeSetParams_v2(s.handle(NODE, "CUgraphNode", a.node), p)
    elif a.action == EXEC_SET:
        r.status = s.lib.cuGraphExecKernelNodeSetParams_v2(s.handle(EXEC, "CUgraphExec", a.exec),
                                                           s.handle(NODE, "CUgraphNode", a.node), p)
    else:
        raise WireError(f"kernel node action {a.action}")
    return r


HANDLERS = {f.__name__: f for f in (cuGraphAddMemsetNode, cuGraphAddMemcpyNode, cuGraphMemcpyNodeGetParams,
                                     cuGraphMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams,
                                     cuGraphAddChildGraphNode, cuGraphConditionalHandleCreate,
                                     cuGraphChildGraphNodeGetGraph, cuGraphMemsetNodeSetParams,
                                     cuGraphExecMemsetNodeSetParams)}
