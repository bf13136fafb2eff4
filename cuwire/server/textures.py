"""Server halves of texture and surface objects, and of mipmapped arrays' levels: hand-written because
what the session must check and keep is more than the annotations' roles say.

- A texture or surface object (CUtexObject, CUsurfObject: plain numbers) is made over a resource that
  must be the session's own: an array or mipmapped array it made, or a range of its device memory. The
  session keeps the objects it made: only those can be queried or destroyed, and what is left is
  destroyed when the session ends (close), before its arrays.
- A mipmapped array's levels are arrays the session may copy to and make objects over, but never destroy:
  they go with their mipmapped array.
- Arrays and mipmapped arrays are device memory: their size, from their descriptor, counts against the
  session's budget (CUWIRE_SESSION_MEMORY) like cuMemAlloc's, checked before CUDA makes them.

The client and the messages are generated (annotations: `server = "server/textures.py"`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import INVALID_VALUE, CudaFail

ARRAY, MIPMAPPED = "CUarray_st", "CUmipmappedArray_st"
RESOURCE_ARRAY, RESOURCE_MIPMAPPED_ARRAY, RESOURCE_LINEAR, RESOURCE_PITCH2D = 0, 1, 2, 3  # CUresourcetype
# bytes of one channel of an element, by CUarray_format; the other formats (normalized, block-compressed,
# YUV) take at most OTHER_FORMAT_BYTES a channel, counted so
CHANNEL_BYTES = {0x01: 1, 0x02: 2, 0x03: 4, 0x08: 1, 0x09: 2, 0x0a: 4, 0x10: 2, 0x20: 4}
OTHER_FORMAT_BYTES = 8


@dataclass
class Objects:
    """One session's texture and surface objects, and the levels of its mipmapped arrays."""

    textures: set[int] = field(default_factory=set)
    surfaces: set[int] = field(default_factory=set)
    levels: dict[int, set[int]] = field(default_factory=dict)  # mipmapped array -> its level arrays
    sizes: dict[int, int] = field(default_factory=dict)  # array or mipmapped array -> bytes counted for it


def _objects(s) -> Objects:
    if s.objects is None:
        s.objects = Objects()
    return s.objects


def _address(s, pointer) -> int:
    return int(s.ffi.cast("uintptr_t", pointer))


def _resource(s, data: bytes, read_only: bool = False):
    """A CUDA_RESOURCE_DESC from the wire, if what it names is the session's (for a texture, which only
    reads, as Session.device_read_only checks device memory)."""
    desc = s.struct_in("CUDA_RESOURCE_DESC", data)
    reach = s.device_read_only if read_only else s.device
    kind = desc.resType
    if kind == RESOURCE_ARRAY:
        s.handle(ARRAY, "CUarray", _address(s, desc.res.array.hArray))
    elif kind == RESOURCE_MIPMAPPED_ARRAY:
        s.handle(MIPMAPPED, "CUmipmappedArray", _address(s, desc.res.mipmap.hMipmappedArray))
    elif kind == RESOURCE_LINEAR:
        reach(desc.res.linear.devPtr, desc.res.linear.sizeInBytes)
    elif kind == RESOURCE_PITCH2D:
        pitched = desc.res.pitch2D
        reach(pitched.devPtr, pitched.pitchInBytes * pitched.height)
    else:
        raise CudaFail(INVALID_VALUE, f"resource type {kind}")
    return desc


def _mine(objects: set[int], value: int, what: str) -> None:
    if value not in objects:
        raise CudaFail(INVALID_VALUE, f"{what} {value:#x} was not created by this session")


def cuTexObjectCreate(s, a: pb.cuTexObjectCreate_Args) -> pb.cuTexObjectCreate_Result:
    r = pb.cuTexObjectCreate_Result()
    res = _resource(s, a.pResDesc, read_only=True)
    tex = s.struct_in("CUDA_TEXTURE_DESC", a.pTexDesc)
    view = s.struct_in("CUDA_RESOURCE_VIEW_DESC", a.pResViewDesc) if a.pResViewDesc else s.ffi.NULL
    out = s.ffi.new("CUtexObject *")
    r.status = s.lib.cuTexObjectCreate(out, res, tex, view)
    if r.status == 0:
        r.pTexObject = out[0]
        _objects(s).textures.add(r.pTexObject)
    return r


def _destroy(s, objects: set[int], value: int, what: str, destroy) -> int:
    _mine(objects, value, what)
    status = destroy(value)
    if status == 0:
        objects.discard(value)
    return status


def cuTexObjectDestroy(s, a: pb.cuTexObjectDestroy_Args) -> pb.cuTexObjectDestroy_Result:
    return pb.cuTexObjectDestroy_Result(status=_destroy(s, _objects(s).textures, a.texObject, "texture object",
                                                        s.lib.cuTexObjectDestroy))


def _describe(s, objects: set[int], value: int, what: str, ctype: str, call) -> tuple[int, bytes]:
    _mine(objects, value, what)
    out = s.ffi.new(ctype + " *")
    status = call(out, value)
    return status, s.take(out) if status == 0 else b""


def cuTexObjectGetResourceDesc(s, a: pb.cuTexObjectGetResourceDesc_Args) -> pb.cuTexObjectGetResourceDesc_Result:
    status, desc = _describe(s, _objects(s).textures, a.texObject, "texture object", "CUDA_RESOURCE_DESC",
                             s.lib.cuTexObjectGetResourceDesc)
    return pb.cuTexObjectGetResourceDesc_Result(status=status, pResDesc=desc)


def cuTexObjectGetTextureDesc(s, a: pb.cuTexObjectGetTextureDesc_Args) -> pb.cuTexObjectGetTextureDesc_Result:
    status, desc = _describe(s, _objects(s).textures, a.texObject, "texture object", "CUDA_TEXTURE_DESC",
                             s.lib.cuTexObjectGetTextureDesc)
    return pb.cuTexObjectGetTextureDesc_Result(status=status, pTexDesc=desc)


def cuTexObjectGetResourceViewDesc(s, a: pb.cuTexObjectGetResourceViewDesc_Args
                                   ) -> pb.cuTexObjectGetResourceViewDesc_Result:
    status, desc = _describe(s, _objects(s).textures, a.texObject, "texture object", "CUDA_RESOURCE_VIEW_DESC",
                             s.lib.cuTexObjectGetResourceViewDesc)
    return pb.cuTexObjectGetResourceViewDesc_Result(status=status, pResViewDesc=desc)


def cuSurfObjectCreate(s, a: pb.cuSurfObjectCreate_Args) -> pb.cuSurfObjectCreate_Result:
    r = pb.cuSurfObjectCreate_Result()
    res = _resource(s, a.pResDesc)
    out = s.ffi.new("CUsurfObject *")
    r.status = s.lib.cuSurfObjectCreate(out, res)
    if r.status == 0:
        r.pSurfObject = out[0]
        _objects(s).surfaces.add(r.pSurfObject)
    return r


def cuSurfObjectDestroy(s, a: pb.cuSurfObjectDestroy_Args) -> pb.cuSurfObjectDestroy_Result:
    return pb.cuSurfObjectDestroy_Result(status=_destroy(s, _objects(s).surfaces, a.surfObject, "surface object",
                                                         s.lib.cuSurfObjectDestroy))


def cuSurfObjectGetResourceDesc(s, a: pb.cuSurfObjectGetResourceDesc_Args
                                ) -> pb.cuSurfObjectGetResourceDesc_Result:
    status, desc = _describe(s, _objects(s).surfaces, a.surfObject, "surface object", "CUDA_RESOURCE_DESC",
                             s.lib.cuSurfObjectGetResourceDesc)
    return pb.cuSurfObjectGetResourceDesc_Result(status=status, pResDesc=desc)


def array_bytes(desc, levels: int = 1) -> int:
    """The device memory an array of `desc` (a CUDA_ARRAY_DESCRIPTOR or CUDA_ARRAY3D_DESCRIPTOR) takes, at
    least: its elements; with mipmap levels, each level half the last in every dimension it has."""
    dims = [max(int(desc.Width), 1), max(int(desc.Height), 1), max(int(getattr(desc, "Depth", 0)), 1)]
    element = CHANNEL_BYTES.get(int(desc.Format), OTHER_FORMAT_BYTES) * max(int(desc.NumChannels), 1)
    total = 0
    for _ in range(max(levels, 1)):
        total += dims[0] * dims[1] * dims[2] * element
        if dims == [1, 1, 1]:
            break
        dims = [max(d // 2, 1) for d in dims]
    return total


def _create(s, kind: str, ctype: str, size: int, make) -> tuple[int, int]:
    """Make an array of `size` bytes with `make(out)`, the session's budget checked first; (status, handle)."""
    s.reserve(size)
    out = s.ffi.new(f"{ctype} *")
    status = make(out)
    if status != 0:
        return status, 0
    handle = _address(s, out[0])
    s.owns_handle(kind, handle)
    _objects(s).sizes[handle] = size
    s.allocated += size
    return 0, handle


def _forget(s, handle: int) -> None:
    s.allocated -= _objects(s).sizes.pop(handle, 0)


def cuArrayCreate_v2(s, a: pb.cuArrayCreate_v2_Args) -> pb.cuArrayCreate_v2_Result:
    desc = s.struct_in("CUDA_ARRAY_DESCRIPTOR", a.pAllocateArray)
    status, handle = _create(s, ARRAY, "CUarray", array_bytes(desc), lambda out: s.lib.cuArrayCreate_v2(out, desc))
    return pb.cuArrayCreate_v2_Result(status=status, pHandle=handle)


def cuArray3DCreate_v2(s, a: pb.cuArray3DCreate_v2_Args) -> pb.cuArray3DCreate_v2_Result:
    desc = s.struct_in("CUDA_ARRAY3D_DESCRIPTOR", a.pAllocateArray)
    status, handle = _create(s, ARRAY, "CUarray", array_bytes(desc), lambda out: s.lib.cuArray3DCreate_v2(out, desc))
    return pb.cuArray3DCreate_v2_Result(status=status, pHandle=handle)


def cuMipmappedArrayCreate(s, a: pb.cuMipmappedArrayCreate_Args) -> pb.cuMipmappedArrayCreate_Result:
    desc = s.struct_in("CUDA_ARRAY3D_DESCRIPTOR", a.pMipmappedArrayDesc)
    status, handle = _create(s, MIPMAPPED, "CUmipmappedArray", array_bytes(desc, a.numMipmapLevels),
                             lambda out: s.lib.cuMipmappedArrayCreate(out, desc, a.numMipmapLevels))
    return pb.cuMipmappedArrayCreate_Result(status=status, pHandle=handle)


def cuArrayDestroy(s, a: pb.cuArrayDestroy_Args) -> pb.cuArrayDestroy_Result:
    array = s.handle(ARRAY, "CUarray", a.hArray)
    if any(a.hArray in levels for levels in _objects(s).levels.values()):
        raise CudaFail(INVALID_VALUE, f"array {a.hArray:#x} is a mipmapped array's level: it goes with its "
                                      "mipmapped array")
    r = pb.cuArrayDestroy_Result(status=s.lib.cuArrayDestroy(array))
    if r.status == 0:
        s.disowns_handle(ARRAY, a.hArray)
        _forget(s, a.hArray)
    return r


def cuMipmappedArrayGetLevel(s, a: pb.cuMipmappedArrayGetLevel_Args) -> pb.cuMipmappedArrayGetLevel_Result:
    r = pb.cuMipmappedArrayGetLevel_Result()
    mipmap = s.handle(MIPMAPPED, "CUmipmappedArray", a.hMipmappedArray)
    out = s.ffi.new("CUarray *")
    r.status = s.lib.cuMipmappedArrayGetLevel(out, mipmap, a.level)
    if r.status == 0:
        r.pLevelArray = _address(s, out[0])
        _objects(s).levels.setdefault(a.hMipmappedArray, set()).add(r.pLevelArray)
        s.owns_handle(ARRAY, r.pLevelArray)
    return r


def cuMipmappedArrayDestroy(s, a: pb.cuMipmappedArrayDestroy_Args) -> pb.cuMipmappedArrayDestroy_Result:
    mipmap = s.handle(MIPMAPPED, "CUmipmappedArray", a.hMipmappedArray)
    r = pb.cuMipmappedArrayDestroy_Result(status=s.lib.cuMipmappedArrayDestroy(mipmap))
    if r.status == 0:
        s.disowns_handle(MIPMAPPED, a.hMipmappedArray)
        _forget(s, a.hMipmappedArray)
        for level in _objects(s).levels.pop(a.hMipmappedArray, ()):
            s.disowns_handle(ARRAY, level)
    return r


def _in_stream_order(s, stream: int, copy) -> int:
    """An asynchronous array copy whose host side is the server's pageable buffer (the bytes came with the
    call, or go back with the answer), which the driver's asynchronous array copies refuse: the stream's
    work so far is waited for, then the copy is made synchronously: the same order, and the bytes are
    there when the call returns."""
    status = s.lib.cuStreamSynchronize(s.handle("CUstream_st", "CUstream", stream))
    return status or copy()


def cuMemcpyHtoAAsync_v2(s, a: pb.cuMemcpyHtoAAsync_v2_Args) -> pb.cuMemcpyHtoAAsync_v2_Result:
    array, src = s.handle(ARRAY, "CUarray", a.dstArray), s.in_buffer(a.srcHost, a.ByteCount)
    return pb.cuMemcpyHtoAAsync_v2_Result(status=_in_stream_order(
        s, a.hStream, lambda: s.lib.cuMemcpyHtoA_v2(array, a.dstOffset, src, a.ByteCount)))


def cuMemcpyAtoHAsync_v2(s, a: pb.cuMemcpyAtoHAsync_v2_Args) -> pb.cuMemcpyAtoHAsync_v2_Result:
    array, dst = s.handle(ARRAY, "CUarray", a.srcArray), s.out_buffer(a.ByteCount)
    r = pb.cuMemcpyAtoHAsync_v2_Result(status=_in_stream_order(
        s, a.hStream, lambda: s.lib.cuMemcpyAtoH_v2(dst, array, a.srcOffset, a.ByteCount)))
    if r.status == 0:
        r.dstHost = s.take(dst, a.ByteCount)
    return r


HANDLERS = {f.__name__: f for f in (
    cuTexObjectCreate, cuTexObjectDestroy, cuTexObjectGetResourceDesc, cuTexObjectGetTextureDesc,
    cuTexObjectGetResourceViewDesc, cuSurfObjectCreate, cuSurfObjectDestroy, cuSurfObjectGetResourceDesc,
    cuArrayCreate_v2, cuArray3DCreate_v2, cuMipmappedArrayCreate, cuArrayDestroy, cuMipmappedArrayGetLevel,
    cuMipmappedArrayDestroy, cuMemcpyHtoAAsync_v2, cuMemcpyAtoHAsync_v2)}


def close(s) -> int:
    """The session's objects destroyed, and its levels forgotten (their mipmapped arrays take them), before
    its arrays go. How many objects."""
    objects = s.objects
    if objects is None:
        return 0
    for tex in objects.textures:
        s.lib.cuTexObjectDestroy(tex)
    for surf in objects.surfaces:
        s.lib.cuSurfObjectDestroy(surf)
    for levels in objects.levels.values():
        for level in levels:
            s.disowns_handle(ARRAY, level)
    s.objects = None
    return len(objects.textures) + len(objects.surfaces)
