"""What the emulated device knows about the test apps: host implementations of their kernels, their
`__device__` variables, and the properties the device reports.

Tests only (CUWIRE_BACKEND=emulated). Kernels are found by their mangled name, as the client names them
when it asks the server for a kernel of a loaded module.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class DeviceMemory(Protocol):
    """The emulated device's memory, as a kernel sees it."""

    cluster: tuple[int, int, int]  # the running launch's thread block cluster dimension

    def read(self, address: int, size: int) -> bytes: ...

    def write(self, address: int, data: bytes) -> None: ...

    def global_address(self, name: str) -> int:
        """Address of a registered __device__ variable (see GLOBALS)."""
        ...

    def texture(self, handle: int) -> Any:
        """A texture object (cuwire_emulated/arrays.py Texture): .sample, .cube, .fetch_index."""
        ...

    def surface(self, handle: int) -> Any:
        """A surface object (cuwire_emulated/arrays.py Surface): .read, .write."""
        ...


@dataclass(frozen=True)
class Params:
    """A launch's parameter buffer with the kernel's layout (offsets from natural alignment)."""

    buffer: bytes
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    def raw(self, i: int) -> bytes:
        return self.buffer[self.offsets[i]:self.offsets[i] + self.sizes[i]]

    def u64(self, i: int) -> int:
        return struct.unpack_from("<Q", self.buffer, self.offsets[i])[0]

    ptr = u64

    def i32(self, i: int) -> int:
        return struct.unpack_from("<i", self.buffer, self.offsets[i])[0]

    def u32(self, i: int) -> int:
        return struct.unpack_from("<I", self.buffer, self.offsets[i])[0]

    def f32(self, i: int) -> float:
        return struct.unpack_from("<f", self.buffer, self.offsets[i])[0]

    def f64(self, i: int) -> float:
        return struct.unpack_from("<d", self.buffer, self.offsets[i])[0]


Dim3 = tuple[int, int, int]
KernelFn = Callable[[DeviceMemory, Dim3, Dim3, int, Params], None]


@dataclass(frozen=True)
class Kernel:
    name: str
    param_sizes: tuple[int, ...]
    param_aligns: tuple[int, ...]
    run: KernelFn
    layout: tuple[int, ...] = ()  # the offsets a loaded image's ELF gives (the driver's); else from the aligns

    @property
    def param_offsets(self) -> tuple[int, ...]:
        if self.layout:
            return self.layout
        out, off = [], 0
        for size, align in zip(self.param_sizes, self.param_aligns, strict=True):
            off = (off + align - 1) // align * align
            out.append(off)
            off += size
        return tuple(out)


KERNELS: dict[str, Kernel] = {}
# The emulated device's tensor maps (cuTensorMapEncodeTiled): the driver's encoding is its own, so the
# emulated device keeps its own in the 128 bytes: data type, rank, out-of-bounds fill, global address,
# dimensions (5), strides in bytes (4), box (5), element strides (5); its TMA kernels read it back.
TENSOR_MAP = struct.Struct("<BBB5xQ5Q4Q5I5I")
# CUtensorMapDataType -> bytes an element (UINT8 ... TFLOAT32_FTZ)
TENSOR_ELEMENT_SIZES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
# __device__ variables by name -> size in bytes
GLOBALS: dict[str, int] = {}


def kernel(name: str, params: list[int], aligns: list[int] | None = None) -> Callable[[KernelFn], KernelFn]:
    """Register a host implementation for the kernel with this mangled name.

    params: each parameter's size in bytes; aligns: each one's alignment (default: min(size, 8)).
    """

    def register(fn: KernelFn) -> KernelFn:
        al = aligns or [min(s, 8) if s in (1, 2, 4, 8) else 8 for s in params]
        KERNELS[name] = Kernel(name, tuple(params), tuple(al), fn)
        return fn

    return register


def device_global(name: str, size: int) -> None:
    GLOBALS[name] = size


# What the emulated device reports, by the names of cudaDeviceProp's fields (device attributes map onto
# them, device.py); what is not here is zero.
PROPERTIES: dict[str, object] = {
    "name": "cuwire emulated device",
    "totalGlobalMem": 8 << 30,
    "sharedMemPerBlock": 49152,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "memPitch": 2147483647,
    "maxThreadsPerBlock": 1024,
    "maxThreadsDim": (1024, 1024, 64),
    "maxGridSize": (2147483647, 65535, 65535),
    "totalConstMem": 65536,
    "major": 9,
    "minor": 0,
    "textureAlignment": 512,
    "texturePitchAlignment": 32,
    "multiProcessorCount": 4,
    "integrated": 0,
    "canMapHostMemory": 1,
    "concurrentKernels": 1,
    "pciBusID": 0,
    "pciDeviceID": 0,
    "pciDomainID": 0,
    "asyncEngineCount": 2,
    "unifiedAddressing": 1,
    "memoryBusWidth": 5120,
    "l2CacheSize": 52428800,
    "maxThreadsPerMultiProcessor": 2048,
    "sharedMemPerMultiprocessor": 233472,
    "regsPerMultiprocessor": 65536,
    "managedMemory": 1,
    "sharedMemPerBlockOptin": 232448,
    "maxBlocksPerMultiProcessor": 32,
}
DRIVER_VERSION = 13000
