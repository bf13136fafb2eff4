"""The emulated device (CUWIRE_BACKEND=emulated): a host-memory stand-in for libcuda and NVML.

CI has no GPU, yet the end-to-end tests must drive the real server code. `EmulatedLib` therefore has the
same interface as the cffi library object the generated handlers call (`s.lib.cuMemAlloc_v2(...)`): one
method per driver or NVML function, the C function's name and positional arguments, cffi values in (ints,
cdata pointers, structs), the CUresult (or nvmlReturn_t) out, outputs written through the pointers.
Kernels run through host implementations registered by name in `cuwire_emulated.registry`. Everything runs
synchronously when it is called. Tests only: never the default backend.

Device memory and handles live in address space the device reserves where the process's next mapping goes
(DEVICE_SPAN, HANDLE_SPAN), as a GPU driver's do, so a device address can never be mistaken for a host
pointer, and a session's holds move them as they move a GPU's (cuwire/address_space.py).
"""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import functools
import mmap
import os
import re
import sys
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import cffi

from cuwire import fatbin
from cuwire.server.backend import cuda_ffi  # noqa: F401  (tests build their FFI through it)
from cuwire_emulated import registry
from cuwire_emulated.arrays import EmulatedArrays, Fault, Surface, Texture
from cuwire_emulated.graphs import BATCH_MEM_OP as BATCH_MEM_OP_NODE
from cuwire_emulated.graphs import KERNEL as KERNEL_NODE
from cuwire_emulated.graphs import EmulatedGraphs, KernelMade
from cuwire_emulated.ipc import EmulatedIpc
from cuwire_emulated.nvml import UUID_TEXT, EmulatedNvml
from cuwire_emulated.vmm import ACCESS_READWRITE, LOCATION_DEVICE, EmulatedVmm, Reservation

CData = Any  # a cffi cdata value; cffi has no static types for these

LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
DEVICE_SPAN = 256 << 30  # the address space one device's memory takes (32x its memory: addresses are not reused)
PROT_NONE, MAP_NORESERVE = 0, 0x4000  # Linux's (Python 3.11's mmap module has neither)
HOST_END = 1 << 48  # the end of user address space on x86-64 and aarch64 (a "host pointer" above it is a bug)
ALLOCATION_ALIGNMENT = 256  # what cuMemAlloc guarantees
PITCH_ALIGNMENT = 512  # what cuMemAllocPitch rounds rows up to on current GPUs
HANDLE_SPAN = 1 << 30  # address space the handles (streams, events, libraries...) are taken from, 16 bytes each:
# a GPU's driver hands out pointers to its own memory, which a session's holds move as they move device memory
MIN_HOST_ADDRESS = 0x10000  # Linux maps nothing below vm.mmap_min_addr: such a "host pointer" is a bug
STREAM_LEGACY, STREAM_PER_THREAD = 0x1, 0x2  # CU_STREAM_LEGACY / CU_STREAM_PER_THREAD (macros in C)
LARGE_ALLOCATION = 1 << 20  # from here on back allocations with lazily zeroed mmap, not a memset bytearray
INT_MAX = 2**31 - 1
# CU_LAUNCH_PARAM_* are macros ((void *)0x01, ...), so the declarations do not carry them.
LAUNCH_PARAM_END, LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE = 0x0, 0x1, 0x2
STREAM_PRIORITIES = (0, -5)  # (least, greatest), as on recent data-center GPUs
DEFAULT_LIMITS = {  # CUlimit name -> default value; the other limits are unsupported
    "CU_LIMIT_STACK_SIZE": 1024,
    "CU_LIMIT_PRINTF_FIFO_SIZE": 1 << 20,
    "CU_LIMIT_MALLOC_HEAP_SIZE": 8 << 20,
    "CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH": 2,
    "CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT": 2048,
    "CU_LIMIT_MAX_L2_FETCH_GRANULARITY": 32,
    "CU_LIMIT_PERSISTING_L2_CACHE_SIZE": 0,
}
KERNEL_REGISTERS = 32  # what cuFuncGetAttribute reports and occupancy assumes
# The CUfunction_attribute names cuFuncSetAttribute takes; the rest are properties of the compiled code.
SETTABLE_FUNCTION_ATTRIBUTES = frozenset({
    "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
    "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT",
    "CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET",
    "CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH",
    "CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT",
    "CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH",
    "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
    "CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE",
})
UUID = b"cuwire-emulated\x00"
# Which ends of a copy must be device memory, (destination, source), by the direction the driver's copy
# functions have in their names (cuMemcpyHtoD_v2, ...); cuMemcpy ("unified") takes it from the pointers.
# CUmemorytype: where a side of a 2D copy is (unified: wherever its address says)
COPY_DIRECTIONS = {"HtoD": (True, False), "DtoH": (False, True), "DtoD": (True, True), "unified": (False, False)}
# The driver's text for the codes test apps meet most; other codes are described by their name.
ERROR_TEXT = {
    "CUDA_SUCCESS": "no error",
    "CUDA_ERROR_INVALID_VALUE": "invalid argument",
    "CUDA_ERROR_OUT_OF_MEMORY": "out of memory",
    "CUDA_ERROR_INVALID_DEVICE": "invalid device ordinal",
    "CUDA_ERROR_INVALID_HANDLE": "invalid resource handle",
    "CUDA_ERROR_NOT_FOUND": "named symbol not found",
    "CUDA_ERROR_NOT_READY": "device not ready",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "an illegal memory access was encountered",
    "CUDA_ERROR_LAUNCH_FAILED": "unspecified launch failure",
    "CUDA_ERROR_NOT_SUPPORTED": "operation not supported",
    "CUDA_ERROR_UNSUPPORTED_LIMIT": "unsupported limit",
}
# Device attributes whose name, less its prefix and underscores and lower-cased, is not a PROPERTIES field's:
# CUdevice_attribute name -> (field, index into a tuple field or None). The rest match a field that way.
ATTRIBUTE_FIELDS: dict[str, tuple[str, int | None]] = {
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X": ("maxThreadsDim", 0),
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y": ("maxThreadsDim", 1),
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z": ("maxThreadsDim", 2),
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X": ("maxGridSize", 0),
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y": ("maxGridSize", 1),
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z": ("maxGridSize", 2),
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK": ("sharedMemPerBlock", None),
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": ("sharedMemPerBlockOptin", None),
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": ("sharedMemPerMultiprocessor", None),
    "CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY": ("totalConstMem", None),
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": ("major", None),
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": ("minor", None),
    "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK": ("regsPerBlock", None),
    "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR": ("regsPerMultiprocessor", None),
    "CU_DEVICE_ATTRIBUTE_MAX_PITCH": ("memPitch", None),
    "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH": ("memoryBusWidth", None),
    "CU_DEVICE_ATTRIBUTE_GPU_OVERLAP": ("asyncEngineCount", None),
}

# Names of the functions of the libraries served: the driver's and NVML's. The runtime's (cuda*) run on
# the client, above cuwire's libcuda; they are no function here, as in the real libraries.
_LIBRARY_FUNCTION = re.compile(r"(cu|nvml)[A-Z]")


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


_Fault = Fault  # (arrays.py: surfaces fault too)


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _zeroed(size: int) -> bytearray | mmap.mmap:
    """Zeroed backing store; big ones are mmap'd so untouched pages cost no host memory."""
    return mmap.mmap(-1, size) if size >= LARGE_ALLOCATION else bytearray(size)


def _prop(name: str) -> Any:
    """A property of the emulated device by its registry.PROPERTIES name (zero where the registry has none)."""
    return registry.PROPERTIES.get(name, 0)


def _function_attribute_defaults() -> dict[str, int]:
    """What cuFuncGetAttribute reports for every kernel, by CUfunction_attribute name, until
    cuFuncSetAttribute changes it; the rest are 0 (no static shared, constant or local memory, no clusters)."""
    version = _prop("major") * 10 + _prop("minor")
    return {
        "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK": _prop("maxThreadsPerBlock"),
        "CU_FUNC_ATTRIBUTE_NUM_REGS": KERNEL_REGISTERS,
        "CU_FUNC_ATTRIBUTE_PTX_VERSION": version,
        "CU_FUNC_ATTRIBUTE_BINARY_VERSION": version,
        "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES": _prop("sharedMemPerBlock"),
        "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT": -1,
    }


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _reserve_span(size: int) -> int:
    """Address space for a device's memory (no access, no memory), where this process's next mapping goes:
    a GPU's driver places device memory so, and a cuwire session moves it by holding ranges before CUDA
    starts (cuwire/address_space.py). Its addresses are then never a host pointer of this process."""
    address = _libc.mmap(None, size, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"no address space for the emulated device's memory ({size} bytes): "
                          f"{os.strerror(ctypes.get_errno())}")
    return address


class EmulatedMemory:
    """The device's global memory: allocations, each backed by host memory, plus `__device__` variables.

    Implements `registry.DeviceMemory` for kernels; an access outside every allocation raises
    `_Fault`, which the launch turns into CUDA's sticky illegal-address error.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.start = _reserve_span(DEVICE_SPAN)  # [start, end): this device's addresses, and no others
        self.end = self.start + DEVICE_SPAN
        weakref.finalize(self, _libc.munmap, self.start, DEVICE_SPAN)
        self._next = self.start
        self._bases: list[int] = []  # sorted allocation start addresses
        self._blocks: dict[int, bytearray | mmap.mmap] = {}
        self._globals: dict[str, int] = {}
        self.cluster: registry.Dim3 = (1, 1, 1)  # the running launch's cluster dimension
        self.textures: dict = {}  # texture objects (arrays.py), as kernels see them
        self.surfaces: dict = {}
        self.conditionals: dict[int, int] = {}  # conditional handle -> its value (graphs.py)
        self._aliases: set[int] = set()  # second addresses of allocations (alias: IPC, pools' pointers)
        self.graph_memory: dict[int, int] = {}  # graphs' memory allocation nodes: address -> size

    def _new_block(self, size: int) -> tuple[int, bytearray | mmap.mmap] | None:
        """(the bytes it takes of the device, a zeroed block) for an allocation of `size`; None when the
        device is full."""
        rounded = _round_up(max(size, 1), ALLOCATION_ALIGNMENT)
        if size < 0 or rounded > self.total - self.used:
            return None
        try:
            return rounded, _zeroed(size)
        except (MemoryError, OSError, OverflowError):
            return None

    def on_device(self, address: int) -> bool:
        """Whether `address` is one of this device's (allocated or not)."""
        return self.start <= address < self.end

    def _place(self, block, span: int, alignment: int = ALLOCATION_ALIGNMENT) -> int | None:
        """`block` at the next `span` bytes of the device's addresses: its address, None when they are spent.
        Addresses are never reused and a gap follows each, so use-after-free and running off the end of an
        allocation fault instead of silently landing in another one."""
        base = _round_up(self._next, alignment)
        if base + span + ALLOCATION_ALIGNMENT > self.end:
            return None
        self._next = base + span + ALLOCATION_ALIGNMENT
        bisect.insort(self._bases, base)  # (host memory registered may lie above)
        self._blocks[base] = block
        return base

    def allocate(self, size: int) -> int | None:
        """A new zeroed allocation's address, or None when the device is full."""
        made = self._new_block(size)
        if made is None or (base := self._place(made[1], made[0])) is None:
            return None
        self.used += made[0]
        return base

    def allocate_at(self, base: int, size: int) -> bool:
        """A zeroed allocation at `base` again (a graph's memory allocation node makes its memory at the same
        address at every launch); False when something lies there now or the device is full."""
        made = self._new_block(size)
        if made is None:
            return False
        rounded, block = made
        i = bisect.bisect_right(self._bases, base + rounded - 1) - 1
        if i >= 0 and self._bases[i] + max(len(self._blocks[self._bases[i]]), 1) > base:
            return False  # (an allocation, reservation or host memory overlaps it)
        bisect.insort(self._bases, base)
        self._blocks[base] = block
        self.used += rounded
        return True

    def reset(self) -> None:
        """cuDevicePrimaryCtxReset: free every allocation; `__device__` variables stay where they are, zeroed,
        because loaded libraries (and the addresses the server learned from them) outlive the reset."""
        kept = {address: self._blocks[address] for address in self._globals.values()}
        self._bases = sorted(kept)
        self._blocks = kept
        self.used = sum(_round_up(max(len(b), 1), ALLOCATION_ALIGNMENT) for b in kept.values())
        for block in kept.values():
            block[:] = bytes(len(block))

    def reserve(self, block: Reservation, alignment: int) -> int | None:
        """Address space for a reservation (cuMemAddressReserve): its bytes are its mappings'; None when the
        device's span has no more."""
        return self._place(block, len(block), alignment)

    def reservation(self, address: int, size: int) -> tuple[Reservation, int] | None:
        """The reservation holding [address, address + size), mapped or not, and the offset in it."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0 or not isinstance(block := self._blocks[self._bases[i]], Reservation):
            return None
        offset = address - self._bases[i]
        return (block, offset) if size >= 0 and offset + size <= len(block) else None

    def release(self, address: int) -> None:
        del self._bases[bisect.bisect_left(self._bases, address)]
        del self._blocks[address]
        self._aliases.discard(address)

    def allocation_base(self, address: int) -> int | None:
        """The start of the allocation (not a reservation, a global or host memory) holding `address`."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0 or not self.on_device(base := self._bases[i]) or base in self._globals.values():
            return None
        block = self._blocks[base]
        return base if not isinstance(block, Reservation) and address - base < max(len(block), 1) else None

    def range_of(self, address: int) -> tuple[int, int] | None:
        """(start, size) of the allocation, reservation or global holding the device address."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0 or not self.on_device(base := self._bases[i]):
            return None
        size = len(self._blocks[base])
        return (base, size) if address - base < max(size, 1) else None

    def alias(self, base: int) -> int | None:
        """A second address for the allocation at `base` (cuIpcOpenMemHandle): the same bytes, until
        released; None if there is none."""
        if self.allocation_base(base) != base:
            return None
        block = self._blocks[base]
        address = self._place(block, _round_up(max(len(block), 1), ALLOCATION_ALIGNMENT))
        if address is not None:
            self._aliases.add(address)
        return address

    def free(self, address: int) -> bool:
        """Free the allocation starting at `address`; False if none does (or it holds a global, or it is a
        reservation)."""
        if (address not in self._blocks or address in self._globals.values()
                or isinstance(self._blocks[address], Reservation)):
            return False
        del self._bases[bisect.bisect_left(self._bases, address)]
        block = self._blocks.pop(address)
        if address in self._aliases:
            self._aliases.discard(address)  # a second address of another allocation: no memory of its own
        else:
            self.used -= _round_up(max(len(block), 1), ALLOCATION_ALIGNMENT)
        return True

    def find(self, address: int, size: int) -> tuple[bytearray | mmap.mmap, int] | None:
        """The block and offset holding [address, address + size), if one allocation holds all of it."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0 or size < 0:
            return None
        base = self._bases[i]
        block = self._blocks[base]
        offset = address - base
        if isinstance(block, Reservation) and not block.covers(offset, size):
            return None  # not mapped, or mapped without access
        return (block, offset) if offset + size <= len(block) else None

    def contains(self, address: int) -> bool:
        return address in self._blocks or self.find(address, 1) is not None

    def register_host(self, address: int, block) -> bool:
        """Host memory the GPU may use at its own address (cuMemHostRegister with unified addressing): a
        writable buffer over it, found like an allocation. False when it overlaps one."""
        if self.find(address, 1) is not None or self.find(address + len(block) - 1, 1) is not None or any(
                address <= b < address + len(block) for b in self._bases):
            return False
        bisect.insort(self._bases, address)
        self._blocks[address] = block
        return True

    def unregister_host(self, address: int) -> bool:
        if self.on_device(address) or address not in self._blocks:
            return False
        del self._bases[bisect.bisect_left(self._bases, address)]
        del self._blocks[address]
        return True

    def host_range(self, address: int) -> tuple[int, int] | None:
        """The registered host range holding `address`: (its start, its size)."""
        if self.on_device(address):
            return None
        found = self.find(address, 1)
        return (address - found[1], len(found[0])) if found else None

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
        if isinstance(block, (bytearray, mmap.mmap)):  # (a bytearray's slice assignment copies data first)
            memoryview(block)[offset:offset + len(data)] = data
        else:  # (a virtual memory reservation's mapped pieces)
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

    def texture(self, handle: int) -> Texture:
        if handle not in self.textures:
            raise _Fault(f"texture object {handle:#x} does not exist")
        return self.textures[handle]

    def surface(self, handle: int) -> Surface:
        if handle not in self.surfaces:
            raise _Fault(f"surface object {handle:#x} does not exist")
        return self.surfaces[handle]

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
    builtin: bool = False  # the default stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: never destroyed
    capture: Any = None  # while capturing: graphs.Capture, the graph its work goes into instead of running
    attributes: dict[int, bytes] = field(default_factory=dict)  # cuStreamSetAttribute: attribute -> value
    context: int = 0  # the context current when it was made (0: the primary context)


@dataclass
class _Event:
    flags: int = 0
    recorded_at: float | None = None  # time.perf_counter() when last recorded
    captured: Any = None  # recorded in a capture: (its graphs.Capture, the nodes then last)


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


class EmulatedLib(EmulatedNvml, EmulatedVmm, EmulatedArrays, EmulatedGraphs, EmulatedIpc):
    """Host-memory stand-in for the cffi object of libcuda and NVML: same function names, arguments and codes.

    A driver or NVML function it does not implement answers "not supported" and says so on stderr
    (`__getattr__`), so nothing an app relies on silently succeeds.
    """

    def __init__(self, ffi: cffi.FFI) -> None:
        self.ffi = ffi
        self.drv = _Enum(ffi, "CUresult")
        self._next_handle = _reserve_span(HANDLE_SPAN)  # (never 0, 1 or 2: the special streams)
        weakref.finalize(self, _libc.munmap, self._next_handle, HANDLE_SPAN)
        self._context = self._new_handle()  # the primary context
        self._current_context = self._context
        self._created: dict[int, int] = {}  # contexts made with cuCtxCreate -> their flags (else they share
        # the one device's state)
        self._links: dict[int, list[bytes]] = {}  # cuLinkCreate's states: their PTX inputs
        self._linked: dict[int, CData] = {}  # cuLinkComplete's images, kept until cuLinkDestroy
        self._link_options: dict[int, tuple] = {}  # cuLinkCreate's JIT options (its log buffers)
        self._error_strings: dict[tuple[str, int], CData] = {}  # kept alive: C callers hold the pointers
        self._memory = EmulatedMemory(int(_prop("totalGlobalMem")))
        # Libraries are context-independent in CUDA: they and their kernels outlive cuDevicePrimaryCtxReset.
        self._libraries: set[int] = set()
        self._library_kernels: dict[int, dict[str, registry.Kernel]] = {}  # library -> the kernels it holds
        self._names: dict[str, CData] = {}  # kernel name -> a C string kept for cuKernelGetName
        self._kernel_handles: dict[int, _Function] = {}
        self._function_handles: dict[int, _Function] = {}
        self._func_attributes: dict[str, dict[str, int]] = {}  # kernel name -> CUfunction_attribute name -> value
        self._reset()

    def _reset(self) -> None:
        """The device's state as at start-up: on creation and at cuDevicePrimaryCtxReset_v2."""
        self._memory.reset()
        self._fault = 0  # the sticky CUresult of a failed kernel
        self._device_flags = 0
        self._cache_config = 0
        limits = self.ffi.typeof("CUlimit").relements
        self._limits = {limits[name]: value for name, value in DEFAULT_LIMITS.items()}
        self._streams = {0: _Stream(builtin=True, ident=1)}
        self._streams[STREAM_LEGACY] = self._streams[0]
        self._streams[STREAM_PER_THREAD] = _Stream(builtin=True, ident=2)
        self._next_stream_id = 3
        self._events: dict[int, _Event] = {}
        self._opened: dict[int, int] = {}  # memory opened with cuIpcOpenMemHandle -> its allocation (ipc.py)
        self._graphs: dict = {}  # graph handle -> its nodes and edges (graphs.py)
        self._bodies: dict = {}  # conditional node -> its body graphs (graphs.py)
        self._graph_execs: dict = {}  # executable graph handle -> its nodes' work, in order
        self._nodes: dict[int, int] = {}  # graph node -> its graph
        self._kept_params: dict[int, tuple] = {}  # kernel node -> the parameter array GetParams gave out
        self._pools: dict[int, dict[int, int]] = {}  # memory pool handle -> its attributes (CUmemPool_attribute)
        self._default_pool = self._current_pool = 0  # made at the first cuDeviceGetDefaultMemPool
        self._physical: dict[int, bytearray] = {}  # cuMemCreate's allocations (vmm.py)
        self._imported: set[int] = set()  # ...of them, those imported from a shareable handle (ipc.py)
        self._retained: dict[int, int] = {}  # ...and the references cuMemRetainAllocationHandle added (vmm.py)
        self._released: dict[int, bytearray] = {}
        self._map_counts: dict[int, int] = {}
        self._launch_cluster: registry.Dim3 = (1, 1, 1)  # cuLaunchKernelEx's cluster dimension, for its launch
        self._arrays: dict = {}  # CUDA arrays (arrays.py)
        self._mipmaps: dict[int, list[int]] = {}  # mipmapped arrays -> their levels' handles

    def __getattr__(self, name: str) -> Callable[..., int]:
        """Any other driver or NVML function: fail loudly by name, never succeed silently."""
        if not _LIBRARY_FUNCTION.match(name):
            raise AttributeError(name)
        code = 3 if name.startswith("nvml") else self.drv.CUDA_ERROR_NOT_SUPPORTED  # 3: NVML_ERROR_NOT_SUPPORTED

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
        memory = self._memory
        if memory.on_device(address):
            return memory.find(address, size) is not None
        return MIN_HOST_ADDRESS <= address and address + size <= HOST_END and not (
            address < memory.end and memory.start < address + size)

    def _load(self, address: int, size: int) -> bytes:
        """Bytes at a device or host address already checked with `_valid`."""
        if self._memory.on_device(address):
            return cast(bytes, self._memory.load(address, size))
        return self.ffi.buffer(self.ffi.cast("char *", address), size)[:]

    def _store(self, address: int, data: bytes) -> None:
        if self._memory.on_device(address):
            self._memory.store(address, data)
        else:
            self.ffi.buffer(self.ffi.cast("char *", address), len(data))[:] = data

    def _copy(self, dst: int | CData, src: int | CData, count: int, direction: str) -> int:
        """Copy `count` bytes, checked before any moves; `direction` (COPY_DIRECTIONS) says which ends must
        be device memory."""
        if count == 0:
            return 0
        dst_address, src_address = self._addr(dst), self._addr(src)
        ends = zip((dst_address, src_address), COPY_DIRECTIONS[direction], strict=True)
        device_ends = [address for address, device in ends if device]
        if not (all(self._memory.contains(a) for a in device_ends) and self._valid(dst_address, count)
                and self._valid(src_address, count)):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        to_device = self._memory.on_device(dst_address)
        device_end, host_end = (dst_address, src_address) if to_device else (src_address, dst_address)
        found = self._memory.find(device_end, count)
        if to_device != self._memory.on_device(src_address) and isinstance(
                found and found[0], (bytearray, mmap.mmap)):  # host <-> device memory: one copy, not two
            block, offset = cast(tuple, found)
            host = self.ffi.buffer(self.ffi.cast("char *", host_end), count)
            if to_device:  # through a memoryview: a bytearray's slice assignment copies a non-bytearray first
                memoryview(block)[offset:offset + count] = host
            else:
                host[:] = memoryview(block)[offset:offset + count]
            return 0
        self._store(dst_address, self._load(src_address, count))
        return 0

    def _copy_async(self, dst: int | CData, src: int | CData, count: int, direction: str, stream: CData) -> int:
        s = self._stream(stream)
        if s is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if s.capture is not None:
            # captured: a copy whose ends the GPU reaches (device or registered host memory) becomes part of
            # the graph; one of other host memory (the server's staging buffers) is refused, as on a GPU the
            # server's staging meets a capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            dst_address, src_address = self._addr(dst), self._addr(src)
            if count and not (self._memory.find(dst_address, count) and self._memory.find(src_address, count)):
                return self.drv.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            self._capture_node(s, lambda: self._copy(dst_address, src_address, count, direction))
            return 0
        return self._copy(dst, src, count, direction)

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

    def _memset(self, dst: int, pitch: int, value: int, size: int, width: int, height: int) -> int:
        """cuMemsetD*: `height` rows of `width` elements of `size` bytes, each `value` (its low bytes); the
        address must be aligned to the element."""
        address = self._addr(dst)
        pattern = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")
        ok = address % size == 0 and self._fill(address, pitch, pattern, width * size, height)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    def _allocate(self, out: CData, size: int) -> int:
        """A new allocation's address into `out`; size 0 gives NULL (cuMemAlloc_v2 refuses it instead)."""
        if self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        address = self._memory.allocate(size) if size else 0
        if address is None:
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        return self._drv_put((out, address))

    # --- device -------------------------------------------------------------------------------------

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
        """As the driver: no device when CUDA_VISIBLE_DEVICES is set and does not begin with the one device
        (0, or its UUID)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.split(",")[0].strip() not in ("0", UUID_TEXT):
            return self.drv.CUDA_ERROR_NO_DEVICE
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

    def _attribute(self, attribute: int) -> int | None:
        """A CUdevice_attribute's value from PROPERTIES, 0 for ones the device does not know; None if no
        attribute has that number."""
        name = self.ffi.typeof("CUdevice_attribute").elements.get(attribute)
        if name is None:
            return None
        if name in ATTRIBUTE_FIELDS:
            field_name, index = ATTRIBUTE_FIELDS[name]
        else:
            fields = {f.lower(): f for f in registry.PROPERTIES}
            field_name, index = fields.get(name.removeprefix("CU_DEVICE_ATTRIBUTE_").replace("_", "").lower(), ""), None
        value = _prop(field_name) if field_name else 0
        return min(int(value[index] if index is not None else value), INT_MAX)

    def cuDeviceGetAttribute(self, pi: CData, attrib: int, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        found = self._attribute(attrib)
        return self.drv.CUDA_ERROR_INVALID_VALUE if found is None else self._drv_put((pi, found))

    def cuDeviceCanAccessPeer(self, canAccessPeer: CData, dev: int, peerDev: int) -> int:
        if dev != 0 or peerDev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self._drv_put((canAccessPeer, 0))

    def cuDeviceGetP2PAttribute(self, value: CData, attrib: int, srcDevice: int, dstDevice: int) -> int:
        return self.drv.CUDA_ERROR_INVALID_DEVICE  # the only device has no peer, and is not its own

    def _pci_bus_id(self) -> tuple[int, int, int, int]:
        """(domain, bus, device, function)."""
        return _prop("pciDomainID"), _prop("pciBusID"), _prop("pciDeviceID"), 0

    def cuDeviceGetPCIBusId(self, pciBusId: CData, len: int, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        text = "{:04X}:{:02X}:{:02X}.{:X}".format(*self._pci_bus_id())
        return 0 if self._write_string(pciBusId, len, text) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuDeviceGetByPCIBusId(self, dev: CData, pciBusId: CData) -> int:
        text = self._string(pciBusId)
        match = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]+):([0-9a-f]+)(?:\.([0-9a-f]+))?", (text or "").lower())
        if match is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        theirs = tuple(int(part or "0", 16) for part in match.groups())
        return self._drv_put((dev, 0)) if theirs == self._pci_bus_id() else self.drv.CUDA_ERROR_INVALID_DEVICE

    # --- contexts -----------------------------------------------------------------------------------

    def cuDevicePrimaryCtxRetain(self, pctx: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self._drv_put((pctx, self._context))

    def cuDevicePrimaryCtxRelease_v2(self, dev: int) -> int:
        """The primary context stays: the server keeps it retained (service.py)."""
        return 0 if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuDevicePrimaryCtxGetState(self, dev: int, flags: CData, active: CData) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        # The server retains the primary context at start, so it is always active here.
        return self._drv_put((flags, self._device_flags), (active, 1))

    def cuDevicePrimaryCtxSetFlags_v2(self, dev: int, flags: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        self._device_flags = flags
        return 0

    def cuDevicePrimaryCtxReset_v2(self, dev: int) -> int:
        """What cudaDeviceReset asks of the driver: every allocation, stream and event goes, and a sticky
        kernel fault with them (contexts share the one device's state here)."""
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        self._reset()
        return 0

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

    def cuCtxGetApiVersion(self, ctx: CData, version: CData) -> int:
        if self._addr(ctx) and not self._is_context(self._addr(ctx)):
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self._drv_put((version, 3020))  # what the driver reports for contexts since CUDA 3.2

    # --- small queries and settings: what a Hopper answers

    def cuDeviceGetTexture1DLinearMaxWidth(self, maxWidthInElements: CData, format: int, numChannels: int,
                                           dev: int) -> int:
        if dev != 0 or numChannels not in (1, 2, 4):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((maxWidthInElements, 1 << 28))

    def cuDeviceGetExecAffinitySupport(self, pi: CData, type: int, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self._drv_put((pi, 1))  # (CU_EXEC_AFFINITY_TYPE_SM_COUNT: supported)

    def cuDeviceGetProperties(self, prop: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        if self._is_null(prop):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        prop.maxThreadsPerBlock = _prop("maxThreadsPerBlock")
        prop.maxThreadsDim = list(_prop("maxThreadsDim"))
        prop.maxGridSize = list(_prop("maxGridSize"))
        prop.sharedMemPerBlock = _prop("sharedMemPerBlock")
        prop.totalConstantMemory = _prop("totalConstMem")
        prop.SIMDWidth = _prop("warpSize")
        prop.memPitch = _prop("memPitch")
        prop.regsPerBlock = _prop("regsPerBlock")
        prop.clockRate = _prop("clockRate")
        prop.textureAlign = _prop("textureAlignment")
        return 0

    def cuDeviceGetLuid(self, luid: CData, deviceNodeMask: CData, dev: int) -> int:
        return self.drv.CUDA_ERROR_NOT_SUPPORTED  # a Windows device's: none on Linux

    def cuCtxGetExecAffinity(self, pExecAffinity: CData, type: int) -> int:
        if self._is_null(pExecAffinity) or type != 0:  # CU_EXEC_AFFINITY_TYPE_SM_COUNT
            return self.drv.CUDA_ERROR_INVALID_VALUE
        pExecAffinity.type = type
        pExecAffinity.param.smCount.val = _prop("multiProcessorCount")  # (no affinity: all of them)
        return 0

    def cuCtxGetSharedMemConfig(self, pConfig: CData) -> int:
        return self._drv_put((pConfig, 1))  # CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE, all a Hopper has

    def cuCtxSetSharedMemConfig(self, config: int) -> int:
        return 0 if config in (0, 1, 2) else self.drv.CUDA_ERROR_INVALID_VALUE  # (no effect since Maxwell)

    def cuFuncSetSharedMemConfig(self, hfunc: CData, config: int) -> int:
        if self._function(hfunc) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return 0 if config in (0, 1, 2) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuFuncIsLoaded(self, state: CData, function: CData) -> int:
        if self._function(function) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((state, 1))  # CU_FUNCTION_LOADING_STATE_LOADED: modules load whole here

    def cuFuncLoad(self, function: CData) -> int:
        return 0 if self._function(function) is not None else self.drv.CUDA_ERROR_INVALID_HANDLE

    def cuPointerSetAttribute(self, value: CData, attribute: int, ptr: int) -> int:
        sync_memops = self.ffi.typeof("CUpointer_attribute").relements["CU_POINTER_ATTRIBUTE_SYNC_MEMOPS"]
        if attribute != sync_memops:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return 0 if self._memory.contains(ptr) else self.drv.CUDA_ERROR_INVALID_VALUE

    def _context_or_current(self, ctx: CData) -> int | None:
        address = self._addr(ctx) or self._current_context
        return address if self._is_context(address) else None

    def cuCtxGetId(self, ctx: CData, ctxId: CData) -> int:
        address = self._context_or_current(ctx)
        if address is None:
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self._drv_put((ctxId, address >> 4))  # (unique and stable, as the driver's ids are)

    def cuCtxRecordEvent(self, hCtx: CData, hEvent: CData) -> int:
        """Records the event after all the context's work: the emulated device runs work as it comes."""
        event = self._event(hEvent)
        if self._context_or_current(hCtx) is None or event is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        event.recorded_at = time.perf_counter()
        return 0

    def cuCtxWaitEvent(self, hCtx: CData, hEvent: CData) -> int:
        if self._context_or_current(hCtx) is None or self._event(hEvent) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return 0

    def cuDeviceGetHostAtomicCapabilities(self, capabilities: CData, operations: CData, count: int, dev: int) -> int:
        """No atomic operation of the emulated device's is also atomic for the host: every capability 0."""
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        if count and (self._is_null(capabilities) or self._is_null(operations)):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        for i in range(count):
            capabilities[i] = 0
        return 0

    def cuDeviceGetP2PAtomicCapabilities(self, capabilities: CData, operations: CData, count: int, srcDevice: int,
                                         dstDevice: int) -> int:
        if srcDevice != 0 or dstDevice != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self.cuDeviceGetHostAtomicCapabilities(capabilities, operations, count, 0)

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
        return self._drv_put((pconfig, self._cache_config))

    def cuCtxSetCacheConfig(self, config: int) -> int:
        """Kept to be read back; the emulated device has no L1 to split."""
        if config not in self.ffi.typeof("CUfunc_cache").elements:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._cache_config = config
        return 0

    def cuCtxGetLimit(self, pvalue: CData, limit: int) -> int:
        if limit not in self._limits:
            return self.drv.CUDA_ERROR_UNSUPPORTED_LIMIT
        return self._drv_put((pvalue, self._limits[limit]))

    def cuCtxSetLimit(self, limit: int, value: int) -> int:
        if limit not in self._limits:
            return self.drv.CUDA_ERROR_UNSUPPORTED_LIMIT
        self._limits[limit] = value
        return 0

    def cuCtxGetStreamPriorityRange(self, leastPriority: CData, greatestPriority: CData) -> int:
        # Either pointer may be NULL: the caller asks only for what it wants.
        outputs = [(leastPriority, STREAM_PRIORITIES[0]), (greatestPriority, STREAM_PRIORITIES[1])]
        return self._drv_put(*[(p, v) for p, v in outputs if not self._is_null(p)])

    def cuCtxResetPersistingL2Cache(self) -> int:
        return 0

    def cuProfilerStart(self) -> int:
        return 0

    def cuProfilerStop(self) -> int:
        return 0

    # --- errors -------------------------------------------------------------------------------------

    def _kept(self, kind: str, code: int, text: str) -> CData:
        """A C string that lives as long as this object, since callers keep the pointer."""
        key = (kind, code)
        if key not in self._error_strings:
            self._error_strings[key] = self.ffi.new("char[]", text.encode())
        return self.ffi.cast("char *", self._error_strings[key])

    def cuGetErrorString(self, error: int, pStr: CData) -> int:
        name = self.drv.names.get(error)
        if name is None:
            self._put((pStr, self.ffi.NULL))
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pStr, self._kept("string", error, ERROR_TEXT.get(name, name))))

    def cuGetErrorName(self, error: int, pStr: CData) -> int:
        name = self.drv.names.get(error)
        if name is None:
            self._put((pStr, self.ffi.NULL))
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pStr, self._kept("name", error, name)))

    # --- memory -------------------------------------------------------------------------------------

    @_after_fault
    def cuMemAlloc_v2(self, dptr: CData, bytesize: int) -> int:
        if bytesize == 0 or self._is_null(dptr):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if prohibited := self._unsafe_call():  # during a stream capture (graphs.py)
            return prohibited
        address = self._memory.allocate(bytesize)
        return self.drv.CUDA_ERROR_OUT_OF_MEMORY if address is None else self._drv_put((dptr, address))

    @_after_fault
    def cuMemAllocManaged(self, dptr: CData, bytesize: int, flags: int) -> int:
        """Managed memory: memory of this (the server's) process, at an address it and the device share;
        the emulated device reaches it like registered host memory."""
        if bytesize == 0 or flags not in (1, 2) or self._is_null(dptr):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if self._memory.used + bytesize > self._memory.total:
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        block = mmap.mmap(-1, bytesize)
        address = int(self.ffi.cast("uintptr_t", self.ffi.from_buffer(block)))
        if not self._memory.register_host(address, block):
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        self._memory.used += _round_up(bytesize, ALLOCATION_ALIGNMENT)
        return self._drv_put((dptr, address))

    def cuMemAdvise_v2(self, devPtr: int, count: int, advice: int, location: CData) -> int:
        """Advice on managed memory: checked (a managed range, a known advice and kind of location) and
        otherwise nothing: the emulated device has one memory, where the advice would place pages."""
        found = self._memory.host_range(devPtr) if count > 0 else None
        if found is None or devPtr + count > found[0] + found[1] or not 1 <= advice <= 6 or location.type not in (
                1, 2, 3, 4):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return 0

    @_after_fault
    def cuMemAllocAsync(self, dptr: CData, bytesize: int, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._allocate(dptr, bytesize)

    @_after_fault
    def cuMemAllocPitch_v2(self, dptr: CData, pPitch: CData, WidthInBytes: int, Height: int,
                           ElementSizeBytes: int) -> int:
        if ElementSizeBytes not in (4, 8, 16) or self._is_null(pPitch):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if prohibited := self._unsafe_call():
            return prohibited
        row = _round_up(max(WidthInBytes, 1), PITCH_ALIGNMENT)
        return self._allocate(dptr, row * Height) or self._drv_put((pPitch, row))

    def cuMemGetAddressRange_v2(self, pbase: CData, psize: CData, dptr: int) -> int:
        found = self._memory.range_of(self._addr(dptr))
        if found is None:
            return self.drv.CUDA_ERROR_NOT_FOUND
        outputs = [(p, v) for p, v in zip((pbase, psize), found, strict=True) if not self._is_null(p)]
        self._put(*outputs)
        return 0

    @_after_fault
    def cuMemFree_v2(self, dptr: int) -> int:
        if self._addr(dptr) and (prohibited := self._unsafe_call()):  # (freeing 0 does nothing, as in CUDA)
            return prohibited
        return self._free(dptr)

    def _free(self, dptr: int) -> int:
        if not self._addr(dptr):
            return 0
        return 0 if self._memory.free(self._addr(dptr)) else self.drv.CUDA_ERROR_INVALID_VALUE

    @_after_fault
    def cuMemFreeAsync(self, dptr: int, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._free(dptr)

    # memory pools (stream-ordered allocation): attributes kept, allocations like cuMemAllocAsync's

    def _new_pool(self) -> int:
        handle = self._new_handle()
        self._pools[handle] = {1: 1, 2: 1, 3: 1, 4: 0, 5: 0, 6: 0, 7: 0, 8: 0}  # the reuse policies on
        return handle

    def _pool(self, handle: CData) -> dict[int, int] | None:
        return self._pools.get(self._addr(handle))

    def cuDeviceGetDefaultMemPool(self, pool_out: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        if not self._default_pool:
            self._default_pool = self._current_pool = self._new_pool()
        return self._drv_put((pool_out, self._default_pool))

    def cuDeviceGetMemPool(self, pool: CData, dev: int) -> int:
        if dev != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        if not self._current_pool:
            self._default_pool = self._current_pool = self._new_pool()
        return self._drv_put((pool, self._current_pool))

    def cuDeviceSetMemPool(self, dev: int, pool: CData) -> int:
        if dev != 0 or self._pool(pool) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._current_pool = self._addr(pool)
        return 0

    def cuMemPoolCreate(self, pool: CData, poolProps: CData) -> int:
        if self._is_null(poolProps):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pool, self._new_pool()))

    def cuMemPoolDestroy(self, pool: CData) -> int:
        address = self._addr(pool)
        if address not in self._pools or address == self._default_pool:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        del self._pools[address]
        if self._current_pool == address:
            self._current_pool = self._default_pool
        return 0

    def cuMemPoolTrimTo(self, pool: CData, minBytesToKeep: int) -> int:
        return 0 if self._pool(pool) is not None else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuMemPoolSetAttribute(self, pool: CData, attr: int, value: CData) -> int:
        attributes = self._pool(pool)
        if attributes is None or attr not in attributes or self._is_null(value) or attr in (5, 7):
            return self.drv.CUDA_ERROR_INVALID_VALUE  # (the current reserved and used sizes are read-only)
        ctype = "int *" if attr <= 3 else "uint64_t *"
        attributes[attr] = self.ffi.cast(ctype, value)[0]
        return 0

    def cuMemPoolSetAccess(self, pool: CData, map: CData, count: int) -> int:
        """The one device always reads and writes its pools' memory: access for it may be asked, not taken."""
        if self._pool(pool) is None or (count and self._is_null(map)):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        for i in range(count):
            if map[i].location.type != LOCATION_DEVICE or map[i].location.id != 0:
                return self.drv.CUDA_ERROR_INVALID_DEVICE
            if map[i].flags != ACCESS_READWRITE:
                return self.drv.CUDA_ERROR_INVALID_VALUE
        return 0

    def cuMemPoolGetAccess(self, flags: CData, memPool: CData, location: CData) -> int:
        if self._pool(memPool) is None or self._is_null(location) or self._is_null(flags):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if location.type != LOCATION_DEVICE or location.id != 0:
            return self.drv.CUDA_ERROR_INVALID_DEVICE
        return self._drv_put((flags, ACCESS_READWRITE))

    def cuMemPoolGetAttribute(self, pool: CData, attr: int, value: CData) -> int:
        attributes = self._pool(pool)
        if attributes is None or attr not in attributes or self._is_null(value):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self.ffi.cast("int *" if attr <= 3 else "uint64_t *", value)[0] = attributes[attr]
        return 0

    def cuMemAllocFromPoolAsync(self, dptr: CData, bytesize: int, pool: CData, hStream: CData) -> int:
        if self._pool(pool) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self.cuMemAllocAsync(dptr, bytesize, hStream)

    # host memory registered for the GPU: its address is the device's address for it (unified addressing)

    def cuMemHostRegister_v2(self, p: CData, bytesize: int, Flags: int) -> int:
        address = self._addr(p)
        if bytesize <= 0 or not self._valid(address, bytesize):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        block = self.ffi.buffer(self.ffi.cast("char *", address), bytesize)
        if not self._memory.register_host(address, block):
            return self.drv.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
        return 0

    def cuMemHostUnregister(self, p: CData) -> int:
        if not self._memory.unregister_host(self._addr(p)):
            return self.drv.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
        return 0

    def cuMemHostGetDevicePointer_v2(self, pdptr: CData, p: CData, Flags: int) -> int:
        address = self._addr(p)
        if Flags or self._memory.host_range(address) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        pdptr[0] = address
        return 0

    def cuMemGetInfo_v2(self, free: CData, total: CData) -> int:
        return self._drv_put((free, self._memory.total - self._memory.used), (total, self._memory.total))

    @_after_fault
    def cuMemcpyHtoD_v2(self, dstDevice: int, srcHost: CData, ByteCount: int) -> int:
        return self._copy(dstDevice, srcHost, ByteCount, "HtoD")

    @_after_fault
    def cuMemcpyDtoH_v2(self, dstHost: CData, srcDevice: int, ByteCount: int) -> int:
        return self._copy(dstHost, srcDevice, ByteCount, "DtoH")

    @_after_fault
    def cuMemcpyDtoD_v2(self, dstDevice: int, srcDevice: int, ByteCount: int) -> int:
        return self._copy(dstDevice, srcDevice, ByteCount, "DtoD")

    def cuMemcpy(self, dst: CData, src: CData, ByteCount: int) -> int:
        return self._copy(dst, src, ByteCount, "unified")

    @_after_fault
    def cuMemcpyHtoDAsync_v2(self, dstDevice: int, srcHost: CData, ByteCount: int, hStream: CData) -> int:
        return self._copy_async(dstDevice, srcHost, ByteCount, "HtoD", hStream)

    def cuMemcpyDtoHAsync_v2(self, dstHost: CData, srcDevice: int, ByteCount: int, hStream: CData) -> int:
        return self._copy_async(dstHost, srcDevice, ByteCount, "DtoH", hStream)

    def cuMemcpyPeer(self, dstDevice: int, dstContext: CData, srcDevice: int, srcContext: CData,
                     ByteCount: int) -> int:
        """One device: a peer copy is a device-to-device copy (its contexts are the device's)."""
        if not (self._is_context(self._addr(dstContext)) and self._is_context(self._addr(srcContext))):
            return self.drv.CUDA_ERROR_INVALID_CONTEXT
        return self.cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount)

    def cuMemcpyPeerAsync(self, dstDevice: int, dstContext: CData, srcDevice: int, srcContext: CData,
                          ByteCount: int, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount)

    def cuMemcpyDtoDAsync_v2(self, dstDevice: int, srcDevice: int, ByteCount: int, hStream: CData) -> int:
        return self._copy_async(dstDevice, srcDevice, ByteCount, "DtoD", hStream)

    def cuMemcpyAsync(self, dst: CData, src: CData, ByteCount: int, hStream: CData) -> int:
        return self._copy_async(dst, src, ByteCount, "unified", hStream)

    @_after_fault
    def cuMemsetD8_v2(self, dstDevice: int, uc: int, N: int) -> int:
        return self._memset(dstDevice, N, uc, 1, N, 1)

    def cuMemsetD16_v2(self, dstDevice: int, us: int, N: int) -> int:
        return self._memset(dstDevice, 2 * N, us, 2, N, 1)

    @_after_fault
    def cuMemsetD32_v2(self, dstDevice: int, ui: int, N: int) -> int:
        return self._memset(dstDevice, 4 * N, ui, 4, N, 1)

    @_after_fault
    def _memset_async(self, run, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return 0 if self._captured(hStream, run) else run()

    def cuMemsetD8Async(self, dstDevice: int, uc: int, N: int, hStream: CData) -> int:
        return self._memset_async(lambda: self.cuMemsetD8_v2(dstDevice, uc, N), hStream)

    def cuMemsetD16Async(self, dstDevice: int, us: int, N: int, hStream: CData) -> int:
        return self._memset_async(lambda: self.cuMemsetD16_v2(dstDevice, us, N), hStream)

    def cuMemsetD32Async(self, dstDevice: int, ui: int, N: int, hStream: CData) -> int:
        return self._memset_async(lambda: self.cuMemsetD32_v2(dstDevice, ui, N), hStream)

    # stream memory operations: work runs at once here, so a wait must find its value already there

    def _write_value(self, hStream: CData, addr: int, value: int, size: int) -> int:
        if self._memory.find(addr, size) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        data = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE

        def run() -> int:
            return 0 if self._memory.store(addr, data) else 1

        return 0 if self._captured(hStream, run, kind=BATCH_MEM_OP_NODE) else run()

    def _wait_value(self, hStream: CData, addr: int, value: int, flags: int, size: int) -> int:
        found = self._memory.load(addr, size)
        if found is None or flags & 0xF not in (0, 1, 2, 3):  # GEQ, EQ, AND, NOR
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        have, mask = int.from_bytes(found, "little"), (1 << 8 * size) - 1
        met = [(have - value) & mask < 1 << (8 * size - 1), have == value, have & value != 0,
               ~(have | ~value) & mask != 0][flags & 0xF]
        if not met:  # nothing else could write it meanwhile: natively the stream would wait for good
            raise Fault("cuStreamWaitValue: the value can never come (emulated device)")
        return 0

    @_after_fault
    def cuStreamWriteValue32_v2(self, stream: CData, addr: int, value: int, flags: int) -> int:
        return self._write_value(stream, addr, value, 4)

    @_after_fault
    def cuStreamWriteValue64_v2(self, stream: CData, addr: int, value: int, flags: int) -> int:
        return self._write_value(stream, addr, value, 8)

    @_after_fault
    def cuStreamWaitValue32_v2(self, stream: CData, addr: int, value: int, flags: int) -> int:
        return self._wait_value(stream, addr, value, flags, 4)

    @_after_fault
    def cuStreamWaitValue64_v2(self, stream: CData, addr: int, value: int, flags: int) -> int:
        return self._wait_value(stream, addr, value, flags, 8)

    @_after_fault
    def cuStreamBatchMemOp_v2(self, stream: CData, count: int, paramArray: CData, flags: int) -> int:
        """Each operation in turn, as its own call makes it; barriers and flushes: the emulated device's
        memory is always coherent."""
        if self._stream(stream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if count <= 0 or self._is_null(paramArray) or flags:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        ops = [paramArray[i] for i in range(count)]
        if any(op.operation not in (1, 2, 3, 4, 5, 6) for op in ops):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        for op in ops:
            err = 0
            if op.operation in (1, 4):  # CU_STREAM_MEM_OP_WAIT_VALUE_32, _64
                w = op.waitValue
                size = 4 if op.operation == 1 else 8
                err = self._wait_value(stream, w.address, w.value if size == 4 else w.value64, w.flags, size)
            elif op.operation in (2, 5):  # CU_STREAM_MEM_OP_WRITE_VALUE_32, _64
                w = op.writeValue
                size = 4 if op.operation == 2 else 8
                err = self._write_value(stream, w.address, w.value if size == 4 else w.value64, size)
            if err:
                return err
        return 0

    def cuCtxEnablePeerAccess(self, peerContext: CData, Flags: int) -> int:
        return self.drv.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED  # the only device is no peer of its own (as the H100 says)

    def cuCtxDisablePeerAccess(self, peerContext: CData) -> int:
        return self.drv.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED

    def cuDeviceGetGraphMemAttribute(self, device: int, attr: int, value: CData) -> int:
        if device != 0 or attr not in (0, 1, 2, 3) or self._is_null(value):  # used/reserved, current/high
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self.ffi.cast("uint64_t *", value)[0] = 0  # graph memory comes from the device's own here
        return 0

    def cuDeviceSetGraphMemAttribute(self, device: int, attr: int, value: CData) -> int:
        if device != 0 or attr not in (1, 3) or self._is_null(value) or self.ffi.cast("uint64_t *", value)[0]:
            return self.drv.CUDA_ERROR_INVALID_VALUE  # only a high watermark may be set, and only to 0
        return 0

    def cuDeviceGraphMemTrim(self, device: int) -> int:
        return 0 if device == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE  # (nothing is kept back to trim)

    # stream capture and graphs: a capturing stream records its kernels and memsets; a graph runs them

    def _captured(self, hStream: CData, run, made: Any = None, kind: int = KERNEL_NODE) -> bool:
        """Whether the stream is capturing, the work then recorded instead of run, as a node of `kind` (a
        kernel's node keeps what it was `made` with, for reading back)."""
        stream = self._stream(hStream)
        if stream is None or stream.capture is None:
            return False
        self._capture_node(stream, run, made, kind)
        return True

    def cuMemsetD2D8_v2(self, dstDevice: int, dstPitch: int, uc: int, Width: int, Height: int) -> int:
        return self._memset(dstDevice, dstPitch, uc, 1, Width, Height)

    def cuMemsetD2D16_v2(self, dstDevice: int, dstPitch: int, us: int, Width: int, Height: int) -> int:
        return self._memset(dstDevice, dstPitch, us, 2, Width, Height)

    def cuMemsetD2D32_v2(self, dstDevice: int, dstPitch: int, ui: int, Width: int, Height: int) -> int:
        return self._memset(dstDevice, dstPitch, ui, 4, Width, Height)

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

    # --- streams: work runs when it is queued, so a stream is always idle ------------------------------

    def _create_stream(self, out: CData, flags: int, priority: int) -> bool:
        if self._is_null(out) or flags & ~self.ffi.typeof("CUstream_flags").relements["CU_STREAM_NON_BLOCKING"]:
            return False
        least, greatest = STREAM_PRIORITIES
        handle = self._new_handle()
        self._streams[handle] = _Stream(flags, min(max(priority, greatest), least), self._next_stream_id,
                                        context=self._current_context or self._context)
        self._next_stream_id += 1
        return self._put((out, handle))

    def cuStreamCreate(self, phStream: CData, Flags: int) -> int:
        return 0 if self._create_stream(phStream, Flags, 0) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuStreamCreateWithPriority(self, phStream: CData, flags: int, priority: int) -> int:
        return 0 if self._create_stream(phStream, flags, priority) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuStreamDestroy_v2(self, hStream: CData) -> int:
        stream = self._stream(hStream)
        if stream is None or stream.builtin:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        del self._streams[self._addr(hStream)]
        return 0

    def cuLaunchHostFunc(self, hStream: CData, fn: CData, userData: CData) -> int:
        """Streams run their work at once, in order: so does a host function (in a capture: a node)."""
        stream = self._stream(hStream)
        if stream is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if stream.capture is not None:
            self._capture_node(stream, lambda: fn(userData))
        else:
            fn(userData)
        return 0

    @_after_fault
    def cuStreamSynchronize(self, hStream: CData) -> int:
        return 0 if self._stream(hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    @_after_fault
    def cuStreamQuery(self, hStream: CData) -> int:
        return 0 if self._stream(hStream) else self.drv.CUDA_ERROR_INVALID_HANDLE

    def cuStreamWaitEvent(self, hStream: CData, hEvent: CData, Flags: int) -> int:
        stream, event = self._stream(hStream), self._event(hEvent)
        if stream is None or event is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._capture_wait(stream, event)  # (outside captures, the event has always happened already)

    def _stream_get(self, handle: CData, out: CData, read: Callable[[_Stream], int]) -> int:
        stream = self._stream(handle)
        return self.drv.CUDA_ERROR_INVALID_HANDLE if stream is None else self._drv_put((out, read(stream)))

    # --- tensor maps (TMA). The real encoding is the driver's secret: this one is the emulated device's own
    # (registry.TENSOR_MAP), which its TMA kernels read (tests/test_apps/kernels.py tma_tile); the checks are
    # the driver's.

    def cuTensorMapEncodeTiled(self, tensorMap: CData, tensorDataType: int, tensorRank: int, globalAddress: CData,
                               globalDim: CData, globalStrides: CData, boxDim: CData, elementStrides: CData,
                               interleave: int, swizzle: int, l2Promotion: int, oobFill: int) -> int:
        size = registry.TENSOR_ELEMENT_SIZES.get(tensorDataType, 0)
        address = self._addr(globalAddress)
        if self._is_null(tensorMap) or not size or not 1 <= tensorRank <= 5 or address % 16:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        u64, u32 = (lambda p: self.ffi.cast("uint64_t *", p)), (lambda p: self.ffi.cast("uint32_t *", p))
        dims = [u64(globalDim)[i] for i in range(tensorRank)]
        strides = [u64(globalStrides)[i] for i in range(tensorRank - 1)]
        box = [u32(boxDim)[i] for i in range(tensorRank)]
        steps = [u32(elementStrides)[i] for i in range(tensorRank)]
        if (not all(1 <= d <= 1 << 32 for d in dims) or any(st % 16 or st >= 1 << 40 for st in strides)
                or not all(1 <= b <= 256 for b in box) or (box[0] * size) % 16 or not all(1 <= e <= 8 for e in steps)):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        pad = [0] * 5
        packed = registry.TENSOR_MAP.pack(tensorDataType, tensorRank, oobFill, address, *(dims + pad)[:5],
                                 *(strides + pad)[:4], *(box + pad)[:5], *(steps + pad)[:5])
        self.ffi.memmove(tensorMap, packed, len(packed))
        return 0

    def cuTensorMapEncodeIm2col(self, tensorMap: CData, *args: Any) -> int:
        """The emulated device runs no im2col TMA kernels: it says so (the GPU's driver encodes them)."""
        return self.drv.CUDA_ERROR_NOT_SUPPORTED

    def cuTensorMapEncodeIm2colWide(self, tensorMap: CData, *args: Any) -> int:
        """As cuTensorMapEncodeIm2col."""
        return self.drv.CUDA_ERROR_NOT_SUPPORTED

    def cuTensorMapReplaceAddress(self, tensorMap: CData, globalAddress: CData) -> int:
        address = self._addr(globalAddress)
        if self._is_null(tensorMap) or address % 16:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        layout = registry.TENSOR_MAP
        fields = list(layout.unpack(bytes(self.ffi.buffer(tensorMap, layout.size))))
        fields[3] = address
        self.ffi.memmove(tensorMap, layout.pack(*fields), layout.size)
        return 0

    # what the driver takes for streams: access policy window, synchronization policy, priority, memory sync
    # domain map and domain, NVLink utilisation-centric scheduling
    STREAM_ATTRIBUTES = {1, 3, 8, 9, 10, 16}

    def cuStreamSetAttribute(self, hStream: CData, attr: int, value: CData) -> int:
        stream = self._stream(hStream)
        if stream is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if attr not in self.STREAM_ATTRIBUTES or self._is_null(value):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        stream.attributes[attr] = bytes(self.ffi.buffer(value, self.ffi.sizeof("CUlaunchAttributeValue")))
        return 0

    def cuStreamGetAttribute(self, hStream: CData, attr: int, value_out: CData) -> int:
        stream = self._stream(hStream)
        if stream is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if attr not in self.STREAM_ATTRIBUTES or self._is_null(value_out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        size = self.ffi.sizeof("CUlaunchAttributeValue")
        self.ffi.memmove(value_out, stream.attributes.get(attr, bytes(size)), size)
        return 0

    def cuStreamCopyAttributes(self, dst: CData, src: CData) -> int:
        to, source = self._stream(dst), self._stream(src)
        if to is None or source is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        to.attributes = dict(source.attributes)
        return 0

    def cuStreamGetFlags(self, hStream: CData, flags: CData) -> int:
        return self._stream_get(hStream, flags, lambda s: s.flags)

    def cuStreamGetPriority(self, hStream: CData, priority: CData) -> int:
        return self._stream_get(hStream, priority, lambda s: s.priority)

    def cuStreamGetId(self, hStream: CData, streamId: CData) -> int:
        return self._stream_get(hStream, streamId, lambda s: s.ident)

    def cuStreamGetDevice(self, hStream: CData, device: CData) -> int:
        return self._stream_get(hStream, device, lambda s: 0)

    def cuStreamGetCtx(self, hStream: CData, pctx: CData) -> int:
        return self._stream_get(hStream, pctx, lambda s: s.context or self._context)

    # --- events -------------------------------------------------------------------------------------

    def _create_event(self, out: CData, flags: int) -> bool:
        known = self.ffi.typeof("CUevent_flags").relements
        if self._is_null(out) or flags & ~sum(known.values()):
            return False
        if flags & known["CU_EVENT_INTERPROCESS"] and not flags & known["CU_EVENT_DISABLE_TIMING"]:
            return False
        handle = self._new_handle()
        self._events[handle] = _Event(flags)
        return self._put((out, handle))

    def cuEventCreate(self, phEvent: CData, Flags: int) -> int:
        return 0 if self._create_event(phEvent, Flags) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuEventDestroy_v2(self, hEvent: CData) -> int:
        found = self._events.pop(self._addr(hEvent), None) is not None
        return 0 if found else self.drv.CUDA_ERROR_INVALID_HANDLE

    def cuEventRecord(self, hEvent: CData, hStream: CData) -> int:
        event, stream = self._event(hEvent), self._stream(hStream)
        if event is None or stream is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        self._capture_record(event, stream)
        if stream.capture is None:
            event.recorded_at = time.perf_counter()
        return 0

    def cuEventRecordWithFlags(self, hEvent: CData, hStream: CData, flags: int) -> int:
        if flags & ~sum(self.ffi.typeof("CUevent_record_flags").relements.values()):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self.cuEventRecord(hEvent, hStream)

    @_after_fault
    def cuEventQuery(self, hEvent: CData) -> int:
        return 0 if self._event(hEvent) else self.drv.CUDA_ERROR_INVALID_HANDLE

    @_after_fault
    def cuEventSynchronize(self, hEvent: CData) -> int:
        return 0 if self._event(hEvent) else self.drv.CUDA_ERROR_INVALID_HANDLE

    def cuEventElapsedTime_v2(self, pMilliseconds: CData, hStart: CData, hEnd: CData) -> int:
        """Milliseconds between two recorded events that both keep timing."""
        first, last = self._event(hStart), self._event(hEnd)
        timing_off = self.ffi.typeof("CUevent_flags").relements["CU_EVENT_DISABLE_TIMING"]
        if first is None or last is None or (first.flags | last.flags) & timing_off:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if first.recorded_at is None or last.recorded_at is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((pMilliseconds, (last.recorded_at - first.recorded_at) * 1000.0))

    # --- modules and kernels ------------------------------------------------------------------------

    def cuLibraryLoadData(self, library: CData, code: CData, jitOptions: CData, jitOptionsValues: CData,
                          numJitOptions: int, libraryOptions: CData, libraryOptionValues: CData,
                          numLibraryOptions: int) -> int:
        """Any fatbin or cubin loads: kernels are found by name in the registry, not in the image. PTX text
        loads when the registry has each of its entries (the JIT's stand-in), else it is refused with a
        log in the program's error log buffer, as the JIT does."""
        if self._is_null(code):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        image = self._image(code)
        if fatbin.image_kind(self.ffi.buffer(self.ffi.cast("char *", code), 4)[:]) == "ptx":
            status = self._check_ptx(self.ffi.string(self.ffi.cast("char *", code)),
                                     (jitOptions, jitOptionsValues, numJitOptions))
            if status:
                return status
        elif not self._runs_here(image):
            return self.drv.CUDA_ERROR_NO_BINARY_FOR_GPU
        handle = self._new_handle()
        status = self._drv_put((library, handle))
        if status == 0:
            self._libraries.add(handle)
            self._library_kernels[handle] = self._image_kernels(image)
        return status

    def _image(self, code: CData) -> bytes | None:
        """The image at `code`, as long as its headers say (PTX: its text); None where the stand-in cannot read
        its length."""
        read = lambda offset, n: self.ffi.buffer(self.ffi.cast("char *", code) + offset, n)[:]  # noqa: E731
        try:
            size = fatbin.image_length(read)
        except ValueError:
            return None
        return read(0, size) if size is not None else self.ffi.string(self.ffi.cast("char *", code))

    @staticmethod
    def _runs_here(image: bytes | None) -> bool:
        """Whether a fatbin has code for this device's compute capability (CUWIRE_EMULATED_ARCH), as the
        driver chooses it; any other image is taken."""
        if image is None or fatbin.image_kind(image) != "fatbin":
            return True
        try:
            return fatbin.select(fatbin.parse(image), _prop("major"), _prop("minor")) is not None
        except ValueError:
            return True

    @staticmethod
    def _image_kernels(image: bytes | None) -> dict[str, registry.Kernel]:
        """The registry's kernels whose names the image holds (in a fatbin's entries, decompressed: the
        stand-in for the kernels the driver finds in a module), each with the parameter offsets the image's
        machine code gives, as the driver answers them (cuFuncGetParamInfo), where its sizes are the
        registry's."""
        if image is None:  # (not an image the stand-in can read: it names no kernels)
            return {}
        layouts: dict[str, list[tuple[int, int]]] = {}
        try:
            entries = fatbin.parse(image) if fatbin.image_kind(image) == "fatbin" else []
            contents = [fatbin.decompress(e) if e.compressed else e.payload for e in entries] or [image]
            for cubin in contents:
                if cubin[:4] == b"\x7fELF":
                    layouts.update(fatbin.elf_kernel_params(cubin))
        except ValueError:
            return {}
        names = set(re.findall(rb"[\w$]+", b"".join(contents)))  # each name standing alone, found once
        out = {}
        for name, kernel in registry.KERNELS.items():
            if name.encode() not in names:
                continue
            params = layouts.get(name, [])
            if params and tuple(size for _, size in params) == kernel.param_sizes:
                kernel = dataclasses.replace(kernel, layout=tuple(offset for offset, _ in params))
            out[name] = kernel
        return out

    def cuLibraryGetKernelCount(self, count: CData, lib: CData) -> int:
        kernels = self._library_kernels.get(self._addr(lib))
        if kernels is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((count, len(kernels)))

    def cuModuleGetFunctionCount(self, count: CData, mod: CData) -> int:
        return self.cuLibraryGetKernelCount(count, mod)  # (a library's module is the library itself here)

    def cuKernelGetLibrary(self, pLib: CData, kernel: CData) -> int:
        function = self._kernel_handles.get(self._addr(kernel))
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((pLib, function.library))

    def cuFuncGetModule(self, hmod: CData, hfunc: CData) -> int:
        function = self._function(hfunc)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((hmod, function.library))

    def cuLibraryEnumerateKernels(self, kernels: CData, numKernels: int, lib: CData) -> int:
        handle = self._addr(lib)
        names = self._library_kernels.get(handle)
        if names is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if self._is_null(kernels) or numKernels != len(names):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        for i, kernel in enumerate(names.values()):
            kernels[i] = self.ffi.cast("CUkernel", self._kernel_handle(handle, kernel))
        return 0

    def cuModuleEnumerateFunctions(self, functions: CData, numFunctions: int, mod: CData) -> int:
        kernels = self.ffi.new("CUkernel[]", max(numFunctions, 1))
        status = self.cuLibraryEnumerateKernels(kernels, numFunctions, mod)  # (a module is its library here)
        for i in range(numFunctions if status == 0 else 0):
            functions[i] = self.ffi.cast("CUfunction", self._function_handle(self._kernel_handles[
                self._addr(kernels[i])]))
        return status

    def cuFuncGetName(self, name: CData, hfunc: CData) -> int:
        return self._put_name(name, self._function_handles.get(self._addr(hfunc)))

    def cuKernelGetName(self, name: CData, hfunc: CData) -> int:
        return self._put_name(name, self._kernel_handles.get(self._addr(hfunc)))

    def _put_name(self, name: CData, function: _Function | None) -> int:
        """A kernel's or function's name into *name (a string the device keeps)."""
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if self._is_null(name):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        text = self._names.setdefault(function.kernel.name, self.ffi.new("char[]", function.kernel.name.encode()))
        name[0] = text
        return 0

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
        if not re.search(r"^\s*\.version\s+\d", text, re.MULTILINE):  # every PTX module states its version
            self._jit_error_log("emulated device: not PTX (no .version directive)", *jit)
            return self.drv.CUDA_ERROR_INVALID_PTX
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
        self._library_kernels.pop(handle, None)
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
        kernel = self._library_kernels.get(handle, {}).get(kernel_name) or registry.KERNELS.get(kernel_name)
        if kernel is None:
            return self.drv.CUDA_ERROR_NOT_FOUND
        return self._drv_put((pKernel, self._kernel_handle(handle, kernel)))

    def _kernel_handle(self, library: int, kernel: registry.Kernel) -> int:
        """The CUkernel of `kernel` in `library`: the same handle each time it is asked."""
        function = _Function(library, kernel)
        existing = [k for k, f in self._kernel_handles.items() if f == function]
        kernel_handle = existing[0] if existing else self._new_handle()
        self._kernel_handles[kernel_handle] = function
        return kernel_handle

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
        return self._drv_put((pFunc, self._function_handle(function)))

    def _function_handle(self, function: _Function) -> int:
        """The CUfunction of a kernel's function (one per function, made at first asking)."""
        existing = [k for k, f in self._function_handles.items() if f == function]
        handle = existing[0] if existing else self._new_handle()
        self._function_handles[handle] = function
        return handle

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

    def cuFuncGetParamInfo(self, func: CData, paramIndex: int, paramOffset: CData, paramSize: CData) -> int:
        function = self._function(func)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        kernel = function.kernel
        if not 0 <= paramIndex < len(kernel.param_sizes) or self._is_null(paramOffset):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        outputs = [(paramOffset, kernel.param_offsets[paramIndex]), (paramSize, kernel.param_sizes[paramIndex])]
        return self._drv_put(*[(p, v) for p, v in outputs if not self._is_null(p)])

    def cuKernelGetParamInfo(self, kernel: CData, paramIndex: int, paramOffset: CData, paramSize: CData) -> int:
        return self.cuFuncGetParamInfo(kernel, paramIndex, paramOffset, paramSize)

    # --- function attributes and occupancy ----------------------------------------------------------

    def _function_attribute_name(self, attrib: int) -> str | None:
        """A CUfunction_attribute's name; None for a number that names none (CU_FUNC_ATTRIBUTE_MAX included)."""
        name = self.ffi.typeof("CUfunction_attribute").elements.get(attrib)
        return None if name == "CU_FUNC_ATTRIBUTE_MAX" else name

    def _func_attribute(self, kernel: registry.Kernel, name: str) -> int:
        """What cuFuncSetAttribute set on the kernel, else what every kernel has."""
        return self._func_attributes.get(kernel.name, {}).get(name, _function_attribute_defaults().get(name, 0))

    def _max_dynamic_shared(self, kernel: registry.Kernel) -> int:
        return self._func_attribute(kernel, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")

    def cuFuncGetAttribute(self, pi: CData, attrib: int, hfunc: CData) -> int:
        function = self._function(hfunc)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        name = self._function_attribute_name(attrib)
        if name is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pi, self._func_attribute(function.kernel, name)))

    def cuFuncSetAttribute(self, hfunc: CData, attrib: int, value: int) -> int:
        function = self._function(hfunc)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        name = self._function_attribute_name(attrib)
        if name not in SETTABLE_FUNCTION_ATTRIBUTES:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if name == "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES" and not 0 <= value <= _prop(
                "sharedMemPerBlockOptin"):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._func_attributes.setdefault(function.kernel.name, {})[name] = value
        return 0

    def cuKernelGetAttribute(self, pi: CData, attrib: int, kernel: CData, dev: int) -> int:
        return self.cuFuncGetAttribute(pi, attrib, kernel) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuKernelSetAttribute(self, attrib: int, val: int, kernel: CData, dev: int) -> int:
        return self.cuFuncSetAttribute(kernel, attrib, val) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

    def cuFuncSetCacheConfig(self, hfunc: CData, config: int) -> int:
        """Accepted and forgotten: the emulated device has no L1 to split."""
        if self._function(hfunc) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return 0 if config in self.ffi.typeof("CUfunc_cache").elements else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuKernelSetCacheConfig(self, kernel: CData, config: int, dev: int) -> int:
        return self.cuFuncSetCacheConfig(kernel, config) if dev == 0 else self.drv.CUDA_ERROR_INVALID_DEVICE

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

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, numBlocks: CData, func: CData, blockSize: int,
                                                    dynamicSMemSize: int) -> int:
        return self.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                         dynamicSMemSize, 0)

    def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(self, numBlocks: CData, func: CData, blockSize: int,
                                                             dynamicSMemSize: int, flags: int) -> int:
        function = self._function(func)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if blockSize <= 0 or flags not in self.ffi.typeof("CUoccupancy_flags").elements:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if dynamicSMemSize > self._max_dynamic_shared(function.kernel):
            return self._drv_put((numBlocks, 0))
        return self._drv_put((numBlocks, self._blocks_per_sm(blockSize, dynamicSMemSize)))

    def cuOccupancyAvailableDynamicSMemPerBlock(self, dynamicSmemSize: CData, func: CData, numBlocks: int,
                                                blockSize: int) -> int:
        function = self._function(func)
        if function is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if numBlocks <= 0 or blockSize <= 0:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if numBlocks > self._blocks_per_sm(blockSize, 0):
            return self._drv_put((dynamicSmemSize, 0))
        per_block = _prop("sharedMemPerMultiprocessor") // numBlocks
        return self._drv_put((dynamicSmemSize, min(per_block, self._max_dynamic_shared(function.kernel))))

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

    def cuOccupancyMaxPotentialClusterSize(self, clusterSize: CData, func: CData, config: CData) -> int:
        """The portable largest cluster (8 blocks), as Hopper's driver answers for a kernel that does not
        allow more."""
        if self._function(func) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self._drv_put((clusterSize, 8))

    # --- launches -----------------------------------------------------------------------------------

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
        cluster = self._launch_cluster
        made = KernelMade(self._addr(f), grid, block, sharedMemBytes, params)
        if self._captured(hStream, lambda: self._run(kernel, grid, block, sharedMemBytes, params, cluster), made):
            return 0
        self._run(kernel, grid, block, sharedMemBytes, params, cluster)
        return 0

    def cuLaunchKernelEx(self, config: CData, f: CData, kernelParams: CData, extra: CData) -> int:
        """cuLaunchKernel of the configuration: launch attributes change nothing on the emulated device."""
        if self._is_null(config):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = config
        for i in range(c.numAttrs):  # a cluster dimension is what a kernel can see (tests/test_apps/kernels.py)
            if c.attrs[i].id == LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                d = c.attrs[i].value.clusterDim
                self._launch_cluster = (d.x, d.y, d.z)
        try:
            return self.cuLaunchKernel(f, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
                                       c.sharedMemBytes, c.hStream, kernelParams, extra)
        finally:
            self._launch_cluster = (1, 1, 1)

    def _run(self, kernel: registry.Kernel, grid: registry.Dim3, block: registry.Dim3, shared: int,
             params: registry.Params, cluster: registry.Dim3 = (1, 1, 1)) -> None:
        self._memory.cluster = cluster
        try:
            kernel.run(self._memory, grid, block, shared, params)
        except _Fault as fault:
            print(f"emulated device: kernel {kernel.name}: illegal address: {fault}", file=sys.stderr)
            self._fault = self.drv.CUDA_ERROR_ILLEGAL_ADDRESS
        except Exception:
            print(f"emulated device: kernel {kernel.name} failed:", file=sys.stderr)
            traceback.print_exc()
            self._fault = self.drv.CUDA_ERROR_LAUNCH_FAILED
