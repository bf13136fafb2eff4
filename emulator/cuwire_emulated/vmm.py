"""The emulated device's virtual memory management: address ranges reserved (cuMemAddressReserve), physical
allocations (cuMemCreate), mapped into the ranges (cuMemMap) and made accessible (cuMemSetAccess).

A reservation is one block of the device's memory (EmulatedMemory) whose bytes live in the physical
allocations mapped into it, so a copy or a kernel may run across two mappings, as on a GPU; bytes not
mapped, or mapped without access, fault. One granularity, 2 MiB, as on current GPUs.
"""

from __future__ import annotations

import bisect
from typing import Any

CData = Any
GRANULARITY = 2 << 20
ALLOCATION_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
ACCESS_READWRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class Reservation:
    """A reserved address range: offset -> [view of physical memory, accessible] for each mapping."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.offsets: list[int] = []  # sorted starts of the mappings
        self.maps: dict[int, list] = {}
        self.handles: dict[int, int] = {}  # mapping start -> the allocation handle mapped there

    def __len__(self) -> int:
        return self.size

    def _pieces(self, start: int, stop: int):
        """(mapping start, view, accessible) of each mapping overlapping [start, stop), in order."""
        i = max(bisect.bisect_right(self.offsets, start) - 1, 0)
        for offset in self.offsets[i:]:
            if offset >= stop:
                break
            view, accessible = self.maps[offset]
            if offset + len(view) > start:
                yield offset, view, accessible

    def covers(self, start: int, size: int) -> bool:
        """Whether every byte of [start, start + size) is mapped and accessible."""
        at = start
        for offset, view, accessible in self._pieces(start, start + size):
            if offset > at or not accessible:
                return False
            at = offset + len(view)
        return at >= start + size

    def __getitem__(self, span: slice) -> bytes:
        start, stop = span.start or 0, span.stop if span.stop is not None else self.size
        return b"".join(bytes(view[max(start - offset, 0):min(stop - offset, len(view))])
                        for offset, view, _ in self._pieces(start, stop))

    def __setitem__(self, span: slice, data: bytes) -> None:
        start = span.start or 0
        data = memoryview(data)
        for offset, view, _ in self._pieces(start, start + len(data)):
            lo, hi = max(start, offset), min(start + len(data), offset + len(view))
            view[lo - offset:hi - offset] = data[lo - start:hi - start]

    def map(self, offset: int, view: memoryview, handle: int) -> bool:
        if offset + len(view) > self.size or any(True for _ in self._pieces(offset, offset + len(view))):
            return False
        bisect.insort(self.offsets, offset)
        self.maps[offset] = [view, False]
        self.handles[offset] = handle
        return True

    def unmap(self, offset: int, size: int) -> list[int] | None:
        """Unmap the mappings [offset, offset + size) consists of: the handles they mapped; None (nothing
        done) if it cuts one."""
        pieces = list(self._pieces(offset, offset + size))
        if not pieces or any(o < offset or o + len(v) > offset + size for o, v, _ in pieces):
            return None
        for o, _, _ in pieces:
            self.offsets.remove(o)
            del self.maps[o]
        return [self.handles.pop(o) for o, _, _ in pieces]

    def handle_at(self, offset: int) -> int | None:
        """The allocation handle mapped at `offset`, or None where nothing is mapped."""
        for o, _, _ in self._pieces(offset, offset + 1):
            return self.handles[o]
        return None

    def set_access(self, offset: int, size: int, accessible: bool) -> bool:
        if not self.covers_mapped(offset, size):
            return False
        for o, _, _ in self._pieces(offset, offset + size):
            self.maps[o][1] = accessible
        return True

    def covers_mapped(self, start: int, size: int) -> bool:
        at = start
        for offset, view, _ in self._pieces(start, start + size):
            if offset > at:
                return False
            at = offset + len(view)
        return size > 0 and at >= start + size


class EmulatedVmm:
    """The driver's virtual memory functions, mixed into EmulatedLib (which has ffi, drv, _memory)."""

    ffi: Any
    drv: Any
    _memory: Any
    _physical: dict[int, bytearray]
    _retained: dict[int, int]  # handle -> references beyond the first (cuMemRetainAllocationHandle)
    _released: dict[int, bytearray]  # handles released while still mapped: retaining one brings it back
    _map_counts: dict[int, int]  # handle -> how many mappings of it there are

    def _location_ok(self, location: CData) -> bool:
        return location.type == LOCATION_DEVICE and location.id == 0

    def _prop_ok(self, prop: CData) -> bool:
        return not self._is_null(prop) and prop.type == ALLOCATION_PINNED and self._location_ok(prop.location)

    def _reservation(self, address: int, size: int) -> tuple[Reservation, int] | None:
        return self._memory.reservation(address, size)

    def cuMemGetAllocationGranularity(self, granularity: CData, prop: CData, option: int) -> int:
        if not self._prop_ok(prop) or option not in (0, 1):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((granularity, GRANULARITY))

    def cuMemAddressReserve(self, ptr: CData, size: int, alignment: int, addr: int, flags: int) -> int:
        if size <= 0 or size % GRANULARITY or alignment & (alignment - 1) or flags:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        address = self._memory.reserve(Reservation(size), max(alignment, GRANULARITY))
        if address is None:
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        return self._drv_put((ptr, address))

    def cuMemAddressFree(self, ptr: int, size: int) -> int:
        found = self._reservation(ptr, size)
        if found is None or found[1] or len(found[0]) != size or found[0].offsets:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._memory.release(ptr)
        return 0

    def cuMemCreate(self, handle: CData, size: int, prop: CData, flags: int) -> int:
        if size <= 0 or size % GRANULARITY or not self._prop_ok(prop) or flags:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if size > self._memory.total - self._memory.used:
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        h = self._new_handle()
        self._physical[h] = bytearray(size)
        self._memory.used += size
        return self._drv_put((handle, h))

    def cuMemRelease(self, handle: int) -> int:
        if self._retained.get(handle):  # one of the references cuMemRetainAllocationHandle gave
            self._retained[handle] -= 1
            return 0
        memory = self._physical.pop(handle, None)
        if memory is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if handle in self._imported:  # (a second handle of another process's allocation: ipc.py)
            self._imported.discard(handle)
            return 0
        self._memory.used -= len(memory)  # (its mappings keep the bytes until they go)
        if self._map_counts.get(handle):
            self._released[handle] = memory
        return 0

    def cuMemRetainAllocationHandle(self, handle: CData, addr: CData) -> int:
        """The handle mapped at `addr`, one more reference to it (one released while mapped comes back)."""
        address = self._addr(addr)
        found = self._reservation(address, 1)
        h = found[0].handle_at(found[1]) if found is not None else None
        if h is None or self._is_null(handle):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if h in self._physical:
            self._retained[h] = self._retained.get(h, 0) + 1
        else:
            memory = self._released.pop(h)
            self._physical[h] = memory
            self._memory.used += len(memory)
        return self._drv_put((handle, h))

    def cuMemGetAllocationPropertiesFromHandle(self, prop: CData, handle: int) -> int:
        if handle not in self._physical or self._is_null(prop):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        prop.type, prop.location.type, prop.location.id = ALLOCATION_PINNED, LOCATION_DEVICE, 0
        return 0

    def cuMemMap(self, ptr: int, size: int, offset: int, handle: int, flags: int) -> int:
        memory = self._physical.get(handle)
        found = self._reservation(ptr, size)
        if (memory is None or found is None or flags or size <= 0 or size % GRANULARITY or offset % GRANULARITY
                or offset + size > len(memory)):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        reservation, at = found
        if not reservation.map(at, memoryview(memory)[offset:offset + size], handle):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._map_counts[handle] = self._map_counts.get(handle, 0) + 1
        return 0

    def cuMemUnmap(self, ptr: int, size: int) -> int:
        found = self._reservation(ptr, size)
        handles = found[0].unmap(found[1], size) if found is not None else None
        if handles is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        for h in handles:
            self._map_counts[h] -= 1
            if not self._map_counts[h]:
                del self._map_counts[h]
                self._released.pop(h, None)  # (released and no longer mapped: gone for good)
        return 0

    def cuMemSetAccess(self, ptr: int, size: int, desc: CData, count: int) -> int:
        found = self._reservation(ptr, size)
        if found is None or count <= 0 or self._is_null(desc):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        entries = [desc[i] for i in range(count)]
        if any(not self._location_ok(d.location) or d.flags not in (0, 1, ACCESS_READWRITE) for d in entries):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        ok = found[0].set_access(found[1], size, entries[-1].flags != 0)
        return 0 if ok else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuMemGetAccess(self, flags: CData, location: CData, ptr: int) -> int:
        found = self._reservation(ptr, 1)
        if found is None or self._is_null(location) or not self._location_ok(location):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if not found[0].covers_mapped(found[1], 1):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((flags, ACCESS_READWRITE if found[0].covers(found[1], 1) else 0))
