"""Hand-written Python halves of module and library loading, linking and lookups: module images are read from
the program's memory and sent through the server's module cache, and kernel and function lookups hand their
parameter layout to the C launch path (client/launches.c).

NVIDIA's runtime loads every fatbin a program registers with cuLibraryLoadData, so these are the paths every
kernel of every CUDA library takes.
"""

from __future__ import annotations

import struct
import sys

from _cuwire import ffi, lib

from cuwire import fatbin
from cuwire.client import runtime as rt
from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb

FILE_NOT_FOUND, INVALID_HANDLE, INVALID_IMAGE, INVALID_VALUE = (
    cu.CUDA_ERROR_FILE_NOT_FOUND, cu.CUDA_ERROR_INVALID_HANDLE, cu.CUDA_ERROR_INVALID_IMAGE,
    cu.CUDA_ERROR_INVALID_VALUE)
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


# The JIT options of the logs the JIT writes: the server's JIT fills them, the client copies
INFO_LOG, INFO_LOG_SIZE, ERROR_LOG, ERROR_LOG_SIZE = (cu.CU_JIT_INFO_LOG_BUFFER, cu.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                                                      cu.CU_JIT_ERROR_LOG_BUFFER, cu.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)


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
    now on as a lookup's would be (its layout for queued launches, its name). Asked of the library's or
    module's server; a device list's library: each kernel looked up on the other servers too, as a lookup by
    name is, so that it launches on every device (its aliases, runtime.look_up_elsewhere)."""
    if out == ffi.NULL:
        return INVALID_VALUE
    route = rt.client.lookup_route(pb.GetKernel_Args(module=module, from_module=from_module))
    res = rt.call(rt.ENUMERATE, pb.Enumerate_Args(module=module, from_module=from_module, count=count),
                  pb.Enumerate_Result, route)
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
        if rt.client.listed and not from_module and e.name:
            rt.client.look_up_elsewhere(pb.GetKernel_Args(module=module, name=e.name), e.kernel, route)
    ffi.memmove(ffi.cast("char *", out), struct.pack(f"<{count}Q", *(e.kernel for e in res.kernels)), 8 * count)
    return 0


@ffi.def_extern(name="cuwire_py_cuLibraryEnumerateKernels", onerror=rt.on_error)
def cuLibraryEnumerateKernels(kernels, numKernels, library):
    return _enumerate(kernels, numKernels, library, False)


@ffi.def_extern(name="cuwire_py_cuModuleEnumerateFunctions", onerror=rt.on_error)
def cuModuleEnumerateFunctions(functions, numFunctions, mod):
    return _enumerate(functions, numFunctions, mod, True)


@ffi.def_extern(name="cuwire_py_cuKernelGetFunction", onerror=rt.on_error)
def cuKernelGetFunction(pFunc, kernel):
    k = rt.client.lookup_kernel(0, pb.GetKernel_Args(kernel=kernel))
    name = rt.client.kernel_names.get(kernel)
    rt.write_scalar(pFunc, "uint64_t", _named(k, ffi.string(name)) if name is not None else k.handle)
    lib.cuwire_keep_kernel_function(kernel, k.handle)  # (asked again, the C half answers: answers_cache.c)
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
    """A module's or library's variable, in the current context (a library's is each device's: of a device
    list, asked of the current context's server in its alias of the library, client/routes.c)."""
    route = lib.cuwire_route_current()
    res = rt.call(rt.GET_GLOBAL, pb.GetGlobal_Args(module=lib.cuwire_route_alias(module, route) or module,
                                                   name=rt.read_string(name), from_module=from_module),
                  pb.GetGlobal_Result, route)
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
