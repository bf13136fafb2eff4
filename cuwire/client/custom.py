"""Hand-written Python halves of the functions annotated `mode = "custom"`: the calls whose meaning
changes on the way (a host stub becomes the server's kernel, a host symbol the server's variable).

Each is called by its generated C stub with the same boundary arguments as a generated one
(see generated/client_cdefs.h).
"""

from __future__ import annotations

from _cuwire import ffi

from cuwire.client import runtime as rt
from cuwire.generated import client_calls as calls

# cudaMemcpyKind
HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, DEFAULT = 1, 2, 3, 4
INVALID_MEMCPY_DIRECTION = 21


def dim3(ptr) -> tuple[int, int, int]:
    d = ffi.cast("unsigned int *", ptr)
    return (d[0], d[1], d[2])


# ---------------------------------------------------------------- kernel launches


@ffi.def_extern(name="cuwire_py_cudaLaunchKernel", onerror=rt.on_error)
def cudaLaunchKernel(func, gridDim, gridDim_len, blockDim, blockDim_len, args, sharedMem, stream):
    return rt.client.launch(func, dim3(gridDim), dim3(blockDim), args, sharedMem, stream)


@ffi.def_extern(name="cuwire_py___cudaLaunchKernel", onerror=rt.on_error)
def cudaLaunchKernel_internal(kernel, gridDim, gridDim_len, blockDim, blockDim_len, args, sharedMem, stream):
    """nvcc's CUDA 13 launch path: the kernel handle is the host stub (see __cudaGetKernel in local.c)."""
    return rt.client.launch(kernel, dim3(gridDim), dim3(blockDim), args, sharedMem, stream)


@ffi.def_extern(name="cuwire_py_cudaLaunchKernelExC", onerror=rt.on_error)
def cudaLaunchKernelExC(config, config_len, func, args):
    c = ffi.cast("unsigned long long *", config)
    u = ffi.cast("unsigned int *", config)
    # cudaLaunchConfig_t: dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes; cudaStream_t stream;
    #                     cudaLaunchAttribute *attrs; unsigned int numAttrs
    grid, block = (u[0], u[1], u[2]), (u[3], u[4], u[5])
    shared_mem, stream, num_attrs = c[3], c[4], ffi.cast("unsigned int *", c + 6)[0]
    if num_attrs:
        raise rt.Fail(801, "cuwire: cudaLaunchKernelExC with launch attributes is not supported yet")
    return rt.client.launch(func, grid, block, args, shared_mem, stream)


# ---------------------------------------------------------------- __device__ variables


def _symbol_kind(kind: int, towards_device: bool) -> int:
    """The cudaMemcpy kind for a symbol copy, checked as the runtime does: the symbol side is device
    memory, so a copy to a symbol comes from host or device, and one from a symbol goes to either."""
    allowed = (HOST_TO_DEVICE, DEVICE_TO_DEVICE, DEFAULT) if towards_device else (DEVICE_TO_HOST, DEVICE_TO_DEVICE,
                                                                                  DEFAULT)
    if kind not in allowed:
        raise rt.Fail(INVALID_MEMCPY_DIRECTION)
    return kind


@ffi.def_extern(name="cuwire_py_cudaMemcpyToSymbol", onerror=rt.on_error)
def cudaMemcpyToSymbol(symbol, src, count, offset, kind):
    dst = rt.symbol_address(symbol) + offset
    return calls.cudaMemcpy(ffi.cast("void *", dst), count, ffi.cast("void *", src), count, count,
                            _symbol_kind(kind, True))


@ffi.def_extern(name="cuwire_py_cudaMemcpyFromSymbol", onerror=rt.on_error)
def cudaMemcpyFromSymbol(dst, symbol, count, offset, kind):
    src = rt.symbol_address(symbol) + offset
    return calls.cudaMemcpy(ffi.cast("void *", dst), count, ffi.cast("void *", src), count, count,
                            _symbol_kind(kind, False))


@ffi.def_extern(name="cuwire_py_cudaMemcpyToSymbolAsync", onerror=rt.on_error)
def cudaMemcpyToSymbolAsync(symbol, src, count, offset, kind, stream):
    dst = rt.symbol_address(symbol) + offset
    return calls.cudaMemcpyAsync(ffi.cast("void *", dst), count, ffi.cast("void *", src), count, count,
                                 _symbol_kind(kind, True), stream)


@ffi.def_extern(name="cuwire_py_cudaMemcpyFromSymbolAsync", onerror=rt.on_error)
def cudaMemcpyFromSymbolAsync(dst, symbol, count, offset, kind, stream):
    src = rt.symbol_address(symbol) + offset
    return calls.cudaMemcpyAsync(ffi.cast("void *", dst), count, ffi.cast("void *", src), count, count,
                                 _symbol_kind(kind, False), stream)


@ffi.def_extern(name="cuwire_py_cudaGetSymbolAddress", onerror=rt.on_error)
def cudaGetSymbolAddress(devPtr, symbol):
    rt.write_scalar(devPtr, "uint64_t", rt.symbol_address(symbol))
    return 0


@ffi.def_extern(name="cuwire_py_cudaGetSymbolSize", onerror=rt.on_error)
def cudaGetSymbolSize(size, symbol):
    rt.write_scalar(size, "uint64_t", rt.client.symbol_size(symbol))
    return 0


# ---------------------------------------------------------------- errors


@ffi.def_extern(name="cuwire_py_cudaGetErrorString", onerror=lambda *exc: 0)
def cudaGetErrorString(error):
    """The server's text for the code, cached; the C stub returns it as const char *."""
    return int(ffi.cast("uintptr_t", rt.client.error_string(error, driver=False)))


_nvml_fallbacks: dict[int, object] = {}  # code -> C string, kept alive: callers hold the pointers


def _nvml_fallback(error: int):
    """nvmlErrorString when the server cannot be asked: never NULL (callers print it unchecked)."""
    if error not in _nvml_fallbacks:
        text = f"NVML error {error} (cuwire: the server could not be asked for its message)"
        _nvml_fallbacks[error] = ffi.new("char[]", text.encode())
    return int(ffi.cast("uintptr_t", _nvml_fallbacks[error]))


@ffi.def_extern(name="cuwire_py_nvmlErrorString", onerror=lambda exc_type, exc, tb: 0)
def nvmlErrorString(result):
    """The server's NVML's message for the code, cached; the C stub returns it as const char *."""
    try:
        text = rt.client.error_string(result, driver=False, nvml=True)
    except rt.Fail:
        return _nvml_fallback(result)
    return int(ffi.cast("uintptr_t", text)) or _nvml_fallback(result)
