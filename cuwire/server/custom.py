"""Server halves of cuwire's own operations: modules, kernels, __device__ variables, launches, error text.

Modules are loaded with cuLibraryLoadData (context-independent, once per server process, keyed by
content hash); kernels are CUkernel handles, launched through the CUfunction of the current context.
"""

from __future__ import annotations

import logging
import os
import struct
import time

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.server import graphs, peer_copy
from cuwire.server.errors import INVALID_HANDLE, INVALID_VALUE, NOT_SUPPORTED, CudaFail, WireError
from cuwire.wire import layouts

log = logging.getLogger("cuwire.server")


def op_id(name: str) -> int:
    return generated.OP_IDS[name]


LIBRARY, MODULE = "CUlib_st", "CUmod_st"


def _module(s, handle: int):
    handle = s.real(handle)
    if handle not in s.modules:
        raise WireError(f"module {handle:#x} was not loaded by this session")
    return s.ffi.cast("CUlibrary", handle)


def _cu_module(s, handle: int):
    """A CUmodule this session got (cuLibraryGetModule of one of its libraries)."""
    return s.handle(MODULE, "CUmodule", handle)


def load_module(s, a: pb.LoadModule_Args) -> pb.LoadModule_Result:
    if len(a.digest) != 32:
        raise WireError("module digest must be 32 bytes (sha256)")
    r = _load(s, a.digest, a.image, a.image_codec, a.as_module)
    if a.name and r.status == 0 and r.module:
        s.give_name(a.name, r.module)
    elif a.name and r.need_image:  # (a named load went unanswered: the client sends the bytes it may lack)
        log.warning("session %s: the image of the library named %#x is not in the module cache, and the "
                    "load did not bring it", s.name, a.name)
        r.status = cu.CUDA_ERROR_FILE_NOT_FOUND
    return r


def _load(s, digest: bytes, upload: bytes, codec: int, as_module: bool) -> pb.LoadModule_Result:
    """A module load (LoadModule, Preload): the image from `upload` (encoded with `codec`), or from the
    cache when that is empty (need_image when the cache lacks it)."""
    cache = s.server.modules
    r = pb.LoadModule_Result()
    s.room_for(LIBRARY)
    with cache.lock:
        handle = cache.loaded.get(digest)
        if handle is None:
            # kept on disk once the driver loaded it: junk never reaches the disk; an image the client sent
            # with its first request (client/runtime.py load_on) that the disk has is said to be cached
            uploaded = bool(upload) and not cache.path(digest).exists()
            if upload and not uploaded:
                r.cached = True
                cache.hits += 1
                cache.used(digest)
            if upload:
                image = s.server.decode(upload, codec)
                try:
                    cache.check(digest, image)
                except ValueError as e:
                    raise WireError(str(e)) from e
            else:
                image = cache.read(digest, s.pinned)
                if image is None:
                    r.need_image = True
                    return r
                r.cached = True
                cache.hits += 1
                log.info("module %s found in the cache: nothing uploaded", digest.hex()[:12])
            out = s.ffi.new("CUlibrary *")
            buf = s.ffi.new("char[]", image)
            options, values, logs = _jit_log_options(s.ffi)
            r.status = s.lib.cuLibraryLoadData(out, buf, options, values, len(options), s.ffi.NULL, s.ffi.NULL, 0)
            r.error_log, r.info_log = _log_texts(s.ffi, logs)
            if r.status != 0:
                return r
            if uploaded:
                cache.store(digest, image)
            handle = int(s.ffi.cast("uintptr_t", out[0]))
            cache.loaded[digest] = handle
        else:
            r.cached = True
            cache.hits += 1
            cache.used(digest)
            log.info("module %s already loaded: nothing uploaded", digest.hex()[:12])
    s.modules.add(handle)
    s.owns_handle(LIBRARY, handle)
    r.module = handle
    _describe_library(s, handle, r.kernels)
    if as_module:
        _library_module(s, handle, r)
    return r


MAX_PRELOAD = 1024  # modules a Preload may name (client/load_lists.py keeps as many)
MAX_PRELOAD_NAMES = 256  # lookups it may name per module
MAX_PRELOAD_QUESTIONS = 256  # occupancy questions it may ask per module (load_lists.MAX_QUESTIONS)
MAX_PRELOAD_HANDLE_KINDS = 64  # kinds of streams and events it may make (load_lists.MAX_HANDLE_KINDS)
ASK_OCCUPANCY, ASK_OCCUPANCY_FLAGS, ASK_AVAILABLE_SHARED, ASK_SET, ASK_ATTRIBUTES, ASK_CLUSTERS = (
    layouts.constant(n) for n in ("CW_ASK_OCCUPANCY", "CW_ASK_OCCUPANCY_FLAGS", "CW_ASK_AVAILABLE_SHARED",
                                  "CW_ASK_SET", "CW_ASK_ATTRIBUTES", "CW_ASK_CLUSTERS"))
CONFIG_HEAD, MAX_CONFIG_ATTRIBUTES, SET_FIRST, SET_COUNT = (  # (a cluster question's configuration; sets)
    layouts.constant(n) for n in ("CW_CLUSTER_CONFIG_HEAD", "CW_CLUSTER_ATTRIBUTES_MOST", "CW_SET_FIRST",
                                  "CW_SET_COUNT"))
SETTABLE = range(SET_FIRST, SET_FIRST + SET_COUNT)  # the attributes a question's sets may name
FOUND_KERNEL, FOUND_FUNCTION, FOUND_KERNEL_FUNCTION = (
    layouts.constant(n) for n in ("CW_FOUND_KERNEL", "CW_FOUND_FUNCTION", "CW_FOUND_KERNEL_FUNCTION"))
PRELOAD_REPLY = 16 << 20  # result bytes past which the rest of a Preload's modules are left to their loads


def keep_list(s, a: pb.KeepList_Args) -> pb.KeepList_Result:
    """cuwire.KeepList: the program's list as its run ends, kept for its next run on a client machine that has
    none (program_lists.py). A list not kept is logged, never the program's error: a list is only a hint."""
    name = s.server.program_list_name(s.hello)
    why = s.server.lists.keep(name, a.list) if name else "its hello named no program"
    if why:
        log.info("session %s: the program's list not kept: %s", s.name, why)
    return pb.KeepList_Result()


def preload(s, a: pb.Preload_Args) -> pb.Preload_Result:
    """cuwire.Preload: the modules the program loaded in its last run, each loaded as LoadModule would and
    looked up in as it was (a kernel's function in the current context), in one round trip at the
    program's first load. Only modules in the cache are loaded (nothing is uploaded ahead); one that
    fails, or a name not found, is left out: the program's own load or lookup then goes to the server and
    gets its error where CUDA gives it."""
    if len(a.modules) > MAX_PRELOAD:
        raise WireError(f"cuwire.Preload: {len(a.modules)} modules (at most {MAX_PRELOAD})")
    r, size, started = pb.Preload_Result(), 0, time.monotonic()
    for m in a.modules:
        if len(m.digest) != 32 or len(m.kernels) + len(m.functions) + len(m.kernel_functions) > MAX_PRELOAD_NAMES \
                or len(m.questions) > MAX_PRELOAD_QUESTIONS:
            raise WireError(f"cuwire.Preload: a digest of 32 bytes, at most {MAX_PRELOAD_NAMES} names and "
                            f"{MAX_PRELOAD_QUESTIONS} questions a module")
        try:
            load = _load(s, m.digest, b"", 0, m.as_module)
        except CudaFail:  # the session's handles are at CUWIRE_MAX_HANDLES: the rest load as the program asks
            break
        if load.need_image or load.status != 0:
            continue
        done = r.modules.add(digest=m.digest, as_module=m.as_module)
        done.load.CopyFrom(load)
        for names, out, module, from_module in ((m.kernels, done.kernels, load.module, False),
                                                (m.functions, done.functions, load.library_module, True)):
            for name in names if module else ():
                found = get_kernel(s, pb.GetKernel_Args(module=module, name=name, from_module=from_module))
                if found.status == 0:
                    out.add(name=name, kernel=found.kernel, param_offsets=found.param_offsets,
                            param_sizes=found.param_sizes, attribute_statuses=found.attribute_statuses,
                            attribute_values=found.attribute_values, attribute_device=found.attribute_device)
        kernels = {k.name: k.kernel for k in (*load.kernels, *done.kernels)}
        for name in m.kernel_functions:
            if name in kernels:
                found = get_kernel(s, pb.GetKernel_Args(kernel=kernels[name]))
                if found.status == 0:
                    done.kernel_functions.add(kernel=kernels[name], function=found.kernel,
                                              param_offsets=found.param_offsets, param_sizes=found.param_sizes,
                                              attribute_statuses=found.attribute_statuses,
                                              attribute_values=found.attribute_values)
        _answer_ahead(s, m.questions, done, kernels)
        size += done.ByteSize()
        if size > PRELOAD_REPLY:
            break
    if len(a.handles) > MAX_PRELOAD_HANDLE_KINDS:
        raise WireError(f"cuwire.Preload: {len(a.handles)} kinds of streams and events (at most "
                        f"{MAX_PRELOAD_HANDLE_KINDS})")
    for h in a.handles:  # (each checked as a MakeHandles of its own)
        try:
            r.made.append(make_handles(s, h))
        except CudaFail as e:  # the session's handles are at CUWIRE_MAX_HANDLES: the program's own go as asked
            r.made.append(pb.MakeHandles_Result(status=e.code))
    log.info("session %s: %d of the %d modules the program loaded in its last run loaded ahead in %.0f ms",
             s.name, len(r.modules), len(a.modules), (time.monotonic() - started) * 1e3)
    return r


def _int32(x: int) -> int:
    """An int the client kept as its 32 bits (client/answers_cache.c keys), as the int it was."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


class _Sets:
    """The attributes a module's questions were asked under, set on the kernels and functions the Preload
    found as each question says, and put back as the load left them once the module's questions are
    answered (the program then sets them itself, as it goes)."""

    def __init__(self, s, device: int | None) -> None:
        self.s, self.device = s, device
        self.out = s.ffi.new("int *")
        self.original: dict[tuple[int, bool, int], int] = {}  # (handle, is a CUkernel, attribute) -> value
        self.now: dict[tuple[int, bool, int], int] = {}

    def _get(self, handle: int, kernel: bool, attribute: int) -> int | None:
        lib, ffi = self.s.lib, self.s.ffi
        status = (lib.cuKernelGetAttribute(self.out, attribute, ffi.cast("CUkernel", handle), self.device) if kernel
                  else lib.cuFuncGetAttribute(self.out, attribute, ffi.cast("CUfunction", handle)))
        return self.out[0] if status == 0 else None

    def set(self, handle: int, kernel: bool, attribute: int, value: int) -> int:
        """Set one attribute (the driver's status), its value as the load left it read first."""
        lib, ffi = self.s.lib, self.s.ffi
        key = (handle, kernel, attribute)
        if key not in self.original:
            was = self._get(handle, kernel, attribute)
            if was is None:
                return INVALID_VALUE
            self.original[key] = self.now[key] = was
        if self.now[key] == value:
            return 0
        status = (lib.cuKernelSetAttribute(attribute, value, ffi.cast("CUkernel", handle), self.device) if kernel
                  else lib.cuFuncSetAttribute(ffi.cast("CUfunction", handle), attribute, value))
        if status == 0:
            self.now[key] = value
        return status

    def make(self, handle: int, kernel: bool, sets: dict[int, int]) -> bool:
        """The handle's attributes as `sets` say, the others as the load left them: whether all were made."""
        if kernel and self.device is None:
            return False
        targets = {a: v for (h, k, a), v in self.original.items() if h == handle and k == kernel}
        targets.update(sets)
        return all(self.set(handle, kernel, a, v) == 0 for a, v in sorted(targets.items()))

    def undo(self) -> None:
        for (handle, kernel, attribute), value in self.original.items():
            if self.set(handle, kernel, attribute, value) != 0:
                log.warning("cuwire.Preload: attribute %d of %#x could not be put back to %d", attribute, handle,
                            value)


def _answer_ahead(s, questions, done: pb.PreloadedModule, kernels: dict[str, int]) -> None:
    """The occupancy questions the program asked in its last run of the kernels and functions the Preload
    found (`kernels`: a library's, by name), answered as the driver answers them now, in the current context,
    each with the attributes set that the program had set by then (and put back after); a question the
    driver refuses, or of a name not found, is left to the program to ask. Of a set, whether it succeeds."""
    if not questions:
        return
    lib, ffi = s.lib, s.ffi
    name_of = {k: n for n, k in kernels.items()}
    handles = {FOUND_KERNEL: kernels,
               FOUND_FUNCTION: {f.name: f.kernel for f in (*done.load.functions, *done.functions)},
               FOUND_KERNEL_FUNCTION: {name_of[f.kernel]: f.function for f in done.kernel_functions}}
    blocks, shared, current = ffi.new("int *"), ffi.new("size_t *"), ffi.new("CUdevice *")
    device = current[0] if lib.cuCtxGetDevice(current) == 0 else None  # (a CUkernel's attributes are per device)
    made = _Sets(s, device)
    try:
        for q in questions:
            _answer_one(s, q, handles.get(q.which, {}).get(q.name), device, made, done, blocks, shared)
    finally:
        made.undo()


def _answer_one(s, q: pb.Question, handle: int | None, device, made: _Sets, done: pb.PreloadedModule, blocks,
                shared) -> None:
    """One question of _answer_ahead's, of `handle` (None: not found)."""
    lib, ffi = s.lib, s.ffi
    if handle is None or max(q.a, q.b, q.c) >= 1 << 63:
        return
    f, a, b = ffi.cast("CUfunction", handle), _int32(q.a), _int32(q.b)
    kernel = q.which == FOUND_KERNEL
    sets = dict(zip(q.set_attributes, q.set_values, strict=False))
    if q.ask == ASK_ATTRIBUTES:  # (of a CUkernel: on the current device, as FunctionAttributes asks)
        if (not kernel or device is not None) and made.make(handle, kernel, {}):  # (as loaded: no sets)
            got = done.attributes.add(handle=handle, function=not kernel, attribute_device=device if kernel else 0)
            _every_attribute(s, ffi.cast("CUkernel", handle) if kernel else f, device if kernel else None,
                             got.attribute_statuses, got.attribute_values)
        return
    if len(sets) != len(q.set_attributes) or not all(x in SETTABLE for x in sets) or \
            not made.make(handle, kernel, sets):
        return  # (asked under sets the driver does not take now: left to the program)
    if q.ask == ASK_CLUSTERS:
        _answer_clusters(s, q, handle, done)
        return
    if q.ask == ASK_SET:
        if q.a in SETTABLE:
            done.answers.add(ask=q.ask, handle=handle, a=q.a, b=q.b, c=q.c, value=made.set(handle, kernel, q.a, b),
                             set_attributes=q.set_attributes, set_values=q.set_values)
        return
    if q.ask == ASK_OCCUPANCY:
        status, value = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, a, q.b), blocks
    elif q.ask == ASK_OCCUPANCY_FLAGS:
        status, value = lib.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, a, q.b,
                                                                                 q.c & 0xFFFFFFFF), blocks
    elif q.ask == ASK_AVAILABLE_SHARED:
        status, value = lib.cuOccupancyAvailableDynamicSMemPerBlock(shared, f, a, b), shared
    else:
        return
    if status == 0:
        done.answers.add(ask=q.ask, handle=handle, a=q.a, b=q.b, c=q.c, value=value[0],
                         set_attributes=q.set_attributes, set_values=q.set_values)


def _answer_clusters(s, q: pb.Question, handle: int, done: pb.PreloadedModule) -> None:
    """A cluster question (CW_ASK_CLUSTERS): its configuration on no stream, a sweep of widths when asked."""
    ffi = s.ffi
    size = ffi.sizeof("CUlaunchAttribute")
    n, rest = divmod(len(q.config) - CONFIG_HEAD, size)
    if len(q.config) < CONFIG_HEAD or rest or n > MAX_CONFIG_ATTRIBUTES or q.a > 1 or q.b > SWEEP_MOST:
        return
    config = ffi.new("CUlaunchConfig *")
    (config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.blockDimY, config.blockDimZ,
     config.sharedMemBytes) = struct.unpack_from("<7I", q.config)
    attrs = ffi.new("CUlaunchAttribute[]", max(n, 1))
    ffi.memmove(attrs, q.config[CONFIG_HEAD:], n * size)
    config.attrs, config.numAttrs = (attrs if n else ffi.NULL), n
    status, clusters, widths = _clusters(s, ffi.cast("CUfunction", handle), config, attrs, n, bool(q.a), q.b)
    done.answers.add(ask=q.ask, handle=handle, a=q.a, b=q.b, c=q.c, value=clusters, status=status,
                     sweep_status=[w[0] for w in widths], sweep_clusters=[w[1] for w in widths],
                     set_attributes=q.set_attributes, set_values=q.set_values, config=q.config)


DESCRIBED_FUNCTIONS = 16  # a module of more has its functions looked up by name (describing loads each)


def _library_module(s, library: int, r: pb.LoadModule_Result) -> None:
    """A module load (cuModuleLoadData...): the library's module, as cuLibraryGetModule gives it, and the
    module's functions with their layouts, as cuModuleGetFunction would look them up (cuDNN loads modules
    of one kernel at a time: each costs one round trip, not three)."""
    lib, ffi = s.lib, s.ffi
    module, count = ffi.new("CUmodule *"), ffi.new("unsigned int *")
    s.room_for(MODULE)
    r.status = lib.cuLibraryGetModule(module, ffi.cast("CUlibrary", library))
    if r.status != 0:
        return
    r.library_module = int(ffi.cast("uintptr_t", module[0]))
    s.owns_handle(MODULE, r.library_module)
    if lib.cuModuleGetFunctionCount(count, module[0]) != 0 or not 0 < count[0] <= DESCRIBED_FUNCTIONS:
        return
    functions = ffi.new("CUfunction[]", count[0])
    if lib.cuModuleEnumerateFunctions(functions, count[0], module[0]) == 0:
        _describe_all(s, list(functions), "function", r.functions, attributes=True)


DESCRIBED_KERNELS = 256  # a library with more (PyTorch's have thousands) has its kernels looked up by name


def _describe_library(s, library: int, out) -> None:
    """Append the library's kernels, with their parameter layouts, to `out` (LoadModule_Result.kernels),
    and take them as this session's: the client then queues the first launch of each too. A library of
    many kernels is left to lookups one by one, so a large library costs no large reply."""
    lib, ffi = s.lib, s.ffi
    handle, count = ffi.cast("CUlibrary", library), ffi.new("unsigned int *")
    if lib.cuLibraryGetKernelCount(count, handle) != 0 or not 0 < count[0] <= DESCRIBED_KERNELS:
        return
    kernels = ffi.new("CUkernel[]", count[0])
    if lib.cuLibraryEnumerateKernels(kernels, count[0], handle) != 0:
        return
    _describe_all(s, list(kernels), "kernel", out, attributes=True)


DESCRIBED_ATTRIBUTES = 16  # a load of at most this many kernels or functions gives their attributes too


def _describe_all(s, handles: list, kind: str, out, attributes: bool = False) -> None:
    """Describe each of a library's kernels or a module's functions (kind "kernel" or "function") into `out`
    (LoadedKernel entries), with its name (empty where the driver gives none). With `attributes`, and few
    of them, every attribute of each too (a CUkernel's on the current device): the runtime asks them
    before a kernel's first launch, and a module of XLA's is loaded to be launched (its round trip saved)."""
    lib, ffi = s.lib, s.ffi
    name = ffi.new("const char **")
    get_name = lib.cuKernelGetName if kind == "kernel" else lib.cuFuncGetName
    attributes = attributes and len(handles) <= DESCRIBED_ATTRIBUTES
    device = None  # a function's attributes are its own; a CUkernel's are per device: the current one's
    if attributes and kind == "kernel":
        current = ffi.new("CUdevice *")
        attributes = lib.cuCtxGetDevice(current) == 0
        device = current[0]
    for h in handles:
        entry = out.add(name=ffi.string(name[0]).decode(errors="replace") if get_name(name, h) == 0 else "",
                        kernel=int(ffi.cast("uintptr_t", h)))
        if attributes:
            entry.attribute_device = device or 0
            _every_attribute(s, h, device, entry.attribute_statuses, entry.attribute_values)
        if kind == "kernel":  # launches take the CUkernel itself: the driver loads it into the current context
            _describe(s, entry.kernel, ffi.cast("CUfunction", h), "kernel", entry.param_offsets,
                      entry.param_sizes, lambda i, o, z, k=h: lib.cuKernelGetParamInfo(k, i, o, z))
        else:
            _describe(s, entry.kernel, h, "function", entry.param_offsets, entry.param_sizes)


MAX_ENUMERATED = 1 << 16


def enumerate_kernels(s, a: pb.Enumerate_Args) -> pb.Enumerate_Result:
    """cuwire.Enumerate (cuLibraryEnumerateKernels, cuModuleEnumerateFunctions)."""
    if a.count > MAX_ENUMERATED:
        raise CudaFail(INVALID_VALUE, f"{a.count} kernels asked for (cuwire enumerates {MAX_ENUMERATED} at most)")
    lib, ffi = s.lib, s.ffi
    r = pb.Enumerate_Result()
    if a.from_module:
        handles = ffi.new("CUfunction[]", max(a.count, 1))
        r.status = lib.cuModuleEnumerateFunctions(handles, a.count, _cu_module(s, a.module))
    else:
        handles = ffi.new("CUkernel[]", max(a.count, 1))
        r.status = lib.cuLibraryEnumerateKernels(handles, a.count, _module(s, a.module))
    if r.status == 0:
        _describe_all(s, list(handles)[:a.count], "function" if a.from_module else "kernel", r.kernels)
        for k in r.kernels:  # (a kernel the client named: the program holds its name)
            k.kernel = s.as_named(k.kernel)
    return r


JIT_LOG_SIZE = 16384


def _jit_log_options(ffi):
    """JIT options asking for the error and info logs (PTX compiled here), for the client to hand on."""
    names = ffi.typeof("CUjit_option").relements
    logs = [ffi.new("char[]", JIT_LOG_SIZE), ffi.new("char[]", JIT_LOG_SIZE)]
    options = ffi.new("CUjit_option[]", [names["CU_JIT_ERROR_LOG_BUFFER"], names["CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES"],
                                          names["CU_JIT_INFO_LOG_BUFFER"], names["CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES"]])
    values = ffi.new("void *[]", [logs[0], ffi.cast("void *", JIT_LOG_SIZE), logs[1], ffi.cast("void *", JIT_LOG_SIZE)])
    return options, values, logs


def _log_texts(ffi, logs) -> tuple[str, str]:
    """The error and info logs the JIT wrote into _jit_log_options' buffers."""
    error, info = (ffi.string(log).decode("utf-8", "replace") for log in logs)
    return error, info


def get_kernel(s, a: pb.GetKernel_Args) -> pb.GetKernel_Result:
    """A kernel (cuLibraryGetKernel), a function (cuModuleGetFunction) or a kernel's function
    (cuKernelGetFunction), with its parameter layout (the client queues launches of it from then on) and
    its attributes (the runtime asks them before its first launch)."""
    lib, ffi = s.lib, s.ffi
    r = pb.GetKernel_Result()
    func = ffi.new("CUfunction *")
    if a.name_as and a.from_module:
        raise WireError("only a library's kernel, or a kernel's function, may be named (GetKernel_Args.name_as)")
    if a.kernel:
        kernel = s.real(a.kernel)
        if kernel not in s.kernels or s.kernel_kind.get(kernel) != "kernel":
            raise CudaFail(INVALID_HANDLE, f"CUkernel {a.kernel:#x} was not looked up by this session")
        r.status = lib.cuKernelGetFunction(func, ffi.cast("CUkernel", kernel))
        handle, kind = func[0], "function"
    elif a.from_module:
        r.status = lib.cuModuleGetFunction(func, _cu_module(s, a.module), s.string(a.name))
        handle, kind = func[0], "function"
    else:
        kernel = ffi.new("CUkernel *")
        r.status = lib.cuLibraryGetKernel(kernel, _module(s, a.module), s.string(a.name))
        if r.status == 0:
            r.status = lib.cuKernelGetFunction(func, kernel[0])
        handle, kind = kernel[0], "kernel"
    if r.status != 0:
        return r
    r.kernel = int(ffi.cast("uintptr_t", handle))
    _describe(s, r.kernel, func[0], kind, r.param_offsets, r.param_sizes)
    if a.name_as:
        _name_kernel(s, a, r.kernel, r.param_offsets, r.param_sizes, kind)
    device = None  # (as _describe_all: a CUkernel's attributes are the current device's)
    if kind == "kernel":
        current = ffi.new("CUdevice *")
        if lib.cuCtxGetDevice(current) != 0:
            return r
        device = r.attribute_device = current[0]
    _every_attribute(s, handle, device, r.attribute_statuses, r.attribute_values)
    return r


def _name_kernel(s, a: pb.GetKernel_Args, kernel: int, offsets, sizes, kind: str) -> None:
    """A kernel or a kernel's function the client named (GetKernel_Args.name_as): launches name it as their
    key, other calls have the driver's handle for it; refused where the layout the client packs its
    launches by is not the driver's (its launches would reach the kernel with their parameters misplaced)."""
    if (list(a.expect_offsets), list(a.expect_sizes)) != (list(offsets), list(sizes)):
        why = (f"kernel {a.name!r} named {a.name_as:#x}: the client's parameter layout "
               f"{list(zip(a.expect_offsets, a.expect_sizes, strict=False))} is not the driver's "
               f"{list(zip(offsets, sizes, strict=True))}")
        log.warning("session %s: %s", s.name, why)
        raise CudaFail(cu.CUDA_ERROR_INVALID_IMAGE, why)
    s.give_name(a.name_as, kernel)
    s.records.kernel(a.name_as, int(s.ffi.cast("uintptr_t", s.kernels[kernel])), offsets, sizes,
                     is_kernel=kind == "kernel")


def _describe(s, handle: int, func, kind: str, offsets, sizes, param_info=None) -> None:
    """Append the parameter layout of `func` to offsets and sizes, and remember `handle` (a kernel or a
    function of this session) for its launches and for the calls that name it. `param_info(i, offset,
    size)` asks the driver for parameter i (default: cuFuncGetParamInfo of func)."""
    offset, size = s.ffi.new("size_t *"), s.ffi.new("size_t *")
    param_info = param_info or (lambda i, o, z: s.lib.cuFuncGetParamInfo(func, i, o, z))
    i = 0
    while param_info(i, offset, size) == 0:
        offsets.append(offset[0])
        sizes.append(size[0])
        i += 1
    if kind == "kernel":
        # a CUkernel is launched as itself, which the driver resolves in the context current at the launch:
        # the function cuKernelGetFunction gave is the lookup's context's, and another device's context
        # refuses it (CUDA_ERROR_INVALID_HANDLE: one process launching on two GPUs)
        func = s.ffi.cast("CUfunction", handle)
    s.kernels[handle] = func
    s.kernel_kind[handle] = kind
    s.layouts[handle] = (list(offsets), list(sizes))
    s.records.kernel(handle, int(s.ffi.cast("uintptr_t", func)), offsets, sizes, is_kernel=kind == "kernel")
    # the driver takes a CUkernel wherever it takes a CUfunction (cuFuncGetAttribute, launches)
    s.owns_handle("CUfunc_st", handle)
    if kind == "kernel":
        s.owns_handle("CUkern_st", handle)


def kernel_node_params(s, a: pb.KernelNodeParams_Args) -> pb.KernelNodeParams_Result:
    """cuwire.KernelNodeParams (cuGraphKernelNodeGetParams_v2). The driver may name a kernel's function this
    session never asked for itself (a node made from a CUkernel): it is described as a lookup's would be."""
    ffi = s.ffi
    p = ffi.new("CUDA_KERNEL_NODE_PARAMS *")
    r = pb.KernelNodeParams_Result(
        status=s.lib.cuGraphKernelNodeGetParams_v2(s.handle(graphs.NODE, "CUgraphNode", a.node), p))
    if r.status != 0:
        return r
    r.func, r.kern, r.ctx = (int(ffi.cast("uintptr_t", h)) for h in (p.func, p.kern, p.ctx))
    if r.func not in s.layouts:
        _describe(s, r.func, p.func, "function", [], [])
    offsets, sizes = s.layouts[r.func]
    if offsets and (p.extra != ffi.NULL or p.kernelParams == ffi.NULL):
        raise CudaFail(NOT_SUPPORTED, "a kernel node whose parameters the driver gives only as `extra`")
    params = bytearray(max((o + n for o, n in zip(offsets, sizes, strict=True)), default=0))
    for i, (o, n) in enumerate(zip(offsets, sizes, strict=True)):
        if p.kernelParams[i] == ffi.NULL:
            raise CudaFail(NOT_SUPPORTED, f"the driver gave no value for a kernel node's parameter {i}")
        params[o:o + n] = ffi.buffer(p.kernelParams[i], n)
    r.grid[:] = (p.gridDimX, p.gridDimY, p.gridDimZ)
    r.block[:] = (p.blockDimX, p.blockDimY, p.blockDimZ)
    r.shared_mem, r.params = p.sharedMemBytes, bytes(params)
    r.param_offsets[:], r.param_sizes[:] = offsets, sizes
    r.kern = s.as_named(r.kern)  # (a kernel the client named: the program holds its name)
    name = ffi.new("const char **")
    if s.lib.cuFuncGetName(name, p.func) == 0 and name[0] != ffi.NULL:
        r.func_name = ffi.string(name[0]).decode(errors="replace")
    if p.kern != ffi.NULL and s.lib.cuKernelGetName(name, p.kern) == 0 and name[0] != ffi.NULL:
        r.kern_name = ffi.string(name[0]).decode(errors="replace")
    return r


def get_global(s, a: pb.GetGlobal_Args) -> pb.GetGlobal_Result:
    r = pb.GetGlobal_Result()
    dptr, size = s.ffi.new("CUdeviceptr *"), s.ffi.new("size_t *")
    if a.from_module:
        r.status = s.lib.cuModuleGetGlobal_v2(dptr, size, _cu_module(s, a.module), s.string(a.name))
    else:
        r.status = s.lib.cuLibraryGetGlobal(dptr, size, _module(s, a.module), s.string(a.name))
    if r.status == 0:
        r.address, r.size = dptr[0], size[0]
        s.owns_global(r.address, r.size)
    return r


def launch_kernel(s, a: pb.LaunchKernel_Args) -> pb.LaunchKernel_Result:
    """A launch that waits for its answer; queued launches run in the session's C loop (records.c)."""
    if len(a.grid) != 3 or len(a.block) != 3:
        raise WireError("grid and block need three dimensions each")
    return pb.LaunchKernel_Result(status=s.records.launch(a.kernel, a.grid, a.block, a.shared_mem, a.stream,
                                                          a.params))


MODULE_ITERATOR = bytes.fromhex("6e163fbeb958444d835ce182aff1991e")  # the driver's private table, slot 7
FUNCTION_OBJECT_BYTES = 0x500  # how much of each function's driver object the client gets a copy of


def module_functions(s, a: pb.ModuleFunctions_Args) -> pb.ModuleFunctions_Result:
    """Run the driver's private module iterator on a module of this session, collecting every function."""
    ffi, lib = s.ffi, s.lib
    _cu_module(s, a.module)  # a module of this session, or refused
    r = pb.ModuleFunctions_Result()
    get_table = getattr(lib, "cuGetExportTable", None)
    table = ffi.new("const void **")
    uuid = ffi.new("CUuuid *")
    ffi.memmove(uuid, MODULE_ITERATOR, 16)
    if get_table is None or get_table(table, uuid) != 0 or table[0] == ffi.NULL:
        r.status = 801  # the emulated device has no private tables
        return r
    slots = ffi.cast("uint64_t *", table[0])
    if slots[0] <= 7 * 8 or not slots[7]:
        r.status = 500
        return r
    found: list[tuple[int, int]] = []

    @ffi.callback("void(void *, void *, uint64_t)")
    def collect(_opaque, node, owner):
        found.append((int(ffi.cast("uintptr_t", node)), owner))

    iterate = ffi.cast("uint64_t(*)(uint64_t, uint64_t, void *, void *, uint64_t, uint64_t)", slots[7])
    r.count = iterate(a.context, a.module, collect, ffi.NULL, a.module, 0)
    for node, owner in found:
        f = r.functions.add(function=node, owner=owner,
                            object=bytes(ffi.buffer(ffi.cast("char *", node), FUNCTION_OBJECT_BYTES)))
        _describe(s, node, ffi.cast("CUfunction", node), "function", f.param_offsets, f.param_sizes)
    return r


SWEEP_MOST = 32  # cluster widths a MaxActiveClusters sweep may ask (the largest cluster is 16 blocks today)
CLUSTER_DIMENSION = cu.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION


def max_active_clusters(s, a: pb.MaxActiveClusters_Args) -> pb.MaxActiveClusters_Result:
    ffi = s.ffi
    config = s.struct_in("CUlaunchConfig", a.config)
    n = config.numAttrs
    if len(a.attributes) != n * ffi.sizeof("CUlaunchAttribute"):
        raise WireError(f"cuOccupancyMaxActiveClusters: {len(a.attributes)} bytes for {n} launch attributes")
    if a.sweep > SWEEP_MOST:
        raise WireError(f"cuwire.MaxActiveClusters: a sweep of {a.sweep} cluster widths (at most {SWEEP_MOST})")
    attrs = ffi.new("CUlaunchAttribute[]", max(n, 1))
    ffi.memmove(attrs, a.attributes, len(a.attributes))
    config.attrs = attrs if n else ffi.NULL
    config.hStream = s.handle("CUstream_st", "CUstream", int(ffi.cast("uintptr_t", config.hStream)))
    function = s.handle("CUfunc_st", "CUfunction", a.function)
    status, clusters, widths = _clusters(s, function, config, attrs, n, a.potential_size, a.sweep)
    return pb.MaxActiveClusters_Result(status=status, clusters=clusters, sweep_status=[w[0] for w in widths],
                                       sweep_clusters=[w[1] for w in widths])


def _clusters(s, function, config, attrs, n: int, potential: bool, sweep: int) -> tuple[int, int, list]:
    """The driver's answer for a configuration (its `n` attributes in attrs), and when `sweep`, for each
    cluster width 1..sweep (status, clusters), the grid's x keeping its multiple of the width."""
    out = s.ffi.new("int *")
    ask = s.lib.cuOccupancyMaxPotentialClusterSize if potential else s.lib.cuOccupancyMaxActiveClusters
    status = ask(out, function, config)
    clusters, widths = out[0], []
    cluster = next((attrs[i].value.clusterDim for i in range(n) if attrs[i].id == CLUSTER_DIMENSION), None)
    if sweep and cluster is not None and cluster.x and config.gridDimX % cluster.x == 0:
        per_cluster = config.gridDimX // cluster.x
        for width in range(1, sweep + 1):
            cluster.x, config.gridDimX = width, per_cluster * width
            st = ask(out, function, config)
            widths.append((st, out[0] if st == 0 else 0))
    return status, clusters, widths


MAKE_AT_ONCE = layouts.constant("CW_MAKE_AT_ONCE")  # handles one MakeHandles makes (the client asks 4, then 8...)
STREAMS, EVENTS = 0, 1  # MakeHandles_Args.kind


def make_handles(s, a: pb.MakeHandles_Args) -> pb.MakeHandles_Result:
    """cuwire.MakeHandles: streams or events made ahead of the program's asking (client/handle_pools.c), each
    as its own cuStreamCreateWithPriority or cuEventCreate would make it, within the session's handle limit."""
    if not 0 < a.count <= MAKE_AT_ONCE or a.kind not in (STREAMS, EVENTS):
        raise WireError(f"cuwire.MakeHandles: {a.count} handles of kind {a.kind} (at most {MAKE_AT_ONCE}, of "
                        "kind 0 or 1)")
    kind, ctype = ("CUstream_st", "CUstream *") if a.kind == STREAMS else ("CUevent_st", "CUevent *")
    out, r = s.ffi.new(ctype), pb.MakeHandles_Result()
    for _ in range(a.count):
        try:
            s.room_for(kind)
        except CudaFail as e:
            if not r.handles:
                raise
            log.debug("session %s: made %d of %d handles: %s", s.name, len(r.handles), a.count, e)
            break
        status = (s.lib.cuStreamCreateWithPriority(out, a.flags, a.priority) if a.kind == STREAMS
                  else s.lib.cuEventCreate(out, a.flags))
        if status != 0:
            if not r.handles:
                r.status = status
            break
        r.handles.append(int(s.ffi.cast("uintptr_t", out[0])))
        s.owns_handle(kind, r.handles[-1])
    return r


def function_attributes(s, a: pb.FunctionAttributes_Args) -> pb.FunctionAttributes_Result:
    """cuwire.FunctionAttributes: every attribute of a kernel on a device, or of a function, at once."""
    r = pb.FunctionAttributes_Result()
    if a.kernel:
        _every_attribute(s, s.handle("CUkern_st", "CUkernel", a.kernel), a.device, r.statuses, r.values)
    else:
        _every_attribute(s, s.handle("CUfunc_st", "CUfunction", a.function), None, r.statuses, r.values)
    return r


def _every_attribute(s, handle, device: int | None, statuses, values) -> None:
    """Append each attribute's status and value (0 where it failed) of a CUkernel on `device`, or with
    device None of a CUfunction."""
    out = s.ffi.new("int *")
    if device is not None:
        ask = lambda attribute: s.lib.cuKernelGetAttribute(out, attribute, handle, device)  # noqa: E731
    else:
        ask = lambda attribute: s.lib.cuFuncGetAttribute(out, attribute, handle)  # noqa: E731
    for attribute in range(s.ffi.typeof("CUfunction_attribute").relements["CU_FUNC_ATTRIBUTE_MAX"]):
        status = ask(attribute)
        statuses.append(status)
        values.append(out[0] if status == 0 else 0)


JIT_INPUT_TYPES = (cu.CU_JIT_INPUT_CUBIN, cu.CU_JIT_INPUT_PTX, cu.CU_JIT_INPUT_FATBINARY, cu.CU_JIT_INPUT_OBJECT,
                   cu.CU_JIT_INPUT_LIBRARY)


def link(s, a: pb.Link_Args) -> pb.Link_Result:
    """cuLinkCreate, cuLinkAddData for each input, cuLinkComplete and cuLinkDestroy, in one call: the
    linked cubin and the logs go back; nothing stays on the server."""
    ffi, r = s.ffi, pb.Link_Result()
    for i in a.inputs:
        s.check_size(len(i.data))
        if i.type not in JIT_INPUT_TYPES:
            raise CudaFail(INVALID_VALUE, f"cuLinkAddData: input type {i.type} is not a CUjitInputType")
    options, values, logs = _jit_log_options(ffi)
    state = ffi.new("CUlinkState *")
    r.status = s.lib.cuLinkCreate_v2(len(options), options, values, state)
    if r.status != 0:
        return r
    try:
        for i in a.inputs:
            data = ffi.new("char[]", i.data)
            r.status = s.lib.cuLinkAddData_v2(state[0], i.type, data, len(i.data), s.string(i.name), 0, ffi.NULL,
                                              ffi.NULL)
            if r.status != 0:
                return r
        cubin, size = ffi.new("void **"), ffi.new("size_t *")
        r.status = s.lib.cuLinkComplete(state[0], cubin, size)
        if r.status == 0:
            r.cubin = bytes(ffi.buffer(cubin[0], size[0]))
        return r
    finally:
        r.error_log, r.info_log = _log_texts(ffi, logs)
        s.lib.cuLinkDestroy(state[0])


MAX_TABLE_BYTES = 4096  # a first word above this (or not a multiple of 8) is a pointer, not a size


def export_table_size(s, a: pb.ExportTableSize_Args) -> pb.ExportTableSize_Result:
    ffi = s.ffi
    if len(a.uuid) != 16:
        raise WireError("an export table's UUID is 16 bytes")
    get_table = getattr(s.lib, "cuGetExportTable", None)
    table, uuid = ffi.new("const void **"), ffi.new("CUuuid *")
    ffi.memmove(uuid, a.uuid, 16)
    r = pb.ExportTableSize_Result()
    r.status = get_table(table, uuid) if get_table is not None else 801
    if r.status == 0 and table[0] != ffi.NULL:
        first = ffi.cast("uint64_t *", table[0])[0]
        r.size = first if 0 < first <= MAX_TABLE_BYTES and first % 8 == 0 else 0
    return r


def error_string(s, a: pb.ErrorString_Args) -> pb.ErrorString_Result:
    r = pb.ErrorString_Result()
    if a.nvml:
        p = s.lib.nvmlErrorString(a.error)
        r.text = s.ffi.string(p).decode() if p != s.ffi.NULL else ""
    else:
        text = s.ffi.new("const char **")
        r.status = (s.lib.cuGetErrorName if a.name else s.lib.cuGetErrorString)(a.error, text)
        r.text = s.ffi.string(text[0]).decode() if r.status == 0 and text[0] != s.ffi.NULL else ""
    return r


RUNNING_PROCESSES = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
                     "nvmlDeviceGetMPSComputeRunningProcesses_v3")  # by RunningProcesses_Args.kind


def running_processes(s, a: pb.RunningProcesses_Args) -> pb.RunningProcesses_Result:
    """The device's processes as the session may see them: its own only (the session always has a CUDA
    context, so a compute process), under the client's pid, with NVML's figure for its process's GPU memory;
    what it allocated where NVML does not list the process (sessions sharing one, or a server in a PID
    namespace of its own, whose pids NVML does not give)."""
    if a.kind >= len(RUNNING_PROCESSES):
        return pb.RunningProcesses_Result(status=cu.NVML_ERROR_INVALID_ARGUMENT)
    ask = getattr(s.lib, RUNNING_PROCESSES[a.kind])
    device = s.handle("nvmlDevice_st", "nvmlDevice_t", a.device)
    count, infos = s.ffi.new("unsigned int *", 0), s.ffi.NULL
    status = ask(device, count, infos)
    while status == cu.NVML_ERROR_INSUFFICIENT_SIZE:  # (processes may come between the two asks)
        count[0] += 8
        infos = s.ffi.new("nvmlProcessInfo_t[]", count[0])
        status = ask(device, count, infos)
    r = pb.RunningProcesses_Result(status=status)
    if status == 0 and RUNNING_PROCESSES[a.kind] == "nvmlDeviceGetComputeRunningProcesses_v3":
        own = [infos[i].usedGpuMemory for i in range(count[0]) if infos[i].pid == os.getpid()]
        r.pids.append(s.hello.pid)
        r.used_memory.append(own[0] if own and s.server.settings.isolation == "process" else s.allocated)
    return r


MEMORY_HOST, MEMORY_DEVICE, MEMORY_ARRAY = cu.CU_MEMORYTYPE_HOST, cu.CU_MEMORYTYPE_DEVICE, cu.CU_MEMORYTYPE_ARRAY
ARRAY_KIND = "CUarray_st"


def _copy_side(s, side: pb.CopySide, a: pb.Copy3D_Args, is_dst: bool):
    """(memory type, host buffer or NULL, device address, CUarray, its length in bytes): a side of a copy,
    checked. A host side is a server buffer holding the client's bytes (offsets folded in); a device side
    must lie in the session's memory; an array must be the session's (the driver checks the extent)."""
    ffi = s.ffi
    if side.type == MEMORY_ARRAY:
        return MEMORY_ARRAY, ffi.NULL, 0, s.handle(ARRAY_KIND, "CUarray", side.array), 0
    if side.type not in (MEMORY_HOST, MEMORY_DEVICE):
        raise WireError(f"a copy side of memory type {side.type}")
    if side.type == MEMORY_HOST:
        length = s.pitched_length(side.pitch, side.height, a.width, a.height, a.depth)
        buffer = s.inout_buffer(side.host, length) if is_dst else s.in_buffer(side.host, length)
        return MEMORY_HOST, buffer, 0, ffi.NULL, length
    length = s.pitched_device(side.device, side.x, side.y, side.z, side.pitch, side.height, a.width, a.height,
                              a.depth)
    return MEMORY_DEVICE, ffi.NULL, side.device, ffi.NULL, length


def copy_3d(s, a: pb.Copy3D_Args) -> pb.Copy3D_Result:
    """cuMemcpy2D and cuMemcpy3D (and the Async forms), with the client's host sides in server buffers; a
    copy that touches them is complete before the reply goes (the buffers live only as long as this call)."""
    if a.dims not in (2, 3) or a.dims == 2 and a.depth != 1:
        raise WireError(f"a {a.dims}D copy of depth {a.depth}")
    if not (a.width and a.height and a.depth):
        return pb.Copy3D_Result(status=0)
    ffi, lib = s.ffi, s.lib
    src, dst = _copy_side(s, a.src, a, False), _copy_side(s, a.dst, a, True)
    copy = ffi.new("CUDA_MEMCPY2D *" if a.dims == 2 else "CUDA_MEMCPY3D *")
    copy.srcMemoryType, copy.srcHost, copy.srcDevice, copy.srcArray = src[:4]
    copy.dstMemoryType, copy.dstHost, copy.dstDevice, copy.dstArray = dst[:4]
    src_at = (0, 0, 0) if src[0] == MEMORY_HOST else (a.src.x, a.src.y, a.src.z)  # a host side's are folded in
    dst_at = (0, 0, 0) if dst[0] == MEMORY_HOST else (a.dst.x, a.dst.y, a.dst.z)
    copy.srcXInBytes, copy.srcY, copy.srcPitch = src_at[0], src_at[1], a.src.pitch
    copy.dstXInBytes, copy.dstY, copy.dstPitch = dst_at[0], dst_at[1], a.dst.pitch
    copy.WidthInBytes, copy.Height = a.width, a.height
    if a.dims == 3:
        copy.srcZ, copy.srcHeight, copy.dstZ, copy.dstHeight = src_at[2], a.src.height, dst_at[2], a.dst.height
        copy.Depth = a.depth
    on_host = MEMORY_HOST in (src[0], dst[0])
    if a.HasField("stream"):
        stream = s.handle("CUstream_st", "CUstream", a.stream)
        status = (lib.cuMemcpy2DAsync_v2 if a.dims == 2 else lib.cuMemcpy3DAsync_v2)(copy, stream)
        if status == 0 and on_host:
            status = lib.cuStreamSynchronize(stream)
    elif a.dims == 2:
        status = (lib.cuMemcpy2DUnaligned_v2 if a.unaligned else lib.cuMemcpy2D_v2)(copy)
    else:
        status = lib.cuMemcpy3D_v2(copy)
    r = pb.Copy3D_Result(status=status)
    if dst[0] == MEMORY_HOST and status == 0:
        r.dst = s.take(dst[1], dst[4])
    return r


def register_host(s, a: pb.RegisterHost_Args) -> pb.RegisterHost_Result:
    if a.HasField("file"):
        return pb.RegisterHost_Result(status=s.register_file(a.at, a.size, a.file))
    if a.anonymous:
        return pb.RegisterHost_Result(status=s.map_host(a.at, a.size))
    return pb.RegisterHost_Result(status=s.register_host(a.offset, a.size, a.at))


def unregister_host(s, a: pb.UnregisterHost_Args) -> pb.UnregisterHost_Result:
    return pb.UnregisterHost_Result(status=s.unregister_at(a.at) if a.at else s.unregister_host(a.offset))


def managed_alloc(s, a: pb.ManagedAlloc_Args) -> pb.ManagedAlloc_Result:
    """Managed memory for a client over TCP: the session's like cuMemAlloc's (its budget, its ranges,
    freed with cuMemFree or when it ends); the client maps the same address for its host copy."""
    if a.size == 0 or a.flags not in (cu.CU_MEM_ATTACH_GLOBAL, cu.CU_MEM_ATTACH_HOST):
        return pb.ManagedAlloc_Result(status=INVALID_VALUE)
    s.reserve(a.size)
    out = s.ffi.new("CUdeviceptr *")
    r = pb.ManagedAlloc_Result(status=s.lib.cuMemAllocManaged(out, a.size, 1))  # both sides use it: global
    if r.status == 0:
        r.address = out[0]
        s.owns(r.address, a.size)
    return r


def _in_relaxed_capture(handler):
    """The handler, run with the session thread's stream capture mode relaxed. A program may load a module
    and look up its kernels while it captures (XLA does, inside its own captures); the steps the server adds
    to them (describing each kernel, which loads it into the context) are calls a capture would prohibit."""
    def run(s, a):
        return s.relaxed_capture(lambda: handler(s, a))
    return run


# id -> (name, Args message, handler), looked up like generated.HANDLERS
OPS = {
    op_id("LoadModule"): ("cuwire.LoadModule", pb.LoadModule_Args, _in_relaxed_capture(load_module)),
    op_id("GetKernel"): ("cuwire.GetKernel", pb.GetKernel_Args, _in_relaxed_capture(get_kernel)),
    op_id("GetGlobal"): ("cuwire.GetGlobal", pb.GetGlobal_Args, get_global),
    op_id("LaunchKernel"): ("cuwire.LaunchKernel", pb.LaunchKernel_Args, launch_kernel),
    op_id("ErrorString"): ("cuwire.ErrorString", pb.ErrorString_Args, error_string),
    op_id("ModuleFunctions"): ("cuwire.ModuleFunctions", pb.ModuleFunctions_Args, module_functions),
    op_id("MaxActiveClusters"): ("cuwire.MaxActiveClusters", pb.MaxActiveClusters_Args, max_active_clusters),
    op_id("ExportTableSize"): ("cuwire.ExportTableSize", pb.ExportTableSize_Args, export_table_size),
    op_id("Link"): ("cuwire.Link", pb.Link_Args, link),
    op_id("Copy3D"): ("cuwire.Copy3D", pb.Copy3D_Args, copy_3d),
    op_id("KernelNode"): ("cuwire.KernelNode", pb.KernelNode_Args, graphs.kernel_node),
    op_id("HostNode"): ("cuwire.HostNode", pb.HostNode_Args, graphs.host_node),
    op_id("GraphNodes"): ("cuwire.GraphNodes", pb.GraphNodes_Args, graphs.graph_nodes),
    op_id("GraphNode"): ("cuwire.GraphNode", pb.GraphNode_Args, graphs.graph_node),
    op_id("CaptureInfo"): ("cuwire.CaptureInfo", pb.CaptureInfo_Args, graphs.capture_info),
    op_id("AllocNodeParams"): ("cuwire.AllocNodeParams", pb.AllocNodeParams_Args, graphs.alloc_node_params),
    op_id("KernelNodeParams"): ("cuwire.KernelNodeParams", pb.KernelNodeParams_Args, kernel_node_params),
    op_id("BatchMemOpNode"): ("cuwire.BatchMemOpNode", pb.BatchMemOpNode_Args, graphs.batch_node),
    op_id("GraphDot"): ("cuwire.GraphDot", pb.GraphDot_Args, graphs.graph_dot),
    op_id("Enumerate"): ("cuwire.Enumerate", pb.Enumerate_Args, enumerate_kernels),
    op_id("RegisterHost"): ("cuwire.RegisterHost", pb.RegisterHost_Args, register_host),
    op_id("UnregisterHost"): ("cuwire.UnregisterHost", pb.UnregisterHost_Args, unregister_host),
    op_id("ManagedAlloc"): ("cuwire.ManagedAlloc", pb.ManagedAlloc_Args, managed_alloc),
    op_id("MakeHandles"): ("cuwire.MakeHandles", pb.MakeHandles_Args, make_handles),
    op_id("FunctionAttributes"): ("cuwire.FunctionAttributes", pb.FunctionAttributes_Args, function_attributes),
    op_id("RunningProcesses"): ("cuwire.RunningProcesses", pb.RunningProcesses_Args, running_processes),
    op_id("Preload"): ("cuwire.Preload", pb.Preload_Args, _in_relaxed_capture(preload)),
    op_id("KeepList"): ("cuwire.KeepList", pb.KeepList_Args, keep_list),
    op_id("PeerOffer"): ("cuwire.PeerOffer", pb.PeerOffer_Args, peer_copy.offer),
    op_id("PeerFetch"): ("cuwire.PeerFetch", pb.PeerFetch_Args, peer_copy.fetch),
}

# cuwire's own queued records, run by the session's C loop (records.c) with the generated ones
RECORD_OPS = {op_id(name): f"cuwire.{name}"
              for name in ("SetContext", "LaunchKernel", "LaunchKernelEx", "CopyToDevice", "CopyShared", "HostFunc",
                           "KernelNodeSet")}
