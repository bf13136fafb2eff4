"""Hand-written Python halves of the graph calls whose parameters point into the program: kernel, host,
batch memory operation and generic nodes, read-backs of node parameters, capture information and the
graph's node queries. The client keeps what read-back parameters point to, as CUDA keeps its own.
"""

from __future__ import annotations

import struct

from _cuwire import ffi, lib

from cuwire.client import runtime as rt
from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb

INVALID_HANDLE, INVALID_VALUE, OPERATING_SYSTEM = (
    cu.CUDA_ERROR_INVALID_HANDLE, cu.CUDA_ERROR_INVALID_VALUE, cu.CUDA_ERROR_OPERATING_SYSTEM)


# ---------------------------------------------------------------- graphs' kernel nodes

# CUDA_KERNEL_NODE_PARAMS (v2): func, grid[3], block[3], shared memory, kernelParams, extra, kern, ctx
_KERNEL_NODE = struct.Struct("<Q7I4xQQQQ")
_PARAMS_MAX = 32 << 10  # the most parameter bytes a kernel takes (CUDA 12.1+)
ADD, SET, EXEC_SET, GET = 0, 1, 2, 3  # KernelNode_Args.action, BatchMemOpNode_Args.action
# node -> what the parameters last read back from it point to (its parameter values, its operations, its access
# descriptors): the client keeps them for the program, as CUDA keeps its own
_read_back: dict[int, object] = {}


# the calls of each action (what a refusal names)
KERNEL_NODE_CALLS = {ADD: "cuGraphAddKernelNode", SET: "cuGraphKernelNodeSetParams",
                     EXEC_SET: "cuGraphExecKernelNodeSetParams"}
BATCH_NODE_CALLS = {ADD: "cuGraphAddBatchMemOpNode", SET: "cuGraphBatchMemOpNodeSetParams",
                    EXEC_SET: "cuGraphExecBatchMemOpNodeSetParams"}


def _kernel_node(nodeParams, action: int, **fields) -> pb.KernelNode_Result | int:
    """A kernel node's parameters for the server: its kernel as looked up, its parameters laid out as a
    launch's (client/launches.c keeps every looked-up kernel's layout)."""
    if nodeParams == ffi.NULL:
        return INVALID_VALUE
    rt.client.connect()
    (func, gx, gy, gz, bx, by, bz, shared, params, extra, kern, _ctx) = _KERNEL_NODE.unpack(
        bytes(ffi.buffer(ffi.cast("char *", nodeParams), _KERNEL_NODE.size)))
    handle, out = ffi.new("uint64_t *"), ffi.new("char[]", _PARAMS_MAX)
    n = lib.cuwire_pack_params(ffi.cast("void *", func or kern), ffi.cast("void **", params),
                               ffi.cast("void **", extra), handle, out, _PARAMS_MAX)
    if n == -1:
        return INVALID_HANDLE  # a function this session never looked up
    if n < 0:
        return INVALID_VALUE
    route = _route(KERNEL_NODE_CALLS[action], fields)
    kernel = rt.alias(handle[0], route)  # (a library's kernel as its graph's server loaded it: a device list's)
    if not kernel:
        return lib.cuwire_route_split(KERNEL_NODE_CALLS[action].encode())
    args = pb.KernelNode_Args(action=action, kernel=kernel, grid=[gx, gy, gz], block=[bx, by, bz],
                              shared_mem=shared, params=bytes(ffi.buffer(out, n)), **fields)
    res = rt.call(rt.KERNEL_NODE, args, pb.KernelNode_Result, route)
    if res.status == 0:  # what a later set in an executable graph is checked against (client/kernel_nodes.c)
        owner, in_exec, node = {ADD: (args.graph, 0, res.node), SET: (0, 0, args.node),
                                EXEC_SET: (args.exec, 1, args.node)}[action]
        lib.cuwire_kernel_node_noted(owner, in_exec, node, args.kernel, list(args.block), args.shared_mem)
    return res


def _route(function: str, fields: dict) -> int:
    """Where a node's call goes, its arguments as KernelNode_Args or BatchMemOpNode_Args take them: the server
    of its graph, executable graph or node (a device list's, client/routes.c), else the current context's."""
    return rt.route(function, (), tuple(fields.get(k, 0) for k in ("graph", "exec", "node")))


def _node_added(phGraphNode, res) -> int:
    """A cuGraphAdd*Node's answer: the new node into the program's variable, and the status."""
    if res.status == 0:
        rt.write_scalar(phGraphNode, "uint64_t", res.node)
    return res.status


@ffi.def_extern(name="cuwire_py_cuGraphAddKernelNode_v2", onerror=rt.on_error)
def cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, nodeParams_len):
    if phGraphNode == ffi.NULL:
        return INVALID_VALUE
    res = _kernel_node(nodeParams, ADD, graph=hGraph, dependencies=rt.read(dependencies, numDependencies * 8))
    return res if isinstance(res, int) else _node_added(phGraphNode, res)


@ffi.def_extern(name="cuwire_py_cuGraphKernelNodeSetParams_v2", onerror=rt.on_error)
def cuGraphKernelNodeSetParams_v2(hNode, nodeParams, nodeParams_len):
    res = _kernel_node(nodeParams, SET, node=hNode)
    return res if isinstance(res, int) else res.status


@ffi.def_extern(name="cuwire_py_cuGraphExecKernelNodeSetParams_v2", onerror=rt.on_error)
def cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, nodeParams, nodeParams_len):
    res = _kernel_node(nodeParams, EXEC_SET, exec=hGraphExec, node=hNode)
    return res if isinstance(res, int) else res.status


@ffi.def_extern(name="cuwire_py_cuGraphDebugDotPrint", onerror=rt.on_error)
def cuGraphDebugDotPrint(hGraph, path, flags):
    """The server's driver draws the graph; the drawing is written here, at the program's path."""
    if path == ffi.NULL:
        return INVALID_VALUE
    res = rt.call(rt.GRAPH_DOT, pb.GraphDot_Args(graph=hGraph, flags=flags), pb.GraphDot_Result,
                  rt.route("cuGraphDebugDotPrint", (), (hGraph,)))
    if res.status != 0:
        return res.status
    name = rt.read_string(path)
    try:
        with open(name, "wb") as f:
            f.write(res.dot)
    except OSError as e:
        raise rt.Fail(OPERATING_SYSTEM, f"cuwire: cannot write the graph's drawing to {name!r}: {e.strerror}") from None
    return 0


# ---------------------------------------------------------------- graphs' batch memory operation nodes

# CUDA_BATCH_MEM_OP_NODE_PARAMS: ctx, count, paramArray, flags; each operation a CUstreamBatchMemOpParams
_BATCH_NODE, _BATCH_OP = struct.Struct("<QI4xQI4x"), 48


def _batch_node(nodeParams, action: int, **fields) -> pb.BatchMemOpNode_Result:
    """A batch memory operation node's parameters for the server: the program's operations as they are."""
    if nodeParams == ffi.NULL:
        raise rt.Fail(INVALID_VALUE)
    ctx, count, array, flags = _BATCH_NODE.unpack(bytes(ffi.buffer(ffi.cast("char *", nodeParams), _BATCH_NODE.size)))
    ops = rt.read(array, count * _BATCH_OP) if count and array else b""
    args = pb.BatchMemOpNode_Args(action=action, ctx=ctx, count=count, ops=ops, flags=flags, **fields)
    return rt.call(rt.BATCH_NODE, args, pb.BatchMemOpNode_Result, _route(BATCH_NODE_CALLS[action], fields))


@ffi.def_extern(name="cuwire_py_cuGraphAddBatchMemOpNode", onerror=rt.on_error)
def cuGraphAddBatchMemOpNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, nodeParams_len):
    if phGraphNode == ffi.NULL:
        return INVALID_VALUE
    return _node_added(phGraphNode, _batch_node(nodeParams, ADD, graph=hGraph,
                                                dependencies=rt.read(dependencies, numDependencies * 8)))


@ffi.def_extern(name="cuwire_py_cuGraphBatchMemOpNodeSetParams", onerror=rt.on_error)
def cuGraphBatchMemOpNodeSetParams(hNode, nodeParams, nodeParams_len):
    return _batch_node(nodeParams, SET, node=hNode).status


@ffi.def_extern(name="cuwire_py_cuGraphExecBatchMemOpNodeSetParams", onerror=rt.on_error)
def cuGraphExecBatchMemOpNodeSetParams(hGraphExec, hNode, nodeParams, nodeParams_len):
    return _batch_node(nodeParams, EXEC_SET, exec=hGraphExec, node=hNode).status


@ffi.def_extern(name="cuwire_py_cuGraphBatchMemOpNodeGetParams", onerror=rt.on_error)
def cuGraphBatchMemOpNodeGetParams(hNode, nodeParams_out, nodeParams_out_len):
    """The server's node; its operations in an array the client keeps for the node (CUDA keeps its own so)."""
    if nodeParams_out == ffi.NULL:
        return INVALID_VALUE
    res = rt.call(rt.BATCH_NODE, pb.BatchMemOpNode_Args(action=GET, node=hNode), pb.BatchMemOpNode_Result,
                  rt.route("cuGraphBatchMemOpNodeGetParams", (), (hNode,)))
    if res.status != 0:
        return res.status
    if len(res.ops) != res.count * _BATCH_OP:
        raise rt.Fail(INVALID_VALUE, "cuwire: the server's batch memory operation node does not add up")
    ops = _read_back[hNode] = ffi.new("char[]", res.ops or b"\0")
    _BATCH_NODE.pack_into(ffi.buffer(ffi.cast("char *", nodeParams_out), _BATCH_NODE.size), 0, res.ctx, res.count,
                          int(ffi.cast("uintptr_t", ops)) if res.count else 0, res.flags)
    return 0


# ---------------------------------------------------------------- graphs' kernel nodes, read back


@ffi.def_extern(name="cuwire_py_cuGraphKernelNodeGetParams_v2", onerror=rt.on_error)
def cuGraphKernelNodeGetParams_v2(hNode, nodeParams, nodeParams_len):
    """The server's node: its function known to the client from now on (launches through it are queued), its
    parameters in an array the client keeps for the node (CUDA keeps its own likewise)."""
    if nodeParams == ffi.NULL:
        return INVALID_VALUE
    res = rt.call(rt.KERNEL_NODE_PARAMS, pb.KernelNodeParams_Args(node=hNode), pb.KernelNodeParams_Result,
                  rt.route("cuGraphKernelNodeGetParams", (), (hNode,)))
    if res.status != 0:
        return res.status
    layout = rt.Kernel(res.func, tuple(res.param_offsets), tuple(res.param_sizes))
    if len(res.grid) != 3 or len(res.block) != 3 or len(layout.offsets) != len(layout.sizes) or \
            any(o + n > len(res.params) for o, n in zip(layout.offsets, layout.sizes, strict=False)):
        raise rt.Fail(INVALID_VALUE, "cuwire: the server's kernel node parameters do not fit their layout")
    rt.give_layout_to_c(res.func, layout)
    for handle, name in ((res.func, res.func_name), (res.kern, res.kern_name)):
        if handle and name:  # (cuFuncGetName and cuKernelGetName answer from these)
            rt.client.kernel_names.setdefault(handle, ffi.new("char[]", name.encode()))
    values = ffi.new("char[]", res.params or b"\0")
    pointers = ffi.new("void *[]", [values + o for o in layout.offsets] or [ffi.NULL])
    _read_back[hNode] = (values, pointers)
    _KERNEL_NODE.pack_into(ffi.buffer(ffi.cast("char *", nodeParams), _KERNEL_NODE.size), 0, res.func, *res.grid,
                           *res.block, res.shared_mem, int(ffi.cast("uintptr_t", pointers)), 0, res.kern, res.ctx)
    return 0


def _keep_host_fn(nodeParams) -> tuple[int, int]:
    """The function and argument of a CUDA_HOST_NODE_PARAMS kept in the client (client/callbacks.c) under a new
    id, which the server's node posts: (the id, 0), or (0, the CUDA error)."""
    fn, user = struct.unpack("<QQ", bytes(ffi.buffer(ffi.cast("char *", nodeParams), 16)))
    err = ffi.new("int *")
    host_id = lib.cuwire_keep_host_fn(ffi.cast("void *", fn), ffi.cast("void *", user), err)
    return host_id, err[0]


@ffi.def_extern(name="cuwire_py_cuGraphAddHostNode", onerror=rt.on_error)
def cuGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, nodeParams_len):
    """The program's function stays in the client, under an id the server's node posts."""
    if phGraphNode == ffi.NULL or nodeParams == ffi.NULL:
        return INVALID_VALUE
    rt.client.connect()  # (the session brings the shared memory host functions need, or their connection)
    host_id, err = _keep_host_fn(nodeParams)
    if not host_id:
        return err
    res = rt.call(rt.HOST_NODE, pb.HostNode_Args(graph=hGraph, dependencies=rt.read(dependencies, numDependencies * 8),
                                                 id=host_id), pb.HostNode_Result,
                  rt.route("cuGraphAddHostNode", (), (hGraph,)))
    return _node_added(phGraphNode, res)


def _host_node_set(action: int, exec_: int, node: int, nodeParams) -> int:
    """A host node's new function and argument: kept under a new id, which the server's node posts from now on."""
    if nodeParams == ffi.NULL:
        return INVALID_VALUE
    host_id, err = _keep_host_fn(nodeParams)
    if not host_id:
        return err
    return rt.call(rt.HOST_NODE, pb.HostNode_Args(action=action, exec=exec_, node=node, id=host_id),
                   pb.HostNode_Result, rt.route("cuGraphHostNodeSetParams", (), (exec_, node))).status


@ffi.def_extern(name="cuwire_py_cuGraphHostNodeSetParams", onerror=rt.on_error)
def cuGraphHostNodeSetParams(hNode, nodeParams, nodeParams_len):
    return _host_node_set(pb.SET_IN_GRAPH, 0, hNode, nodeParams)


@ffi.def_extern(name="cuwire_py_cuGraphExecHostNodeSetParams", onerror=rt.on_error)
def cuGraphExecHostNodeSetParams(hGraphExec, hNode, nodeParams, nodeParams_len):
    return _host_node_set(pb.SET_IN_EXEC, hGraphExec, hNode, nodeParams)


@ffi.def_extern(name="cuwire_py_cuGraphHostNodeGetParams", onerror=rt.on_error)
def cuGraphHostNodeGetParams(hNode, nodeParams, nodeParams_len):
    """The server says which id the node posts; the function and argument kept under it are the program's."""
    if nodeParams == ffi.NULL:
        return INVALID_VALUE
    res = rt.call(rt.HOST_NODE, pb.HostNode_Args(action=pb.GET, node=hNode), pb.HostNode_Result,
                  rt.route("cuGraphHostNodeGetParams", (), (hNode,)))
    if res.status != 0:
        return res.status
    fn, user = ffi.new("void **"), ffi.new("void **")
    if lib.cuwire_host_fn_of(res.id, fn, user) != 0:
        return INVALID_VALUE
    ffi.memmove(nodeParams, struct.pack("<QQ", int(ffi.cast("uintptr_t", fn[0])), int(ffi.cast("uintptr_t", user[0]))),
                16)
    return 0


@ffi.def_extern(name="cuwire_py_cuGraphMemAllocNodeGetParams", onerror=rt.on_error)
def cuGraphMemAllocNodeGetParams(hNode, params_out, params_out_len):
    """The server's parameters, their access descriptors in an array the client keeps for the node (CUDA keeps
    its own likewise)."""
    if params_out == ffi.NULL:
        return INVALID_VALUE
    res = rt.call(rt.ALLOC_NODE_PARAMS, pb.AllocNodeParams_Args(node=hNode), pb.AllocNodeParams_Result,
                  rt.route("cuGraphMemAllocNodeGetParams", (), (hNode,)))
    if res.status != 0:
        return res.status
    if len(res.params) != params_out_len:
        raise rt.Fail(INVALID_VALUE)
    ffi.memmove(params_out, res.params, len(res.params))
    access = _read_back[hNode] = ffi.new("char[]", res.access or b"\0")
    struct.pack_into("<Q", ffi.buffer(ffi.cast("char *", params_out), params_out_len), ALLOC_ACCESS_AT - NODE_PARAMS_AT,
                     int(ffi.cast("uintptr_t", access)) if res.access else 0)
    return 0


# CUgraphNodeParams: the type, then the kind's parameters from byte 16 (cuda.h; tests/test_codegen.py checks
# these offsets against the headers)
NODE_PARAMS_SIZE, NODE_PARAMS_AT = 256, 16
MEM_ALLOC, CONDITIONAL = cu.CU_GRAPH_NODE_TYPE_MEM_ALLOC, cu.CU_GRAPH_NODE_TYPE_CONDITIONAL
ALLOC_ACCESS_AT, ALLOC_DPTR_AT = 16 + 88, 16 + 112  # CUDA_MEM_ALLOC_NODE_PARAMS_v2: accessDescs (+count), dptr
ALLOC_LOCATION_AT = 16 + 8  # ...its poolProps' CUmemLocation
ACCESS_DESC_SIZE = 12  # CUmemAccessDesc
COND_SIZE_AT, COND_GRAPHS_AT = 16 + 12, 16 + 16  # CUDA_CONDITIONAL_NODE_PARAMS: size, phGraph_out
_bodies: dict[int, object] = {}  # conditional node -> its body graphs' array, which the program's params point to


@ffi.def_extern(name="cuwire_py_cuGraphAddNode_v2", onerror=rt.on_error)
def cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, dependencyData, dependencyData_len, numDependencies,
                      nodeParams, nodeParams_len):
    """The node's parameters travel as they are; its pointers are the client's: a memory allocation's access
    descriptors travel beside them, its address comes back into them; a conditional node's body graphs come
    back in an array the client keeps for the node's life, as CUDA keeps its own."""
    if phGraphNode == ffi.NULL or nodeParams == ffi.NULL:
        return INVALID_VALUE
    params = bytes(ffi.buffer(ffi.cast("char *", nodeParams), NODE_PARAMS_SIZE))
    kind = struct.unpack_from("<i", params)[0]
    args = pb.GraphNode_Args(graph=hGraph, dependencies=rt.read(dependencies, numDependencies * 8), params=params)
    if dependencyData != ffi.NULL:
        args.edge_data, args.dependency_data = True, rt.read(dependencyData, numDependencies * 8)
    located = ()
    if kind == MEM_ALLOC:  # (its pool's and its access descriptors' devices: a device list's, its server's own)
        descs, count = struct.unpack_from("<QQ", params, ALLOC_ACCESS_AT)
        if count and not descs:
            return INVALID_VALUE
        args.params, pool_at = rt.located(params, ALLOC_LOCATION_AT)
        access = rt.read(ffi.cast("void *", descs), count * ACCESS_DESC_SIZE) if count else b""
        args.access, access_at = rt.located(access, 0, ACCESS_DESC_SIZE)
        located = (pool_at, access_at)
    route = rt.route("cuGraphAddNode", (), (hGraph,), (), (), (), located)
    res = rt.call(rt.GRAPH_NODE, args, pb.GraphNode_Result, route)
    if res.status != 0:
        return res.status
    rt.write_scalar(phGraphNode, "uint64_t", res.node)
    if kind == MEM_ALLOC:
        rt.write_scalar(ffi.cast("char *", nodeParams) + ALLOC_DPTR_AT, "uint64_t", res.dptr)
    elif kind == CONDITIONAL:
        size = struct.unpack_from("<I", params, COND_SIZE_AT)[0]
        if len(res.bodies) != 8 * size:
            raise rt.bad_reply(f"{len(res.bodies) // 8} body graphs for a conditional node of {size}")
        bodies = ffi.new("uint64_t[]", list(struct.unpack(f"<{size}Q", res.bodies)))
        _bodies[res.node] = bodies
        rt.write_scalar(ffi.cast("char *", nodeParams) + COND_GRAPHS_AT, "uint64_t",
                        int(ffi.cast("uintptr_t", bodies)))
    return 0


_capture_arrays: dict[int, tuple] = {}  # stream -> the arrays its last cuStreamGetCaptureInfo handed out


@ffi.def_extern(name="cuwire_py_capture_info", onerror=rt.on_error)
def cuwire_py_capture_info(stream, graph, deps, edges, count):
    """A capture's graph and last nodes (client/capture.c): the arrays stay the stream's until its next
    cuStreamGetCaptureInfo, as CUDA keeps its own until the capture changes."""
    res = rt.call(rt.CAPTURE_INFO, pb.CaptureInfo_Args(stream=int(ffi.cast("uintptr_t", stream)),
                                                       edge_data=edges != ffi.NULL), pb.CaptureInfo_Result,
                  rt.route("cuStreamGetCaptureInfo", (stream,)))
    if res.status != 0:
        return res.status
    n = len(res.dependencies) // 8
    if len(res.dependencies) % 8 or res.edge_data and len(res.edge_data) != 8 * n:
        raise rt.bad_reply(f"{len(res.dependencies)} bytes of nodes and {len(res.edge_data)} of edge data")
    nodes = ffi.new("uint64_t[]", list(struct.unpack(f"<{n}Q", res.dependencies)) or [0])
    data = ffi.new("char[]", res.edge_data) if res.edge_data else ffi.NULL
    _capture_arrays[int(ffi.cast("uintptr_t", stream))] = (nodes, data)
    if graph != ffi.NULL:
        rt.write_scalar(graph, "uint64_t", res.graph)
    if deps != ffi.NULL:
        rt.write_scalar(deps, "uint64_t", int(ffi.cast("uintptr_t", nodes)) if n else 0)
    if edges != ffi.NULL:
        rt.write_scalar(edges, "uint64_t", int(ffi.cast("uintptr_t", data)) if n and res.edge_data else 0)
    rt.write_scalar(count, "size_t", n)
    return 0


@ffi.def_extern(name="cuwire_py_cuGraphGetNodes", onerror=rt.on_error)
def cuGraphGetNodes(hGraph, nodes, numNodes):
    return _graph_query(pb.NODES, hGraph, 0, nodes, ffi.NULL, ffi.NULL, numNodes)


@ffi.def_extern(name="cuwire_py_cuGraphGetRootNodes", onerror=rt.on_error)
def cuGraphGetRootNodes(hGraph, rootNodes, numRootNodes):
    return _graph_query(pb.ROOTS, hGraph, 0, rootNodes, ffi.NULL, ffi.NULL, numRootNodes)


@ffi.def_extern(name="cuwire_py_cuGraphGetEdges_v2", onerror=rt.on_error)
def cuGraphGetEdges_v2(hGraph, from_, to, edgeData, edgeData_len, numEdges):
    if (from_ == ffi.NULL) != (to == ffi.NULL):
        return INVALID_VALUE
    return _graph_query(pb.EDGES, hGraph, 0, from_, to, edgeData, numEdges)


@ffi.def_extern(name="cuwire_py_cuGraphNodeGetDependencies_v2", onerror=rt.on_error)
def cuGraphNodeGetDependencies_v2(hNode, dependencies, edgeData, edgeData_len, numDependencies):
    return _graph_query(pb.DEPENDENCIES, 0, hNode, dependencies, ffi.NULL, edgeData, numDependencies)


@ffi.def_extern(name="cuwire_py_cuGraphNodeGetDependentNodes_v2", onerror=rt.on_error)
def cuGraphNodeGetDependentNodes_v2(hNode, dependentNodes, edgeData, edgeData_len, numDependentNodes):
    return _graph_query(pb.DEPENDENTS, 0, hNode, dependentNodes, ffi.NULL, edgeData, numDependentNodes)


def _graph_query(what: int, graph: int, node: int, nodes, to, edge_data, count) -> int:
    """The driver's way for all five: with nodes NULL, the total into *count; else up to *count of them
    into nodes (and to, edge_data), and how many into *count."""
    if count == ffi.NULL:
        return INVALID_VALUE
    capacity = rt.read_scalar(count, "uint64_t") if nodes != ffi.NULL else 0
    args = pb.GraphNodes_Args(graph=graph, node=node, what=what, capacity=capacity,
                              edge_data=edge_data != ffi.NULL and nodes != ffi.NULL)
    res = rt.call(rt.GRAPH_NODES, args, pb.GraphNodes_Result, rt.route("cuGraphGetNodes", (), (graph, node)))
    if res.status == 0:
        if nodes == ffi.NULL:
            rt.write_scalar(count, "uint64_t", res.total)
            return 0
        n = len(res.nodes) // 8
        if n > capacity or len(res.to) not in (0, len(res.nodes)) or len(res.edge_data) not in (0, 8 * n):
            raise rt.bad_reply(f"{n} nodes for room for {capacity}")
        ffi.memmove(ffi.cast("char *", nodes), res.nodes, len(res.nodes))
        if to != ffi.NULL:
            ffi.memmove(ffi.cast("char *", to), res.to, len(res.to))
        if edge_data != ffi.NULL:
            ffi.memmove(ffi.cast("char *", edge_data), res.edge_data, len(res.edge_data))
        rt.write_scalar(count, "uint64_t", n)
    return res.status
