"""The emulated device (CUWIRE_BACKEND=emulated): a host-memory stand-in for the CUDA libraries.

CI has no GPU, yet the end-to-end tests must drive the real server code. `EmulatedLib` therefore has the
same interface as the cffi library object the generated handlers call (`s.lib.cudaMalloc(...)`): one
method per CUDA function, the C function's name and positional arguments, cffi values in (ints, cdata
pointers, structs), the CUDA error code out, outputs written through the pointers. Kernels run through
host implementations registered by name in `cuwire.emulated.registry`. Everything runs synchronously when it is
called. Tests only: never the default backend.

Device memory lives at addresses at or above 2**48, above any x86-64 user-space address, so a device
address can never be mistaken for a host pointer and anything below is a host buffer the server made.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import re
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import cffi

from cuwire.client import fatbin
from cuwire.emulated import registry
from cuwire.emulated.nvml import EmulatedNvml
from cuwire.server.backend import cuda_ffi  # noqa: F401  (tests build their FFI through it)

CData = Any  # a cffi cdata value; cffi has no static types for these

DEVICE_BASE = 1 << 48  # above the x86-64 user address space: never equal to a host pointer
ALLOCATION_ALIGNMENT = 256  # what cudaMalloc guarantees
PITCH_ALIGNMENT = 512  # what cudaMallocPitch rounds rows up to on current GPUs
HANDLE_BASE = 0x5000_0000  # streams, events, libraries, ... : small fake addresses, never 0, 1 or 2
MIN_HOST_ADDRESS = 0x10000  # Linux maps nothing below vm.mmap_min_addr: such a "host pointer" is a bug
STREAM_LEGACY, STREAM_PER_THREAD = 0x1, 0x2  # cudaStreamLegacy / cudaStreamPerThread (macros in C)
LARGE_ALLOCATION = 1 << 20  # from here on back allocations with lazily zeroed mmap, not a memset bytearray
INT_MAX = 2**31 - 1
# CU_LAUNCH_PARAM_* are macros ((void *)0x01, ...), so the declarations do not carry them.
LAUNCH_PARAM_END, LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE = 0x0, 0x1, 0x2
STREAM_PRIORITIES = (0, -5)  # (least, greatest), as on recent data-center GPUs
DEFAULT_LIMITS = {  # cudaLimit name -> default value on the device
    "cudaLimitStackSize": 1024,
    "cudaLimitPrintfFifoSize": 1 << 20,
    "cudaLimitMallocHeapSize": 8 << 20,
    "cudaLimitDevRuntimeSyncDepth": 2,
    "cudaLimitDevRuntimePendingLaunchCount": 2048,
    "cudaLimitMaxL2FetchGranularity": 32,
    "cudaLimitPersistingL2CacheSize": 0,
}
KERNEL_REGISTERS = 32  # what cudaFuncGetAttributes reports and occupancy assumes
UUID = b"cuwire-emulated\x00"
# Real text for the codes test apps meet most; other codes are described by their name.
ERROR_TEXT = {
    "Success": "no error",
    "InvalidValue": "invalid argument",
    "MemoryAllocation": "out of memory",
    "InvalidDevice": "invalid device ordinal",
    "InvalidConfiguration": "invalid configuration argument",
    "InvalidPitchValue": "invalid pitch argument",
    "InvalidMemcpyDirection": "invalid copy direction for memcpy",
    "InvalidDeviceFunction": "invalid device function",
    "InvalidResourceHandle": "invalid resource handle",
    "NotFound": "named symbol not found",
    "NotReady": "device not ready",
    "IllegalAddress": "an illegal memory access was encountered",
    "LaunchFailure": "unspecified launch failure",
    "NotSupported": "operation not supported",
    "UnsupportedLimit": "unsupported limit",
}
# Device attributes whose normalized name (no prefix, no underscores, lower case) is not a cudaDeviceProp
# field's: name -> (field, index into an array field or None). The rest match a field by name.
ATTRIBUTE_FIELDS: dict[str, tuple[str, int | None]] = {
    "maxblockdimx": ("maxThreadsDim", 0),
    "maxblockdimy": ("maxThreadsDim", 1),
    "maxblockdimz": ("maxThreadsDim", 2),
    "maxgriddimx": ("maxGridSize", 0),
    "maxgriddimy": ("maxGridSize", 1),
    "maxgriddimz": ("maxGridSize", 2),
    "maxsharedmemoryperblock": ("sharedMemPerBlock", None),
    "sharedmemoryperblock": ("sharedMemPerBlock", None),
    "maxsharedmemoryperblockoptin": ("sharedMemPerBlockOptin", None),
    "maxsharedmemorypermultiprocessor": ("sharedMemPerMultiprocessor", None),
    "totalconstantmemory": ("totalConstMem", None),
    "computecapabilitymajor": ("major", None),
    "computecapabilityminor": ("minor", None),
    "maxregistersperblock": ("regsPerBlock", None),
    "registersperblock": ("regsPerBlock", None),
    "maxregisterspermultiprocessor": ("regsPerMultiprocessor", None),
    "maxpitch": ("memPitch", None),
    "globalmemorybuswidth": ("memoryBusWidth", None),
    "gpuoverlap": ("asyncEngineCount", None),
}

_CUDA_FUNCTION = re.compile(r"(cu(da)?|nvml)[A-Z]")


class _Enum:
    """An enum's constants by name, read from the declarations so no error number is typed by hand."""

    def __init__(self, ffi: cffi.FFI, ctype: str) -> None:
        self.values: dict[str, int] = ffi.typeof(ctype).relements
        self.names: dict[int, str] = ffi.typeof(ctype).elements

    def __getattr__(self, name: str) -> int:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


class _Fault(Exception):
    """A kernel touched memory outside every allocation: CUDA's illegal address."""


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _zeroed(size: int) -> bytearray | mmap.mmap:
    """Zeroed backing store; big ones are mmap'd so untouched pages cost no host memory."""
    return mmap.mmap(-1, size) if size >= LARGE_ALLOCATION else bytearray(size)


def _prop(name: str) -> Any:
    """A cudaDeviceProp field of the emulated device (zero where the registry names none)."""
    return registry.PROPERTIES.get(name, 0)


class EmulatedMemory:
    """The device's global memory: allocations, each backed by host memory, plus `__device__` variables.

    Implements `registry.DeviceMemory` for kernels; an access outside every allocation raises
    `_Fault`, which the launch turns into CUDA's sticky illegal-address error.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._next = DEVICE_BASE
        self._bases: list[int] = []  # sorted allocation start addresses
        self._blocks: dict[int, bytearray | mmap.mmap] = {}
        self._globals: dict[str, int] = {}

    def allocate(self, size: int) -> int | None:
        """A new zeroed allocation's address, or None when the device is full."""
        rounded = _round_up(max(size, 1), ALLOCATION_ALIGNMENT)
        if size < 0 or rounded > self.total - self.used:
            return None
        try:
            block = _zeroed(size)
        except (MemoryError, OSError, OverflowError):
            return None
        base = self._next
        # Addresses are never reused and a gap follows each allocation, so use-after-free and running off
        # the end of an allocation fault instead of silently landing in another one.
        self._next += rounded + ALLOCATION_ALIGNMENT
        self._bases.append(base)
        self._blocks[base] = block
        self.used += rounded
        return base

    def reset(self) -> None:
        """cudaDeviceReset: free every allocation; `__device__` variables stay where they are, zeroed,
        because loaded libraries (and the addresses the server learned from them) outlive the reset."""
        kept = {address: self._blocks[address] for address in self._globals.values()}
        self._bases = sorted(kept)
        self._blocks = kept
        self.used = sum(_round_up(max(len(b), 1), ALLOCATION_ALIGNMENT) for b in kept.values())
        for block in kept.values():
            block[:] = bytes(len(block))

    def free(self, address: int) -> bool:
        """Free the allocation starting at `address`; False if none does (or it holds a global)."""
        if address not in self._blocks or address in self._globals.values():
            return False
        del self._bases[bisect.bisect_left(self._bases, address)]
        self.used -= _round_up(max(len(self._blocks.pop(address)), 1), ALLOCATION_ALIGNMENT)
        return True

    def find(self, address: int, size: int) -> tuple[bytearray | mmap.mmap, int] | None:
        """The block and offset holding [address, address + size), if one allocation holds all of it."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0 or size < 0:
            return None
        base = self._bases[i]
        block = self._blocks[base]
        offset = address - base
        return (block, offset) if offset + size <= len(block) else None

    def contains(self, address: int) -> bool:
        return address in self._blocks or self.find(address, 1) is not None

    def load(self, address: int, size: int) -> bytes | None:
        found = self.find(address, size)
        if found is None:
            return None
        block, offset = found
        return bytes(block[offset:offset + size])

    def store(self, address: int, data: bytes) -> bool:
        found = self.find(address, len(data))
        if found is None:
            return False
        block, offset = found
        block[offset:offset + len(data)] = data
        return True

    def global_variable(self, name: str) -> int | None:
        """Address of a registered `__device__` variable, allocated zeroed on first use; None if full."""
        if name not in self._globals:
            address = self.allocate(registry.GLOBALS[name])
            if address is None:
                return None
            self._globals[name] = address
        return self._globals[name]

    # registry.DeviceMemory, as kernels see it

    def read(self, address: int, size: int) -> bytes:
        data = self.load(address, size)
        if data is None:
            raise _Fault(f"read of {size} bytes at {address:#x}")
        return data

    def write(self, address: int, data: bytes) -> None:
        if not self.store(address, bytes(memoryview(data).cast("B"))):
            raise _Fault(f"write of {len(data)} bytes at {address:#x}")

    def global_address(self, name: str) -> int:
        address = self.global_variable(name)
        if address is None:
            raise MemoryError(f"no device memory left for __device__ variable {name}")
        return address


@dataclass
class _Stream:
    flags: int = 0
    priority: int = 0
    ident: int = 0
    builtin: bool = False  # the default stream, cudaStreamLegacy, cudaStreamPerThread: never destroyed
    attributes: dict[int, bytes] = field(default_factory=dict)  # cudaLaunchAttributeValue bytes by id


@dataclass
class _Event:
    flags: int = 0
    recorded_at: float | None = None  # time.perf_counter() when last recorded


@dataclass(frozen=True)
class _Function:
    """What a CUkernel or CUfunction handle names."""

    library: int
    kernel: registry.Kernel


Method = TypeVar("Method", bound=Callable[..., int])


def _after_fault(method: Method) -> Method:
    """Make a call that touches device work return the sticky kernel fault, as CUDA does after one."""

    @functools.wraps(method)
    def checked(self: EmulatedLib, *args: Any) -> int:
        return self._fault or method(self, *args)

    return cast(Method, checked)


class EmulatedLib(EmulatedNvml):
    """Host-memory stand-in for the cffi CUDA library object: same function names, arguments and codes.

    A CUDA function it does not implement answers "not supported" and says so on stderr (`__getattr__`),
    so nothing an app relies on silently succeeds.
    """

    def __init__(self, ffi: cffi.FFI) -> None:
        self.ffi = ffi
        self.rt = _Enum(ffi, "cudaError_t")
        self.drv = _Enum(ffi, "CUresult")
        self._next_handle = HANDLE_BASE
        self._context = self._new_handle()  # the primary context
        self._created: dict[int, int] = {}  # contexts made with cuCtxCreate -> their flags (else they share
        # the one device's state)
        self._links: dict[int, list[bytes]] = {}  # cuLinkCreate's states: their PTX inputs
        self._linked: dict[int, CData] = {}  # cuLinkComplete's images, kept until cuLinkDestroy
        self._link_options: dict[int, tuple] = {}  # cuLinkCreate's JIT options (its log buffers)
        self._error_strings: dict[tuple[str, int], CData] = {}  # kept alive: C callers hold the pointers
        self._memory = EmulatedMemory(int(_prop("totalGlobalMem")))
        # Libraries are context-independent in CUDA: they and their kernels outlive cudaDeviceReset.
        self._libraries: set[int] = set()
        self._kernel_handles: dict[int, _Function] = {}
        self._function_handles: dict[int, _Function] = {}
        self._func_attributes: dict[str, dict[int, int]] = {}  # kernel name -> cudaFuncAttribute -> value
        self._reset()

    def _reset(self) -> None:
        """The device's state as at start-up: on creation and at cudaDeviceReset."""
        self._memory.reset()
        self._fault = 0  # sticky error of a failed kernel (same number in cudaError_t and CUresult)
        self._device = 0
        self._device_flags = 0
        self._cache_config = 0
        self._shared_mem_config = 0
        self._limits = {self.ffi.typeof("enum cudaLimit").relements[n]: v for n, v in DEFAULT_LIMITS.items()}
        self._current_context = self._context
        self._primary_refs = 0
        self._streams = {0: _Stream(builtin=True, ident=1)}
        self._streams[STREAM_LEGACY] = self._streams[0]
        self._streams[STREAM_PER_THREAD] = _Stream(builtin=True, ident=2)
        self._next_stream_id = 3
        self._events: dict[int, _Event] = {}

    def __getattr__(self, name: str) -> Callable[..., int]:
        """Any other CUDA function: fail loudly by name, never succeed silently."""
        if not _CUDA_FUNCTION.match(name):
            raise AttributeError(name)
        code = (self.rt.cudaErrorNotSupported if name.startswith("cuda") else 3 if name.startswith("nvml")
                else self.drv.CUDA_ERROR_NOT_SUPPORTED)  # 3: NVML_ERROR_NOT_SUPPORTED

        def not_implemented(*args: Any) -> int:
            print(f"emulated device: {name} not implemented", file=sys.stderr, flush=True)
            return code

        return not_implemented

    # --- small helpers -------------------------------------------------------------------------------

    def _new_handle(self) -> int:
        self._next_handle += 0x10
        return self._next_handle

    def _addr(self, value: int | CData) -> int:
        """A pointer argument (int or cdata) as an address."""
        return value if isinstance(value, int) else int(self.ffi.cast("uintptr_t", value))

    def _is_null(self, pointer: CData) -> bool:
        return self._addr(pointer) == 0

    def _put(self, *outputs: tuple[CData, Any]) -> bool:
        """Write each (pointer, value) as C would; False, writing nothing, if any pointer is NULL."""
        if any(self._is_null(out) for out, _ in outputs):
            return False
        for out, value in outputs:
            item = self.ffi.typeof(out).item
            out[0] = self.ffi.cast(item, value) if item.kind == "pointer" else value
        return True

    def _rt_put(self, *outputs: tuple[CData, Any]) -> int:
        return 0 if self._put(*outputs) else self.rt.cudaErrorInvalidValue

    def _drv_put(self, *outputs: tuple[CData, Any]) -> int:
        return 0 if self._put(*outputs) else self.drv.CUDA_ERROR_INVALID_VALUE

    def _write_string(self, buffer: CData, length: int, text: str) -> bool:
        """Copy `text` into a C buffer of `length` bytes, truncated and NUL-terminated, like CUDA does."""
        if length <= 0 or self._is_null(buffer):
            return False
        data = text.encode()[:length - 1] + b"\0"
        self.ffi.memmove(self.ffi.cast("char *", buffer), data, len(data))
        return True

    def _string(self, pointer: CData | bytes) -> str | None:
        """A `const char *` argument; bytes too, which cffi passes to C functions as char pointers."""
        if isinstance(pointer, bytes):
            return pointer.split(b"\0", 1)[0].decode("utf-8", "replace")
        if self._is_null(pointer):
            return None
        return self.ffi.string(self.ffi.cast("char *", pointer)).decode("utf-8", "replace")

    def _stream(self, handle: CData) -> _Stream | None:
        return self._streams.get(self._addr(handle))

    def _event(self, handle: CData) -> _Event | None:
        return self._events.get(self._addr(handle))

    def _function(self, handle: CData) -> _Function | None:
        """A CUkernel or CUfunction handle (CUDA accepts either where a function is expected)."""
        address = self._addr(handle)
        return self._kernel_handles.get(address) or self._function_handles.get(address)

    # --- memory: where a pointer points ---------------------------------------------------------------

    def _valid(self, address: int, size: int) -> bool:
        """Whether [address, address + size) is all device memory of one allocation, or plausibly host."""
        if address >= DEVICE_BASE:
            return self._memory.find(address, size) is not None
        return MIN_HOST_ADDRESS <= address and address + size <= DEVICE_BASE

    def _load(self, address: int, size: int) -> bytes:
        """Bytes at a device or host address already checked with `_valid`."""
        if address >= DEVICE_BASE:
            return cast(bytes, self._memory.load(address, size))
        return self.ffi.buffer(self.ffi.cast("char *", address), size)[:]

    def _store(self, address: int, data: bytes) -> None:
        if address >= DEVICE_BASE:
            self._memory.store(address, data)
        else:
            self.ffi.buffer(self.ffi.cast("char *", address), len(data))[:] = data

    def _kind_fits(self, dst: int, src: int, kind: int) -> bool | None:
        """Whether a cudaMemcpyKind agrees with where dst and src are; None if it is no kind at all."""
        kinds = self.ffi.typeof("enum cudaMemcpyKind").relements
        device_side = {
            kinds["cudaMemcpyHostToHost"]: (),
            kinds["cudaMemcpyHostToDevice"]: (dst,),
            kinds["cudaMemcpyDeviceToHost"]: (src,),
            kinds["cudaMemcpyDeviceToDevice"]: (dst, src),
            kinds["cudaMemcpyDefault"]: (),
        }.get(kind)
        if device_side is None:
            return None
        return all(self._memory.contains(address) for address in device_side)

    def _copy(self, dst: CData, src: CData, count: int, kind: int) -> int:
        """cudaMemcpy for every kind, the direction taken from the pointers; a cudaError_t."""
        return self._copy_2d(dst, count, src, count, count, 1, kind)

    def _copy_2d(self, dst: CData, dpitch: int, src: CData, spitch: int, width: int, height: int,
                 kind: int) -> int:
        """cudaMemcpy2D: `height` rows of `width` bytes; every row is checked before any is copied."""
        dst_address, src_address = self._addr(dst), self._addr(src)
        fits = self._kind_fits(dst_address, src_address, kind)
        if fits is None:
            return self.rt.cudaErrorInvalidMemcpyDirection
        if width == 0 or height == 0:
            return 0
        if width > dpitch or width > spitch:
            return self.rt.cudaErrorInvalidPitchValue
        rows = (height - 1)
        if not (fits and self._valid(dst_address, dpitch * rows + width)
                and self._valid(src_address, spitch * rows + width)):
            return self.rt.cudaErrorInvalidValue
        for row in range(height):
            self._store(dst_address + row * dpitch, self._load(src_address + row * spitch, width))
        return 0

    def _fill(self, address: int, pitch: int, pattern: bytes, width: int, height: int) -> bool:
        """Memset of `height` rows of `width` bytes of device memory with a repeated pattern."""
        if width == 0 or height == 0:
            return True
        if width > pitch or self._memory.find(address, pitch * (height - 1) + width) is None:
            return False
        row = pattern * (width // len(pattern))
        for i in range(height):
            self._memory.store(address + i * pitch, row)
        return True

    def _allocate(self, out: CData, size: int) -> int:
        """cudaMalloc's work; a cudaError_t. Size 0 gives NULL, as CUDA does."""
        if self._is_null(out):
            return self.rt.cudaErrorInvalidValue
        address = self._memory.allocate(size) if size else 0
        if address is None:
            return self.rt.cudaErrorMemoryAllocation
        return self._rt_put((out, address))

    def _free(self, pointer: CData) -> int:
        address = self._addr(pointer)
        return 0 if address == 0 or self._memory.free(address) else self.rt.cudaErrorInvalidValue

    # --- device -------------------------------------------------------------------------------------

    def cudaGetDeviceCount(self, count: CData) -> int:
        return self._rt_put((count, 1))

    def cudaGetDevice(self, device: CData) -> int:
        return self._rt_put((device, self._device))

    def cudaSetDevice(self, device: int) -> int:
        if device != 0:
            return self.rt.cudaErrorInvalidDevice
        self._device = device
        return 0

    def cudaInitDevice(self, device: int, deviceFlags: int, flags: int) -> int:
        return 0 if device == 0 else self.rt.cudaErrorInvalidDevice

    def cudaSetValidDevices(self, device_arr: CData, len: int) -> int:
        if len < 0 or (len and self._is_null(device_arr)):
            return self.rt.cudaErrorInvalidValue
        devices = self.ffi.cast("int *", device_arr)
        return 0 if all(devices[i] == 0 for i in range(len)) else self.rt.cudaErrorInvalidDevice

    def cudaChooseDevice(self, device: CData, prop: CData) -> int:
        if self._is_null(prop):
            return self.rt.cudaErrorInvalidValue
        return self._rt_put((device, 0))

    def cudaGetDeviceFlags(self, flags: CData) -> int:
        return self._rt_put((flags, self._device_flags))

    def cudaSetDeviceFlags(self, flags: int) -> int:
        self._device_flags = flags
        return 0

    def cudaDeviceReset(self) -> int:
        self._reset()
        return 0

    @_after_fault
    def cudaDeviceSynchronize(self) -> int:
        return 0

    def cudaGetDeviceProperties(self, prop: CData, device: int) -> int:
        if device != 0:
            return self.rt.cudaErrorInvalidDevice
        if self._is_null(prop):
            return self.rt.cudaErrorInvalidValue
        self.ffi.memmove(prop, bytes(self.ffi.sizeof("struct cudaDeviceProp")), self.ffi.sizeof(
            "struct cudaDeviceProp"))
        for name, value in registry.PROPERTIES.items():
            if isinstance(value, str):
                value = value.encode()[:255]
            elif isinstance(value, tuple):
                value = list(value)
            setattr(prop, name, value)
        self.ffi.memmove(prop.uuid.bytes, UUID, len(UUID))
        return 0

    def _attribute(self, enum_ctype: str, prefix: str, attribute: int) -> int | None:
        """A device attribute from PROPERTIES, by its enum name; 0 for ones the device does not know."""
        name = self.ffi.typeof(enum_ctype).elements.get(attribute)
        if name is None:
            return None
        key = name.removeprefix(prefix).replace("_", "").lower()
        fields = {f.lower(): f for f in registry.PROPERTIES}
        field_name, index = ATTRIBUTE_FIELDS.get(key, (fields.get(key, ""), None))
        value = _prop(field_name) if field_name else 0
        return min(int(value[index] if index is not None else value), INT_MAX)

    def cudaDeviceGetAttribute(self, value: CData, attr: int, device: int) -> int:
        if device != 0:
            return self.rt.cudaErrorInvalidDevice
        found = self._attribute("enum cudaDeviceAttr", "cudaDevAttr", attr)
        return self.rt.cudaErrorInvalidValue if found is None else self._rt_put((value, found))

    def cudaDeviceGetP2PAttribute(self, value: CData, attr: int, srcDevice: int, dstDevice: int) -> int:
        return self.rt.cudaErrorInvalidDevice  # the only device has no peer, and is not its own

    def _pci_bus_id(self) -> str:
        return f"{_prop('pciDomainID'):04X}:{_prop('pciBusID'):02X}:{_prop('pciDeviceID'):02X}.0"

    def cudaDeviceGetPCIBusId(self, pciBusId: CData, len: int, device: int) -> int:
        if device != 0:
            return self.rt.cudaErrorInvalidDevice
        return 0 if self._write_string(pciBusId, len, self._pci_bus_id()) else self.rt.cudaErrorInvalidValue

    def cudaDeviceGetByPCIBusId(self, device: CData, pciBusId: CData) -> int:
        text = self._string(pciBusId)
        match = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]+):([0-9a-f]+)(?:\.([0-9a-f]+))?", (text or "").lower())
        if match is None:
            return self.rt.cudaErrorInvalidValue
        ours = (_prop("pciDomainID"), _prop("pciBusID"), _prop("pciDeviceID"), 0)
        theirs = tuple(int(part or "0", 16) for part in match.groups())
        return self._rt_put((device, 0)) if theirs == ours else self.rt.cudaErrorInvalidDevice

    def cudaDeviceGetCacheConfig(self, pCacheConfig: CData) -> int:
        return self._rt_put((pCacheConfig, self._cache_config))

    def cudaDeviceSetCacheConfig(self, cacheConfig: int) -> int:
        if cacheConfig not in self.ffi.typeof("enum cudaFuncCache").elements:
            return self.rt.cudaErrorInvalidValue
        self._cache_config = cacheConfig
        return 0

    def cudaDeviceGetSharedMemConfig(self, pConfig: CData) -> int:
        return self._rt_put((pConfig, self._shared_mem_config))

    def cudaDeviceSetSharedMemConfig(self, config: int) -> int:
        if config not in self.ffi.typeof("enum cudaSharedMemConfig").elements:
            return self.rt.cudaErrorInvalidValue
        self._shared_mem_config = config
        return 0

    def cudaDeviceGetLimit(self, pValue: CData, limit: int) -> int:
        if limit not in self._limits:
            return self.rt.cudaErrorUnsupportedLimit
        return self._rt_put((pValue, self._limits[limit]))

    def cudaDeviceSetLimit(self, limit: int, value: int) -> int:
        if limit not in self._limits:
            return self.rt.cudaErrorUnsupportedLimit
        self._limits[limit] = value
        return 0

    def cudaDeviceGetStreamPriorityRange(self, leastPriority: CData, greatestPriority: CData) -> int:
        least, greatest = STREAM_PRIORITIES
        # Either pointer may be NULL: the caller asks only for what it wants.
        outputs = [(p, v) for p, v in ((leastPriority, least), (greatestPriority, greatest)) if not self._is_null(p)]
        return self._rt_put(*outputs)

    def cudaDriverGetVersion(self, driverVersion: CData) -> int:
        return self._rt_put((driverVersion, registry.DRIVER_VERSION))

    def cudaRuntimeGetVersion(self, runtimeVersion: CData) -> int:
        return self._rt_put((runtimeVersion, registry.RUNTIME_VERSION))

    # --- errors -------------------------------------------------------------------------------------

    def _kept(self, kind: str, code: int, text: str) -> CData:
        """A C string that lives as long as this object, since callers keep the pointer."""
        key = (kind, code)
        if key not in self._error_strings:
            self._error_strings[key] = self.ffi.new("char[]", text.encode())
        return self.ffi.cast("char *", self._error_strings[key])

    def _error_text(self, name: str) -> str:
        short = name.removeprefix("cudaError").removeprefix("cuda")
        return ERROR_TEXT.get(short, name)

    def cudaGetErrorString(self, error: int) -> CData:
        name = self.rt.names.get(error)
        return self._kept("string", error, self._error_text(name) if name else "unrecognized error code")

    def cudaGetErrorName(self, error: int) -> CData:
        return self._kept("name", error, self.rt.names.get(error, "cudaErrorUnknown"))

    def cuGetErrorString(self, error: int, pStr: CData) -> int:
        name = self.drv.names.get(error)
        if name is None:
            self._put((pStr, self.ffi.NULL))
            return self.drv.CUDA_ERROR_INVALID_VALUE
        runtime_name = self.rt.names.get(error, name)  # same numbers name the same error in both enums
        return self._drv_put((pStr, self._kept("cu-string", error, self._error_text(runtime_name))))

    def cuGetErrorName(self, error: int, pStr: CData) -> int:
        name = self.drv.names.get(error)
        if name is None:
            self._put((pStr, self.ffi.NULL))
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pStr, self._kept("cu-name", error, name)))

    # --- memory -------------------------------------------------------------------------------------

    @_after_fault
    def cudaMalloc(self, devPtr: CData, size: int) -> int:
        return self._allocate(devPtr, size)

    @_after_fault
    def cudaMallocAsync(self, devPtr: CData, size: int, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self._allocate(devPtr, size)

    @_after_fault
    def cudaMallocPitch(self, devPtr: CData, pitch: CData, width: int, height: int) -> int:
        row = _round_up(max(width, 1), PITCH_ALIGNMENT)
        if self._is_null(pitch):
            return self.rt.cudaErrorInvalidValue
        status = self._allocate(devPtr, row * height)
        return status or self._rt_put((pitch, row))

    @_after_fault
    def cudaFree(self, devPtr: CData) -> int:
        return self._free(devPtr)

    @_after_fault
    def cudaFreeAsync(self, devPtr: CData, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self._free(devPtr)

    def cudaMemGetInfo(self, free: CData, total: CData) -> int:
        return self._rt_put((free, self._memory.total - self._memory.used), (total, self._memory.total))

    def cudaPointerGetAttributes(self, attributes: CData, ptr: CData) -> int:
        if self._is_null(attributes):
            return self.rt.cudaErrorInvalidValue
        types = self.ffi.typeof("enum cudaMemoryType").relements
        address = self._addr(ptr)
        on_device = self._memory.contains(address)
        attributes.type = types["cudaMemoryTypeDevice" if on_device else "cudaMemoryTypeUnregistered"]
        attributes.device = self._device if on_device else -2  # what CUDA reports for unregistered memory
        attributes.devicePointer = self.ffi.cast("void *", address if on_device else 0)
        attributes.hostPointer = self.ffi.NULL
        return 0

    @_after_fault
    def cudaMemcpy(self, dst: CData, src: CData, count: int, kind: int) -> int:
        return self._copy(dst, src, count, kind)

    @_after_fault
    def cudaMemcpyAsync(self, dst: CData, src: CData, count: int, kind: int, stream: CData) -> int:
        if self._stream(stream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self._copy(dst, src, count, kind)

    @_after_fault
    def cudaMemcpy2D(self, dst: CData, dpitch: int, src: CData, spitch: int, width: int, height: int,
                     kind: int) -> int:
        return self._copy_2d(dst, dpitch, src, spitch, width, height, kind)

    @_after_fault
    def cudaMemcpy2DAsync(self, dst: CData, dpitch: int, src: CData, spitch: int, width: int, height: int,
                          kind: int, stream: CData) -> int:
        if self._stream(stream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self._copy_2d(dst, dpitch, src, spitch, width, height, kind)

    @_after_fault
    def cudaMemcpyPeer(self, dst: CData, dstDevice: int, src: CData, srcDevice: int, count: int) -> int:
        if dstDevice != 0 or srcDevice != 0:
            return self.rt.cudaErrorInvalidDevice
        kind = self.ffi.typeof("enum cudaMemcpyKind").relements["cudaMemcpyDeviceToDevice"]
        return self._copy(dst, src, count, kind)

    @_after_fault
    def cudaMemcpyPeerAsync(self, dst: CData, dstDevice: int, src: CData, srcDevice: int, count: int,
                            stream: CData) -> int:
        if self._stream(stream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self.cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count)

    @_after_fault
    def cudaMemset(self, devPtr: CData, value: int, count: int) -> int:
        return self.cudaMemset2D(devPtr, count, value, count, 1)

    @_after_fault
    def cudaMemsetAsync(self, devPtr: CData, value: int, count: int, stream: CData) -> int:
        if self._stream(stream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self.cudaMemset2D(devPtr, count, value, count, 1)

    @_after_fault
    def cudaMemset2D(self, devPtr: CData, pitch: int, value: int, width: int, height: int) -> int:
        ok = self._fill(self._addr(devPtr), pitch, bytes([value & 0xFF]), width, height)
        return 0 if ok else self.rt.cudaErrorInvalidValue

    @_after_fault
    def cudaMemset2DAsync(self, devPtr: CData, pitch: int, value: int, width: int, height: int,
                          stream: CData) -> int:
        if self._stream(stream) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return self.cudaMemset2D(devPtr, pitch, value, width, height)

    @_after_fault
    def cuMemAlloc_v2(self, dptr: CData, bytesize: int) -> int:
        if bytesize == 0 or self._is_null(dptr):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        address = self._memory.allocate(bytesize)
        return self.drv.CUDA_ERROR_OUT_OF_MEMORY if address is None else self._drv_put((dptr, address))

    @_after_fault
    def cuMemFree_v2(self, dptr: int) -> int:
        if not self._addr(dptr):
            return 0  # freeing 0 does nothing (what cudaFree(NULL) relies on)
        return 0 if self._memory.free(self._addr(dptr)) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuMemAllocPitch_v2(self, dptr: CData, pPitch: CData, WidthInBytes: int, Height: int,
                           ElementSizeBytes: int) -> int:
        if ElementSizeBytes not in (4, 8, 16):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self.cudaMallocPitch(dptr, pPitch, WidthInBytes, Height)

    def cuMemGetInfo_v2(self, free: CData, total: CData) -> int:
        return self._drv_put((free, self._memory.total - self._memory.used), (total, self._memory.total))

    def _driver_copy(self, dst: int | CData, src: int | CData, count: int, kind: str) -> int:
        code = self._copy(dst, src, count, self.ffi.typeof("enum cudaMemcpyKind").relements[kind])
        return 0 if code == 0 else self.drv.CUDA_ERROR_INVALID_VALUE

    @_after_fault
    def cuMemcpyHtoD_v2(self, dstDevice: int, srcHost: CData, ByteCount: int) -> int:
        return self._driver_copy(dstDevice, srcHost, ByteCount, "cudaMemcpyHostToDevice")

    @_after_fault
    def cuMemcpyDtoH_v2(self, dstHost: CData, srcDevice: int, ByteCount: int) -> int:
        return self._driver_copy(dstHost, srcDevice, ByteCount, "cudaMemcpyDeviceToHost")

    @_after_fault
    def cuMemcpyDtoD_v2(self, dstDevice: int, srcDevice: int, ByteCount: int) -> int:
        return self._driver_copy(dstDevice, srcDevice, ByteCount, "cudaMemcpyDeviceToDevice")

    @_after_fault
    def cuMemsetD8_v2(self, dstDevice: int, uc: int, N: int) -> int:
        ok = self._fill(self._addr(dstDevice), N, bytes([uc & 0xFF]), N, 1)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    @_after_fault
    def cuMemsetD32_v2(self, dstDevice: int, ui: int, N: int) -> int:
        address = self._addr(dstDevice)
        ok = address % 4 == 0 and self._fill(address, 4 * N, struct.pack("<I", ui & 0xFFFFFFFF), 4 * N, 1)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    # --- streams ------------------------------------------------------------------------------------

    def _create_stream(self, out: CData, flags: int, priority: int) -> bool:
        if self._is_null(out) or flags & ~self.ffi.typeof("CUstream_flags").relements["CU_STREAM_NON_BLOCKING"]:
            return False
        least, greatest = STREAM_PRIORITIES
        handle = self._new_handle()
        self._streams[handle] = _Stream(flags, min(max(priority, greatest), least), self._next_stream_id)
        self._next_stream_id += 1
        return self._put((out, handle))

    def cudaStreamCreate(self, pStream: CData) -> int:
        return 0 if self._create_stream(pStream, 0, 0) else self.rt.cudaErrorInvalidValue

    def cudaStreamCreateWithFlags(self, pStream: CData, flags: int) -> int:
        return 0 if self._create_stream(pStream, flags, 0) else self.rt.cudaErrorInvalidValue

    def cudaStreamCreateWithPriority(self, pStream: CData, flags: int, priority: int) -> int:
        return 0 if self._create_stream(pStream, flags, priority) else self.rt.cudaErrorInvalidValue

    def cuStreamCreate(self, phStream: CData, Flags: int) -> int:
        return 0 if self._create_stream(phStream, Flags, 0) else self.drv.CUDA_ERROR_INVALID_VALUE

    def _destroy_stream(self, handle: CData) -> bool:
        stream = self._stream(handle)
        if stream is None or stream.builtin:
            return False
        del self._streams[self._addr(handle)]
        return True

    def cudaStreamDestroy(self, stream: CData) -> int:
        return 0 if self._destroy_stream(stream) else self.rt.cudaErrorInvalidResourceHandle

    def cuStreamDestroy_v2(self, hStream: CData) -> int:
        return 0 if self._destroy_stream(hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    @_after_fault
    def cudaStreamSynchronize(self, stream: CData) -> int:
        return 0 if self._stream(stream) else self.rt.cudaErrorInvalidResourceHandle

    @_after_fault
    def cuStreamSynchronize(self, hStream: CData) -> int:
        return 0 if self._stream(hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    @_after_fault
    def cudaStreamQuery(self, stream: CData) -> int:
        return 0 if self._stream(stream) else self.rt.cudaErrorInvalidResourceHandle

    def cudaStreamWaitEvent(self, stream: CData, event: CData, flags: int) -> int:
        if self._stream(stream) is None or self._event(event) is None:
            return self.rt.cudaErrorInvalidResourceHandle
        return 0  # work runs at call time: the event has always happened already

    def _stream_get(self, handle: CData, out: CData, read: Callable[[_Stream], int]) -> int:
        stream = self._stream(handle)
        return self.rt.cudaErrorInvalidResourceHandle if stream is None else self._rt_put((out, read(stream)))

    def cudaStreamGetFlags(self, hStream: CData, flags: CData) -> int:
        return self._stream_get(hStream, flags, lambda s: s.flags)

    def cudaStreamGetPriority(self, hStream: CData, priority: CData) -> int:
        return self._stream_get(hStream, priority, lambda s: s.priority)

    def cudaStreamGetId(self, hStream: CData, streamId: CData) -> int:
        return self._stream_get(hStream, streamId, lambda s: s.ident)

    def cudaStreamGetDevice(self, hStream: CData, device: CData) -> int:
        return self._stream_get(hStream, device, lambda s: self._device)

    def cudaStreamIsCapturing(self, stream: CData, pCaptureStatus: CData) -> int:
        none = self.ffi.typeof("enum cudaStreamCaptureStatus").relements["cudaStreamCaptureStatusNone"]
        return self._stream_get(stream, pCaptureStatus, lambda s: none)

    def _launch_attribute(self, attr: int) -> str | None:
        return self.ffi.typeof("cudaLaunchAttributeID").elements.get(attr)

    def cudaStreamGetAttribute(self, hStream: CData, attr: int, value_out: CData) -> int:
        stream = self._stream(hStream)
        if stream is None:
            return self.rt.cudaErrorInvalidResourceHandle
        if self._launch_attribute(attr) is None or self._is_null(value_out):
            return self.rt.cudaErrorInvalidValue
        size = self.ffi.sizeof("cudaLaunchAttributeValue")
        self.ffi.memmove(value_out, stream.attributes.get(attr, bytes(size)), size)
        if self._launch_attribute(attr) == "cudaLaunchAttributePriority":
            value_out.priority = stream.priority
        return 0

    def cudaStreamSetAttribute(self, hStream: CData, attr: int, value: CData) -> int:
        stream = self._stream(hStream)
        if stream is None:
            return self.rt.cudaErrorInvalidResourceHandle
        if self._launch_attribute(attr) is None or self._is_null(value):
            return self.rt.cudaErrorInvalidValue
        value = self.ffi.cast("cudaLaunchAttributeValue *", value)
        stream.attributes[attr] = self.ffi.buffer(value)[:]
        if self._launch_attribute(attr) == "cudaLaunchAttributePriority":
            least, greatest = STREAM_PRIORITIES
            stream.priority = min(max(value.priority, greatest), least)
        return 0

    def cudaStreamCopyAttributes(self, dst: CData, src: CData) -> int:
        target, source = self._stream(dst), self._stream(src)
        if target is None or source is None:
            return self.rt.cudaErrorInvalidResourceHandle
        target.attributes = dict(source.attributes)
        target.priority = source.priority
        return 0

    # --- events -------------------------------------------------------------------------------------

    def _create_event(self, out: CData, flags: int) -> bool:
        known = self.ffi.typeof("CUevent_flags").relements  # the same bits as cudaEvent* flags
        if self._is_null(out) or flags & ~sum(known.values()):
            return False
        if flags & known["CU_EVENT_INTERPROCESS"] and not flags & known["CU_EVENT_DISABLE_TIMING"]:
            return False
        handle = self._new_handle()
        self._events[handle] = _Event(flags)
        return self._put((out, handle))

    def cudaEventCreate(self, event: CData) -> int:
        return 0 if self._create_event(event, 0) else self.rt.cudaErrorInvalidValue

    def cudaEventCreateWithFlags(self, event: CData, flags: int) -> int:
        return 0 if self._create_event(event, flags) else self.rt.cudaErrorInvalidValue

    def cuEventCreate(self, phEvent: CData, Flags: int) -> int:
        return 0 if self._create_event(phEvent, Flags) else self.drv.CUDA_ERROR_INVALID_VALUE

    def _destroy_event(self, handle: CData) -> bool:
        return self._events.pop(self._addr(handle), None) is not None

    def cudaEventDestroy(self, event: CData) -> int:
        return 0 if self._destroy_event(event) else self.rt.cudaErrorInvalidResourceHandle

    def cuEventDestroy_v2(self, hEvent: CData) -> int:
        return 0 if self._destroy_event(hEvent) else self.drv.CUDA_ERROR_INVALID_HANDLE

    def _record(self, handle: CData, stream: CData) -> bool:
        event = self._event(handle)
        if event is None or self._stream(stream) is None:
            return False
        event.recorded_at = time.perf_counter()
        return True

    def cudaEventRecord(self, event: CData, stream: CData) -> int:
        return 0 if self._record(event, stream) else self.rt.cudaErrorInvalidResourceHandle

    def cudaEventRecordWithFlags(self, event: CData, stream: CData, flags: int) -> int:
        if flags & ~sum(self.ffi.typeof("CUevent_record_flags").relements.values()):
            return self.rt.cudaErrorInvalidValue
        return self.cudaEventRecord(event, stream)

    def cuEventRecord(self, hEvent: CData, hStream: CData) -> int:
        return 0 if self._record(hEvent, hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    @_after_fault
    def cudaEventQuery(self, event: CData) -> int:
        return 0 if self._event(event) else self.rt.cudaErrorInvalidResourceHandle

    @_after_fault
    def cudaEventSynchronize(self, event: CData) -> int:
        return 0 if self._event(event) else self.rt.cudaErrorInvalidResourceHandle

    @_after_fault
    def cuEventSynchronize(self, hEvent: CData) -> int:
        return 0 if self._event(hEvent) else self.drv.CUDA_ERROR_INVALID_HANDLE

    def _elapsed(self, start: CData, end: CData) -> float | None:
        """Milliseconds between two recorded, timing events; None where CUDA says invalid handle."""
        first, last = self._event(start), self._event(end)
        timing_off = self.ffi.typeof("CUevent_flags").relements["CU_EVENT_DISABLE_TIMING"]
        if first is None or last is None or (first.flags | last.flags) & timing_off:
            return None
        if first.recorded_at is None or last.recorded_at is None:
            return None
        return (last.recorded_at - first.recorded_at) * 1000.0

    def cudaEventElapsedTime(self, ms: CData, start: CData, end: CData) -> int:
        elapsed = self._elapsed(start, end)
        return self.rt.cudaErrorInvalidResourceHandle if elapsed is None else self._rt_put((ms, elapsed))

    def cuEventElapsedTime_v2(self, pMilliseconds: CData, hStart: CData, hEnd: CData) -> int:
        elapsed = self._elapsed(hStart, hEnd)
        return self.drv.CUDA_ERROR_INVALID_HANDLE if elapsed is None else self._drv_put((pMilliseconds, elapsed))

    # --- driver: device and context -----------------------------------------------------------------

    # A private table only the emulated device has, so that tests can show how the client serves
    # tables it does not know (client/export_tables.c): three slots, all empty.
    TEST_EXPORT_TABLE = b"cuwire-emulated!"

    def cuGetExportTable(self, ppExportTable: CData, pExportTableId: CData) -> int:
        if bytes(self.ffi.buffer(pExportTableId, 16)) != self.TEST_EXPORT_TABLE:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if not hasattr(self, "_test_table"):
            self._test_table = self.ffi.new("uint64_t[3]", [24, 0, 0])
        ppExportTable[0] = self._test_table
        return 0

    def cuInit(self, Flags: int) -> int:
        return 0 if Flags == 0 else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuDriverGetVersion(self, driverVersion: CData) -> int:
        return self._drv_put((driverVersion, registry.DRIVER_VERSION))

    def cuDeviceGetCount(self, count: CData) -> int:
        return self._drv_put((count, 1))

    def cuDeviceGet(self, device: CData, ordinal: int) -> int:
        return self._drv_put((device, 0)) if ordinal == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuDeviceGetName(self, name: CData, len: int, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        ok = self._write_string(name, len, str(_prop("name")))
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuDeviceGetUuid_v2(self, uuid: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        if self._is_null(uuid):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self.ffi.memmove(uuid.bytes, UUID, len(UUID))
        return 0

    def cuDeviceTotalMem_v2(self, bytes: CData, dev: int) -> int:
        return self._drv_put((bytes, self._memory.total)) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuDeviceComputeCapability(self, major: CData, minor: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self._drv_put((major, _prop("major")), (minor, _prop("minor")))

    def cuDeviceGetAttribute(self, pi: CData, attrib: int, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        found = self._attribute("CUdevice_attribute", "CU_DEVICE_ATTRIBUTE_", attrib)
        return self.drv.CUDA_ERROR_INVALID_VALUE if found is None else self._drv_put((pi, found))

    def cuDevicePrimaryCtxRetain(self, pctx: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        status = self._drv_put((pctx, self._context))
        if status == 0:
            self._primary_refs += 1
        return status

    def cuDevicePrimaryCtxRelease_v2(self, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        self._primary_refs = max(self._primary_refs - 1, 0)
        return 0

    def cuDevicePrimaryCtxGetState(self, dev: int, flags: CData, active: CData) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        # The runtime API keeps the primary context in use, so it is always active here.
        return self._drv_put((flags, self._device_flags), (active, 1))

    def cuCtxGetCurrent(self, pctx: CData) -> int:
        return self._drv_put((pctx, self._current_context))

    def _is_context(self, address: int) -> bool:
        return address == self._context or address in self._created

    def cuCtxSetCurrent(self, ctx: CData) -> int:
        address = self._addr(ctx)
        if address and not self._is_context(address):
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        self._current_context = address
        return 0

    def cuCtxCreate_v4(self, pctx: CData, ctxCreateParams: CData, flags: int, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        if not self._is_null(ctxCreateParams):
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        handle = self._new_handle()
        status = self._drv_put((pctx, handle))
        if status == 0:
            self._created[handle] = flags
            self._current_context = handle
        return status

    def cuCtxCreate_v2(self, pctx: CData, flags: int, dev: int) -> int:
        return self.cuCtxCreate_v4(pctx, self.ffi.NULL, flags, dev)

    def cuCtxDestroy_v2(self, ctx: CData) -> int:
        address = self._addr(ctx)
        if address not in self._created:
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        del self._created[address]
        if self._current_context == address:
            self._current_context = 0
        return 0

    @_after_fault
    def cuCtxSynchronize(self) -> int:
        return 0

    def cuCtxSynchronize_v2(self, ctx: CData) -> int:
        if self._addr(ctx) and not self._is_context(self._addr(ctx)):
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self.cuCtxSynchronize()

    def cuCtxGetDevice(self, device: CData) -> int:
        if not self._current_context:
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self._drv_put((device, 0))

    def cuCtxGetDevice_v2(self, device: CData, ctx: CData) -> int:
        if self._addr(ctx) and not self._is_context(self._addr(ctx)):
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self._drv_put((device, 0)) if self._addr(ctx) else self.cuCtxGetDevice(device)

    # --- driver: what NVIDIA's runtime asks of libcuda beyond the above ------------------------------
    # These share the runtime methods' logic; the error codes they return (1, 400, 600) are the same
    # numbers in CUresult and cudaError_t.

    def cuMemsetD8Async(self, dstDevice: int, uc: int, N: int, hStream: CData) -> int:
        return self.cudaMemsetAsync(self.ffi.cast("void *", dstDevice), uc, N, hStream)

    def cuMemsetD16_v2(self, dstDevice: int, us: int, N: int) -> int:
        address = self._addr(dstDevice)
        ok = address % 2 == 0 and self._fill(address, 2 * N, struct.pack("<H", us & 0xFFFF), 2 * N, 1)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuMemsetD16Async(self, dstDevice: int, us: int, N: int, hStream: CData) -> int:
        return self.cuMemsetD16_v2(dstDevice, us, N) if self._stream(hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    def cuMemsetD32Async(self, dstDevice: int, ui: int, N: int, hStream: CData) -> int:
        return self.cuMemsetD32_v2(dstDevice, ui, N) if self._stream(hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    def _driver_copy_async(self, dst, src, count: int, kind: str, stream: CData) -> int:
        if self._stream(stream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._driver_copy(dst, src, count, kind)

    def cuMemcpyHtoDAsync_v2(self, dstDevice: int, srcHost: CData, ByteCount: int, hStream: CData) -> int:
        return self._driver_copy_async(dstDevice, srcHost, ByteCount, "cudaMemcpyHostToDevice", hStream)

    def cuMemcpyDtoHAsync_v2(self, dstHost: CData, srcDevice: int, ByteCount: int, hStream: CData) -> int:
        return self._driver_copy_async(dstHost, srcDevice, ByteCount, "cudaMemcpyDeviceToHost", hStream)

    def cuMemcpyDtoDAsync_v2(self, dstDevice: int, srcDevice: int, ByteCount: int, hStream: CData) -> int:
        return self._driver_copy_async(dstDevice, srcDevice, ByteCount, "cudaMemcpyDeviceToDevice", hStream)

    def cuMemcpy(self, dst: CData, src: CData, ByteCount: int) -> int:
        return self._driver_copy(dst, src, ByteCount, "cudaMemcpyDefault")

    def cuMemcpyAsync(self, dst: CData, src: CData, ByteCount: int, hStream: CData) -> int:
        return self._driver_copy_async(dst, src, ByteCount, "cudaMemcpyDefault", hStream)

    def cuStreamCreateWithPriority(self, phStream: CData, flags: int, priority: int) -> int:
        return 0 if self._create_stream(phStream, flags, priority) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuStreamQuery(self, hStream: CData) -> int:
        return self.cudaStreamQuery(hStream)

    def cuStreamWaitEvent(self, hStream: CData, hEvent: CData, Flags: int) -> int:
        return self.cudaStreamWaitEvent(hStream, hEvent, Flags)

    def cuStreamGetFlags(self, hStream: CData, flags: CData) -> int:
        return self.cudaStreamGetFlags(hStream, flags)

    def cuStreamGetPriority(self, hStream: CData, priority: CData) -> int:
        return self.cudaStreamGetPriority(hStream, priority)

    def cuEventQuery(self, hEvent: CData) -> int:
        return self.cudaEventQuery(hEvent)

    def cuEventRecordWithFlags(self, hEvent: CData, hStream: CData, flags: int) -> int:
        return self.cudaEventRecordWithFlags(hEvent, hStream, flags)

    def cuFuncGetAttribute(self, pi: CData, attrib: int, hfunc: CData) -> int:
        function = self._function(hfunc)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        attrs = self.ffi.new("struct cudaFuncAttributes *")
        status = self.cudaFuncGetAttributes(attrs, hfunc)
        names = {v: k for k, v in self.ffi.typeof("CUfunction_attribute").relements.items()}
        field = {"CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK": "maxThreadsPerBlock",
                 "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES": "sharedSizeBytes",
                 "CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES": "constSizeBytes",
                 "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES": "localSizeBytes",
                 "CU_FUNC_ATTRIBUTE_NUM_REGS": "numRegs", "CU_FUNC_ATTRIBUTE_PTX_VERSION": "ptxVersion",
                 "CU_FUNC_ATTRIBUTE_BINARY_VERSION": "binaryVersion",
                 "CU_FUNC_ATTRIBUTE_CACHE_MODE_CA": "cacheModeCA",
                 "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES": "maxDynamicSharedSizeBytes",
                 "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT": "preferredShmemCarveout"}.get(
                     names.get(attrib, ""))
        if status or attrib not in names or names[attrib] == "CU_FUNC_ATTRIBUTE_MAX":
            return status or self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pi, getattr(attrs, field) if field else 0))  # cluster attributes: none set

    def cuFuncSetAttribute(self, hfunc: CData, attrib: int, value: int) -> int:
        return self.cudaFuncSetAttribute(hfunc, attrib, value)  # the two enums agree on these values

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, numBlocks: CData, func: CData, blockSize: int,
                                                    dynamicSMemSize: int) -> int:
        return self.cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                         dynamicSMemSize, 0)

    def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(self, numBlocks: CData, func: CData, blockSize: int,
                                                             dynamicSMemSize: int, flags: int) -> int:
        return self.cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                         dynamicSMemSize, flags)

    def cuKernelGetAttribute(self, pi: CData, attrib: int, kernel: CData, dev: int) -> int:
        return self.cuFuncGetAttribute(pi, attrib, kernel) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuKernelSetAttribute(self, attrib: int, val: int, kernel: CData, dev: int) -> int:
        return self.cuFuncSetAttribute(kernel, attrib, val) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def _fill_2d(self, dst: int, pitch: int, value: int, size: int, width: int, height: int) -> int:
        address = self._addr(dst)
        pattern = value.to_bytes(8, "little")[:size]
        ok = address % size == 0 and self._fill(address, pitch, pattern, width * size, height)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuMemsetD2D8_v2(self, dstDevice: int, dstPitch: int, uc: int, Width: int, Height: int) -> int:
        return self._fill_2d(dstDevice, dstPitch, uc & 0xFF, 1, Width, Height)

    def cuMemsetD2D16_v2(self, dstDevice: int, dstPitch: int, us: int, Width: int, Height: int) -> int:
        return self._fill_2d(dstDevice, dstPitch, us & 0xFFFF, 2, Width, Height)

    def cuMemsetD2D32_v2(self, dstDevice: int, dstPitch: int, ui: int, Width: int, Height: int) -> int:
        return self._fill_2d(dstDevice, dstPitch, ui & 0xFFFFFFFF, 4, Width, Height)

    def cuMemsetD2D8Async(self, dstDevice: int, dstPitch: int, uc: int, Width: int, Height: int,
                          hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemsetD2D8_v2(dstDevice, dstPitch, uc, Width, Height)

    def cuMemsetD2D16Async(self, dstDevice: int, dstPitch: int, us: int, Width: int, Height: int,
                           hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemsetD2D16_v2(dstDevice, dstPitch, us, Width, Height)

    def cuMemsetD2D32Async(self, dstDevice: int, dstPitch: int, ui: int, Width: int, Height: int,
                           hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemsetD2D32_v2(dstDevice, dstPitch, ui, Width, Height)

    def cuCtxGetStreamPriorityRange(self, leastPriority: CData, greatestPriority: CData) -> int:
        outputs = [(leastPriority, STREAM_PRIORITIES[0]), (greatestPriority, STREAM_PRIORITIES[1])]
        return self._drv_put(*[(p, v) for p, v in outputs if not self._is_null(p)])

    def cuCtxGetApiVersion(self, ctx: CData, version: CData) -> int:
        if self._addr(ctx) and not self._is_context(self._addr(ctx)):
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self._drv_put((version, 3020))  # what the driver reports for contexts since CUDA 3.2

    def cuCtxGetFlags(self, flags: CData) -> int:
        if self._current_context in self._created:
            return self._drv_put((flags, self._created[self._current_context]))
        return self._drv_put((flags, self._device_flags))

    def cuCtxSetFlags(self, flags: int) -> int:
        if self._current_context in self._created:
            self._created[self._current_context] = flags
        else:
            self._device_flags = flags
        return 0

    def cuCtxGetCacheConfig(self, pconfig: CData) -> int:
        return self.cudaDeviceGetCacheConfig(pconfig)

    def cuCtxSetCacheConfig(self, config: int) -> int:
        return self.cudaDeviceSetCacheConfig(config)

    def cuCtxResetPersistingL2Cache(self) -> int:
        return 0

    def cuDevicePrimaryCtxSetFlags_v2(self, dev: int, flags: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        self._device_flags = flags
        return 0

    def cuDevicePrimaryCtxReset_v2(self, dev: int) -> int:
        return 0 if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuDeviceCanAccessPeer(self, canAccessPeer: CData, dev: int, peerDev: int) -> int:
        if dev != 0 or peerDev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self._drv_put((canAccessPeer, 0))

    def cuDeviceGetP2PAttribute(self, value: CData, attrib: int, srcDevice: int, dstDevice: int) -> int:
        return self.cudaDeviceGetP2PAttribute(value, attrib, srcDevice, dstDevice)

    def cuDeviceGetPCIBusId(self, pciBusId: CData, len: int, dev: int) -> int:
        return self.cudaDeviceGetPCIBusId(pciBusId, len, dev)

    def cuDeviceGetByPCIBusId(self, dev: CData, pciBusId: CData) -> int:
        return self.cudaDeviceGetByPCIBusId(dev, pciBusId)

    def cuKernelGetParamInfo(self, kernel: CData, paramIndex: int, paramOffset: CData, paramSize: CData) -> int:
        return self.cuFuncGetParamInfo(kernel, paramIndex, paramOffset, paramSize)

    def cuFuncSetCacheConfig(self, hfunc: CData, config: int) -> int:
        return self.cudaFuncSetCacheConfig(hfunc, config)

    def cuKernelSetCacheConfig(self, kernel: CData, config: int, dev: int) -> int:
        return self.cudaFuncSetCacheConfig(kernel, config) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuOccupancyAvailableDynamicSMemPerBlock(self, dynamicSmemSize: CData, func: CData, numBlocks: int,
                                                blockSize: int) -> int:
        return self.cudaOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, func, numBlocks, blockSize)

    def cuStreamGetId(self, hStream: CData, streamId: CData) -> int:
        return self.cudaStreamGetId(hStream, streamId)

    def cuStreamGetDevice(self, hStream: CData, device: CData) -> int:
        return self.cudaStreamGetDevice(hStream, device)

    def cuStreamGetCtx(self, hStream: CData, pctx: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((pctx, self._context))

    def cuMemAllocAsync(self, dptr: CData, bytesize: int, hStream: CData) -> int:
        return self.cudaMallocAsync(dptr, bytesize, hStream)

    def cuMemFreeAsync(self, dptr: int, hStream: CData) -> int:
        return self.cudaFreeAsync(self.ffi.cast("void *", dptr), hStream)

    def cuProfilerStart(self) -> int:
        return 0

    def cuProfilerStop(self) -> int:
        return 0

    def cuOccupancyMaxActiveClusters(self, numClusters: CData, func: CData, config: CData) -> int:
        """One cluster per multiprocessor, of the size the launch attributes ask (1 block by default)."""
        if self._function(func) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        ids = self.ffi.typeof("CUlaunchAttributeID").relements
        size = 1
        for i in range(config.numAttrs):
            if config.attrs[i].id == ids["CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION"]:
                d = config.attrs[i].value.clusterDim
                size = d.x * d.y * d.z
        return self._drv_put((numClusters, _prop("multiProcessorCount") // max(size, 1)))

    def cuCtxGetLimit(self, pvalue: CData, limit: int) -> int:
        return self.cudaDeviceGetLimit(pvalue, limit)

    def cuCtxSetLimit(self, limit: int, value: int) -> int:
        return self.cudaDeviceSetLimit(limit, value)

    # --- modules, kernels and launches --------------------------------------------------------------

    def cuLibraryLoadData(self, library: CData, code: CData, jitOptions: CData, jitOptionsValues: CData,
                          numJitOptions: int, libraryOptions: CData, libraryOptionValues: CData,
                          numLibraryOptions: int) -> int:
        """Any fatbin or cubin loads: kernels are found by name in the registry, not in the image. PTX text
        loads when the registry has each of its entries (the JIT's stand-in), else it is refused with a
        log in the program's error log buffer, as the JIT does."""
        if self._is_null(code):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if fatbin.image_kind(self.ffi.buffer(self.ffi.cast("char *", code), 4)[:]) == "ptx":
            status = self._check_ptx(self.ffi.string(self.ffi.cast("char *", code)),
                                     (jitOptions, jitOptionsValues, numJitOptions))
            if status:
                return status
        handle = self._new_handle()
        status = self._drv_put((library, handle))
        if status == 0:
            self._libraries.add(handle)
        return status

    # The emulated linker takes PTX only and "links" by concatenating it: loading the result finds the
    # kernels by name in the registry, as for any PTX.

    def cuLinkCreate_v2(self, numOptions: int, options: CData, optionValues: CData, stateOut: CData) -> int:
        handle = self._new_handle()
        status = self._drv_put((stateOut, handle))
        if status == 0:
            self._links[handle] = []
            self._link_options[handle] = (options, optionValues, numOptions)
        return status

    def cuLinkAddData_v2(self, state: CData, type: int, data: CData, size: int, name: CData, numOptions: int,
                         options: CData, optionValues: CData) -> int:
        inputs = self._links.get(self._addr(state))
        if inputs is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if type != self.ffi.typeof("CUjitInputType").relements["CU_JIT_INPUT_PTX"]:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        ptx = self.ffi.buffer(self.ffi.cast("char *", data), size)[:].rstrip(b"\0")
        status = self._check_ptx(ptx, self._link_options[self._addr(state)])
        if status == 0:
            inputs.append(ptx)
        return status

    def cuLinkComplete(self, state: CData, cubinOut: CData, sizeOut: CData) -> int:
        inputs = self._links.get(self._addr(state))
        if inputs is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        image = self.ffi.new("char[]", b"\n".join(inputs) + b"\0")
        self._linked[self._addr(state)] = image
        return self._drv_put((cubinOut, image), (sizeOut, len(image)))

    def cuLinkDestroy(self, state: CData) -> int:
        self._linked.pop(self._addr(state), None)
        self._link_options.pop(self._addr(state), None)
        return 0 if self._links.pop(self._addr(state), None) is not None else self.drv.CUDA_ERROR_INVALID_HANDLE

    def _check_ptx(self, ptx: bytes, jit: tuple) -> int:
        """The JIT's stand-in: PTX compiles when the registry has each of its entries; else
        CUDA_ERROR_INVALID_PTX, with a log in the caller's error log buffer (jit: options, values, count)."""
        text = ptx.decode("utf-8", "replace")
        unknown = [n for n in re.findall(r"\.entry\s+(\w+)", text) if n not in registry.KERNELS]
        if not unknown:
            return 0
        self._jit_error_log(f"emulated device: no kernel named {unknown[0]} (PTX is not compiled here)", *jit)
        return self.drv.CUDA_ERROR_INVALID_PTX

    def _jit_error_log(self, message: str, options: CData, values: CData, count: int) -> None:
        """Write `message` into a CU_JIT_ERROR_LOG_BUFFER the caller passed, and its size into the size option."""
        names = self.ffi.typeof("CUjit_option").relements
        opts = [options[i] for i in range(count)] if count and not self._is_null(options) else []
        log, size = names["CU_JIT_ERROR_LOG_BUFFER"], names["CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES"]
        if log in opts and size in opts:
            room = self._addr(values[opts.index(size)])
            data = message.encode()[:max(room - 1, 0)]
            if room:
                self.ffi.memmove(values[opts.index(log)], data + b"\0", len(data) + 1)
                values[opts.index(size)] = self.ffi.cast("void *", len(data))

    def cuLibraryUnload(self, library: CData) -> int:
        handle = self._addr(library)
        if handle not in self._libraries:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        self._libraries.discard(handle)
        for table in (self._kernel_handles, self._function_handles):
            for key in [k for k, f in table.items() if f.library == handle]:
                del table[key]
        return 0

    def cuLibraryGetKernel(self, pKernel: CData, library: CData, name: CData) -> int:
        handle = self._addr(library)
        if handle not in self._libraries:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        kernel_name = self._string(name)
        if kernel_name is None or self._is_null(pKernel):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        kernel = registry.KERNELS.get(kernel_name)
        if kernel is None:
            return self.drv.CUDA_ERROR_NOT_FOUND
        function = _Function(handle, kernel)
        existing = [k for k, f in self._kernel_handles.items() if f == function]
        kernel_handle = existing[0] if existing else self._new_handle()
        self._kernel_handles[kernel_handle] = function
        return self._drv_put((pKernel, kernel_handle))

    def cuLibraryGetModule(self, pMod: CData, library: CData) -> int:
        """A library's module is the library itself here."""
        handle = self._addr(library)
        if handle not in self._libraries:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((pMod, handle))

    def cuModuleGetFunction(self, hfunc: CData, hmod: CData, name: CData) -> int:
        kernel = self.ffi.new("CUkernel *")
        status = self.cuLibraryGetKernel(kernel, hmod, name)
        return status or self.cuKernelGetFunction(hfunc, kernel[0])

    def cuModuleGetGlobal_v2(self, dptr: CData, bytes: CData, hmod: CData, name: CData) -> int:
        return self.cuLibraryGetGlobal(dptr, bytes, hmod, name)

    def cuKernelGetFunction(self, pFunc: CData, kernel: CData) -> int:
        function = self._kernel_handles.get(self._addr(kernel))
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        existing = [k for k, f in self._function_handles.items() if f == function]
        function_handle = existing[0] if existing else self._new_handle()
        self._function_handles[function_handle] = function
        return self._drv_put((pFunc, function_handle))

    def cuLibraryGetGlobal(self, dptr: CData, bytes: CData, library: CData, name: CData) -> int:
        if self._addr(library) not in self._libraries:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        global_name = self._string(name)
        if global_name is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if global_name not in registry.GLOBALS:
            return self.drv.CUDA_ERROR_NOT_FOUND
        address = self._memory.global_variable(global_name)
        if address is None:
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        # Either output may be NULL: the caller asks only for what it wants.
        wanted = [(dptr, address), (bytes, registry.GLOBALS[global_name])]
        return self._drv_put(*[(p, v) for p, v in wanted if not self._is_null(p)])

    def _param_info(self, function: _Function, index: int, offset: CData, size: CData) -> bool:
        kernel = function.kernel
        if not 0 <= index < len(kernel.param_sizes) or self._is_null(offset):
            return False
        outputs = [(offset, kernel.param_offsets[index]), (size, kernel.param_sizes[index])]
        return self._put(*[(p, v) for p, v in outputs if not self._is_null(p)])

    def cuFuncGetParamInfo(self, func: CData, paramIndex: int, paramOffset: CData, paramSize: CData) -> int:
        function = self._function(func)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        ok = self._param_info(function, paramIndex, paramOffset, paramSize)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    def cudaFuncGetParamInfo(self, func: CData, paramIndex: int, paramOffset: CData, paramSize: CData) -> int:
        function = self._function(func)
        if function is None:
            return self.rt.cudaErrorInvalidDeviceFunction
        ok = self._param_info(function, paramIndex, paramOffset, paramSize)
        return 0 if ok else self.rt.cudaErrorInvalidValue

    def _func_attribute(self, kernel: registry.Kernel, name: str, default: int) -> int:
        attribute = self.ffi.typeof("enum cudaFuncAttribute").relements[name]
        return self._func_attributes.get(kernel.name, {}).get(attribute, default)

    def _max_dynamic_shared(self, kernel: registry.Kernel) -> int:
        default = int(_prop("sharedMemPerBlock"))
        return self._func_attribute(kernel, "cudaFuncAttributeMaxDynamicSharedMemorySize", default)

    def cudaFuncGetAttributes(self, attr: CData, func: CData) -> int:
        function = self._function(func)
        if function is None:
            return self.rt.cudaErrorInvalidDeviceFunction
        if self._is_null(attr):
            return self.rt.cudaErrorInvalidValue
        kernel = function.kernel
        self.ffi.memmove(attr, bytes(self.ffi.sizeof("struct cudaFuncAttributes")),
                         self.ffi.sizeof("struct cudaFuncAttributes"))
        attr.maxThreadsPerBlock = _prop("maxThreadsPerBlock")
        attr.numRegs = KERNEL_REGISTERS
        attr.ptxVersion = attr.binaryVersion = _prop("major") * 10 + _prop("minor")
        attr.maxDynamicSharedSizeBytes = self._max_dynamic_shared(kernel)
        attr.preferredShmemCarveout = self._func_attribute(
            kernel, "cudaFuncAttributePreferredSharedMemoryCarveout", -1)
        return 0

    def cudaFuncSetAttribute(self, func: CData, attr: int, value: int) -> int:
        function = self._function(func)
        if function is None:
            return self.rt.cudaErrorInvalidDeviceFunction
        names = self.ffi.typeof("enum cudaFuncAttribute").elements
        name = names.get(attr)
        if name is None or name == "cudaFuncAttributeMax":
            return self.rt.cudaErrorInvalidValue
        if name == "cudaFuncAttributeMaxDynamicSharedMemorySize" and not 0 <= value <= _prop(
                "sharedMemPerBlockOptin"):
            return self.rt.cudaErrorInvalidValue
        self._func_attributes.setdefault(function.kernel.name, {})[attr] = value
        return 0

    def cudaFuncSetCacheConfig(self, func: CData, cacheConfig: int) -> int:
        if self._function(func) is None:
            return self.rt.cudaErrorInvalidDeviceFunction
        known = cacheConfig in self.ffi.typeof("enum cudaFuncCache").elements
        return 0 if known else self.rt.cudaErrorInvalidValue

    def _blocks_per_sm(self, block_size: int, dynamic_shared: int) -> int:
        """Resident blocks per multiprocessor, from threads, registers, shared memory and the block cap."""
        if block_size > _prop("maxThreadsPerBlock"):
            return 0
        threads = _round_up(block_size, _prop("warpSize"))
        limits = [
            _prop("maxThreadsPerMultiProcessor") // threads,
            _prop("regsPerMultiprocessor") // (threads * KERNEL_REGISTERS),
            _prop("maxBlocksPerMultiProcessor"),
        ]
        if dynamic_shared:
            limits.append(_prop("sharedMemPerMultiprocessor") // dynamic_shared)
        return max(min(limits), 0)

    def cudaOccupancyMaxActiveBlocksPerMultiprocessor(self, numBlocks: CData, func: CData, blockSize: int,
                                                      dynamicSMemSize: int) -> int:
        return self.cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
            numBlocks, func, blockSize, dynamicSMemSize, 0)

    def cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(self, numBlocks: CData, func: CData,
                                                               blockSize: int, dynamicSMemSize: int,
                                                               flags: int) -> int:
        function = self._function(func)
        if function is None:
            return self.rt.cudaErrorInvalidDeviceFunction
        if blockSize <= 0 or flags not in (0, 1):  # cudaOccupancyDefault, cudaOccupancyDisableCachingOverride
            return self.rt.cudaErrorInvalidValue
        if dynamicSMemSize > self._max_dynamic_shared(function.kernel):
            return self._rt_put((numBlocks, 0))
        return self._rt_put((numBlocks, self._blocks_per_sm(blockSize, dynamicSMemSize)))

    def cudaOccupancyAvailableDynamicSMemPerBlock(self, dynamicSmemSize: CData, func: CData, numBlocks: int,
                                                  blockSize: int) -> int:
        function = self._function(func)
        if function is None:
            return self.rt.cudaErrorInvalidDeviceFunction
        if numBlocks <= 0 or blockSize <= 0:
            return self.rt.cudaErrorInvalidValue
        if numBlocks > self._blocks_per_sm(blockSize, 0):
            return self._rt_put((dynamicSmemSize, 0))
        per_block = _prop("sharedMemPerMultiprocessor") // numBlocks
        return self._rt_put((dynamicSmemSize, min(per_block, self._max_dynamic_shared(function.kernel))))

    def _launch_shape_ok(self, grid: tuple[int, int, int], block: tuple[int, int, int]) -> bool:
        limits = zip(block + grid, tuple(_prop("maxThreadsDim")) + tuple(_prop("maxGridSize")), strict=True)
        in_range = all(1 <= n <= limit for n, limit in limits)
        return in_range and block[0] * block[1] * block[2] <= _prop("maxThreadsPerBlock")

    def _param_buffer(self, kernel: registry.Kernel, kernel_params: CData, extra: CData) -> bytes | None:
        """The launch's parameter bytes in the kernel's layout, from kernelParams or `extra`."""
        offsets, sizes = kernel.param_offsets, kernel.param_sizes
        total = offsets[-1] + sizes[-1] if sizes else 0
        if not self._is_null(extra):
            return None if not self._is_null(kernel_params) else self._extra_buffer(extra, total)
        if sizes and self._is_null(kernel_params):
            return None
        buffer = bytearray(total)
        values = self.ffi.cast("void **", kernel_params)
        for i, (offset, size) in enumerate(zip(offsets, sizes, strict=True)):
            if self._is_null(values[i]):
                return None
            buffer[offset:offset + size] = self.ffi.buffer(self.ffi.cast("char *", values[i]), size)[:]
        return bytes(buffer)

    def _extra_buffer(self, extra: CData, total: int) -> bytes | None:
        """cuLaunchKernel's `extra`: {BUFFER_POINTER, p, BUFFER_SIZE, &size, END}."""
        items = self.ffi.cast("void **", extra)
        pointer, size, i = None, None, 0
        while i < 16 and self._addr(items[i]) != LAUNCH_PARAM_END:
            tag, value = self._addr(items[i]), items[i + 1]
            if tag == LAUNCH_PARAM_BUFFER_POINTER:
                pointer = value
            elif tag == LAUNCH_PARAM_BUFFER_SIZE and not self._is_null(value):
                size = self.ffi.cast("size_t *", value)[0]
            else:
                return None
            i += 2
        if pointer is None or size is None or size < total or (total and self._is_null(pointer)):
            return None
        return self.ffi.buffer(self.ffi.cast("char *", pointer), total)[:] if total else b""

    @_after_fault
    def cuLaunchKernel(self, f: CData, gridDimX: int, gridDimY: int, gridDimZ: int, blockDimX: int,
                       blockDimY: int, blockDimZ: int, sharedMemBytes: int, hStream: CData,
                       kernelParams: CData, extra: CData) -> int:
        """Run the kernel's host implementation now; a fault in it becomes the sticky error."""
        function = self._function(f)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        kernel = function.kernel
        grid, block = (gridDimX, gridDimY, gridDimZ), (blockDimX, blockDimY, blockDimZ)
        if not self._launch_shape_ok(grid, block) or sharedMemBytes > self._max_dynamic_shared(kernel):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        buffer = self._param_buffer(kernel, kernelParams, extra)
        if buffer is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        params = registry.Params(buffer, kernel.param_offsets, kernel.param_sizes)
        self._run(kernel, grid, block, sharedMemBytes, params)
        return 0

    def cuLaunchKernelEx(self, config: CData, f: CData, kernelParams: CData, extra: CData) -> int:
        """cuLaunchKernel of the configuration: launch attributes change nothing on the emulated device."""
        if self._is_null(config):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = config
        return self.cuLaunchKernel(f, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
                                   c.sharedMemBytes, c.hStream, kernelParams, extra)

    def _run(self, kernel: registry.Kernel, grid: registry.Dim3, block: registry.Dim3, shared: int,
             params: registry.Params) -> None:
        try:
            kernel.run(self._memory, grid, block, shared, params)
        except _Fault as fault:
            print(f"emulated device: kernel {kernel.name}: illegal address: {fault}", file=sys.stderr)
            self._fault = self.drv.CUDA_ERROR_ILLEGAL_ADDRESS
        except Exception:
            print(f"emulated device: kernel {kernel.name} failed:", file=sys.stderr)
            traceback.print_exc()
            self._fault = self.drv.CUDA_ERROR_LAUNCH_FAILED
