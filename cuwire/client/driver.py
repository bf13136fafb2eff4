"""Hand-written Python halves of the driver functions whose meaning changes on the way: module images
(read from the program's memory and sent through the server's module cache), kernel and function
lookups (which hand their parameter layout to the C launch path), and the first launch of a function.

NVIDIA's runtime loads every fatbin a program registers with cuLibraryLoadData and launches with
cuLaunchKernel, so these are the paths every kernel of every CUDA library takes.
"""

from __future__ import annotations

import struct
import sys
import threading

from _cuwire import ffi, lib

from cuwire import fatbin
from cuwire.client import runtime as rt
from cuwire.generated import cuwire_pb2 as pb

INVALID_VALUE, INVALID_IMAGE, FILE_NOT_FOUND, OPERATING_SYSTEM, INVALID_HANDLE, NOT_FOUND, NOT_SUPPORTED = (
    1, 200, 301, 304, 400, 500, 801)
_U32 = struct.Struct("<I")


def _bytes(address: int, size: int) -> bytes:
    return bytes(ffi.buffer(ffi.cast("char *", address), size))


def image_at(address: int) -> bytes:
    """The bytes of the module image at `address`: a fatbin registration wrapper, a fatbin, a 64-bit ELF
    cubin, or NUL-terminated PTX text (what cuModuleLoadData and cuLibraryLoadData accept)."""
    if not address:
        raise rt.Fail(INVALID_VALUE)
    magic = _U32.unpack(_bytes(address, 4))[0]
    if magic == fatbin.WRAPPER_MAGIC:  # __fatBinC_Wrapper_t: magic, version, data, filename
        return image_at(ffi.cast("uint64_t *", address)[1])
    size = fatbin.image_length(lambda offset, n: _bytes(address + offset, n))
    return _bytes(address, size) if size is not None else ffi.string(ffi.cast("char *", address)) + b"\0"  # PTX


# CUjit_option values (cuda.h) of the logs the JIT writes: the server's JIT fills them, the client copies
INFO_LOG, INFO_LOG_SIZE, ERROR_LOG, ERROR_LOG_SIZE = 3, 4, 5, 6


def _hand_on_logs(logs: list[str], count: int, options, values) -> None:
    """Write the JIT's logs into the buffers the program passed as JIT options, and each buffer's filled
    size into its size option, as the driver does."""
    if not count or options == ffi.NULL or values == ffi.NULL or not logs:
        return
    opts = [int(ffi.cast("int *", options)[i]) for i in range(count)]
    vals = ffi.cast("void **", values)
    for text, buffer, size in ((logs[0], ERROR_LOG, ERROR_LOG_SIZE), (logs[1], INFO_LOG, INFO_LOG_SIZE)):
        if buffer not in opts or size not in opts:
            continue
        dest, room = vals[opts.index(buffer)], int(ffi.cast("uintptr_t", vals[opts.index(size)]))
        if dest == ffi.NULL or room == 0:
            continue
        data = text.encode()[:room - 1] + b"\0"
        ffi.memmove(dest, data, len(data))
        vals[opts.index(size)] = ffi.cast("void *", len(data) - 1)


NO_JIT_OPTIONS = (0, ffi.NULL, ffi.NULL)


def _load(address: int, jit: tuple = NO_JIT_OPTIONS, as_module: bool = False) -> int:
    """Load the image at `address`; jit: the program's (count, options, values), whose log buffers
    receive the server JIT's logs. Its CUlibrary, or with as_module its CUmodule."""
    try:
        image = image_at(address)
    except ValueError as e:
        raise rt.Fail(INVALID_IMAGE, f"cuwire: unreadable module image: {e}") from None
    return _load_image(image, jit, as_module)


def _load_image(image: bytes, jit: tuple = NO_JIT_OPTIONS, as_module: bool = False) -> int:
    logs: list[str] = []
    try:
        return rt.client.load_image(image, logs, as_module)
    except rt.Fail as e:
        if rt.client.settings.trace:
            kind = fatbin.image_kind(image)
            entries = [repr(x) for x in fatbin.parse(image)] if kind == "fatbin" else []
            print(f"cuwire trace: module image ({kind}, {len(image)} bytes{', ' if entries else ''}"
                  f"{', '.join(entries)}) not loaded: error {e.code}", file=sys.stderr)
        raise
    finally:
        _hand_on_logs(logs, *jit)


# ---------------------------------------------------------------- modules and libraries


@ffi.def_extern(name="cuwire_py_cuLibraryLoadData", onerror=rt.on_error)
def cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                      libraryOptionValues, numLibraryOptions):
    rt.write_scalar(library, "uint64_t", _load(code, (numJitOptions, jitOptions, jitOptionsValues)))
    return 0


def _load_module(module, image, jit: tuple = NO_JIT_OPTIONS) -> int:
    """A module is its library's module on the server (one cache for both), given with the load."""
    rt.write_scalar(module, "uint64_t", _load(image, jit, as_module=True))
    return 0


@ffi.def_extern(name="cuwire_py_cuModuleLoadData", onerror=rt.on_error)
def cuModuleLoadData(module, image):
    return _load_module(module, image)


@ffi.def_extern(name="cuwire_py_cuModuleLoadDataEx", onerror=rt.on_error)
def cuModuleLoadDataEx(module, image, numOptions, options, optionValues):
    return _load_module(module, image, (numOptions, options, optionValues))


@ffi.def_extern(name="cuwire_py_cuModuleLoadFatBinary", onerror=rt.on_error)
def cuModuleLoadFatBinary(module, fatCubin):
    return _load_module(module, fatCubin)


def _read_file(path) -> bytes:
    """A file the program names (cuModuleLoad, cuLinkAddFile): the program's, so read on the client."""
    name = rt.read_string(path)
    try:
        with open(name, "rb") as f:
            return f.read()
    except OSError as e:
        raise rt.Fail(FILE_NOT_FOUND, f"cuwire: cannot read {name!r}: {e.strerror}") from None


def _read_image(path) -> bytes:
    """A module file's bytes (cubin, fatbin or PTX); PTX text gets the NUL the driver expects."""
    image = _read_file(path)
    if fatbin.image_kind(image) == "ptx" and not image.endswith(b"\0"):
        image += b"\0"
    return image


@ffi.def_extern(name="cuwire_py_cuModuleLoad", onerror=rt.on_error)
def cuModuleLoad(module, fname):
    rt.write_scalar(module, "uint64_t", _load_image(_read_image(fname), as_module=True))
    return 0


@ffi.def_extern(name="cuwire_py_cuLibraryLoadFromFile", onerror=rt.on_error)
def cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                          libraryOptionValues, numLibraryOptions):
    if library == ffi.NULL:
        return INVALID_VALUE
    image = _read_image(fileName)
    rt.write_scalar(library, "uint64_t", _load_image(image, (numJitOptions, jitOptions, jitOptionsValues)))
    return 0


# ---------------------------------------------------------------- linking (cuLink*)


class _LinkState:
    """A CUlinkState: the inputs gathered on the client; the server links them at cuLinkComplete."""

    def __init__(self, jit: tuple) -> None:
        self.handle = ffi.new("char[1]")  # its address is the CUlinkState the program holds
        self.jit = jit  # the program's (count, options, values): its log buffers get the linker's logs
        self.inputs: list[pb.LinkInput] = []
        self.cubin = None  # the linked image, kept until cuLinkDestroy (the program reads it in place)


_links: dict[int, _LinkState] = {}


def _link_state(state: int) -> _LinkState:
    link = _links.get(state)
    if link is None:
        raise rt.Fail(INVALID_HANDLE)
    return link


@ffi.def_extern(name="cuwire_py_cuLinkCreate_v2", onerror=rt.on_error)
def cuLinkCreate_v2(numOptions, options, optionValues, stateOut):
    if stateOut == ffi.NULL:
        raise rt.Fail(INVALID_VALUE)
    link = _LinkState((numOptions, options, optionValues))
    handle = int(ffi.cast("uintptr_t", link.handle))
    _links[handle] = link
    rt.write_scalar(stateOut, "uint64_t", handle)
    return 0


@ffi.def_extern(name="cuwire_py_cuLinkAddData_v2", onerror=rt.on_error)
def cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues):
    link = _link_state(state)
    if not data or not size:
        raise rt.Fail(INVALID_VALUE)
    label = rt.read_string(name) if name != ffi.NULL else ""
    link.inputs.append(pb.LinkInput(type=type, data=_bytes(data, size), name=label))
    return 0


@ffi.def_extern(name="cuwire_py_cuLinkAddFile_v2", onerror=rt.on_error)
def cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues):
    link = _link_state(state)
    link.inputs.append(pb.LinkInput(type=type, data=_read_file(path), name=rt.read_string(path)))
    return 0


@ffi.def_extern(name="cuwire_py_cuLinkComplete", onerror=rt.on_error)
def cuLinkComplete(state, cubinOut, sizeOut):
    link = _link_state(state)
    if cubinOut == ffi.NULL or sizeOut == ffi.NULL:
        raise rt.Fail(INVALID_VALUE)
    res = rt.call(rt.LINK, pb.Link_Args(inputs=link.inputs), pb.Link_Result)
    _hand_on_logs([res.error_log, res.info_log], *link.jit)
    if res.status != 0:
        return res.status
    link.cubin = ffi.new("char[]", res.cubin)
    rt.write_scalar(cubinOut, "uint64_t", int(ffi.cast("uintptr_t", link.cubin)))
    rt.write_scalar(sizeOut, "uint64_t", len(res.cubin))
    return 0


@ffi.def_extern(name="cuwire_py_cuLinkDestroy", onerror=rt.on_error)
def cuLinkDestroy(state):
    if _links.pop(state, None) is None:
        raise rt.Fail(INVALID_HANDLE)
    return 0


# ---------------------------------------------------------------- the driver's private module iterator


@ffi.def_extern(onerror=lambda *exc: 0)
def cuwire_py_module_functions(context, module, callback, userdata):
    """Slot 7 of the private table 6e163fbe (client/export_tables.c): call `callback(userdata, function,
    owner)` for each function of `module`, as the driver does for cuBLAS and cuFFT. The function handed
    over is a client copy of the server's function object (the libraries read fields of it); launches
    and calls through it reach the server's function."""
    res = rt.call(rt.MODULE_FUNCTIONS, pb.ModuleFunctions_Args(module=module, context=context),
                  pb.ModuleFunctions_Result)
    if res.status != 0:
        print(f"cuwire: the driver's module iterator failed on the server (error {res.status})", file=sys.stderr)
        return 0
    client = rt.client
    report = ffi.cast("void (*)(void *, void *, uint64_t)", callback)
    for f in res.functions:
        copy = ffi.new("char[]", f.object)
        handle = int(ffi.cast("uintptr_t", copy))
        client.function_objects[handle] = (f.function, copy)
        rt.give_layout_to_c(copy, rt.Kernel(f.function, tuple(f.param_offsets), tuple(f.param_sizes)))
        if callback:
            report(ffi.cast("void *", userdata), copy, f.owner)
    return res.count


@ffi.def_extern(onerror=lambda *exc: 0)
def cuwire_py_export_table_size(uuid):
    """The size of the server driver's private table `uuid` (client/export_tables.c), or 0."""
    res = rt.call(rt.EXPORT_TABLE_SIZE, pb.ExportTableSize_Args(uuid=bytes(ffi.buffer(uuid, 16))),
                  pb.ExportTableSize_Result)
    return res.size if res.status == 0 else 0


# ---------------------------------------------------------------- kernels, functions, globals


def _named(k, name: bytes):
    rt.client.kernel_names.setdefault(k.handle, ffi.new("char[]", name))
    return k.handle


@ffi.def_extern(name="cuwire_py_cuLibraryGetKernel", onerror=rt.on_error)
def cuLibraryGetKernel(pKernel, library, name):
    text = rt.read_string(name)
    k = rt.client.lookup_kernel(0, pb.GetKernel_Args(module=library, name=text))
    rt.write_scalar(pKernel, "uint64_t", _named(k, text.encode()))
    return 0


@ffi.def_extern(name="cuwire_py_cuModuleGetFunction", onerror=rt.on_error)
def cuModuleGetFunction(hfunc, hmod, name):
    text = rt.read_string(name)
    k = rt.client.lookup_kernel(0, pb.GetKernel_Args(module=hmod, name=text, from_module=True))
    rt.write_scalar(hfunc, "uint64_t", _named(k, text.encode()))
    return 0


def _enumerate(out, count: int, module: int, from_module: bool) -> int:
    """A library's kernels or a module's functions into the program's array, each known to the client from
    now on as a lookup's would be (its layout for queued launches, its name)."""
    if out == ffi.NULL:
        return INVALID_VALUE
    res = rt.call(rt.ENUMERATE, pb.Enumerate_Args(module=module, from_module=from_module, count=count),
                  pb.Enumerate_Result)
    if res.status != 0:
        return res.status
    if len(res.kernels) != count:
        raise rt.Fail(INVALID_VALUE, f"cuwire: the server enumerated {len(res.kernels)} kernels of {count}")
    for e in res.kernels:
        k = rt.Kernel(e.kernel, tuple(e.param_offsets), tuple(e.param_sizes))
        if e.name:
            rt.client.lookups[rt.lookup_key(pb.GetKernel_Args(module=module, name=e.name, from_module=from_module))] = k
            _named(k, e.name.encode())
        rt.give_layout_to_c(e.kernel, k)
    ffi.memmove(ffi.cast("char *", out), struct.pack(f"<{count}Q", *(e.kernel for e in res.kernels)), 8 * count)
    return 0


@ffi.def_extern(name="cuwire_py_cuLibraryEnumerateKernels", onerror=rt.on_error)
def cuLibraryEnumerateKernels(kernels, numKernels, lib):
    return _enumerate(kernels, numKernels, lib, False)


@ffi.def_extern(name="cuwire_py_cuModuleEnumerateFunctions", onerror=rt.on_error)
def cuModuleEnumerateFunctions(functions, numFunctions, mod):
    return _enumerate(functions, numFunctions, mod, True)


@ffi.def_extern(name="cuwire_py_cuKernelGetFunction", onerror=rt.on_error)
def cuKernelGetFunction(pFunc, kernel):
    k = rt.client.lookup_kernel(0, pb.GetKernel_Args(kernel=kernel))
    name = rt.client.kernel_names.get(kernel)
    rt.write_scalar(pFunc, "uint64_t", _named(k, ffi.string(name)) if name is not None else k.handle)
    return 0


def _get_name(out: int, handle: int) -> int:
    name = rt.client.kernel_names.get(handle)
    if name is None:
        return INVALID_HANDLE
    rt.write_scalar(ffi.cast("void *", out), "uint64_t", int(ffi.cast("uintptr_t", name)))
    return 0


@ffi.def_extern(name="cuwire_py_cuFuncGetName", onerror=rt.on_error)
def cuFuncGetName(name, hfunc):
    return _get_name(name, hfunc)


@ffi.def_extern(name="cuwire_py_cuKernelGetName", onerror=rt.on_error)
def cuKernelGetName(name, hfunc):
    return _get_name(name, hfunc)


def _global(dptr, size, module: int, name, from_module: bool) -> int:
    res = rt.call(rt.GET_GLOBAL, pb.GetGlobal_Args(module=module, name=rt.read_string(name), from_module=from_module),
                  pb.GetGlobal_Result)
    if res.status != 0:
        return res.status
    rt.client.track_alloc(res.address, res.size)
    if dptr != ffi.NULL:
        rt.write_scalar(dptr, "uint64_t", res.address)
    if size != ffi.NULL:
        rt.write_scalar(size, "uint64_t", res.size)
    return 0


@ffi.def_extern(name="cuwire_py_cuLibraryGetGlobal", onerror=rt.on_error)
def cuLibraryGetGlobal(dptr, bytes_, library, name):
    return _global(dptr, bytes_, library, name, False)


@ffi.def_extern(name="cuwire_py_cuModuleGetGlobal_v2", onerror=rt.on_error)
def cuModuleGetGlobal_v2(dptr, bytes_, hmod, name):
    return _global(dptr, bytes_, hmod, name, True)


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


# CUlaunchConfig: grid[3], block[3], shared memory (u32), stream, attrs (at 40), numAttrs (at 48);
# CUlaunchAttribute: 72 bytes, its id (u32) first, its value at 8 (a cluster dimension: x, y, z as u32)
_LAUNCH_ATTRIBUTE = 72
_CLUSTER_DIMENSION = 4
_SWEEP = 32  # cluster widths asked at once (server/custom.py, SWEEP_MOST)


class _ClusterAnswers:
    """cuOccupancyMaxActiveClusters's answers, kept: they depend only on the function, the launch
    configuration and the function's attributes, and a set of those (cuFuncSetAttribute...) forgets them
    all, as client/answers_cache.c forgets its own. cuBLASLt and cuDNN ask a kernel's clusters for each
    cluster width in turn, 1 to 32, the grid following the width: the first such question asks for all
    widths at once (a sweep), one round trip where there were 32. At most MOST answers are kept: past
    them, questions go to the server (a program that asks of ever new launch shapes costs no memory)."""

    MOST = 4096

    def __init__(self) -> None:
        self.answers: dict[tuple, tuple[int, int]] = {}  # key -> (status, clusters)
        self.swept: set[tuple] = set()
        self.generation = -1
        self.lock = threading.Lock()  # program threads ask at once

    def _fresh(self) -> None:
        now = lib.cuwire_answers_generation()
        if now != self.generation:
            self.answers.clear()
            self.swept.clear()
            self.generation = now

    @staticmethod
    def _width_at(body: bytes) -> int | None:
        """Where the cluster dimension's x is in the attributes, when the cluster is a row (y = z = 1)."""
        for i in range(0, len(body), _LAUNCH_ATTRIBUTE):
            kind, x, y, z = struct.unpack_from("<I4xIII", body, i)
            if kind == _CLUSTER_DIMENSION and x and y == 1 and z == 1:
                return i + 8
        return None

    def _keep(self, key: tuple, answer: tuple[int, int]) -> None:
        if len(self.answers) < self.MOST:
            self.answers[key] = answer

    def ask(self, func: int, raw: bytes, body: bytes, potential: bool) -> tuple[int, int]:
        """The answer for a function, its CUlaunchConfig's bytes and its attributes' bytes."""
        with self.lock:
            return self._ask(func, raw, body, potential)

    def _ask(self, func: int, raw: bytes, body: bytes, potential: bool) -> tuple[int, int]:
        self._fresh()
        head = raw[:40]  # what the configuration says, but where its attributes are
        key = (func, potential, head, body)
        if key in self.answers:
            return self.answers[key]
        at = None if potential else self._width_at(body)
        width = struct.unpack_from("<I", body, at)[0] if at is not None else 0
        grid_x = struct.unpack_from("<I", head)[0]
        sweep = at is not None and grid_x % width == 0
        if sweep:
            base = (func, head[4:], body[:at] + body[at + 4:], grid_x // width)
            sweep = base not in self.swept
        args = pb.MaxActiveClusters_Args(function=rt.server_function(func), config=head + bytes(8) + raw[48:],
                                         attributes=body, potential_size=potential, sweep=_SWEEP if sweep else 0)
        res = rt.call(rt.MAX_ACTIVE_CLUSTERS, args, pb.MaxActiveClusters_Result)
        self._keep(key, (res.status, res.clusters))
        if sweep and len(self.swept) < self.MOST:
            self.swept.add(base)
            for w, (status, clusters) in enumerate(zip(res.sweep_status, res.sweep_clusters, strict=False), start=1):
                wide = (func, potential, struct.pack("<I", grid_x // width * w) + head[4:],
                        body[:at] + struct.pack("<I", w) + body[at + 4:])
                self._keep(wide, (status, clusters))
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
    to give out as the program asks for them. `made` is how many came (at least one on success)."""
    rt.client.connect()
    res = rt.call(rt.MAKE_HANDLES, pb.MakeHandles_Args(kind=kind, flags=flags, priority=priority, count=count),
                  pb.MakeHandles_Result)
    if res.status == 0:
        handles = list(res.handles)[:count]
        if not handles:
            raise rt.Fail(INVALID_VALUE, "cuwire.MakeHandles: the server made none and said it succeeded")
        for i, h in enumerate(handles):
            out[i] = h
        made[0] = len(handles)
    return res.status


@ffi.def_extern(name="cuwire_py_function_attributes", onerror=rt.on_error)
def function_attributes(kernel, function, device, statuses, values, count):
    """cuwire.FunctionAttributes: every attribute of a kernel on a device (or of a function), for
    client/answers_cache.c to keep: each one's status and value, `count` of them at most (C leaves the
    rest as they were)."""
    rt.client.connect()
    args = pb.FunctionAttributes_Args(kernel=kernel, function=rt.server_function(function) if function else 0,
                                      device=device)
    res = rt.call(rt.FUNCTION_ATTRIBUTES, args, pb.FunctionAttributes_Result)
    n = min(count, len(res.statuses), len(res.values))
    for i in range(n):
        statuses[i], values[i] = res.statuses[i], res.values[i]
    return 0


# ---------------------------------------------------------------- 2D and 3D copies

# CUmemorytype
HOST, DEVICE, ARRAY, UNIFIED = 1, 2, 3, 4
# CUDA_MEMCPY2D, 64-bit: per side X, Y, memory type, host, device, array, pitch; then width and height
_COPY2D = struct.Struct("<QQI4xQQQQ" "QQI4xQQQQ" "QQ")
# CUDA_MEMCPY3D: per side X, Y, Z, LOD, memory type, host, device, array, reserved, pitch, height; then
# width, height, depth
_COPY3D = struct.Struct("<QQQQI4xQQQQQQ" "QQQQI4xQQQQQQ" "QQQ")


def _side(kind: int, host: int, device: int, array: int, x: int, y: int, z: int, pitch: int, rows: int,
          width: int, height: int, depth: int) -> tuple[pb.CopySide, int, int]:
    """A side of a copy for the wire, and where its bytes are in the program's memory when they are
    host memory (address, length; else 0, 0). Unified addresses are decided here, from the session's
    allocations."""
    if kind == ARRAY:
        return pb.CopySide(type=ARRAY, array=array, x=x, y=y, z=z), 0, 0
    slice_rows = rows if depth > 1 else 0
    start = (host if kind == HOST else device) + (z * slice_rows + y) * pitch + x
    length = ((depth - 1) * slice_rows + height - 1) * pitch + width
    if kind == DEVICE or kind == UNIFIED and rt.client.is_device(start):
        return pb.CopySide(type=DEVICE, device=device, x=x, y=y, z=z, pitch=pitch, height=rows), 0, 0
    if kind not in (HOST, UNIFIED):
        raise rt.Fail(INVALID_VALUE)
    return pb.CopySide(type=HOST, pitch=pitch, height=rows), start, length


def _copy(dims: int, fields: tuple, stream: int | None, unaligned: bool = False) -> int:
    """cuMemcpy2D/3D: host sides travel as bytes; device and array sides as the server's addresses and
    handles (the server checks them). A copy between two host sides is the client's own."""
    if dims == 2:
        (sx, sy, stype, shost, sdev, sarray, spitch, dx, dy, dtype, dhost, ddev, darray, dpitch, width,
         height) = fields
        sz = dz = 0
        srows = drows = depth = 1
    else:
        (sx, sy, sz, _, stype, shost, sdev, sarray, _, spitch, srows, dx, dy, dz, _, dtype, dhost, ddev, darray, _,
         dpitch, drows, width, height, depth) = fields
    if width == 0 or height == 0 or depth == 0:
        return 0
    src, src_at, src_len = _side(stype, shost, sdev, sarray, sx, sy, sz, spitch, srows, width, height, depth)
    dst, dst_at, dst_len = _side(dtype, dhost, ddev, darray, dx, dy, dz, dpitch, drows, width, height, depth)
    if src_at and dst_at:  # host to host: the client's own memory
        for k in range(depth):
            for row in range(height):
                ffi.memmove(ffi.cast("char *", dst_at + (k * drows * (depth > 1) + row) * dpitch),
                            ffi.cast("char *", src_at + (k * srows * (depth > 1) + row) * spitch), width)
        return 0
    if src_at:
        src.host = rt.read(ffi.cast("void *", src_at), src_len)
    if dst_at:  # the gaps between rows come back as they are
        dst.host = rt.read(ffi.cast("void *", dst_at), dst_len)
    args = pb.Copy3D_Args(dims=dims, unaligned=unaligned, src=src, dst=dst, width=width, height=height, depth=depth)
    if stream is not None:
        args.stream = stream
    if dst_at:
        rt.expect(ffi.cast("void *", dst_at), dst_len)
    res = rt.call(rt.COPY_3D, args, pb.Copy3D_Result)
    if dst_at and res.status == 0:
        rt.write(ffi.cast("void *", dst_at), res.dst, dst_len)
    return res.status


def _copy_2d(pCopy, stream: int | None, unaligned: bool = False) -> int:
    if pCopy == ffi.NULL:
        return INVALID_VALUE
    return _copy(2, _COPY2D.unpack(bytes(ffi.buffer(ffi.cast("char *", pCopy), _COPY2D.size))), stream, unaligned)


def _copy_3d(pCopy, stream: int | None) -> int:
    if pCopy == ffi.NULL:
        return INVALID_VALUE
    return _copy(3, _COPY3D.unpack(bytes(ffi.buffer(ffi.cast("char *", pCopy), _COPY3D.size))), stream)


@ffi.def_extern(name="cuwire_py_cuMemcpy2D_v2", onerror=rt.on_error)
def cuMemcpy2D_v2(pCopy, pCopy_len):
    return _copy_2d(pCopy, None)


@ffi.def_extern(name="cuwire_py_cuMemcpy2DUnaligned_v2", onerror=rt.on_error)
def cuMemcpy2DUnaligned_v2(pCopy, pCopy_len):
    return _copy_2d(pCopy, None, unaligned=True)


@ffi.def_extern(name="cuwire_py_cuMemcpy2DAsync_v2", onerror=rt.on_error)
def cuMemcpy2DAsync_v2(pCopy, pCopy_len, hStream):
    return _copy_2d(pCopy, hStream)


@ffi.def_extern(name="cuwire_py_cuMemcpy3D_v2", onerror=rt.on_error)
def cuMemcpy3D_v2(pCopy, pCopy_len):
    return _copy_3d(pCopy, None)


@ffi.def_extern(name="cuwire_py_cuMemcpy3DAsync_v2", onerror=rt.on_error)
def cuMemcpy3DAsync_v2(pCopy, pCopy_len, hStream):
    return _copy_3d(pCopy, hStream)


# ---------------------------------------------------------------- graphs' kernel nodes

# CUDA_KERNEL_NODE_PARAMS (v2): func, grid[3], block[3], shared memory, kernelParams, extra, kern, ctx
_KERNEL_NODE = struct.Struct("<Q7I4xQQQQ")
_PARAMS_MAX = 32 << 10  # the most parameter bytes a kernel takes (CUDA 12.1+)
ADD, SET, EXEC_SET, GET = 0, 1, 2, 3  # KernelNode_Args.action, BatchMemOpNode_Args.action
# node -> what the parameters last read back from it point to (its parameter values, its operations, its access
# descriptors): the client keeps them for the program, as CUDA keeps its own
_read_back: dict[int, object] = {}


def _kernel_node(nodeParams, action: int, **fields) -> pb.KernelNode_Result | int:
    """A kernel node's parameters for the server: its kernel as looked up, its parameters laid out as a
    launch's (client/local.c keeps every looked-up kernel's layout)."""
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
    args = pb.KernelNode_Args(action=action, kernel=handle[0], grid=[gx, gy, gz], block=[bx, by, bz],
                              shared_mem=shared, params=bytes(ffi.buffer(out, n)), **fields)
    return rt.call(rt.KERNEL_NODE, args, pb.KernelNode_Result)


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
    res = rt.call(rt.GRAPH_DOT, pb.GraphDot_Args(graph=hGraph, flags=flags), pb.GraphDot_Result)
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
    return rt.call(rt.BATCH_NODE, args, pb.BatchMemOpNode_Result)


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
    res = rt.call(rt.BATCH_NODE, pb.BatchMemOpNode_Args(action=GET, node=hNode), pb.BatchMemOpNode_Result)
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
    res = rt.call(rt.KERNEL_NODE_PARAMS, pb.KernelNodeParams_Args(node=hNode), pb.KernelNodeParams_Result)
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
                                                 id=host_id), pb.HostNode_Result)
    return _node_added(phGraphNode, res)


def _host_node_set(action: int, exec_: int, node: int, nodeParams) -> int:
    """A host node's new function and argument: kept under a new id, which the server's node posts from now on."""
    if nodeParams == ffi.NULL:
        return INVALID_VALUE
    host_id, err = _keep_host_fn(nodeParams)
    if not host_id:
        return err
    return rt.call(rt.HOST_NODE, pb.HostNode_Args(action=action, exec=exec_, node=node, id=host_id),
                   pb.HostNode_Result).status


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
    res = rt.call(rt.HOST_NODE, pb.HostNode_Args(action=pb.GET, node=hNode), pb.HostNode_Result)
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
    res = rt.call(rt.ALLOC_NODE_PARAMS, pb.AllocNodeParams_Args(node=hNode), pb.AllocNodeParams_Result)
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
MEM_ALLOC, CONDITIONAL = 10, 13  # CUgraphNodeType
ALLOC_ACCESS_AT, ALLOC_DPTR_AT = 16 + 88, 16 + 112  # CUDA_MEM_ALLOC_NODE_PARAMS_v2: accessDescs (+count), dptr
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
    if kind == MEM_ALLOC:
        descs, count = struct.unpack_from("<QQ", params, ALLOC_ACCESS_AT)
        if count and not descs:
            return INVALID_VALUE
        args.access = rt.read(ffi.cast("void *", descs), count * ACCESS_DESC_SIZE) if count else b""
    res = rt.call(rt.GRAPH_NODE, args, pb.GraphNode_Result)
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
    """A capture's graph and last nodes (client/driver_local.c): the arrays stay the stream's until its next
    cuStreamGetCaptureInfo, as CUDA keeps its own until the capture changes."""
    res = rt.call(rt.CAPTURE_INFO, pb.CaptureInfo_Args(stream=int(ffi.cast("uintptr_t", stream)),
                                                       edge_data=edges != ffi.NULL), pb.CaptureInfo_Result)
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
    res = rt.call(rt.GRAPH_NODES, args, pb.GraphNodes_Result)
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


# ---------------------------------------------------------------- errors


def _error_text(error: int, out: int, name: bool) -> int:
    if not out:
        return INVALID_VALUE
    text = rt.client.error_string(error, name=name)
    ffi.cast("uint64_t *", out)[0] = int(ffi.cast("uintptr_t", text))
    return 0 if text != ffi.NULL else INVALID_VALUE


@ffi.def_extern(name="cuwire_py_cuGetErrorString", onerror=rt.on_error)
def cuGetErrorString(error, pStr):
    return _error_text(error, pStr, False)


# ---------------------------------------------------------------- pointer attributes

# CUpointer_attribute values answered here, and their sizes
CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER = 1, 2, 3, 4
SYNC_MEMOPS, BUFFER_ID, IS_MANAGED, DEVICE_ORDINAL = 6, 7, 8, 9
RANGE_START_ADDR, RANGE_SIZE, MAPPED = 11, 12, 13


@ffi.def_extern(name="cuwire_py_cuPointerGetAttributes", onerror=rt.on_error)
def cuPointerGetAttributes(numAttributes, attributes, data, ptr):
    """What the client knows of its own session's memory: device allocations (and __device__ variables)
    are device memory of device 0; any other address is host memory CUDA does not know (type 0)."""
    attrs = ffi.cast("unsigned int *", attributes)
    out = ffi.cast("void **", data)
    for i in range(numAttributes):
        if out[i] != ffi.NULL:
            err = _pointer_attribute(attrs[i], out[i], ptr)
            if err:
                return err
    return 0


@ffi.def_extern(name="cuwire_py_cuPointerGetAttribute", onerror=rt.on_error)
def cuPointerGetAttribute(data, attribute, ptr):
    if not data:
        return INVALID_VALUE
    if rt.client.allocation_of(ptr) is None:
        return INVALID_VALUE  # one attribute of memory CUDA does not know: the driver refuses
    return _pointer_attribute(attribute, ffi.cast("void *", data), ptr)


@ffi.def_extern(name="cuwire_py_cuMemGetAddressRange_v2", onerror=rt.on_error)
def cuMemGetAddressRange_v2(pbase, psize, dptr):
    hit = rt.client.allocation(dptr)
    if hit is None:
        return NOT_FOUND
    if pbase != ffi.NULL:
        rt.write_scalar(pbase, "uint64_t", hit[0])
    if psize != ffi.NULL:
        rt.write_scalar(psize, "uint64_t", hit[1])
    return 0


def _pointer_attribute(a: int, slot, ptr: int) -> int:
    """Write one CUpointer_attribute of `ptr` into `slot`; 0, or INVALID_VALUE for one not answered here."""
    hit = rt.client.allocation(ptr)
    known = hit is not None
    base, size = hit or (0, 0)
    if a in (CONTEXT, DEVICE_POINTER, HOST_POINTER, BUFFER_ID, RANGE_START_ADDR, RANGE_SIZE):
        value = {CONTEXT: lib.cuwire_current_context() if known else 0, DEVICE_POINTER: ptr if known else 0,
                 HOST_POINTER: 0, BUFFER_ID: base, RANGE_START_ADDR: base, RANGE_SIZE: size}[a]
        ffi.cast("uint64_t *", slot)[0] = value
    elif a == MEMORY_TYPE:
        ffi.cast("unsigned int *", slot)[0] = DEVICE if known else 0
    elif a in (SYNC_MEMOPS, IS_MANAGED, MAPPED):  # booleans, read by the runtime as 32-bit
        ffi.cast("unsigned int *", slot)[0] = 1 if a == MAPPED and known else 0
    elif a == DEVICE_ORDINAL:
        ffi.cast("int *", slot)[0] = 0 if known else -2
    else:
        return INVALID_VALUE
    return 0
