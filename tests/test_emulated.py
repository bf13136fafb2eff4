"""The emulated device, driven the way the generated handlers drive the real libcuda: driver calls only,
cffi values in, CUresult codes out, outputs through pointers."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import pytest

from cuwire_emulated import registry
from cuwire_emulated.device import EmulatedLib, cuda_ffi

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
    """A CUresult by name, from the declarations."""
    return ffi.typeof("CUresult").relements[name]


def enum(ffi: Any, ctype: str, name: str) -> int:
    return ffi.typeof(ctype).relements[name]


def malloc(lib: EmulatedLib, size: int) -> int:
    out = lib.ffi.new("CUdeviceptr *")
    assert lib.cuMemAlloc_v2(out, size) == 0
    return int(out[0])


def host(ffi: Any, buffer: Any) -> int:
    """A host buffer's address, as the driver's CUdeviceptr arguments take it (unified addressing)."""
    return int(ffi.cast("uintptr_t", buffer))


def handle(lib: EmulatedLib, ctype: str, create: str, *args: Any) -> Any:
    out = lib.ffi.new(f"{ctype} *")
    assert getattr(lib, create)(out, *args) == 0
    return out[0]


def read(lib: EmulatedLib, address: int, size: int) -> bytes:
    back = lib.ffi.new("char[]", size)
    assert lib.cuMemcpyDtoH_v2(back, address, size) == 0
    return lib.ffi.buffer(back)[:]


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
    assert sorted(name for name in implemented if name.startswith("cuda")) == []  # the runtime runs on the client


def test_nvml_queries_not_modelled_are_not_supported(lib: EmulatedLib, ffi: Any, capsys: Any) -> None:
    assert lib.nvmlDeviceGetFanSpeed(ffi.NULL, ffi.NULL) == 3  # NVML_ERROR_NOT_SUPPORTED
    assert "emulated device: nvmlDeviceGetFanSpeed not implemented" in capsys.readouterr().err


def test_unimplemented_function_fails_loudly(lib: EmulatedLib, ffi: Any, capsys: Any) -> None:
    assert lib.cuModuleLoad(ffi.NULL, b"x") == code(ffi, "CUDA_ERROR_NOT_SUPPORTED")
    assert lib.cuFlushGPUDirectRDMAWrites(0, 100) == code(ffi, "CUDA_ERROR_NOT_SUPPORTED")
    err = capsys.readouterr().err
    assert "emulated device: cuModuleLoad not implemented" in err
    assert "emulated device: cuFlushGPUDirectRDMAWrites not implemented" in err
    with pytest.raises(AttributeError):
        lib.not_a_cuda_function  # noqa: B018


def test_runtime_functions_are_no_functions_here(lib: EmulatedLib, capsys: Any) -> None:
    """As with the real libraries (server/backend.py): NVIDIA's runtime runs on the client."""
    for name in ("cudaMalloc", "cudaGraphCreate"):
        with pytest.raises(AttributeError, match=name):
            getattr(lib, name)
    assert capsys.readouterr().err == ""


def test_cuda_ffi_is_cached() -> None:
    assert cuda_ffi() is cuda_ffi()


# --- memory -----------------------------------------------------------------------------------------

def test_allocations_are_aligned_and_apart_from_host_memory(lib: EmulatedLib, ffi: Any) -> None:
    a, b = malloc(lib, 100), malloc(lib, 1)
    buffer = ffi.new("char[]", 128)
    span = lib._memory.start, lib._memory.end
    assert span[0] <= a < span[1] and span[0] <= b < span[1]  # address space this process reserved for it
    assert not span[0] <= host(ffi, buffer) < span[1]  # where no host memory can be
    assert a % 256 == 0 and b % 256 == 0 and a != b


def test_allocating_zero_bytes(lib: EmulatedLib, ffi: Any) -> None:
    out = ffi.new("CUdeviceptr *", 1234)
    assert lib.cuMemAlloc_v2(out, 0) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuMemAllocAsync(out, 0, ffi.NULL) == 0
    assert out[0] == 0


def test_huge_allocation_fails_out_of_memory(lib: EmulatedLib, ffi: Any) -> None:
    out_of_memory = code(ffi, "CUDA_ERROR_OUT_OF_MEMORY")
    assert lib.cuMemAlloc_v2(ffi.new("CUdeviceptr *"), 1 << 40) == out_of_memory
    assert lib.cuMemAllocAsync(ffi.new("CUdeviceptr *"), 1 << 40, ffi.NULL) == out_of_memory
    assert lib.cuMemAlloc_v2(ffi.NULL, 16) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuMemAllocAsync(ffi.NULL, 16, ffi.NULL) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


def test_large_allocation_is_lazy_and_zeroed(lib: EmulatedLib) -> None:
    address = malloc(lib, 1 << 30)
    assert read(lib, address + (1 << 29), 16) == bytes(16)


def test_free(lib: EmulatedLib, ffi: Any) -> None:
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    a = malloc(lib, 1024)
    assert lib.cuMemFree_v2(a + 256) == invalid  # inside, not the start
    assert lib.cuMemFree_v2(0x1234_5678) == invalid  # never allocated
    assert lib.cuMemFree_v2(a) == 0
    assert lib.cuMemFree_v2(a) == invalid  # twice
    assert lib.cuMemFree_v2(0) == 0
    b = malloc(lib, 16)
    assert lib.cuMemFreeAsync(b, ffi.cast("CUstream", 0x7777)) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuMemFreeAsync(b, ffi.NULL) == 0
    assert lib.cuMemFreeAsync(b, ffi.NULL) == invalid


def test_mem_get_info_counts_allocations(lib: EmulatedLib, ffi: Any) -> None:
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cuMemGetInfo_v2(free, total) == 0
    assert free[0] == total[0] == registry.PROPERTIES["totalGlobalMem"]
    a = malloc(lib, 1000)
    assert lib.cuMemGetInfo_v2(free, total) == 0
    assert total[0] - free[0] == 1024
    assert lib.cuMemFree_v2(a) == 0
    assert lib.cuMemGetInfo_v2(free, total) == 0 and free[0] == total[0]


@pytest.mark.parametrize("unified", [False, True])
def test_memcpy_round_trip_in_every_direction(lib: EmulatedLib, ffi: Any, unified: bool) -> None:
    """Through the copy of each direction, or cuMemcpy's, which takes it from the pointers."""
    data = bytes(range(256)) * 4
    n = len(data)
    src, back, copy = ffi.from_buffer(data), ffi.new("char[]", n), ffi.new("char[]", n)
    a, b = malloc(lib, n), malloc(lib, n)
    if unified:
        assert lib.cuMemcpy(a, host(ffi, src), n) == 0
        assert lib.cuMemcpy(b, a, n) == 0
        assert lib.cuMemcpy(host(ffi, back), b, n) == 0
    else:
        assert lib.cuMemcpyHtoD_v2(a, src, n) == 0
        assert lib.cuMemcpyDtoD_v2(b, a, n) == 0
        assert lib.cuMemcpyDtoH_v2(back, b, n) == 0
    assert ffi.buffer(back)[:] == data
    assert lib.cuMemcpy(host(ffi, copy), host(ffi, back), n) == 0  # host to host
    assert ffi.buffer(copy)[:] == data


def test_memcpy_inside_an_allocation(lib: EmulatedLib, ffi: Any) -> None:
    a = malloc(lib, 64)
    assert lib.cuMemcpyHtoD_v2(a + 10, ffi.from_buffer(b"hello"), 5) == 0
    assert read(lib, a, 64) == bytes(10) + b"hello" + bytes(49)


def test_memcpy_errors(lib: EmulatedLib, ffi: Any) -> None:
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    a = malloc(lib, 64)
    buffer = ffi.new("char[]", 128)
    assert lib.cuMemcpyHtoD_v2(a, buffer, 65) == invalid  # past the end
    assert lib.cuMemcpyHtoD_v2(a + 60, buffer, 8) == invalid
    assert lib.cuMemcpyHtoD_v2(host(ffi, buffer), buffer, 8) == invalid  # the name says device, it is host
    assert lib.cuMemcpyDtoH_v2(buffer, host(ffi, buffer), 8) == invalid
    assert lib.cuMemcpyDtoD_v2(a, host(ffi, buffer), 8) == invalid
    assert lib.cuMemcpy(a + (1 << 30), host(ffi, buffer), 8) == invalid  # the device's, never allocated
    assert lib.cuMemcpy(a, 0, 8) == invalid
    assert lib.cuMemcpyHtoD_v2(a, buffer, 0) == 0


def test_memcpy_async(lib: EmulatedLib, ffi: Any) -> None:
    a, b, c = malloc(lib, 8), malloc(lib, 8), malloc(lib, 8)
    stream = handle(lib, "CUstream", "cuStreamCreate", 0)
    assert lib.cuMemcpyHtoDAsync_v2(a, ffi.from_buffer(b"12345678"), 8, stream) == 0
    assert lib.cuMemcpyDtoDAsync_v2(b, a, 8, stream) == 0
    assert lib.cuMemcpyAsync(c, b, 8, ffi.NULL) == 0
    back = ffi.new("char[]", 8)
    assert lib.cuMemcpyDtoHAsync_v2(back, c, 8, stream) == 0
    assert ffi.buffer(back)[:] == b"12345678"
    bad_stream = ffi.cast("CUstream", 0x7777)
    invalid_handle = code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuMemcpyDtoHAsync_v2(back, c, 8, bad_stream) == invalid_handle
    assert lib.cuMemcpyAsync(host(ffi, back), c, 8, bad_stream) == invalid_handle
    assert lib.cuMemcpyHtoDAsync_v2(a, back, 9, stream) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


def test_pitched_allocation_and_2d_memset(lib: EmulatedLib, ffi: Any) -> None:
    width, height = 10, 4
    dptr, pitch = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
    assert lib.cuMemAllocPitch_v2(dptr, pitch, width, height, 4) == 0
    assert pitch[0] == 512
    base = int(dptr[0])
    assert lib.cuMemsetD2D8_v2(base, pitch[0], 0x1AB, width, height) == 0  # only the low byte counts
    rows = read(lib, base, pitch[0] * height)
    for r in range(height):
        assert rows[r * 512:r * 512 + width] == b"\xab" * width
        assert rows[r * 512 + width:(r + 1) * 512] == bytes(512 - width)  # the gaps between rows are left alone
    assert lib.cuMemsetD2D32_v2(base, pitch[0], 0x01020304, 2, height) == 0
    assert read(lib, base + 3 * 512, 10) == b"\x04\x03\x02\x01" * 2 + b"\xab\xab"
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuMemsetD2D8_v2(base, pitch[0], 0, width, height + 1) == invalid  # one row more than allocated
    assert lib.cuMemsetD2D8_v2(base, 4, 0, width, 2) == invalid  # rows wider than the pitch
    assert lib.cuMemsetD2D16_v2(base + 1, pitch[0], 0, 2, 2) == invalid  # misaligned
    assert lib.cuMemAllocPitch_v2(dptr, pitch, width, height, 3) == invalid  # no such element size
    assert lib.cuMemAllocPitch_v2(dptr, ffi.NULL, width, height, 4) == invalid


def test_memset(lib: EmulatedLib, ffi: Any) -> None:
    a = malloc(lib, 32)
    assert lib.cuMemsetD8_v2(a, 0x1AB, 32) == 0  # only the low byte counts
    assert lib.cuMemsetD8Async(a + 8, 0, 8, ffi.NULL) == 0
    assert read(lib, a, 32) == b"\xab" * 8 + bytes(8) + b"\xab" * 16
    assert lib.cuMemsetD16_v2(a, 0x10203, 2) == 0
    assert lib.cuMemsetD32Async(a + 4, 0x04030201, 1, ffi.NULL) == 0
    assert read(lib, a, 9) == b"\x03\x02\x03\x02\x01\x02\x03\x04\x00"
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuMemsetD8_v2(a, 0, 33) == invalid
    assert lib.cuMemsetD8_v2(host(ffi, ffi.new("char[]", 8)), 0, 4) == invalid  # host memory
    assert lib.cuMemsetD16_v2(a + 1, 0, 1) == invalid  # misaligned
    bad_stream = ffi.cast("CUstream", 0x7777)
    for memset in (lib.cuMemsetD8Async, lib.cuMemsetD16Async, lib.cuMemsetD32Async):
        assert memset(a, 0, 1, bad_stream) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuMemsetD2D8Async(a, 8, 0, 2, 2, bad_stream) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")


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


def test_primary_context_reset_frees_everything(lib: EmulatedLib, ffi: Any) -> None:
    """What cudaDeviceReset asks of the driver."""
    a = malloc(lib, 64)
    stream = handle(lib, "CUstream", "cuStreamCreate", 0)
    event = handle(lib, "CUevent", "cuEventCreate", 0)
    heap = enum(ffi, "CUlimit", "CU_LIMIT_MALLOC_HEAP_SIZE")
    assert lib.cuCtxSetLimit(heap, 1 << 24) == 0
    assert lib.cuDevicePrimaryCtxReset_v2(1) == code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    assert lib.cuDevicePrimaryCtxReset_v2(0) == 0
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cuMemGetInfo_v2(free, total) == 0 and free[0] == total[0]
    assert lib.cuMemFree_v2(a) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuStreamDestroy_v2(stream) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuEventDestroy_v2(event) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    value = ffi.new("size_t *")
    assert lib.cuCtxGetLimit(value, heap) == 0 and value[0] == 8 << 20
    current = ffi.new("CUcontext *")
    assert lib.cuCtxGetCurrent(current) == 0 and current[0] != ffi.NULL  # the context itself stays


# --- kernels ----------------------------------------------------------------------------------------

def load_library(lib: EmulatedLib, *kernels: str) -> Any:
    """A library of PTX text declaring `kernels` (any registry kernel is found in it by name, too)."""
    ptx = b".version 9.0\n.target sm_90\n" + b"".join(b".visible .entry %s()\n{\n}\n" % k.encode() for k in kernels)
    return handle(lib, "CUlibrary", "cuLibraryLoadData", lib.ffi.from_buffer(ptx + b"\0"),
                  lib.ffi.NULL, lib.ffi.NULL, 0, lib.ffi.NULL, lib.ffi.NULL, 0)


def get_kernel(lib: EmulatedLib, name: str) -> Any:
    return handle(lib, "CUkernel", "cuLibraryGetKernel", load_library(lib), name.encode())


def get_function(lib: EmulatedLib, name: str) -> Any:
    return handle(lib, "CUfunction", "cuKernelGetFunction", get_kernel(lib, name))


def launch(lib: EmulatedLib, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
           params: Any, extra: Any = None) -> int:
    ffi = lib.ffi
    return lib.cuLaunchKernel(function, *grid, *block, 0, ffi.NULL, params, ffi.NULL if extra is None else extra)


def test_kernel_launch_through_the_library_calls(lib: EmulatedLib, ffi: Any) -> None:
    n = 100
    xs, ys = [float(i) for i in range(n)], [1.0] * n
    x, y = malloc(lib, 4 * n), malloc(lib, 4 * n)
    assert lib.cuMemcpyHtoD_v2(x, ffi.from_buffer(struct.pack(f"<{n}f", *xs)), 4 * n) == 0
    assert lib.cuMemcpyHtoD_v2(y, ffi.from_buffer(struct.pack(f"<{n}f", *ys)), 4 * n) == 0
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
    assert lib.cuCtxSynchronize() == 0
    assert list(struct.unpack(f"<{n}f", read(lib, y, 4 * n))) == [2.0 * i + 1.0 for i in range(n)]


def test_a_library_names_its_kernels(lib: EmulatedLib, ffi: Any) -> None:
    """What the server describes in its reply to a module load: each kernel, its name and its layout."""
    library = load_library(lib, SAXPY, COUNTER)
    count = ffi.new("unsigned int *")
    assert lib.cuLibraryGetKernelCount(count, library) == 0 and count[0] == 2
    kernels = ffi.new("CUkernel[]", 2)
    assert lib.cuLibraryEnumerateKernels(kernels, 1, library) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuLibraryEnumerateKernels(kernels, 2, library) == 0
    name = ffi.new("const char **")
    names = []
    for k in kernels:
        assert lib.cuKernelGetName(name, k) == 0
        names.append(ffi.string(name[0]).decode())
    assert sorted(names) == sorted([SAXPY, COUNTER])
    saxpy = kernels[names.index(SAXPY)]
    assert handle(lib, "CUkernel", "cuLibraryGetKernel", library, SAXPY.encode()) == saxpy  # the same handle
    offset, size = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cuKernelGetParamInfo(saxpy, 2, offset, size) == 0 and (offset[0], size[0]) == (8, 8)
    assert lib.cuLibraryGetKernelCount(count, load_library(lib)) == 0 and count[0] == 0
    assert lib.cuLibraryGetKernelCount(count, ffi.cast("CUlibrary", 12345)) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")


def test_kernel_launch_with_a_parameter_buffer(lib: EmulatedLib, ffi: Any) -> None:
    x, y = malloc(lib, 8), malloc(lib, 8)
    assert lib.cuMemcpyHtoD_v2(x, ffi.from_buffer(struct.pack("<2f", 1, 2)), 8) == 0
    function = get_function(lib, SAXPY)
    buffer = ffi.from_buffer(struct.pack("<ifQQ", 2, 3.0, x, y))
    size = ffi.new("size_t *", len(buffer))
    extra = ffi.new("void *[]", [ffi.cast("void *", 1), buffer, ffi.cast("void *", 2), size, ffi.NULL])
    assert launch(lib, function, (1, 1, 1), (2, 1, 1), ffi.NULL, extra) == 0
    assert struct.unpack("<2f", read(lib, y, 8)) == (3.0, 6.0)


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
    illegal = code(ffi, "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert lib.cuCtxSynchronize() == illegal
    assert lib.cuMemcpyDtoH_v2(ffi.new("char[]", 4), a, 4) == illegal
    assert lib.cuMemAlloc_v2(ffi.new("CUdeviceptr *"), 16) == illegal
    assert lib.cuStreamQuery(ffi.NULL) == illegal
    assert lib.cuEventQuery(ffi.NULL) == illegal
    assert launch(lib, function, (1, 1, 1), (1, 1, 1), params) == illegal
    assert "illegal address" in capsys.readouterr().err
    assert lib.cuDevicePrimaryCtxReset_v2(0) == 0
    assert lib.cuCtxSynchronize() == 0


def test_globals(lib: EmulatedLib, ffi: Any) -> None:
    library = load_library(lib)
    dptr, size = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
    assert lib.cuLibraryGetGlobal(dptr, size, library, COUNTER_GLOBAL.encode()) == 0
    address = dptr[0]
    assert size[0] == 8 and lib._memory.on_device(address)
    assert lib.cuLibraryGetGlobal(dptr, ffi.NULL, library, COUNTER_GLOBAL.encode()) == 0
    assert dptr[0] == address
    assert lib.cuLibraryGetGlobal(dptr, size, library, b"no_such_global") == code(ffi, "CUDA_ERROR_NOT_FOUND")

    function = get_function(lib, COUNTER)
    assert launch(lib, function, (2, 1, 1), (3, 1, 1), ffi.NULL) == 0
    assert struct.unpack("<Q", read(lib, address, 8)) == (6,)
    assert lib.cuMemFree_v2(address) == code(ffi, "CUDA_ERROR_INVALID_VALUE")  # not cuMemAlloc'd
    assert lib.cuDevicePrimaryCtxReset_v2(0) == 0  # the library outlives the reset; the variable is zeroed
    assert read(lib, address, 8) == bytes(8)


def test_function_attributes(lib: EmulatedLib, ffi: Any) -> None:
    function, kernel = get_function(lib, SAXPY), get_kernel(lib, SAXPY)
    value = ffi.new("int *")

    def attribute(name: str, handle: Any = function) -> int:
        value[0] = -7
        assert lib.cuFuncGetAttribute(value, enum(ffi, "CUfunction_attribute", name), handle) == 0
        return value[0]

    assert attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK") == 1024
    assert attribute("CU_FUNC_ATTRIBUTE_NUM_REGS") == 32
    assert attribute("CU_FUNC_ATTRIBUTE_PTX_VERSION") == attribute("CU_FUNC_ATTRIBUTE_BINARY_VERSION") == 90
    assert attribute("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES") == 49152
    assert attribute("CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT") == -1
    assert attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES") == 0
    max_dynamic = enum(ffi, "CUfunction_attribute", "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")
    assert lib.cuFuncSetAttribute(function, max_dynamic, 100000) == 0
    assert attribute("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", kernel) == 100000  # the kernel's, too
    assert lib.cuKernelSetAttribute(max_dynamic, 65536, kernel, 0) == 0
    assert lib.cuKernelGetAttribute(value, max_dynamic, kernel, 0) == 0 and value[0] == 65536
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuFuncSetAttribute(function, max_dynamic, 1 << 30) == invalid
    num_regs = enum(ffi, "CUfunction_attribute", "CU_FUNC_ATTRIBUTE_NUM_REGS")
    assert lib.cuFuncSetAttribute(function, num_regs, 16) == invalid  # read-only
    no_attribute = enum(ffi, "CUfunction_attribute", "CU_FUNC_ATTRIBUTE_MAX")
    assert lib.cuFuncGetAttribute(value, no_attribute, function) == invalid
    assert lib.cuKernelGetAttribute(value, max_dynamic, kernel, 1) == code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    bogus = ffi.cast("CUfunction", 0x4242)
    assert lib.cuFuncGetAttribute(value, max_dynamic, bogus) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuFuncSetAttribute(bogus, max_dynamic, 0) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    offset, size = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.cuKernelGetParamInfo(kernel, 2, offset, size) == 0 and (offset[0], size[0]) == (8, 8)
    prefer_l1 = enum(ffi, "CUfunc_cache", "CU_FUNC_CACHE_PREFER_L1")
    assert lib.cuFuncSetCacheConfig(function, prefer_l1) == 0
    assert lib.cuKernelSetCacheConfig(kernel, 9, 0) == invalid
    assert lib.cuFuncSetCacheConfig(bogus, prefer_l1) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")


def test_occupancy(lib: EmulatedLib, ffi: Any) -> None:
    function = get_function(lib, SAXPY)
    blocks = ffi.new("int *")
    assert lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, 256, 0) == 0
    assert blocks[0] == 8
    assert lib.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, 1024, 0, 1) == 0
    assert blocks[0] == 2
    assert lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, 256, 1 << 20) == 0
    assert blocks[0] == 0  # more dynamic shared memory than the kernel may have
    invalid = code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, 256, 0, 2) == invalid
    assert lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, 0, 0) == invalid
    smem = ffi.new("size_t *")
    assert lib.cuOccupancyAvailableDynamicSMemPerBlock(smem, function, 4, 256) == 0
    assert 0 < smem[0] <= 49152
    assert lib.cuOccupancyAvailableDynamicSMemPerBlock(smem, function, 64, 256) == 0 and smem[0] == 0
    bogus = ffi.cast("CUfunction", 0x4242)
    assert lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, bogus, 256, 0) == code(
        ffi, "CUDA_ERROR_INVALID_HANDLE")
    assert lib.cuOccupancyAvailableDynamicSMemPerBlock(smem, bogus, 4, 256) == code(ffi, "CUDA_ERROR_INVALID_HANDLE")


# --- device -----------------------------------------------------------------------------------------

def test_device_properties(lib: EmulatedLib, ffi: Any) -> None:
    name = ffi.new("char[]", 256)
    assert lib.cuDeviceGetName(name, 256, 0) == 0 and ffi.string(name) == b"cuwire emulated device"
    value = ffi.new("int *")

    def attribute(name: str) -> int:
        value[0] = -1
        assert lib.cuDeviceGetAttribute(value, enum(ffi, "CUdevice_attribute", f"CU_DEVICE_ATTRIBUTE_{name}"), 0) == 0
        return value[0]

    assert [attribute(f"MAX_BLOCK_DIM_{axis}") for axis in "XYZ"] == [1024, 1024, 64]
    assert (attribute("COMPUTE_CAPABILITY_MAJOR"), attribute("COMPUTE_CAPABILITY_MINOR")) == (9, 0)
    assert attribute("ECC_ENABLED") == 0 and attribute("MAXIMUM_TEXTURE1D_WIDTH") == 0  # not in the registry
    assert attribute("MAX_PITCH") == 2**31 - 1
    total = ffi.new("size_t *")
    assert lib.cuDeviceTotalMem_v2(total, 0) == 0 and total[0] == registry.PROPERTIES["totalGlobalMem"]
    uuid = ffi.new("CUuuid *")
    assert lib.cuDeviceGetUuid_v2(uuid, 0) == 0 and bytes(ffi.buffer(uuid)) == b"cuwire-emulated\0"
    invalid_device = code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    assert lib.cuDeviceGetName(name, 256, 1) == invalid_device
    assert lib.cuDeviceTotalMem_v2(total, 1) == invalid_device
    assert lib.cuDeviceGetUuid_v2(uuid, 1) == invalid_device
    assert lib.cuDeviceGetAttribute(value, enum(ffi, "CUdevice_attribute", "CU_DEVICE_ATTRIBUTE_WARP_SIZE"), 1) == (
        invalid_device)
    assert lib.cuDeviceGetAttribute(value, 100000, 0) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


@pytest.mark.parametrize(("attr", "expected"), [
    ("MAX_THREADS_PER_BLOCK", 1024), ("MAX_BLOCK_DIM_Z", 64), ("MAX_GRID_DIM_X", 2147483647), ("WARP_SIZE", 32),
    ("MAX_SHARED_MEMORY_PER_BLOCK", 49152), ("MULTIPROCESSOR_COUNT", 4), ("COMPUTE_CAPABILITY_MAJOR", 9),
    ("COMPUTE_CAPABILITY_MINOR", 0), ("L2_CACHE_SIZE", 52428800), ("CLOCK_RATE", 0),
    ("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 232448), ("MAX_THREADS_PER_MULTIPROCESSOR", 2048),
])
def test_device_attributes(lib: EmulatedLib, ffi: Any, attr: str, expected: int) -> None:
    value = ffi.new("int *", -1)
    assert lib.cuDeviceGetAttribute(value, enum(ffi, "CUdevice_attribute", f"CU_DEVICE_ATTRIBUTE_{attr}"), 0) == 0
    assert value[0] == expected


def test_device_management(lib: EmulatedLib, ffi: Any) -> None:
    count, device = ffi.new("int *"), ffi.new("CUdevice *")
    assert lib.cuDeviceGetCount(count) == 0 and count[0] == 1
    assert lib.cuCtxGetDevice(device) == 0 and device[0] == 0
    bus_id = ffi.new("char[]", 32)
    assert lib.cuDeviceGetPCIBusId(bus_id, 32, 0) == 0 and ffi.string(bus_id) == b"0000:00:00.0"
    assert lib.cuDeviceGetPCIBusId(bus_id, 32, 1) == code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    assert lib.cuDeviceGetByPCIBusId(device, b"0000:00:00.0") == 0 and device[0] == 0
    assert lib.cuDeviceGetByPCIBusId(device, b"00:00.0") == 0
    assert lib.cuDeviceGetByPCIBusId(device, b"0000:01:00.0") == code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    assert lib.cuDeviceGetByPCIBusId(device, b"not a bus id") == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    peer = ffi.new("int *", 1)
    assert lib.cuDeviceCanAccessPeer(peer, 0, 0) == 0 and peer[0] == 0
    assert lib.cuDeviceGetP2PAttribute(peer, 1, 0, 0) == code(ffi, "CUDA_ERROR_INVALID_DEVICE")
    version = ffi.new("int *")
    assert lib.cuDriverGetVersion(version) == 0 and version[0] == registry.DRIVER_VERSION


def test_context_limits_and_cache_config(lib: EmulatedLib, ffi: Any) -> None:
    limit, value = enum(ffi, "CUlimit", "CU_LIMIT_MALLOC_HEAP_SIZE"), ffi.new("size_t *")
    assert lib.cuCtxGetLimit(value, enum(ffi, "CUlimit", "CU_LIMIT_STACK_SIZE")) == 0 and value[0] == 1024
    assert lib.cuCtxSetLimit(limit, 1 << 24) == 0
    assert lib.cuCtxGetLimit(value, limit) == 0 and value[0] == 1 << 24
    assert lib.cuCtxGetLimit(value, 99) == code(ffi, "CUDA_ERROR_UNSUPPORTED_LIMIT")
    assert lib.cuCtxSetLimit(99, 0) == code(ffi, "CUDA_ERROR_UNSUPPORTED_LIMIT")
    config = ffi.new("CUfunc_cache *", 7)
    assert lib.cuCtxGetCacheConfig(config) == 0 and config[0] == enum(ffi, "CUfunc_cache", "CU_FUNC_CACHE_PREFER_NONE")
    prefer_shared = enum(ffi, "CUfunc_cache", "CU_FUNC_CACHE_PREFER_SHARED")
    assert lib.cuCtxSetCacheConfig(prefer_shared) == 0
    assert lib.cuCtxGetCacheConfig(config) == 0 and config[0] == prefer_shared
    assert lib.cuCtxSetCacheConfig(9) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


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
    text = ffi.new("const char **")
    assert lib.cuGetErrorString(code(ffi, "CUDA_ERROR_OUT_OF_MEMORY"), text) == 0
    assert ffi.string(text[0]) == b"out of memory"
    assert lib.cuGetErrorString(0, text) == 0 and ffi.string(text[0]) == b"no error"
    assert lib.cuGetErrorString(code(ffi, "CUDA_ERROR_INVALID_VALUE"), text) == 0
    assert ffi.string(text[0]) == b"invalid argument"
    assert lib.cuGetErrorString(code(ffi, "CUDA_ERROR_INVALID_PTX"), text) == 0
    assert ffi.string(text[0]) == b"CUDA_ERROR_INVALID_PTX"  # no text of its own: its name
    assert lib.cuGetErrorName(code(ffi, "CUDA_ERROR_ILLEGAL_ADDRESS"), text) == 0
    assert ffi.string(text[0]) == b"CUDA_ERROR_ILLEGAL_ADDRESS"
    assert lib.cuGetErrorString(123456, text) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert text[0] == ffi.NULL
    assert lib.cuGetErrorName(123456, text) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


# --- streams and events -----------------------------------------------------------------------------

def test_streams(lib: EmulatedLib, ffi: Any) -> None:
    invalid_handle = code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    least, greatest = ffi.new("int *"), ffi.new("int *")
    assert lib.cuCtxGetStreamPriorityRange(least, greatest) == 0 and greatest[0] < least[0]
    stream = handle(lib, "CUstream", "cuStreamCreateWithPriority", 1, greatest[0])
    assert stream != ffi.NULL
    priority, flags, ident = ffi.new("int *"), ffi.new("unsigned int *"), ffi.new("unsigned long long *")
    assert lib.cuStreamGetPriority(stream, priority) == 0 and priority[0] == greatest[0]
    assert lib.cuStreamGetFlags(stream, flags) == 0 and flags[0] == 1
    assert lib.cuStreamGetId(stream, ident) == 0 and ident[0] >= 3  # 1 and 2 are the built-in streams'
    clamped = handle(lib, "CUstream", "cuStreamCreateWithPriority", 0, greatest[0] - 100)
    assert lib.cuStreamGetPriority(clamped, priority) == 0 and priority[0] == greatest[0]
    device, ctx, primary = ffi.new("CUdevice *", 7), ffi.new("CUcontext *"), ffi.new("CUcontext *")
    assert lib.cuStreamGetDevice(stream, device) == 0 and device[0] == 0
    assert lib.cuDevicePrimaryCtxRetain(primary, 0) == 0
    assert lib.cuStreamGetCtx(stream, ctx) == 0 and ctx[0] == primary[0]
    for special in (0, 1, 2):  # default, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
        assert lib.cuStreamSynchronize(ffi.cast("CUstream", special)) == 0
        assert lib.cuStreamDestroy_v2(ffi.cast("CUstream", special)) == invalid_handle
    assert lib.cuStreamQuery(stream) == 0
    assert lib.cuStreamDestroy_v2(stream) == 0
    assert lib.cuStreamSynchronize(stream) == invalid_handle
    assert lib.cuStreamQuery(stream) == invalid_handle
    assert lib.cuStreamGetFlags(stream, flags) == invalid_handle
    assert lib.cuStreamSynchronize(ffi.cast("CUstream", 0x3333)) == invalid_handle
    assert lib.cuStreamCreate(ffi.new("CUstream *"), 8) == code(ffi, "CUDA_ERROR_INVALID_VALUE")


def test_events_time_what_they_bracket(lib: EmulatedLib, ffi: Any) -> None:
    invalid_handle = code(ffi, "CUDA_ERROR_INVALID_HANDLE")
    start = handle(lib, "CUevent", "cuEventCreate", 0)
    end = handle(lib, "CUevent", "cuEventCreate", enum(ffi, "CUevent_flags", "CU_EVENT_BLOCKING_SYNC"))
    ms = ffi.new("float *")
    assert lib.cuEventElapsedTime_v2(ms, start, end) == invalid_handle  # unrecorded
    assert lib.cuEventRecord(start, ffi.NULL) == 0
    malloc(lib, 1 << 16)
    assert lib.cuEventRecordWithFlags(end, ffi.NULL, 2) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuEventRecordWithFlags(end, ffi.NULL, 0) == 0
    assert lib.cuEventSynchronize(end) == 0 and lib.cuEventQuery(end) == 0
    assert lib.cuEventElapsedTime_v2(ms, start, end) == 0 and ms[0] >= 0.0
    assert lib.cuStreamWaitEvent(ffi.NULL, end, 0) == 0
    assert lib.cuStreamWaitEvent(ffi.NULL, ffi.cast("CUevent", 0x9999), 0) == invalid_handle
    untimed = handle(lib, "CUevent", "cuEventCreate", enum(ffi, "CUevent_flags", "CU_EVENT_DISABLE_TIMING"))
    assert lib.cuEventRecord(untimed, ffi.NULL) == 0
    assert lib.cuEventElapsedTime_v2(ms, start, untimed) == invalid_handle
    interprocess = enum(ffi, "CUevent_flags", "CU_EVENT_INTERPROCESS")
    assert lib.cuEventCreate(ffi.new("CUevent *"), interprocess) == code(ffi, "CUDA_ERROR_INVALID_VALUE")
    assert lib.cuEventDestroy_v2(start) == 0
    assert lib.cuEventDestroy_v2(start) == invalid_handle
    assert lib.cuEventRecord(start, ffi.NULL) == invalid_handle
    assert lib.cuEventQuery(start) == invalid_handle
    assert lib.cuEventRecord(end, ffi.cast("CUstream", 0x9999)) == invalid_handle


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
