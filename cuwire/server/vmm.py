"""Server halves of virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap...), hand-written
because what the session must keep is more than the annotations' roles say:

- a reservation is address space of this session's: the whole of it counts as the session's device memory
  for the checks of copies and memsets (a copy may span two mappings; the driver itself refuses an
  unmapped part), and it is freed when the session ends;
- a physical allocation (a CUmemGenericAllocationHandle, a plain number) is this session's only if this
  session made it, and counts against the session's memory budget until released;
- a mapping may only put this session's allocations into this session's reservations; what is still
  mapped when the session ends is unmapped, then released, then the reservations freed (close);
- cuMemRetainAllocationHandle gives the handle mapped at an address of the session's mappings, one more
  reference the session holds (released with the others at its end).

The client and the messages are generated (annotations: `server = "server/vmm.py"`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import INVALID_VALUE, CudaFail

ACCESS_DESC = 12  # sizeof(CUmemAccessDesc): a CUmemLocation (type, id) and the flags, three ints


@dataclass
class Vmm:
    """One session's virtual memory: what it reserved, created and mapped."""

    reserved: dict[int, int] = field(default_factory=dict)  # address -> size
    created: dict[int, int] = field(default_factory=dict)  # allocation handle -> size
    retained: dict[int, int] = field(default_factory=dict)  # allocation handle -> references beyond the first
    sizes: dict[int, int] = field(default_factory=dict)  # every allocation handle the session had -> size
    mapped: dict[int, int] = field(default_factory=dict)  # address -> size

    def reservation_of(self, address: int, size: int) -> bool:
        return any(base <= address and address + size <= base + n for base, n in self.reserved.items())


def _vmm(s) -> Vmm:
    if s.vmm is None:
        s.vmm = Vmm()
    return s.vmm


def _in_reservation(s, address: int, size: int) -> None:
    if size <= 0 or not _vmm(s).reservation_of(address, size):
        raise CudaFail(INVALID_VALUE, f"{size} bytes at {address:#x} are not in an address range this session reserved")


def _created(s, handle: int) -> int:
    size = _vmm(s).created.get(handle)
    if size is None:
        raise CudaFail(INVALID_VALUE, f"memory allocation handle {handle:#x} was not created by this session")
    return size


def created_size(s, handle: int) -> int:
    """The size of a physical allocation this session holds (refused if it holds none by that handle)."""
    return _created(s, handle)


def note_created(s, handle: int, size: int) -> None:
    """A physical allocation the session holds from now on (imported: server/ipc.py), as its own."""
    _vmm(s).created[handle] = _vmm(s).sizes[handle] = size
    s.allocated += size


def cuMemAddressReserve(s, a: pb.cuMemAddressReserve_Args) -> pb.cuMemAddressReserve_Result:
    r = pb.cuMemAddressReserve_Result()
    ptr = s.ffi.new("CUdeviceptr *")
    r.status = s.lib.cuMemAddressReserve(ptr, a.size, a.alignment, a.addr, a.flags)
    if r.status and a.addr and s.server.windows:
        # A session of a device list holds the address space outside its windows (address_space.py), where
        # the driver then refuses an address it is asked for rather than choose another, as it does where
        # the address is taken: the address is a hint, so the reservation is made where the driver chooses
        r.status = s.lib.cuMemAddressReserve(ptr, a.size, a.alignment, 0, a.flags)
    if r.status == 0:
        r.ptr = ptr[0]
        _vmm(s).reserved[r.ptr] = a.size
        s.records.add_memory(r.ptr, a.size)
    return r


def cuMemAddressFree(s, a: pb.cuMemAddressFree_Args) -> pb.cuMemAddressFree_Result:
    vmm = _vmm(s)
    if vmm.reserved.get(a.ptr) != a.size:
        raise CudaFail(INVALID_VALUE, f"{a.size} bytes at {a.ptr:#x} are not an address range this session reserved")
    r = pb.cuMemAddressFree_Result(status=s.lib.cuMemAddressFree(a.ptr, a.size))
    if r.status == 0:
        del vmm.reserved[a.ptr]
        s.records.remove_memory(a.ptr)
    return r


def cuMemCreate(s, a: pb.cuMemCreate_Args) -> pb.cuMemCreate_Result:
    r = pb.cuMemCreate_Result()
    prop = s.struct_in("CUmemAllocationProp", a.prop)
    prop.win32HandleMetaData = s.ffi.NULL  # an address in the client's memory, meaningless here
    s.reserve(a.size)
    handle = s.ffi.new("CUmemGenericAllocationHandle *")
    r.status = s.lib.cuMemCreate(handle, a.size, prop, a.flags)
    if r.status == 0:
        r.handle = handle[0]
        _vmm(s).created[r.handle] = _vmm(s).sizes[r.handle] = a.size
        s.allocated += a.size
    return r


def cuMemRelease(s, a: pb.cuMemRelease_Args) -> pb.cuMemRelease_Result:
    size = _created(s, a.handle)
    r = pb.cuMemRelease_Result(status=s.lib.cuMemRelease(a.handle))
    vmm = _vmm(s)
    if r.status == 0 and vmm.retained.get(a.handle):  # one of the references a retain gave
        vmm.retained[a.handle] -= 1
    elif r.status == 0:  # the memory lives on while mapped; the session no longer holds the handle
        del vmm.created[a.handle]
        s.allocated -= size
    return r


def cuMemRetainAllocationHandle(s, a: pb.cuMemRetainAllocationHandle_Args) -> pb.cuMemRetainAllocationHandle_Result:
    """The handle mapped at an address of the session's mappings: one more reference the session holds."""
    vmm = _vmm(s)
    if not any(base <= a.addr < base + n for base, n in vmm.mapped.items()):
        raise CudaFail(INVALID_VALUE, f"{a.addr:#x} is not in memory this session mapped")
    handle = s.ffi.new("CUmemGenericAllocationHandle *")
    r = pb.cuMemRetainAllocationHandle_Result(status=s.lib.cuMemRetainAllocationHandle(handle, s.ptr("void *",
                                                                                                     a.addr)))
    if r.status == 0:
        r.handle = handle[0]
        if r.handle in vmm.created:
            vmm.retained[r.handle] = vmm.retained.get(r.handle, 0) + 1
        else:  # released while mapped: the session holds it again
            vmm.created[r.handle] = size = vmm.sizes.get(r.handle, 0)
            s.allocated += size
    return r


def cuMemMap(s, a: pb.cuMemMap_Args) -> pb.cuMemMap_Result:
    size = _created(s, a.handle)
    _in_reservation(s, a.ptr, a.size)
    if a.offset > size or a.size > size - a.offset:
        raise CudaFail(INVALID_VALUE, f"{a.size} bytes at offset {a.offset} of an allocation of {size}")
    r = pb.cuMemMap_Result(status=s.lib.cuMemMap(a.ptr, a.size, a.offset, a.handle, a.flags))
    if r.status == 0:
        _vmm(s).mapped[a.ptr] = a.size
    return r


def cuMemUnmap(s, a: pb.cuMemUnmap_Args) -> pb.cuMemUnmap_Result:
    _in_reservation(s, a.ptr, a.size)
    r = pb.cuMemUnmap_Result(status=s.lib.cuMemUnmap(a.ptr, a.size))
    if r.status == 0:
        mapped = _vmm(s).mapped
        for base in [b for b in mapped if a.ptr <= b < a.ptr + a.size]:
            del mapped[base]
    return r


def cuMemSetAccess(s, a: pb.cuMemSetAccess_Args) -> pb.cuMemSetAccess_Result:
    _in_reservation(s, a.ptr, a.size)
    if not 0 < a.count <= 64 or len(a.desc) != a.count * ACCESS_DESC:
        raise CudaFail(INVALID_VALUE, f"{a.count} access descriptors in {len(a.desc)} bytes")
    desc = s.ffi.new("CUmemAccessDesc[]", a.count)
    s.ffi.memmove(desc, a.desc, len(a.desc))
    return pb.cuMemSetAccess_Result(status=s.lib.cuMemSetAccess(a.ptr, a.size, desc, a.count))


def cuMemGetAllocationPropertiesFromHandle(s, a: pb.cuMemGetAllocationPropertiesFromHandle_Args
                                           ) -> pb.cuMemGetAllocationPropertiesFromHandle_Result:
    _created(s, a.handle)
    r = pb.cuMemGetAllocationPropertiesFromHandle_Result()
    prop = s.ffi.new("CUmemAllocationProp *")
    r.status = s.lib.cuMemGetAllocationPropertiesFromHandle(prop, a.handle)
    if r.status == 0:
        r.prop = s.take(prop)
    return r


HANDLERS = {f.__name__: f for f in (cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap,
                                     cuMemUnmap, cuMemSetAccess, cuMemGetAllocationPropertiesFromHandle,
                                     cuMemRetainAllocationHandle)}


def close(s) -> int:
    """What the session left: unmapped, released, freed, in that order (the driver's). How many things."""
    vmm, lib = s.vmm, s.lib
    if vmm is None:
        return 0
    for address, size in vmm.mapped.items():
        lib.cuMemUnmap(address, size)
    for handle in vmm.created:
        for _ in range(1 + vmm.retained.get(handle, 0)):
            lib.cuMemRelease(handle)
    for address, size in vmm.reserved.items():
        lib.cuMemAddressFree(address, size)
        s.records.remove_memory(address)
    done = len(vmm.mapped) + len(vmm.created) + len(vmm.reserved)
    s.vmm = None
    return done
