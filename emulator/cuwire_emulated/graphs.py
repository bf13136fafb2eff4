"""The emulated device's graphs: captured from a stream or built node by node, instantiated, launched.

A graph is its nodes, each a function that does the node's work when called, and the edges between
them; an executable graph runs its nodes in an order the edges allow (Kahn's, nodes added earlier
first). Work runs at once when launched, as everything does on the emulated device.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuwire_emulated import registry
from cuwire_emulated.arrays import Fault

CData = Any
# CUgraphNodeType
KERNEL, MEMCPY, MEMSET, HOST, GRAPH, EMPTY, WAIT_EVENT, EVENT_RECORD = 0, 1, 2, 3, 4, 5, 6, 7
MEM_ALLOC, MEM_FREE, BATCH_MEM_OP, CONDITIONAL = 10, 11, 12, 13
IF, WHILE, SWITCH = 0, 1, 2  # CUgraphConditionalNodeType
ASSIGN_DEFAULT = 1  # CU_GRAPH_COND_ASSIGN_DEFAULT
DEFAULT_EDGE = bytes(8)  # CUgraphEdgeData of a plain dependency (from_port, to_port, type: all 0)
CAPTURE_GLOBAL, CAPTURE_RELAXED = 0, 2  # CUstreamCaptureMode (thread-local: 1)
WHILE_LIMIT = 1 << 20  # iterations of a while node before the emulated device calls it a hang


@dataclass
class Graph:
    nodes: list[int] = field(default_factory=list)  # in the order they were added
    work: dict[int, Callable[[], Any]] = field(default_factory=dict)
    kinds: dict[int, int] = field(default_factory=dict)
    edges: set[tuple[int, int]] = field(default_factory=set)
    defaults: dict[int, int] = field(default_factory=dict)  # conditional handles assigned at each launch
    params: dict[int, Any] = field(default_factory=dict)  # node -> what it was made with, for reading back
    attributes: dict[int, dict[int, bytes]] = field(default_factory=dict)  # kernel node -> attribute -> value
    edge_data: dict[tuple[int, int], bytes] = field(default_factory=dict)  # an edge's CUgraphEdgeData, if not default

    def copy(self) -> Graph:
        """A graph of the same nodes, work and edges (cuGraphClone; a child node's own graph)."""
        return Graph(list(self.nodes), dict(self.work), dict(self.kinds), set(self.edges), dict(self.defaults),
                     dict(self.params), {node: dict(values) for node, values in self.attributes.items()},
                     dict(self.edge_data))

    def order(self) -> list[int]:
        """The nodes in an order the edges allow."""
        waiting = {n: sum(1 for a, b in self.edges if b == n) for n in self.nodes}
        done: list[int] = []
        while len(done) < len(self.nodes):
            ready = next(n for n in self.nodes if waiting[n] == 0 and n not in done)
            done.append(ready)
            for a, b in self.edges:
                if a == ready:
                    waiting[b] -= 1
        return done


@dataclass
class KernelMade:
    """What a kernel node was made with, for cuGraphKernelNodeGetParams: the CUfunction or CUkernel it
    names, its launch shape and its parameters."""

    func: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    params: registry.Params


@dataclass
class Exec:
    order: list[int]
    work: dict[int, Callable[[], Any]]
    flags: int = 0
    disabled: set[int] = field(default_factory=set)  # cuGraphNodeSetEnabled
    defaults: dict[int, int] = field(default_factory=dict)  # conditional handle -> value set at each launch

    def run(self, conditionals: dict[int, int] | None = None) -> None:
        if conditionals is not None:
            conditionals.update(self.defaults)
        for node in self.order:
            if node not in self.disabled:
                self.work[node]()


def run_graph(graph: Graph) -> None:
    """A conditional node's body, as it is when the node runs."""
    for node in graph.order():
        graph.work[node]()


@dataclass
class Capture:
    """A stream's capture: the graph its work goes into, as nodes after `leaves`."""

    graph: int
    leaves: list[int]
    into: bool = False  # a graph of the program's (cuStreamBeginCaptureToGraph)
    kept: Any = None  # the last dependencies array handed out (cuStreamGetCaptureInfo)
    origin: Capture | None = None  # a stream that joined: the capture of the stream that began it
    joined: list[Any] = field(default_factory=list)  # (the origin's) streams that joined it
    mode: int = CAPTURE_GLOBAL  # (the origin's) the mode it began in
    thread: int = 0  # (the origin's) the thread that began it
    invalidated: bool = False  # a prohibited call was made during it: ending it gives no graph


class EmulatedGraphs:
    """The driver's graph functions, mixed into EmulatedLib."""

    ffi: Any
    drv: Any
    _graphs: dict[int, Graph]
    _graph_execs: dict[int, Exec]
    _nodes: dict[int, int]  # node -> its graph
    _bodies: dict[int, CData]  # conditional node -> its body graphs' array (CUDA-owned)
    _kept_params: dict[int, tuple]  # kernel node -> the parameter array cuGraphKernelNodeGetParams gave out
    _streams: dict[int, Any]  # stream handle -> its _Stream (device.py)

    def _graph(self, handle: CData | int) -> Graph | None:
        return self._graphs.get(self._addr(handle))

    def _new_graph(self, out: CData, graph: Graph) -> int:
        handle = self._new_handle()
        self._graphs[handle] = graph
        return self._drv_put((out, handle))

    def _add(self, out: CData, hGraph: CData, dependencies: CData, count: int, kind: int, work,
             made: Any = None) -> int:
        """A node of `kind` doing `work`, after `dependencies`; it keeps what it was `made` with (if anything),
        for reading back."""
        graph = self._graph(hGraph)
        if graph is None or self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        deps = [self._addr(dependencies[i]) for i in range(count)] if count else []
        if any(d not in graph.work for d in deps):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        node = self._new_handle()
        graph.nodes.append(node)
        graph.work[node], graph.kinds[node] = work, kind
        if made is not None:
            graph.params[node] = made
        graph.edges.update((d, node) for d in deps)
        self._nodes[node] = self._addr(hGraph)
        return self._drv_put((out, node))

    # --- capture

    def _held_modes(self) -> threading.local:
        held = getattr(self, "_capture_modes", None)
        if held is None:
            held = self._capture_modes = threading.local()
        return held

    def cuThreadExchangeStreamCaptureMode(self, mode: CData) -> int:
        """The calling thread's capture mode, swapped."""
        if self._is_null(mode) or mode[0] not in (0, 1, 2):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        held = self._held_modes()
        mode[0], held.mode = getattr(held, "mode", CAPTURE_GLOBAL), mode[0]
        return 0

    def _unsafe_call(self) -> int:
        """Before a potentially unsafe call (an allocation, a free): the driver's rule. A thread in relaxed mode
        may; in thread-local mode not while a capture it began (not relaxed) runs; in global mode, nor while one
        another thread began in global mode runs. A prohibited call fails and invalidates those captures."""
        mode = getattr(self._held_modes(), "mode", CAPTURE_GLOBAL)
        if mode == CAPTURE_RELAXED:
            return 0
        me = threading.get_ident()
        streams = {id(s): s for s in self._streams.values()}.values()
        prohibiting = [s.capture for s in streams
                       if s.capture is not None and s.capture.origin is None and s.capture.mode != CAPTURE_RELAXED
                       and (s.capture.thread == me or (mode == CAPTURE_GLOBAL and s.capture.mode == CAPTURE_GLOBAL))]
        for c in prohibiting:
            c.invalidated = True
        return self.drv.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED if prohibiting else 0

    def _begin_capture(self, hStream: CData, graph: int, deps: list[int], mode: int) -> int:
        stream = self._stream(hStream)
        if stream is None or stream.builtin:
            return self.drv.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED if stream else self.drv.CUDA_ERROR_INVALID_HANDLE
        if stream.capture is not None:
            return self.drv.CUDA_ERROR_ILLEGAL_STATE
        if mode not in (0, 1, 2):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        stream.capture = Capture(graph, deps, mode=mode, thread=threading.get_ident())
        return 0

    def cuStreamBeginCapture_v2(self, hStream: CData, mode: int) -> int:
        handle = self._new_handle()
        self._graphs[handle] = Graph()
        err = self._begin_capture(hStream, handle, [], mode)
        if err:
            del self._graphs[handle]
        return err

    def cuStreamBeginCaptureToGraph(self, hStream: CData, hGraph: CData, dependencies: CData,
                                    dependencyData: CData, numDependencies: int, mode: int) -> int:
        graph = self._graph(hGraph)
        deps = [self._addr(dependencies[i]) for i in range(numDependencies)] if numDependencies else []
        if graph is None or any(d not in graph.work for d in deps):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        err = self._begin_capture(hStream, self._addr(hGraph), deps, mode)
        if err == 0:
            self._stream(hStream).capture.into = True
        return err

    def _capture_node(self, stream, run, made: KernelMade | None = None, kind: int = KERNEL) -> None:
        """Work on a capturing stream: a node of `kind` in the capture's graph, after the capture's last nodes
        (a kernel's node keeps what it was `made` with)."""
        c = stream.capture
        graph = self._graphs[c.graph]
        node = self._new_handle()
        graph.edges.update((d, node) for d in c.leaves)
        graph.nodes.append(node)
        graph.work[node], graph.kinds[node] = run, kind
        if made is not None:
            graph.params[node] = made
        self._nodes[node] = c.graph
        c.leaves = [node]

    def _capture_record(self, event: Any, stream: Any) -> None:
        """An event recorded in a capturing stream carries the capture and its last nodes (else nothing)."""
        c = stream.capture
        event.captured = (c.origin or c, list(c.leaves)) if c is not None else None

    def _capture_wait(self, stream: Any, event: Any) -> int:
        """A stream waiting for an event recorded in a capture joins it, after the event's nodes (CUDA's
        multi-stream capture); one in another capture may not."""
        if event.captured is None:
            return 0
        origin, leaves = event.captured
        c = stream.capture
        if c is None:
            if stream.builtin:
                return self.drv.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
            stream.capture = Capture(origin.graph, list(leaves), into=origin.into, origin=origin)
            origin.joined.append(stream)
        elif (c.origin or c) is not origin:
            return self.drv.CUDA_ERROR_STREAM_CAPTURE_ISOLATION
        else:
            c.leaves += [n for n in leaves if n not in c.leaves]
        return 0

    def cuStreamEndCapture(self, hStream: CData, phGraph: CData) -> int:
        stream = self._stream(hStream)
        if stream is None or stream.capture is None:
            return self.drv.CUDA_ERROR_ILLEGAL_STATE
        if stream.capture.origin is not None:
            return self.drv.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED  # ended from a stream that only joined it
        handle, invalidated = stream.capture.graph, stream.capture.invalidated
        for joined in stream.capture.joined:
            if joined.capture is not None and joined.capture.origin is stream.capture:
                joined.capture = None
        stream.capture = None
        if invalidated:  # the capture ends all the same, with no graph
            if not self._is_null(phGraph):
                self._drv_put((phGraph, 0))
            return self.drv.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        if self._is_null(phGraph):
            return 0
        return self._drv_put((phGraph, handle))

    def cuStreamIsCapturing(self, hStream: CData, captureStatus: CData) -> int:
        stream = self._stream(hStream)
        if stream is None or self._is_null(captureStatus):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = stream.capture  # CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE, _INVALIDATED
        captureStatus[0] = 0 if c is None else 2 if (c.origin or c).invalidated else 1
        return 0

    def cuStreamGetCaptureInfo_v3(self, hStream: CData, captureStatus_out: CData, id_out: CData, graph_out: CData,
                                  dependencies_out: CData, edgeData_out: CData, numDependencies_out: CData) -> int:
        """The capture's graph and last nodes, mid-capture (the array stays the stream's until it changes)."""
        stream = self._stream(hStream)
        if stream is None or self._is_null(captureStatus_out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = stream.capture
        captureStatus_out[0] = 1 if c is not None else 0  # CU_STREAM_CAPTURE_STATUS_ACTIVE, _NONE
        if c is None:
            return 0
        if not self._is_null(id_out):
            id_out[0] = c.graph
        if not self._is_null(graph_out):
            graph_out[0] = self.ffi.cast("CUgraph", c.graph)
        c.kept = self.ffi.new("CUgraphNode[]", [self.ffi.cast("CUgraphNode", n) for n in c.leaves] or 1)
        if not self._is_null(dependencies_out):
            dependencies_out[0] = c.kept
        if not self._is_null(edgeData_out):
            edgeData_out[0] = self.ffi.NULL
        if not self._is_null(numDependencies_out):
            numDependencies_out[0] = len(c.leaves)
        return 0

    def cuStreamUpdateCaptureDependencies_v2(self, hStream: CData, dependencies: CData, dependencyData: CData,
                                             numDependencies: int, flags: int) -> int:
        """The nodes the capture's next work follows: these (CU_STREAM_SET_CAPTURE_DEPENDENCIES, 1) or these
        too (CU_STREAM_ADD_CAPTURE_DEPENDENCIES, 0)."""
        stream = self._stream(hStream)
        if stream is None or stream.capture is None:
            return self.drv.CUDA_ERROR_ILLEGAL_STATE
        c = stream.capture
        nodes = [self._addr(dependencies[i]) for i in range(numDependencies)] if numDependencies else []
        if flags not in (0, 1) or any(n not in self._graphs[c.graph].work for n in nodes):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c.leaves = nodes if flags == 1 else c.leaves + [n for n in nodes if n not in c.leaves]
        return 0

    # --- building

    def cuGraphCreate(self, phGraph: CData, flags: int) -> int:
        return self.drv.CUDA_ERROR_INVALID_VALUE if flags else self._new_graph(phGraph, Graph())

    def cuGraphClone(self, phGraphClone: CData, originalGraph: CData) -> int:
        graph = self._graph(originalGraph)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._new_graph(phGraphClone, graph.copy())

    def cuGraphAddEmptyNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int) -> int:
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, EMPTY, lambda: None)

    def _kernel_work(self, p: CData) -> tuple[Callable[[], Any], KernelMade] | None:
        """A kernel node's work and what it is made with; None for parameters CUDA refuses."""
        if self._is_null(p) or self._addr(p.func) in self._kernel_handles:  # (a CUkernel goes as `kern` only)
            return None
        handle = p.func if not self._is_null(p.func) else p.kern
        function = self._function(handle)
        if function is None:
            return None
        kernel = function.kernel
        grid, block = (p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ)
        buffer = self._param_buffer(kernel, p.kernelParams, p.extra)
        if buffer is None or not self._launch_shape_ok(grid, block):
            return None
        params = registry.Params(buffer, kernel.param_offsets, kernel.param_sizes)
        shared = p.sharedMemBytes
        made = KernelMade(self._addr(handle), grid, block, shared, params)
        return (lambda: self._fault or self._run(kernel, grid, block, shared, params)), made

    def cuGraphAddKernelNode_v2(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                                nodeParams: CData) -> int:
        work = self._kernel_work(nodeParams)
        if work is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, KERNEL, work[0], work[1])

    def cuGraphKernelNodeGetParams_v2(self, hNode: CData, nodeParams: CData) -> int:
        """What the node was made with, as CUDA gives it: a kernel's node names the kernel's function and the
        kernel, a module function's only the function; its parameters in an array the node keeps."""
        made = self._node_param(hNode, KERNEL)
        if not isinstance(made, KernelMade) or self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        ffi, p, function = self.ffi, nodeParams, self._function(made.func)
        kern = made.func if made.func in self._kernel_handles else \
            next((k for k, f in self._kernel_handles.items() if f == function), 0)
        func = made.func if made.func in self._function_handles else self._function_handle(function)
        buffer = ffi.new("char[]", made.params.buffer or b"\0")
        pointers = ffi.new("void *[]", [buffer + o for o in made.params.offsets] or [ffi.NULL])
        self._kept_params[self._addr(hNode)] = (buffer, pointers)
        p.func, p.kern, p.ctx = (ffi.cast(t, v) for t, v in (("CUfunction", func), ("CUkernel", kern),
                                                               ("CUcontext", self._current_context)))
        p.gridDimX, p.gridDimY, p.gridDimZ = made.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = made.block
        p.sharedMemBytes, p.kernelParams, p.extra = made.shared, pointers, ffi.NULL
        return 0

    def _set_node_work(self, hNode: CData, kind: int, work: Callable[[], Any] | None, made: Any) -> int:
        """A node of `kind` does `work` from now on, and keeps what it was `made` with; nothing is set for a
        node of another kind, an unknown node or no work (parameters CUDA refuses: CUDA_ERROR_INVALID_VALUE)."""
        graph = self._graphs.get(self._nodes.get(self._addr(hNode), 0))
        if graph is None or work is None or graph.kinds[self._addr(hNode)] != kind:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        graph.work[self._addr(hNode)] = work
        graph.params[self._addr(hNode)] = made
        return 0

    def _set_exec_work(self, hGraphExec: CData, hNode: CData, work: Callable[[], Any] | None) -> int:
        """A node of an executable graph does `work` from now on (no work: parameters CUDA refuses)."""
        exe = self._graph_execs.get(self._addr(hGraphExec))
        node = self._addr(hNode)
        if exe is None or node not in exe.work or work is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        exe.work[node] = work
        return 0

    def cuGraphKernelNodeSetParams_v2(self, hNode: CData, nodeParams: CData) -> int:
        work = self._kernel_work(nodeParams)
        return self._set_node_work(hNode, KERNEL, work and work[0], work and work[1])

    def _memset_work(self, m: CData) -> Callable[[], None] | None:
        """A memset node's work, or None for parameters CUDA refuses."""
        dst, pitch, value, size, width, height = m.dst, m.pitch, m.value, m.elementSize, m.width, m.height
        if size not in (1, 2, 4) or self._memory.find(dst, pitch * (height - 1) + width * size if height else 0) \
                is None:
            return None
        return lambda: self._memset(dst, pitch or width * size, value, size, width, height)

    def cuGraphAddMemsetNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                             memsetParams: CData, ctx: CData) -> int:
        work = None if self._is_null(memsetParams) else self._memset_work(memsetParams)
        if work is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, MEMSET, work,
                         self.ffi.new("CUDA_MEMSET_NODE_PARAMS *", memsetParams[0]))

    def cuGraphMemsetNodeSetParams(self, hNode: CData, nodeParams: CData) -> int:
        if self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._set_node_work(hNode, MEMSET, self._memset_work(nodeParams),
                                   self.ffi.new("CUDA_MEMSET_NODE_PARAMS *", nodeParams[0]))

    def cuGraphExecMemsetNodeSetParams(self, hGraphExec: CData, hNode: CData, memsetParams: CData,
                                       ctx: CData) -> int:
        return self._set_exec_work(hGraphExec, hNode,
                                   None if self._is_null(memsetParams) else self._memset_work(memsetParams))

    def cuGraphAddMemcpyNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                             copyParams: CData, ctx: CData) -> int:
        if self._is_null(copyParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = self.ffi.new("CUDA_MEMCPY3D *", copyParams[0])  # kept: the node copies it, as CUDA does
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, MEMCPY, lambda: self.cuMemcpy3D_v2(c),
                         c)

    def _batch_work(self, p: CData) -> tuple[Callable[[], Any], tuple[CData, CData]] | None:
        """A batch memory operation node's work (its operations, as cuStreamBatchMemOp makes them, on the
        null stream) and the parameters it keeps (its own array of them); None for ones CUDA refuses."""
        if self._is_null(p) or self._is_null(p.ctx) or p.count <= 0 or self._is_null(p.paramArray) or p.flags:
            return None  # (CUDA wants the node's context named)
        if any(p.paramArray[i].operation not in (1, 2, 3, 4, 5, 6) for i in range(p.count)):
            return None
        ffi, count = self.ffi, p.count
        ops = ffi.new("CUstreamBatchMemOpParams[]", count)
        ffi.memmove(ops, p.paramArray, count * ffi.sizeof("CUstreamBatchMemOpParams"))
        kept = ffi.new("CUDA_BATCH_MEM_OP_NODE_PARAMS *", {"ctx": p.ctx, "count": count, "paramArray": ops})
        return (lambda: self.cuStreamBatchMemOp_v2(ffi.NULL, count, ops, 0)), (kept, ops)

    def cuGraphAddBatchMemOpNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData,
                                 numDependencies: int, nodeParams: CData) -> int:
        work = self._batch_work(nodeParams)
        if work is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, BATCH_MEM_OP, work[0], work[1])

    def cuGraphBatchMemOpNodeSetParams(self, hNode: CData, nodeParams: CData) -> int:
        work = self._batch_work(nodeParams)
        return self._set_node_work(hNode, BATCH_MEM_OP, work and work[0], work and work[1])

    def cuGraphExecBatchMemOpNodeSetParams(self, hGraphExec: CData, hNode: CData, nodeParams: CData) -> int:
        work = self._batch_work(nodeParams)
        if self._node_param(hNode, BATCH_MEM_OP) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._set_exec_work(hGraphExec, hNode, work and work[0])

    def cuGraphBatchMemOpNodeGetParams(self, hNode: CData, nodeParams_out: CData) -> int:
        made = self._node_param(hNode, BATCH_MEM_OP)
        if made is None or self._is_null(nodeParams_out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        nodeParams_out[0] = made[0][0]  # (its operations: the node's array, as CUDA's are)
        return 0

    def cuGraphMemcpyNodeSetParams(self, hNode: CData, nodeParams: CData) -> int:
        if self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = self.ffi.new("CUDA_MEMCPY3D *", nodeParams[0])
        return self._set_node_work(hNode, MEMCPY, lambda: self.cuMemcpy3D_v2(c), c)

    def cuGraphExecMemcpyNodeSetParams(self, hGraphExec: CData, hNode: CData, copyParams: CData,
                                       ctx: CData) -> int:
        if self._is_null(copyParams) or self._node_param(hNode, MEMCPY) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = self.ffi.new("CUDA_MEMCPY3D *", copyParams[0])
        return self._set_exec_work(hGraphExec, hNode, lambda: self.cuMemcpy3D_v2(c))

    def cuGraphMemcpyNodeGetParams(self, hNode: CData, nodeParams: CData) -> int:
        c = self._node_param(hNode, MEMCPY)
        if c is None or self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        nodeParams[0] = c[0]
        return 0

    def cuGraphAddChildGraphNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                                 childGraph: CData) -> int:
        child = self._graph(childGraph)
        if child is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        copy = child.copy()  # the child as it is now, as CUDA clones it
        handle = self._new_handle()
        self._graphs[handle] = copy
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, GRAPH, lambda: run_graph(copy), handle)

    def cuGraphExecChildGraphNodeSetParams(self, hGraphExec: CData, hNode: CData, childGraph: CData) -> int:
        """The executable graph's child node runs the graph as it is now (one of the same shape, CUDA asks)."""
        child = self._graph(childGraph)
        if child is None or self._node_param(hNode, GRAPH) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        copy = child.copy()
        return self._set_exec_work(hGraphExec, hNode, lambda: run_graph(copy))

    def cuGraphAddEventRecordNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                                  event: CData) -> int:
        work = self._record_work(event)
        if work is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, EVENT_RECORD, work, self._addr(event))

    def _record_work(self, event: CData):
        e = self._event(event)
        if e is None:
            return None

        def record() -> None:
            e.recorded_at = time.perf_counter()

        return record

    def _node_graph(self, node: CData | int) -> Graph | None:
        return self._graphs.get(self._nodes.get(self._addr(node), 0))

    def _node_param(self, hNode: CData, kind: int):
        """What a node of `kind` was made with; None for another node."""
        graph, node = self._node_graph(hNode), self._addr(hNode)
        return graph.params.get(node) if graph is not None and graph.kinds.get(node) == kind else None

    def _put_param(self, hNode: CData, kind: int, out: CData) -> int:
        """What a node of `kind` was made with (a handle or an address) into *out."""
        value = self._node_param(hNode, kind)
        if value is None or self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        out[0] = self.ffi.cast(self.ffi.typeof(out).item, value)
        return 0

    def cuGraphMemAllocNodeGetParams(self, hNode: CData, params_out: CData) -> int:
        made = self._node_param(hNode, MEM_ALLOC)
        if made is None or self._is_null(params_out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        params_out[0] = made[0][0]  # (the access descriptors: the node's array, as CUDA's are)
        return 0

    def cuGraphMemsetNodeGetParams(self, hNode: CData, nodeParams: CData) -> int:
        params = self._node_param(hNode, MEMSET)
        if params is None or self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        nodeParams[0] = params[0]
        return 0

    def cuGraphMemFreeNodeGetParams(self, hNode: CData, dptr_out: CData) -> int:
        return self._put_param(hNode, MEM_FREE, dptr_out)

    def cuGraphEventRecordNodeGetEvent(self, hNode: CData, event_out: CData) -> int:
        return self._put_param(hNode, EVENT_RECORD, event_out)

    def cuGraphEventWaitNodeGetEvent(self, hNode: CData, event_out: CData) -> int:
        return self._put_param(hNode, WAIT_EVENT, event_out)

    def cuGraphChildGraphNodeGetGraph(self, hNode: CData, phGraph: CData) -> int:
        return self._put_param(hNode, GRAPH, phGraph)

    def _set_event(self, hNode: CData, kind: int, event: CData, exe: Exec | None = None) -> int:
        graph, node = self._node_graph(hNode), self._addr(hNode)
        if graph is None or graph.kinds.get(node) != kind or self._event(event) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        work = self._record_work(event) if kind == EVENT_RECORD else (lambda: None)
        if exe is None:
            graph.work[node], graph.params[node] = work, self._addr(event)
        elif node in exe.work:
            exe.work[node] = work
        else:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return 0

    def cuGraphEventRecordNodeSetEvent(self, hNode: CData, event: CData) -> int:
        return self._set_event(hNode, EVENT_RECORD, event)

    def cuGraphEventWaitNodeSetEvent(self, hNode: CData, event: CData) -> int:
        return self._set_event(hNode, WAIT_EVENT, event)

    def cuGraphExecEventRecordNodeSetEvent(self, hGraphExec: CData, hNode: CData, event: CData) -> int:
        exe = self._graph_execs.get(self._addr(hGraphExec))
        return self._set_event(hNode, EVENT_RECORD, event, exe) if exe else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuGraphExecEventWaitNodeSetEvent(self, hGraphExec: CData, hNode: CData, event: CData) -> int:
        exe = self._graph_execs.get(self._addr(hGraphExec))
        return self._set_event(hNode, WAIT_EVENT, event, exe) if exe else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuGraphNodeFindInClone(self, phNode: CData, hOriginalNode: CData, hClonedGraph: CData) -> int:
        clone, node = self._graph(hClonedGraph), self._addr(hOriginalNode)
        if clone is None or node not in clone.work or self._is_null(phNode):  # a clone keeps its nodes' handles
            return self.drv.CUDA_ERROR_INVALID_VALUE
        phNode[0] = self.ffi.cast("CUgraphNode", node)
        return 0

    def cuGraphAddHostNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                           nodeParams: CData) -> int:
        if self._is_null(nodeParams) or self._is_null(nodeParams.fn):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        fn, user = nodeParams.fn, nodeParams.userData
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, HOST, lambda: fn(user), (fn, user))

    def cuGraphHostNodeGetParams(self, hNode: CData, nodeParams: CData) -> int:
        made = self._node_param(hNode, HOST)
        if made is None or self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        nodeParams.fn, nodeParams.userData = made
        return 0

    def cuGraphHostNodeSetParams(self, hNode: CData, nodeParams: CData) -> int:
        if self._is_null(nodeParams) or self._is_null(nodeParams.fn):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        fn, user = nodeParams.fn, nodeParams.userData
        return self._set_node_work(hNode, HOST, lambda: fn(user), (fn, user))

    def cuGraphExecHostNodeSetParams(self, hGraphExec: CData, hNode: CData, nodeParams: CData) -> int:
        if self._is_null(nodeParams) or self._is_null(nodeParams.fn) or self._node_param(hNode, HOST) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        fn, user = nodeParams.fn, nodeParams.userData
        return self._set_exec_work(hGraphExec, hNode, lambda: fn(user))

    def cuGraphAddEventWaitNode(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                                event: CData) -> int:
        if self._event(event) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        # (work runs at once here: whatever recorded the event is done already)
        return self._add(phGraphNode, hGraph, dependencies, numDependencies, WAIT_EVENT, lambda: None,
                         self._addr(event))

    def cuGraphDebugDotPrint(self, hGraph: CData, path: CData, flags: int) -> int:
        """The graph in DOT: its nodes (numbered, with their kind) and edges, into the file at `path`."""
        graph, name = self._graph(hGraph), self._string(path)
        if graph is None or not name:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        number = {node: i for i, node in enumerate(graph.nodes)}
        lines = ["digraph emulated {"] + [f'  n{number[n]} [label="node {number[n]}: type {graph.kinds[n]}"];'
                                          for n in graph.nodes]
        lines += [f"  n{number[a]} -> n{number[b]};" for a, b in sorted(graph.edges)] + ["}"]
        try:
            with open(name, "w") as f:
                f.write("\n".join(lines) + "\n")
        except OSError:
            return self.drv.CUDA_ERROR_OPERATING_SYSTEM
        return 0

    def cuGraphGetNodes(self, hGraph: CData, nodes: CData, numNodes: CData) -> int:
        graph = self._graph(hGraph)
        if graph is None or self._is_null(numNodes):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if self._is_null(nodes):
            numNodes[0] = len(graph.nodes)
            return 0
        count = min(numNodes[0], len(graph.nodes))
        for i in range(count):
            nodes[i] = self.ffi.cast("CUgraphNode", graph.nodes[i])
        numNodes[0] = count
        return 0

    def _edges_given(self, edgeData: CData, count: int) -> list[bytes]:
        """Each edge's CUgraphEdgeData as bytes (all default where edgeData is NULL)."""
        if self._is_null(edgeData):
            return [DEFAULT_EDGE] * count
        return [bytes(self.ffi.buffer(edgeData + i, 8)) for i in range(count)]

    def cuGraphAddDependencies_v2(self, hGraph: CData, from_: CData, to: CData, edgeData: CData,
                                  numDependencies: int) -> int:
        graph = self._graph(hGraph)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        pairs = [(self._addr(from_[i]), self._addr(to[i])) for i in range(numDependencies)]
        data = self._edges_given(edgeData, numDependencies)
        if any(a not in graph.work or b not in graph.work or a == b for a, b in pairs):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if any(d[2] > 1 for d in data):  # type: CU_GRAPH_DEPENDENCY_TYPE_DEFAULT or _PROGRAMMATIC
            return self.drv.CUDA_ERROR_INVALID_VALUE
        graph.edges.update(pairs)
        graph.edge_data.update((pair, d) for pair, d in zip(pairs, data, strict=True) if d != DEFAULT_EDGE)
        return 0

    def cuGraphRemoveDependencies_v2(self, hGraph: CData, from_: CData, to: CData, edgeData: CData,
                                     numDependencies: int) -> int:
        graph = self._graph(hGraph)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        pairs = [(self._addr(from_[i]), self._addr(to[i])) for i in range(numDependencies)]
        data = self._edges_given(edgeData, numDependencies)
        if any(pair not in graph.edges or graph.edge_data.get(pair, DEFAULT_EDGE) != d
               for pair, d in zip(pairs, data, strict=True)):
            return self.drv.CUDA_ERROR_INVALID_VALUE  # (an edge is named with the data it was added with)
        graph.edges.difference_update(pairs)
        for pair in pairs:
            graph.edge_data.pop(pair, None)
        return 0

    def _listed(self, found: list, out: tuple, edge_data: CData, count: CData, data: list[bytes] | None = None) -> int:
        """The driver's way of listing: with the first array NULL, the total into *count; else up to *count
        entries into each array of `out` (columns of `found`), and how many into *count; each entry's edge data
        (`data`, default where not given) into edge_data."""
        if self._is_null(count):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if self._is_null(out[0]):
            count[0] = len(found)
            return 0
        n = min(count[0], len(found))
        for column, array in enumerate(out):
            for i in range(n):
                array[i] = self.ffi.cast("CUgraphNode", found[i][column])
        if not self._is_null(edge_data):
            for i in range(n):
                self.ffi.buffer(edge_data + i, 8)[:] = data[i] if data else DEFAULT_EDGE
        count[0] = n
        return 0

    def cuGraphGetRootNodes(self, hGraph: CData, rootNodes: CData, numRootNodes: CData) -> int:
        graph = self._graph(hGraph)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        roots = [(n,) for n in graph.nodes if not any(b == n for _, b in graph.edges)]
        return self._listed(roots, (rootNodes,), self.ffi.NULL, numRootNodes)

    def cuGraphGetEdges_v2(self, hGraph: CData, from_: CData, to: CData, edgeData: CData, numEdges: CData) -> int:
        graph = self._graph(hGraph)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        edges = sorted(graph.edges)
        return self._listed(edges, (from_, to), edgeData, numEdges,
                            [graph.edge_data.get(e, DEFAULT_EDGE) for e in edges])

    def _node_edges(self, hNode: CData, out: CData, edgeData: CData, count: CData, dependents: bool) -> int:
        node = self._addr(hNode)
        graph = self._graphs.get(self._nodes.get(node, 0))
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        edges = sorted((b, (a, b)) if dependents else (a, (a, b))
                       for a, b in graph.edges if (a if dependents else b) == node)
        return self._listed([(other,) for other, _ in edges], (out,), edgeData, count,
                            [graph.edge_data.get(e, DEFAULT_EDGE) for _, e in edges])

    def cuGraphNodeGetDependencies_v2(self, hNode: CData, dependencies: CData, edgeData: CData,
                                      numDependencies: CData) -> int:
        return self._node_edges(hNode, dependencies, edgeData, numDependencies, dependents=False)

    def cuGraphNodeGetDependentNodes_v2(self, hNode: CData, dependentNodes: CData, edgeData: CData,
                                        numDependentNodes: CData) -> int:
        return self._node_edges(hNode, dependentNodes, edgeData, numDependentNodes, dependents=True)

    def cuGraphDestroyNode(self, hNode: CData) -> int:
        node = self._addr(hNode)
        graph = self._graphs.get(self._nodes.pop(node, 0))
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        graph.nodes.remove(node)
        del graph.work[node], graph.kinds[node]
        graph.edges = {(a, b) for a, b in graph.edges if node not in (a, b)}
        graph.edge_data = {e: d for e, d in graph.edge_data.items() if e in graph.edges}
        return 0

    def cuGraphConditionalHandleCreate(self, pHandle_out: CData, hGraph: CData, ctx: CData, defaultLaunchValue: int,
                                       flags: int) -> int:
        graph = self._graph(hGraph)
        if graph is None or self._is_null(pHandle_out) or flags & ~ASSIGN_DEFAULT:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if self._is_null(ctx):  # the driver wants the context named
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        handle = self._new_handle()
        self._memory.conditionals[handle] = defaultLaunchValue
        if flags & ASSIGN_DEFAULT:
            graph.defaults[handle] = defaultLaunchValue
        pHandle_out[0] = handle
        return 0

    def cuGraphAddNode_v2(self, phGraphNode: CData, hGraph: CData, dependencies: CData, dependencyData: CData,
                          numDependencies: int, nodeParams: CData) -> int:
        if self._is_null(nodeParams):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        p = nodeParams
        if p.type == EMPTY:
            return self.cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies)
        if p.type == MEM_ALLOC:
            descs = p.alloc.accessDescs
            if not self._location_ok(p.alloc.poolProps.location) or any(  # (the one device there is: 0)
                    self._is_null(descs) or not self._location_ok(descs[i].location)
                    for i in range(p.alloc.accessDescCount)):
                return self.drv.CUDA_ERROR_INVALID_VALUE
            address = self._memory.allocate(p.alloc.bytesize) if p.alloc.bytesize else None
            if address is None:
                return self.drv.CUDA_ERROR_OUT_OF_MEMORY if p.alloc.bytesize else self.drv.CUDA_ERROR_INVALID_VALUE
            p.alloc.dptr = address  # (allocated from the node's creation on; made again at a launch once freed)
            size, memory = p.alloc.bytesize, self._memory
            memory.graph_memory[address] = size
            count = p.alloc.accessDescCount  # what it was made with, its access descriptors kept for reading back
            descs = self.ffi.new("CUmemAccessDesc[]", [p.alloc.accessDescs[i] for i in range(count)] or 1)
            made = self.ffi.new("CUDA_MEM_ALLOC_NODE_PARAMS *")  # (v1: v2's layout)
            self.ffi.memmove(made, self.ffi.addressof(p.alloc), self.ffi.sizeof("CUDA_MEM_ALLOC_NODE_PARAMS"))
            made.accessDescs = descs if count else self.ffi.NULL
            return self._add(phGraphNode, hGraph, dependencies, numDependencies, MEM_ALLOC,
                             lambda: memory.contains(address) or memory.allocate_at(address, size), (made, descs))
        if p.type == MEM_FREE:
            dptr = int(p.free.dptr)
            if not self._memory.contains(dptr) and dptr not in self._memory.graph_memory:
                return self.drv.CUDA_ERROR_INVALID_VALUE  # (a graph's memory may be freed now: it is made again)
            return self._add(phGraphNode, hGraph, dependencies, numDependencies, MEM_FREE,
                             lambda: self._memory.free(dptr), dptr)
        if p.type == CONDITIONAL:
            return self._add_conditional(phGraphNode, hGraph, dependencies, numDependencies, p.conditional)
        return self.drv.CUDA_ERROR_NOT_SUPPORTED

    def _add_conditional(self, phGraphNode: CData, hGraph: CData, dependencies: CData, numDependencies: int,
                         c: CData) -> int:
        handle, kind, size = int(c.handle), c.type, c.size
        conditionals = self._memory.conditionals
        if handle not in conditionals or kind not in (IF, WHILE, SWITCH) or not (
                size == 1 or kind == IF and size == 2 or kind == SWITCH and size > 0):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        bodies = [Graph() for _ in range(size)]
        handles = self.ffi.new("CUgraph[]", size)
        for i, body in enumerate(bodies):
            handles[i] = self.ffi.cast("CUgraph", self._new_handle())
            self._graphs[self._addr(handles[i])] = body

        def work() -> None:
            if kind == IF:
                if conditionals[handle]:
                    run_graph(bodies[0])
                elif size == 2:
                    run_graph(bodies[1])
            elif kind == SWITCH:
                if 0 <= conditionals[handle] < size:
                    run_graph(bodies[conditionals[handle]])
            else:
                for _ in range(WHILE_LIMIT):
                    if not conditionals[handle]:
                        return
                    run_graph(bodies[0])
                raise Fault(f"a while node ran {WHILE_LIMIT} times")

        err = self._add(phGraphNode, hGraph, dependencies, numDependencies, CONDITIONAL, work)
        if err == 0:
            self._bodies[self._addr(phGraphNode[0])] = handles  # CUDA-owned: kept as long as the node
            c.phGraph_out = handles
        return err

    # --- kernel node attributes (a CUlaunchAttributeValue each; what the driver takes for graph nodes)

    NODE_ATTRIBUTES = {1, 2, 4, 5, 8, 9, 10, 11, 16}

    def _kernel_node_attributes(self, node: CData, attr: int) -> dict[int, bytes] | None:
        graph = self._node_graph(node)
        address = self._addr(node)
        if graph is None or graph.kinds[address] != KERNEL or attr not in self.NODE_ATTRIBUTES:
            return None
        return graph.attributes.setdefault(address, {})

    def cuGraphKernelNodeSetAttribute(self, hNode: CData, attr: int, value: CData) -> int:
        values = self._kernel_node_attributes(hNode, attr)
        if values is None or self._is_null(value):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        values[attr] = bytes(self.ffi.buffer(value, self.ffi.sizeof("CUlaunchAttributeValue")))
        return 0

    def cuGraphKernelNodeGetAttribute(self, hNode: CData, attr: int, value_out: CData) -> int:
        values = self._kernel_node_attributes(hNode, attr)
        if values is None or self._is_null(value_out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        size = self.ffi.sizeof("CUlaunchAttributeValue")
        self.ffi.memmove(value_out, values.get(attr, bytes(size)), size)
        return 0

    def cuGraphKernelNodeCopyAttributes(self, dst: CData, src: CData) -> int:
        to, source = self._kernel_node_attributes(dst, 1), self._kernel_node_attributes(src, 1)
        if to is None or source is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        to.clear()
        to.update(source)
        return 0

    def cuGraphNodeGetType(self, hNode: CData, type: CData) -> int:
        graph = self._graphs.get(self._nodes.get(self._addr(hNode), 0))
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((type, graph.kinds[self._addr(hNode)]))

    # --- executable graphs

    def cuGraphInstantiateWithFlags(self, phGraphExec: CData, hGraph: CData, flags: int) -> int:
        graph = self._graph(hGraph)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        handle = self._new_handle()
        self._graph_execs[handle] = Exec(graph.order(), dict(graph.work), flags, defaults=dict(graph.defaults))
        return self._drv_put((phGraphExec, handle))

    def cuGraphExecGetFlags(self, hGraphExec: CData, flags: CData) -> int:
        exe = self._graph_execs.get(self._addr(hGraphExec))
        if exe is None or self._is_null(flags):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        flags[0] = exe.flags
        return 0

    def cuGraphNodeSetEnabled(self, hGraphExec: CData, hNode: CData, isEnabled: int) -> int:
        exe, node = self._graph_execs.get(self._addr(hGraphExec)), self._addr(hNode)
        if exe is None or node not in exe.work:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        (exe.disabled.discard if isEnabled else exe.disabled.add)(node)
        return 0

    def cuGraphNodeGetEnabled(self, hGraphExec: CData, hNode: CData, isEnabled: CData) -> int:
        exe, node = self._graph_execs.get(self._addr(hGraphExec)), self._addr(hNode)
        if exe is None or node not in exe.work or self._is_null(isEnabled):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        isEnabled[0] = int(node not in exe.disabled)
        return 0

    def cuGraphUpload(self, hGraphExec: CData, hStream: CData) -> int:
        if self._graph_execs.get(self._addr(hGraphExec)) is None or self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return 0  # nothing to upload ahead of a launch here

    def cuGraphExecKernelNodeSetParams_v2(self, hGraphExec: CData, hNode: CData, nodeParams: CData) -> int:
        work = self._kernel_work(nodeParams)
        return self._set_exec_work(hGraphExec, hNode, work and work[0])

    def cuGraphExecUpdate_v2(self, hGraphExec: CData, hGraph: CData, resultInfo: CData) -> int:
        exe, graph = self._graph_execs.get(self._addr(hGraphExec)), self._graph(hGraph)
        if exe is None or graph is None or self._is_null(resultInfo):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if sorted(exe.order) != sorted(graph.nodes):  # the same nodes, parameters changed: updated in place
            resultInfo.result = 2  # CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
            return self.drv.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
        exe.work = dict(graph.work)
        resultInfo.result = 0
        return 0

    def cuGraphLaunch(self, hGraphExec: CData, hStream: CData) -> int:
        exe = self._graph_execs.get(self._addr(hGraphExec))
        if exe is None or self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        exe.run(self._memory.conditionals)
        return 0

    def cuGraphExecDestroy(self, hGraphExec: CData) -> int:
        found = self._graph_execs.pop(self._addr(hGraphExec), None) is not None
        return 0 if found else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuGraphDestroy(self, hGraph: CData) -> int:
        graph = self._graphs.pop(self._addr(hGraph), None)
        if graph is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        for node in graph.nodes:
            self._nodes.pop(node, None)
        return 0
