"""The emulated device, driven the way the generated handlers drive the real library: cffi values in,
CUDA error codes out, outputs through pointers."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import pytest

from cuwire.emulated import registry
from cuwire.emulated.device import DEVICE_BASE, EmulatedLib, cuda_ffi

ROOT = Path(__file__).resolve().parent.parent

SAXPY = "_Z24cuwire_test_emulated_saxpyifPKfPf"  # (int n, float a, const float *x, float *y)
COUNTER = "_Z26cuwire_test_emulated_counterv"  # bumps a __device__ unsigned long long
WILD = "_Z23cuwire_test_emulated_wildPf"  # writes outside its buffer
COUNTER_GLOBAL = "cuwire_test_emulated_counter"


@registry.kernel(SAXPY, [4, 4, 8, 8])
def _saxpy(mem: registry.DeviceMemory, grid: registry.Dim3, block: registry.Dim3, shared: int,
           p: registry.Params) -> None:
    n = min(p.i32(0), grid[0] * block[0])
    xs = struct.unpack(f"<{n}f", mem.read(p.ptr(2), 4 * n))
    ys = struct.unpack(f"<{n}f", mem.read(p.ptr(3), 4 * n))
    mem.write(p.ptr(3), struct.pack(f"<{n}f", *(p.f32(1) * x + y for x, y in zip(xs, ys, strict=True))))


@registry.kernel(COUNTER, [])
def _counter(mem: registry.DeviceMemory, grid: registry.Dim3, block: registry.Dim3, shared: int,
             p: registry.Params) -> None:
    address = mem.global_address(COUNTER_GLOBAL)
    (value,) = struct.unpack("<Q", mem.read(address, 8))
    mem.write(address, struct.pack("<Q", value + grid[0] * block[0]))


@registry.kernel(WILD, [8])
def _wild(mem: registry.DeviceMemory, grid: registry.Dim3, block: registry.Dim3, shared: int,
          p: registry.Params) -> None:
    mem.write(p.ptr(0) + (1 << 20), b"\0" * 4)


registry.device_global(COUNTER_GLOBAL, 8)


@pytest.fixture(scope="module")
def ffi() -> Any:
    return cuda_ffi()


@pytest.fixture
def lib(ffi: Any) -> EmulatedLib:
    return EmulatedLib(ffi)


def code(ffi: Any, name: str) -> int:
    """An error code by name, from the declarations."""
    for ctype in ("cudaError_t", "CUresult"):
        values = ffi.typeof(ctype).relements
        if name in values:
            return values[name]
    raise KeyError(name)


def kind(ffi: Any, name: str) -> int:
    return ffi.typeof("enum cudaMemcpyKind").relements[name]


def malloc(lib: EmulatedLib, size: int) -> int:
    out = lib.ffi.new("void **")
    assert lib.cudaMalloc(out, size) == 0
    return int(lib.ffi.cast("uintptr_t", out[0]))


def dev(lib: EmulatedLib, address: int) -> Any:
    return lib.ffi.cast("void *", address)


def handle(lib: EmulatedLib, ctype: str, create: str, *args: Any) -> Any:
    out = lib.ffi.new(f"{ctype} *")
    assert getattr(lib, create)(out, *args) == 0
    return out[0]


# --- coverage ---------------------------------------------------------------------------------------

def test_every_function_the_server_calls_is_implemented() -> None:
    """What the generated handlers and the hand-written ones (server/custom.py) call on the backend."""
    package = ROOT / "cuwire"
    text = (package / "generated" / "server_handlers.py").read_text() + (package / "server" / "custom.py").read_text()
    called = set(re.findall(r"\bs\.lib\.(\w+)", text)) | set(re.findall(r"\blib\.(cu\w+)", text))
    assert len(called) > 100
    implemented = {name for cls in EmulatedLib.__mro__ for name in vars(cls)}
    # NVML queries the emulated device does not model answer NVML_ERROR_NOT_SUPPORTED, as the real NVML
    # does for what a GPU lacks (fans, ECC...); the ones tests/tools/nvml_probe.py asks are modelled
    missing = sorted(name for name in called if name not in implemented and not name.startswith("nvml"))
    assert missing == []
    assert {"nvmlInit_v2", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo"} <= implemented


def test_nvml_queries_not_modelled_are_not_supported(lib: EmulatedLib, ffi: Any, capsys: Any) -> None:
    assert lib.nvmlDeviceGetFanSpeed(ffi.NULL, ffi.NULL) == 3  # NVML_ERROR_NOT_SUPPORTED
    assert "emulated device: nvmlDeviceGetFanSpeed not implemented" in capsys.readouterr().err


def test_unimplemented_function_fails_loudly(lib: EmulatedLib, ffi: Any, capsys: Any) -> None:
    assert lib.cudaGraphCreate(ffi.NULL, 0) == code(ffi, "cudaErrorNotSupported")
    assert lib.cuModuleLoad(ffi.NULL, b"x") == code(ffi, "CUDA_ERROR_NOT_SUPPORTED")
    err = capsys.readouterr().err
    assert "emulated device: cudaGraphCreate not implemented" in err
    assert "emulated device: cuModuleLoad not implemented" in err
    with pytest.raises(AttributeError):
        lib.not_a_cuda_function  # noqa: B018


def test_sticky_errors_have_one_number_in_both_enums(ffi: Any) -> None:
    assert code(ffi, "cudaErrorIllegalAddress") == code(ffi, "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert code(ffi, "cudaErrorLaunchFailure") == code(ffi, "CUDA_ERROR_LAUNCH_FAILED")


def test_cuda_ffi_is_cached() -> None:
    assert cuda_ffi() is cuda_ffi()


# --- memory -----------------------------------------------------------------------------------------

def test_malloc_gives_aligned_addresses_above_host_space(lib: EmulatedLib) -> None:
    a, b = malloc(lib, 100), malloc(lib, 1)
    assert a >= DEVICE_BASE and b >= DEVICE_BASE
    assert a % 256 == 0 and b % 256 == 0 and a != b


def test_malloc_zero_gives_null(lib: EmulatedLib, ffi: Any) -> None:
    out = ffi.new("void **", ffi.cast("void *", 1234))
    assert lib.cudaMalloc(out, 0) == 0
    assert out[0] == ffi.NULL


def test_huge_malloc_fails_with_memory_allocation(lib: EmulatedLib, ffi: Any) -> None:
    assert lib.cudaMalloc(ffi.new("void **"), 1 << 40) == code(ffi, "cudaErrorMemoryAllocation")
    assert lib.cuMemAlloc_v2(ffi.new("CUdeviceptr *"), 1 << 40) == code(ffi, "CUDA_ERROR_OUT_OF_MEMORY")
    assert lib.cudaMalloc(ffi.NULL, 16) == code(ffi, "cudaErrorInvalidValue")


def test_large_allocation_is_lazy_and_zeroed(lib: EmulatedLib, ffi: Any) -> None:
    address = malloc(lib, 1 << 30)
    back = ffi.new("char[]", 16)
    assert lib.cudaMemcpy(back, dev(lib, address + (1 << 29)), 16, kind(ffi, "cudaMemcpyDeviceToHost")) == 0
    assert ffi.buffer(back)[:] == bytes(16)


def test_free(lib: EmulatedLib, ffi: Any) -> None:
    invalid = code(ffi, "cudaErrorInvalidValue")
    a = malloc(lib, 1024)
    assert lib.cudaFree(dev(lib, a + 256)) == invalid  # inside, not the start
    assert lib.cudaFree(dev(lib, 0x1234_5678)) == invalid  # never allocated
    assert lib.cudaFree(dev(lib, a)) == 0
    assert lib.cudaFree(dev(lib, a)) == invalid  # twice
    assert lib.cudaFree(ffi.NULL) == 0
    assert lib.cuMemFree_v2(a) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


def test_mem_get_info_counts_allocations(lib: EmulatedLib, ffi: Any) -> None:
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cudaMemGetInfo(free, total) == 0
    assert free[0] == total[0] == registry.PROPERTIES["totalGlobalMem"]
    a = malloc(lib, 1000)
    assert lib.cuMemGetInfo_v2(free, total) == 0
    assert total[0] - free[0] == 1024
    assert lib.cudaFree(dev(lib, a)) == 0
    assert lib.cudaMemGetInfo(free, total) == 0 and free[0] == total[0]


@pytest.mark.parametrize("how", ["explicit", "default"])
def test_memcpy_round_trip_in_every_direction(lib: EmulatedLib, ffi: Any, how: str) -> None:
    def k(name: str) -> int:
        return kind(ffi, name if how == "explicit" else "cudaMemcpyDefault")

    data = bytes(range(256)) * 4
    src = ffi.from_buffer(data)
    a, b = malloc(lib, len(data)), malloc(lib, len(data))
    assert lib.cudaMemcpy(dev(lib, a), src, len(data), k("cudaMemcpyHostToDevice")) == 0
    assert lib.cudaMemcpy(dev(lib, b), dev(lib, a), len(data), k("cudaMemcpyDeviceToDevice")) == 0
    back = ffi.new("char[]", len(data))
    assert lib.cudaMemcpy(back, dev(lib, b), len(data), k("cudaMemcpyDeviceToHost")) == 0
    assert ffi.buffer(back)[:] == data
    copy = ffi.new("char[]", len(data))
    assert lib.cudaMemcpy(copy, back, len(data), k("cudaMemcpyHostToHost")) == 0
    assert ffi.buffer(copy)[:] == data


def test_memcpy_inside_an_allocation(lib: EmulatedLib, ffi: Any) -> None:
    a = malloc(lib, 64)
    assert lib.cudaMemcpy(dev(lib, a + 10), ffi.from_buffer(b"hello"), 5, kind(ffi, "cudaMemcpyDefault")) == 0
    back = ffi.new("char[]", 64)
    assert lib.cudaMemcpy(back, dev(lib, a), 64, kind(ffi, "cudaMemcpyDefault")) == 0
    assert ffi.buffer(back)[:] == bytes(10) + b"hello" + bytes(49)


def test_memcpy_errors(lib: EmulatedLib, ffi: Any) -> None:
    invalid = code(ffi, "cudaErrorInvalidValue")
    a = malloc(lib, 64)
    host = ffi.new("char[]", 128)
    h2d = kind(ffi, "cudaMemcpyHostToDevice")
    assert lib.cudaMemcpy(dev(lib, a), host, 65, h2d) == invalid  # past the end
    assert lib.cudaMemcpy(dev(lib, a + 60), host, 8, h2d) == invalid
    assert lib.cudaMemcpy(host, host, 8, h2d) == invalid  # kind says device, pointer is host
    assert lib.cudaMemcpy(dev(lib, DEVICE_BASE + (1 << 40)), host, 8, kind(ffi, "cudaMemcpyDefault")) == invalid
    assert lib.cudaMemcpy(dev(lib, a), ffi.NULL, 8, kind(ffi, "cudaMemcpyDefault")) == invalid
    assert lib.cudaMemcpy(dev(lib, a), host, 8, 7) == code(ffi, "cudaErrorInvalidMemcpyDirection")
    assert lib.cudaMemcpy(dev(lib, a), host, 0, h2d) == 0


def test_memcpy_async_and_peer(lib: EmulatedLib, ffi: Any) -> None:
    a, b = malloc(lib, 8), malloc(lib, 8)
    stream = handle(lib, "cudaStream_t", "cudaStreamCreate")
    default = kind(ffi, "cudaMemcpyDefault")
    assert lib.cudaMemcpyAsync(dev(lib, a), ffi.from_buffer(b"12345678"), 8, default, stream) == 0
    assert lib.cudaMemcpyPeerAsync(dev(lib, b), 0, dev(lib, a), 0, 8, stream) == 0
    back = ffi.new("char[]", 8)
    assert lib.cudaMemcpyAsync(back, dev(lib, b), 8, default, ffi.NULL) == 0
    assert ffi.buffer(back)[:] == b"12345678"
    bad_stream = ffi.cast("cudaStream_t", 0x7777)
    assert lib.cudaMemcpyAsync(back, dev(lib, b), 8, default, bad_stream) == code(
        ffi, "cudaErrorInvalidResourceHandle")
    assert lib.cudaMemcpyPeer(dev(lib, b), 1, dev(lib, a), 0, 8) == code(ffi, "cudaErrorInvalidDevice")


def test_memcpy_2d_with_pitches(lib: EmulatedLib, ffi: Any) -> None:
    width, height, host_pitch = 10, 4, 16
    rows = [bytes([r * 16 + c for c in range(width)]) for r in range(height)]
    host = ffi.from_buffer(b"".join(row + b"\xee" * (host_pitch - width) for row in rows))
    dev_ptr, pitch = ffi.new("void **"), ffi.new("size_t *")
    assert lib.cudaMallocPitch(dev_ptr, pitch, width, height) == 0
    assert pitch[0] == 512
    h2d, d2h = kind(ffi, "cudaMemcpyHostToDevice"), kind(ffi, "cudaMemcpyDeviceToHost")
    assert lib.cudaMemcpy2D(dev_ptr[0], pitch[0], host, host_pitch, width, height, h2d) == 0
    out_pitch = 12
    back = ffi.new("char[]", out_pitch * (height - 1) + width)
    assert lib.cudaMemcpy2DAsync(back, out_pitch, dev_ptr[0], pitch[0], width, height, d2h, ffi.NULL) == 0
    got = ffi.buffer(back)[:]
    assert [got[r * out_pitch:r * out_pitch + width] for r in range(height)] == rows
    assert got[width:out_pitch] == bytes(out_pitch - width)  # the gaps between rows are left alone
    assert lib.cudaMemcpy2D(back, 4, dev_ptr[0], pitch[0], width, height, d2h) == code(
        ffi, "cudaErrorInvalidPitchValue")
    # one row more than the allocation holds: checked before any byte moves
    assert lib.cudaMemcpy2D(dev_ptr[0], pitch[0], host, host_pitch, width, height + 1, h2d) == code(
        ffi, "cudaErrorInvalidValue")


def test_memset(lib: EmulatedLib, ffi: Any) -> None:
    a = malloc(lib, 32)
    back = ffi.new("char[]", 32)
    d2h = kind(ffi, "cudaMemcpyDeviceToHost")
    assert lib.cudaMemset(dev(lib, a), 0x1AB, 32) == 0  # only the low byte counts
    assert lib.cudaMemsetAsync(dev(lib, a + 8), 0, 8, ffi.NULL) == 0
    assert lib.cudaMemcpy(back, dev(lib, a), 32, d2h) == 0
    assert ffi.buffer(back)[:] == b"\xab" * 8 + bytes(8) + b"\xab" * 16
    assert lib.cudaMemset2D(dev(lib, a), 8, 1, 2, 4) == 0
    assert lib.cudaMemcpy(back, dev(lib, a), 32, d2h) == 0
    assert ffi.buffer(back)[:8] == b"\x01\x01\xab\xab\xab\xab\xab\xab"
    assert lib.cudaMemset(dev(lib, a), 0, 33) == code(ffi, "cudaErrorInvalidValue")
    assert lib.cudaMemset(back, 0, 4) == code(ffi, "cudaErrorInvalidValue")  # host memory


def test_driver_memory_calls(lib: EmulatedLib, ffi: Any) -> None:
    dptr = ffi.new("CUdeviceptr *")
    assert lib.cuMemAlloc_v2(dptr, 16) == 0
    a = dptr[0]
    assert lib.cuMemAlloc_v2(dptr, 16) == 0
    b = dptr[0]
    assert lib.cuMemcpyHtoD_v2(a, ffi.from_buffer(b"abcdefghijklmnop"), 16) == 0
    assert lib.cuMemcpyDtoD_v2(b, a, 16) == 0
    assert lib.cuMemsetD8_v2(b, ord("z"), 2) == 0
    assert lib.cuMemsetD32_v2(b + 4, 0x44434241, 2) == 0
    back = ffi.new("char[]", 16)
    assert lib.cuMemcpyDtoH_v2(back, b, 16) == 0
    assert ffi.buffer(back)[:] == b"zzcdABCDABCDmnop"
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuMemsetD32_v2(b + 1, 0, 1) == invalid  # misaligned
    assert lib.cuMemcpyDtoH_v2(back, b, 17) == invalid
    assert lib.cuMemAlloc_v2(dptr, 0) == invalid
    assert lib.cuMemFree_v2(a) == 0


def test_pointer_attributes(lib: EmulatedLib, ffi: Any) -> None:
    types = ffi.typeof("enum cudaMemoryType").relements
    a = malloc(lib, 64)
    attrs = ffi.new("struct cudaPointerAttributes *")
    assert lib.cudaPointerGetAttributes(attrs, dev(lib, a + 8)) == 0
    assert attrs.type == types["cudaMemoryTypeDevice"]
    assert int(ffi.cast("uintptr_t", attrs.devicePointer)) == a + 8
    assert lib.cudaPointerGetAttributes(attrs, ffi.new("char[]", 8)) == 0
    assert attrs.type == types["cudaMemoryTypeUnregistered"]


def test_device_reset_frees_everything(lib: EmulatedLib, ffi: Any) -> None:
    a = malloc(lib, 64)
    stream = handle(lib, "cudaStream_t", "cudaStreamCreate")
    assert lib.cudaDeviceReset() == 0
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cudaMemGetInfo(free, total) == 0 and free[0] == total[0]
    assert lib.cudaFree(dev(lib, a)) == code(ffi, "cudaErrorInvalidValue")
    assert lib.cudaStreamDestroy(stream) == code(ffi, "cudaErrorInvalidResourceHandle")


# --- kernels ----------------------------------------------------------------------------------------

def load_library(lib: EmulatedLib) -> Any:
    return handle(lib, "CUlibrary", "cuLibraryLoadData", lib.ffi.from_buffer(b"\x7fELF any image"),
                  lib.ffi.NULL, lib.ffi.NULL, 0, lib.ffi.NULL, lib.ffi.NULL, 0)


def get_function(lib: EmulatedLib, name: str) -> Any:
    kernel = handle(lib, "CUkernel", "cuLibraryGetKernel", load_library(lib), name.encode())
    return handle(lib, "CUfunction", "cuKernelGetFunction", kernel)


def launch(lib: EmulatedLib, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
           params: Any, extra: Any = None) -> int:
    ffi = lib.ffi
    return lib.cuLaunchKernel(function, *grid, *block, 0, ffi.NULL, params, ffi.NULL if extra is None else extra)


def test_kernel_launch_through_the_library_calls(lib: EmulatedLib, ffi: Any) -> None:
    n = 100
    xs, ys = [float(i) for i in range(n)], [1.0] * n
    x, y = malloc(lib, 4 * n), malloc(lib, 4 * n)
    default = kind(ffi, "cudaMemcpyDefault")
    assert lib.cudaMemcpy(dev(lib, x), ffi.from_buffer(struct.pack(f"<{n}f", *xs)), 4 * n, default) == 0
    assert lib.cudaMemcpy(dev(lib, y), ffi.from_buffer(struct.pack(f"<{n}f", *ys)), 4 * n, default) == 0
    function = get_function(lib, SAXPY)

    offset, size = ffi.new("size_t *"), ffi.new("size_t *")
    layout = []
    for i in range(4):
        assert lib.cuFuncGetParamInfo(function, i, offset, size) == 0
        layout.append((offset[0], size[0]))
    assert layout == [(0, 4), (4, 4), (8, 8), (16, 8)]
    assert lib.cuFuncGetParamInfo(function, 4, offset, size) == code(ffi, "CUDA_ERROR_INVALID_VALUE")

    values = [ffi.new("int *", n), ffi.new("float *", 2.0), ffi.new("CUdeviceptr *", x),
              ffi.new("CUdeviceptr *", y)]
    assert launch(lib, function, (1, 1, 1), (128, 1, 1), ffi.new("void *[]", values)) == 0
    assert lib.cudaDeviceSynchronize() == 0
    back = ffi.new("char[]", 4 * n)
    assert lib.cudaMemcpy(back, dev(lib, y), 4 * n, default) == 0
    assert list(struct.unpack(f"<{n}f", ffi.buffer(back)[:])) == [2.0 * i + 1.0 for i in range(n)]


def test_kernel_launch_with_a_parameter_buffer(lib: EmulatedLib, ffi: Any) -> None:
    x, y = malloc(lib, 8), malloc(lib, 8)
    assert lib.cudaMemcpy(dev(lib, x), ffi.from_buffer(struct.pack("<2f", 1, 2)), 8, 4) == 0
    function = get_function(lib, SAXPY)
    buffer = ffi.from_buffer(struct.pack("<ifQQ", 2, 3.0, x, y))
    size = ffi.new("size_t *", len(buffer))
    extra = ffi.new("void *[]", [ffi.cast("void *", 1), buffer, ffi.cast("void *", 2), size, ffi.NULL])
    assert launch(lib, function, (1, 1, 1), (2, 1, 1), ffi.NULL, extra) == 0
    back = ffi.new("char[]", 8)
    assert lib.cudaMemcpy(back, dev(lib, y), 8, 4) == 0
    assert struct.unpack("<2f", ffi.buffer(back)[:]) == (3.0, 6.0)


def test_launch_errors(lib: EmulatedLib, ffi: Any) -> None:
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    function = get_function(lib, COUNTER)
    assert launch(lib, function, (1, 1, 1), (1025, 1, 1), ffi.NULL) == invalid
    assert launch(lib, function, (1, 1, 1), (32, 32, 2), ffi.NULL) == invalid  # 2048 threads
    assert launch(lib, function, (1, 1, 1), (1, 1, 65), ffi.NULL) == invalid
    assert launch(lib, function, (0, 1, 1), (1, 1, 1), ffi.NULL) == invalid
    assert launch(lib, function, (1, 65536, 1), (1, 1, 1), ffi.NULL) == invalid
    assert launch(lib, ffi.cast("CUfunction", 0x1234), (1, 1, 1), (1, 1, 1), ffi.NULL) == code(
        ffi, "CUDA_ERROR_INVALID_HANDLE")
    saxpy = get_function(lib, SAXPY)
    assert launch(lib, saxpy, (1, 1, 1), (1, 1, 1), ffi.NULL) == invalid  # parameters missing
    bad_stream = ffi.cast("CUstream", 0x999)
    assert lib.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, bad_stream, ffi.NULL, ffi.NULL) == code(
        ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 1 << 20, ffi.NULL, ffi.NULL, ffi.NULL) == invalid


def test_unknown_kernel_is_not_found(lib: EmulatedLib, ffi: Any) -> None:
    library = load_library(lib)
    out = ffi.new("CUkernel *")
    assert lib.cuLibraryGetKernel(out, library, b"_Z9no_such_kernelv") == code(ffi, "CUDA_ERROR_NOT_FOUND")
    assert lib.cuLibraryUnload(library) == 0
    assert lib.cuLibraryGetKernel(out, library, SAXPY.encode()) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")


def test_kernel_fault_is_sticky_until_reset(lib: EmulatedLib, ffi: Any, capsys: Any) -> None:
    a = malloc(lib, 16)
    function = get_function(lib, WILD)
    params = ffi.new("void *[]", [ffi.new("CUdeviceptr *", a)])
    assert launch(lib, function, (1, 1, 1), (1, 1, 1), params) == 0  # launches report faults later
    illegal = code(ffi, "cudaErrorIllegalAddress")
    assert lib.cudaDeviceSynchronize() == illegal
    assert lib.cudaMemcpy(ffi.new("char[]", 4), dev(lib, a), 4, 4) == illegal
    assert lib.cuCtxSynchronize() == illegal
    assert "illegal address" in capsys.readouterr().err
    assert lib.cudaDeviceReset() == 0
    assert lib.cudaDeviceSynchronize() == 0


def test_globals(lib: EmulatedLib, ffi: Any) -> None:
    library = load_library(lib)
    dptr, size = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
    assert lib.cuLibraryGetGlobal(dptr, size, library, COUNTER_GLOBAL.encode()) == 0
    address = dptr[0]
    assert size[0] == 8 and address >= DEVICE_BASE
    assert lib.cuLibraryGetGlobal(dptr, ffi.NULL, library, COUNTER_GLOBAL.encode()) == 0
    assert dptr[0] == address
    assert lib.cuLibraryGetGlobal(dptr, size, library, b"no_such_global") == code(ffi, "CUDA_ERROR_NOT_FOUND")

    function = get_function(lib, COUNTER)
    assert launch(lib, function, (2, 1, 1), (3, 1, 1), ffi.NULL) == 0
    back = ffi.new("unsigned long long *")
    assert lib.cudaMemcpy(back, dev(lib, address), 8, kind(ffi, "cudaMemcpyDeviceToHost")) == 0
    assert back[0] == 6
    assert lib.cudaFree(dev(lib, address)) == code(ffi, "cudaErrorInvalidValue")  # not cudaMalloc'd
    assert lib.cudaDeviceReset() == 0  # the library outlives the reset; the variable is zeroed again
    assert lib.cudaMemcpy(back, dev(lib, address), 8, kind(ffi, "cudaMemcpyDeviceToHost")) == 0
    assert back[0] == 0


def test_function_attributes_and_occupancy(lib: EmulatedLib, ffi: Any) -> None:
    kernel = handle(lib, "CUkernel", "cuLibraryGetKernel", load_library(lib), SAXPY.encode())
    func = ffi.cast("const void *", kernel)
    attrs = ffi.new("struct cudaFuncAttributes *")
    assert lib.cudaFuncGetAttributes(attrs, func) == 0
    assert attrs.maxThreadsPerBlock == 1024 and attrs.numRegs == 32 and attrs.maxDynamicSharedSizeBytes == 49152
    max_dynamic = ffi.typeof("enum cudaFuncAttribute").relements["cudaFuncAttributeMaxDynamicSharedMemorySize"]
    assert lib.cudaFuncSetAttribute(func, max_dynamic, 100000) == 0
    assert lib.cudaFuncGetAttributes(attrs, func) == 0 and attrs.maxDynamicSharedSizeBytes == 100000
    assert lib.cudaFuncSetAttribute(func, max_dynamic, 1 << 30) == code(ffi, "cudaErrorInvalidValue")
    offset, size = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cudaFuncGetParamInfo(func, 2, offset, size) == 0 and (offset[0], size[0]) == (8, 8)
    blocks = ffi.new("int *")
    assert lib.cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, 256, 0) == 0
    assert blocks[0] == 8
    smem = ffi.new("size_t *")
    assert lib.cudaOccupancyAvailableDynamicSMemPerBlock(smem, func, 4, 256) == 0
    assert 0 < smem[0] <= 100000
    bogus = ffi.cast("const void *", 0x4242)
    assert lib.cudaFuncGetAttributes(attrs, bogus) == code(ffi, "cudaErrorInvalidDeviceFunction")


# --- device -----------------------------------------------------------------------------------------

def test_device_properties(lib: EmulatedLib, ffi: Any) -> None:
    prop = ffi.new("struct cudaDeviceProp *")
    assert lib.cudaGetDeviceProperties(prop, 0) == 0
    assert ffi.string(prop.name) == b"cuwire emulated device"
    assert list(prop.maxThreadsDim) == [1024, 1024, 64]
    assert (prop.major, prop.minor, prop.warpSize) == (9, 0, 32)
    assert prop.totalGlobalMem == registry.PROPERTIES["totalGlobalMem"]
    assert prop.ECCEnabled == 0 and prop.maxTexture1D == 0  # not in the registry
    assert lib.cudaGetDeviceProperties(prop, 1) == code(ffi, "cudaErrorInvalidDevice")


@pytest.mark.parametrize(("attr", "expected"), [
    ("MaxThreadsPerBlock", 1024), ("MaxBlockDimZ", 64), ("MaxGridDimX", 2147483647), ("WarpSize", 32),
    ("MaxSharedMemoryPerBlock", 49152), ("MultiProcessorCount", 4), ("ComputeCapabilityMajor", 9),
    ("ComputeCapabilityMinor", 0), ("L2CacheSize", 52428800), ("ClockRate", 0),
])
def test_device_attributes(lib: EmulatedLib, ffi: Any, attr: str, expected: int) -> None:
    value = ffi.new("int *", -1)
    assert lib.cudaDeviceGetAttribute(value, ffi.typeof("enum cudaDeviceAttr").relements[f"cudaDevAttr{attr}"], 0) == 0
    assert value[0] == expected
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", attr).upper().replace("MULTI_PROCESSOR", "MULTIPROCESSOR")
    driver_attr = ffi.typeof("CUdevice_attribute").relements[f"CU_DEVICE_ATTRIBUTE_{snake}"]
    value[0] = -1
    assert lib.cuDeviceGetAttribute(value, driver_attr, 0) == 0
    assert value[0] == expected


def test_device_management(lib: EmulatedLib, ffi: Any) -> None:
    count, device = ffi.new("int *"), ffi.new("int *")
    assert lib.cudaGetDeviceCount(count) == 0 and count[0] == 1
    assert lib.cudaSetDevice(1) == code(ffi, "cudaErrorInvalidDevice")
    assert lib.cudaSetDevice(0) == 0
    assert lib.cudaGetDevice(device) == 0 and device[0] == 0
    bus_id = ffi.new("char[]", 32)
    assert lib.cudaDeviceGetPCIBusId(bus_id, 32, 0) == 0 and ffi.string(bus_id) == b"0000:00:00.0"
    assert lib.cudaDeviceGetByPCIBusId(device, b"0000:00:00.0") == 0
    assert lib.cudaDeviceGetByPCIBusId(device, b"0000:01:00.0") == code(ffi, "cudaErrorInvalidDevice")
    version = ffi.new("int *")
    assert lib.cudaRuntimeGetVersion(version) == 0 and version[0] == registry.RUNTIME_VERSION
    assert lib.cuDriverGetVersion(version) == 0 and version[0] == registry.DRIVER_VERSION
    limit = ffi.typeof("enum cudaLimit").relements["cudaLimitMallocHeapSize"]
    value = ffi.new("size_t *")
    assert lib.cudaDeviceSetLimit(limit, 1 << 24) == 0
    assert lib.cudaDeviceGetLimit(value, limit) == 0 and value[0] == 1 << 24
    assert lib.cudaDeviceGetLimit(value, 99) == code(ffi, "cudaErrorUnsupportedLimit")


def test_driver_device_and_context(lib: EmulatedLib, ffi: Any) -> None:
    assert lib.cuInit(0) == 0
    device, major, minor = ffi.new("CUdevice *"), ffi.new("int *"), ffi.new("int *")
    assert lib.cuDeviceGet(device, 0) == 0 and device[0] == 0
    assert lib.cuDeviceGet(device, 1) == code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    assert lib.cuDeviceComputeCapability(major, minor, 0) == 0 and (major[0], minor[0]) == (9, 0)
    name = ffi.new("char[]", 8)
    assert lib.cuDeviceGetName(name, 8, 0) == 0 and ffi.string(name) == b"cuwire "
    total = ffi.new("size_t *")
    assert lib.cuDeviceTotalMem_v2(total, 0) == 0 and total[0] == registry.PROPERTIES["totalGlobalMem"]
    ctx, current = ffi.new("CUcontext *"), ffi.new("CUcontext *")
    assert lib.cuDevicePrimaryCtxRetain(ctx, 0) == 0 and ctx[0] != ffi.NULL
    assert lib.cuCtxSetCurrent(ctx[0]) == 0
    assert lib.cuCtxGetCurrent(current) == 0 and current[0] == ctx[0]
    flags, active = ffi.new("unsigned int *"), ffi.new("int *")
    assert lib.cuDevicePrimaryCtxGetState(0, flags, active) == 0 and active[0] == 1
    assert lib.cuCtxSetCurrent(ffi.cast("CUcontext", 0x55)) == code(ffi, "CUDA_ERROR_INVALID_CONTEXT")
    assert lib.cuDevicePrimaryCtxRelease_v2(0) == 0


def test_error_strings(lib: EmulatedLib, ffi: Any) -> None:
    assert ffi.string(lib.cudaGetErrorString(code(ffi, "cudaErrorMemoryAllocation"))) == b"out of memory"
    assert ffi.string(lib.cudaGetErrorString(0)) == b"no error"
    text = ffi.new("const char **")
    assert lib.cuGetErrorName(code(ffi, "CUDA_ERROR_ILLEGAL_ADDRESS"), text) == 0
    assert ffi.string(text[0]) == b"CUDA_ERROR_ILLEGAL_ADDRESS"
    assert lib.cuGetErrorString(code(ffi, "CUDA_ERROR_INVALID_VALUE"), text) == 0
    assert ffi.string(text[0]) == b"invalid argument"
    assert lib.cuGetErrorString(123456, text) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


# --- streams and events -----------------------------------------------------------------------------

def test_streams(lib: EmulatedLib, ffi: Any) -> None:
    invalid_handle = code(ffi, "cudaErrorInvalidResourceHandle")
    least, greatest = ffi.new("int *"), ffi.new("int *")
    assert lib.cudaDeviceGetStreamPriorityRange(least, greatest) == 0 and greatest[0] < least[0]
    stream = handle(lib, "cudaStream_t", "cudaStreamCreateWithPriority", 1, greatest[0])
    assert stream != ffi.NULL
    priority, flags, ident = ffi.new("int *"), ffi.new("unsigned int *"), ffi.new("unsigned long long *")
    assert lib.cudaStreamGetPriority(stream, priority) == 0 and priority[0] == greatest[0]
    assert lib.cudaStreamGetFlags(stream, flags) == 0 and flags[0] == 1
    assert lib.cudaStreamGetId(stream, ident) == 0
    for special in (0, 1, 2):  # default, cudaStreamLegacy, cudaStreamPerThread
        assert lib.cudaStreamSynchronize(ffi.cast("cudaStream_t", special)) == 0
    assert lib.cudaStreamQuery(stream) == 0
    status = ffi.new("enum cudaStreamCaptureStatus *", 5)
    assert lib.cudaStreamIsCapturing(stream, status) == 0 and status[0] == 0
    assert lib.cudaStreamDestroy(stream) == 0
    assert lib.cudaStreamSynchronize(stream) == invalid_handle
    assert lib.cudaStreamDestroy(ffi.NULL) == invalid_handle
    assert lib.cuStreamSynchronize(ffi.cast("CUstream", 0x3333)) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cudaStreamCreateWithFlags(ffi.new("cudaStream_t *"), 8) == code(ffi, "cudaErrorInvalidValue")


def test_stream_attributes(lib: EmulatedLib, ffi: Any) -> None:
    a = handle(lib, "cudaStream_t", "cudaStreamCreate")
    b = handle(lib, "cudaStream_t", "cudaStreamCreate")
    priority = ffi.typeof("cudaLaunchAttributeID").relements["cudaLaunchAttributePriority"]
    value = ffi.new("cudaLaunchAttributeValue *")
    value.priority = -3
    assert lib.cudaStreamSetAttribute(a, priority, value) == 0
    assert lib.cudaStreamCopyAttributes(b, a) == 0
    out = ffi.new("cudaLaunchAttributeValue *")
    assert lib.cudaStreamGetAttribute(b, priority, out) == 0 and out.priority == -3


def test_events_time_what_they_bracket(lib: EmulatedLib, ffi: Any) -> None:
    start = handle(lib, "cudaEvent_t", "cudaEventCreate")
    end = handle(lib, "cudaEvent_t", "cudaEventCreateWithFlags", 1)
    ms = ffi.new("float *")
    assert lib.cudaEventElapsedTime(ms, start, end) == code(ffi, "cudaErrorInvalidResourceHandle")  # unrecorded
    assert lib.cudaEventRecord(start, ffi.NULL) == 0
    malloc(lib, 1 << 16)
    assert lib.cudaEventRecordWithFlags(end, ffi.NULL, 0) == 0
    assert lib.cudaEventSynchronize(end) == 0 and lib.cudaEventQuery(end) == 0
    assert lib.cudaEventElapsedTime(ms, start, end) == 0 and ms[0] >= 0.0
    assert lib.cudaStreamWaitEvent(ffi.NULL, end, 0) == 0
    untimed = handle(lib, "cudaEvent_t", "cudaEventCreateWithFlags", 2)
    assert lib.cudaEventRecord(untimed, ffi.NULL) == 0
    assert lib.cudaEventElapsedTime(ms, start, untimed) == code(ffi, "cudaErrorInvalidResourceHandle")
    assert lib.cudaEventDestroy(start) == 0
    assert lib.cudaEventRecord(start, ffi.NULL) == code(ffi, "cudaErrorInvalidResourceHandle")
    assert lib.cudaEventRecord(end, ffi.cast("cudaStream_t", 0x9999)) == code(
        ffi, "cudaErrorInvalidResourceHandle")


def test_driver_events(lib: EmulatedLib, ffi: Any) -> None:
    start = handle(lib, "CUevent", "cuEventCreate", 0)
    end = handle(lib, "CUevent", "cuEventCreate", 0)
    assert lib.cuEventRecord(start, ffi.NULL) == 0 and lib.cuEventRecord(end, ffi.NULL) == 0
    assert lib.cuEventSynchronize(end) == 0
    ms = ffi.new("float *")
    assert lib.cuEventElapsedTime_v2(ms, start, end) == 0 and ms[0] >= 0.0
    assert lib.cuEventDestroy_v2(start) == 0
    assert lib.cuEventDestroy_v2(start) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")


def test_the_server_sees_the_emulated_device_through_prototype_checks() -> None:
    """A pointer where the driver takes an integer (a CUdeviceptr) is refused as cffi refuses it with the
    real library, so a handler that passes one fails in CI, not first on a GPU."""
    from cuwire.server.backend import open_backend

    ffi, lib, label = open_backend("emulated")
    assert label == "emulated"
    buf = ffi.new("char[]", 8)
    with pytest.raises(TypeError, match="cuMemcpy: argument 1 is a C integer"):
        lib.cuMemcpy(ffi.cast("void *", buf), 0, 8)
    assert lib.cuDriverGetVersion(ffi.new("int *")) == 0  # well-typed calls go through
