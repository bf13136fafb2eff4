"""Hand-written Python halves of launches and what a launch asks first: the first launch of a function (C
queues the rest), cluster occupancy (kept, a sweep of widths asked at once), and streams, events and kernel
attributes asked for ahead (client/handle_pools.c, client/answers_cache.c).
"""

from __future__ import annotations

import struct
import threading

from _cuwire import ffi, lib

from cuwire.client import clusters_ahead, load_lists
from cuwire.client import runtime as rt
from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb

INVALID_HANDLE, INVALID_VALUE = cu.CUDA_ERROR_INVALID_HANDLE, cu.CUDA_ERROR_INVALID_VALUE


# ---------------------------------------------------------------- launches


@ffi.def_extern(name="cuwire_py_cuLaunchKernel", onerror=rt.on_error)
def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra):
    """Reached when C could not queue the launch: before the session knows the device's limits (the
    first call of the process), or for a function this session never looked up."""
    rt.client.connect()
    err = lib.cuwire_fast_cuLaunchKernel(ffi.cast("void *", f), gx, gy, gz, bx, by, bz, shared_mem,
                                        ffi.cast("void *", stream), ffi.cast("void **", params),
                                        ffi.cast("void **", extra))
    return INVALID_HANDLE if err < 0 else err


@ffi.def_extern(name="cuwire_py_cuLaunchKernelEx", onerror=rt.on_error)
def cuLaunchKernelEx(config, config_len, f, params, extra):
    """As cuLaunchKernel's: C queues the launch, attributes included, once the session is open."""
    rt.client.connect()
    err = lib.cuwire_fast_cuLaunchKernelEx(ffi.cast("void *", config), ffi.cast("void *", f),
                                          ffi.cast("void **", params), ffi.cast("void **", extra))
    return INVALID_HANDLE if err < 0 else err


# (the layouts: clusters_ahead.py)
_LAUNCH_ATTRIBUTE = clusters_ahead.LAUNCH_ATTRIBUTE
_SWEEP = 32  # cluster widths asked at once (server/custom.py, SWEEP_MOST)


class _ClusterAnswers:
    """cuOccupancyMaxActiveClusters's answers, kept: they depend only on the function, the launch
    configuration and the function's attributes, and a set of those (cuFuncSetAttribute...) forgets the
    function's kernel's, as client/answers_cache.c forgets its own (cuwire_answers_generation_of: each answer
    holds while its kernel's count is the one it was kept at). cuBLASLt and cuDNN ask a kernel's clusters for
    each cluster width in turn, 1 to 32, the grid following the width: the first such question asks for all
    widths at once (a sweep), one round trip where there were 32. At most MOST answers are kept: past them,
    questions go to the server (a program that asks of ever new launch shapes costs no memory). The
    questions the server answered go on the run's list (load_lists.py) with the attributes set of their
    kernel by then; the next run's Preload answers them ahead, and those answers hold whenever the kernel's
    sets are those again (client/answers_cache.c keeps its own so)."""

    MOST = 4096

    def __init__(self) -> None:
        self.answers: dict[tuple, tuple[int, int, int]] = {}  # key -> (status, clusters, its kernel's count)
        self.swept: dict[tuple, int] = {}  # sweeps asked -> their kernel's count
        self.lock = threading.Lock()  # program threads ask at once

    def _keep(self, key: tuple, answer: tuple[int, int], count: int) -> None:
        if len(self.answers) < self.MOST or key in self.answers:
            self.answers[key] = (*answer, count)

    def ask(self, func: int, raw: bytes, body: bytes, potential: bool) -> tuple[int, int]:
        """The answer for a function, its CUlaunchConfig's bytes and its attributes' bytes."""
        with self.lock:
            return self._ask(func, raw, body, potential)

    def _ask(self, func: int, raw: bytes, body: bytes, potential: bool) -> tuple[int, int]:
        count = lib.cuwire_answers_generation_of(func)
        # what the configuration says, but where its attributes are: the grid, the block, the shared memory
        # and the stream, not the padding between them (a C caller's, not always zeroed)
        head = raw[:28] + raw[32:40]
        body = b"".join(body[i:i + 4] + bytes(4) + body[i + 8:i + _LAUNCH_ATTRIBUTE]  # (each id's padding too)
                        for i in range(0, len(body), _LAUNCH_ATTRIBUTE))
        key = (func, potential, head, body)
        kept = self.answers.get(key)
        if kept is not None and kept[2] == count:
            return kept[0], kept[1]
        config = head[:clusters_ahead.HEAD] + body  # (the stream left out: an answer given ahead holds for any)
        digest = ffi.new("uint64_t *")
        known_sets = lib.cuwire_sets_digest_now(func, digest) == 0
        given = clusters_ahead.ahead.get(func, potential, config, digest[0]) if known_sets else None
        if given is not None:
            self._keep(key, given[:2], count)
            if given[2] is not None:
                _record(load_lists.ASK_CLUSTERS, func, int(potential), given[2], config=config)
            return given[0], given[1]
        at = None if potential else clusters_ahead.width_at(body)
        width = struct.unpack_from("<I", body, at)[0] if at is not None else 0
        grid_x = struct.unpack_from("<I", head)[0]
        sweep = at is not None and grid_x % width == 0
        if sweep:
            base = (func, head[4:], body[:at] + body[at + 4:], grid_x // width)
            sweep = self.swept.get(base) != count
        route, theirs = rt.kernel_route(rt.server_function(func))  # (a device list: the current device's server)
        args = pb.MaxActiveClusters_Args(function=theirs, config=raw[:40] + bytes(8) + raw[48:],
                                         attributes=body, potential_size=potential, sweep=_SWEEP if sweep else 0)
        res = rt.call(rt.MAX_ACTIVE_CLUSTERS, args, pb.MaxActiveClusters_Result, route)
        self._keep(key, (res.status, res.clusters), count)
        _record(load_lists.ASK_CLUSTERS, func, int(potential), _SWEEP if sweep else 0, config=config)
        if sweep and (len(self.swept) < self.MOST or base in self.swept):
            self.swept[base] = count
            for w, (status, clusters) in enumerate(zip(res.sweep_status, res.sweep_clusters, strict=False), start=1):
                self._keep((func, potential, *clusters_ahead.at_width(head, body, at, width, w)), (status, clusters),
                           count)
        return res.status, res.clusters


_cluster_answers = _ClusterAnswers()


def _clusters(out, func, config, config_len: int, potential_size: bool) -> int:
    """cuwire.MaxActiveClusters: the launch configuration as bytes, its attributes beside it; kept."""
    if not config or not out:
        return INVALID_VALUE
    raw = bytes(ffi.buffer(ffi.cast("char *", config), config_len))
    attrs, count = struct.unpack_from("<QI", raw, 40)
    body = bytes(ffi.buffer(ffi.cast("char *", attrs), count * _LAUNCH_ATTRIBUTE)) if count and attrs else b""
    status, clusters = _cluster_answers.ask(int(ffi.cast("uintptr_t", func)), raw, body, potential_size)
    if status == 0:
        ffi.cast("int *", out)[0] = clusters
    return status


@ffi.def_extern(name="cuwire_py_cuOccupancyMaxActiveClusters", onerror=rt.on_error)
def cuOccupancyMaxActiveClusters(numClusters, func, config, config_len):
    return _clusters(numClusters, func, config, config_len, False)


@ffi.def_extern(name="cuwire_py_cuOccupancyMaxPotentialClusterSize", onerror=rt.on_error)
def cuOccupancyMaxPotentialClusterSize(clusterSize, func, config, config_len):
    return _clusters(clusterSize, func, config, config_len, True)


# ---------------------------------------------------------------- answers asked for ahead

@ffi.def_extern(name="cuwire_py_make_handles", onerror=rt.on_error)
def make_handles(kind, flags, priority, count, out, made):
    """cuwire.MakeHandles: `count` streams (kind 0) or events (kind 1) made at once, for client/handle_pools.c
    to give out as the program asks for them; the first batch of a kind as many as the program's last run
    made (load_lists.Run.handle_batch), made ahead by its Preload when it could. `out` has room for
    MAKE_AT_ONCE. `made` is how many came (at least one on success)."""
    run = rt.client.preload(rt.client.connect())
    ahead = run.take_made(kind, flags, priority, lib.cuwire_current_context())
    count = len(ahead) or run.handle_batch(kind, flags, priority, count)
    res = pb.MakeHandles_Result(handles=ahead) if ahead else rt.call(
        rt.MAKE_HANDLES, pb.MakeHandles_Args(kind=kind, flags=flags, priority=priority, count=count),
        pb.MakeHandles_Result)
    if res.status == 0:
        handles = list(res.handles)[:count]
        if not handles:
            raise rt.Fail(INVALID_VALUE, "cuwire.MakeHandles: the server made none and said it succeeded")
        for i, h in enumerate(handles):
            out[i] = h
        made[0] = len(handles)
        run.made_handles(kind, flags, priority, len(handles))
    return res.status


@ffi.def_extern(name="cuwire_py_function_attributes", onerror=rt.on_error)
def function_attributes(kernel, function, device, statuses, values, count):
    """cuwire.FunctionAttributes: every attribute of a kernel on a device (or of a function), for
    client/answers_cache.c to keep: each one's status and value, `count` of them at most (C leaves the
    rest as they were)."""
    rt.client.connect()
    if kernel:  # (a device list: the device's server, its own kernel and device number)
        route, theirs = rt.kernel_route(kernel, device)
        args = pb.FunctionAttributes_Args(kernel=theirs, device=rt.own_device(device))
    else:
        route, theirs = rt.kernel_route(rt.server_function(function))
        args = pb.FunctionAttributes_Args(function=theirs)
    res = rt.call(rt.FUNCTION_ATTRIBUTES, args, pb.FunctionAttributes_Result, route)
    if res.status:  # (a handle the server refused: each attribute's answer is that error)
        res.statuses[:], res.values[:] = [res.status] * count, [0] * count
    n = min(count, len(res.statuses), len(res.values))
    for i in range(n):
        statuses[i], values[i] = res.statuses[i], res.values[i]
    if rt.client.run is not None:  # (its next run's Preload asks them ahead: load_lists.py)
        rt.client.run.asked(load_lists.ASK_ATTRIBUTES, kernel or function, 0, 0, 0)
    return 0


def _record(ask: int, handle: int, a: int, b: int, c: int = 0, config: bytes = b"") -> None:
    """A question the program asked, for this run's list, with the attributes the program had set of its
    kernel by then (none kept when those are not known)."""
    run = rt.client.run
    if run is None:
        return
    attributes, values = ffi.new("int32_t[]", load_lists.MAX_SETS), ffi.new("int32_t[]", load_lists.MAX_SETS)
    n = lib.cuwire_sets_of(handle, attributes, values, load_lists.MAX_SETS)
    if n >= 0:
        run.asked(ask, handle, a, b, c, tuple((attributes[i], values[i]) for i in range(n)), config)


@ffi.def_extern(name="cuwire_py_asked")
def asked(ask, handle, a, b, c):
    """An occupancy question the server answered (client/answers_cache.c), for this run's list."""
    _record(ask, handle, a, b, c)


def _ask_the_server(exc_type, exc, tb) -> int:
    """A model that failed (a bug, never the program's error) leaves the question to the server."""
    rt.on_error(exc_type, exc, tb)  # (said on stderr)
    return -1


@ffi.def_extern(name="cuwire_py_model_occupancy", onerror=_ask_the_server)
def model_occupancy(ask, handle, a, b, c, value):
    """An occupancy question of a kernel the client named, answered by cuwire/occupancy.py (client/answers_cache.c
    keeps it): 0, else -1 to ask the server."""
    attributes, values = ffi.new("int32_t[]", load_lists.MAX_SETS), ffi.new("int32_t[]", load_lists.MAX_SETS)
    n = lib.cuwire_sets_of(handle, attributes, values, load_lists.MAX_SETS)
    if n < 0:
        return -1  # (a cache preference was set: the driver's to reckon)
    answer = rt.client.model_occupancy(ask, handle, a, b, c, {attributes[i]: values[i] for i in range(n)})
    if answer is None:
        return -1
    value[0] = answer
    rt.client.stats.occupancy_modelled += 1
    return 0
