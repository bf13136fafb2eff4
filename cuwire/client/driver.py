"""Hand-written Python halves of the remaining driver functions whose meaning changes on the way: 2D and 3D
copies (a host side travels as its bytes), error strings (the server's text, kept), and pointer attributes
(answered from what the client knows of its memory). Modules, launches and graphs have modules of their own
(client/modules.py, launches.py, graphs.py).
"""

from __future__ import annotations

import struct

from _cuwire import ffi, lib

from cuwire.client import runtime as rt
from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb

INVALID_VALUE, NOT_FOUND = cu.CUDA_ERROR_INVALID_VALUE, cu.CUDA_ERROR_NOT_FOUND


# ---------------------------------------------------------------- 2D and 3D copies

HOST, DEVICE, ARRAY, UNIFIED = (cu.CU_MEMORYTYPE_HOST, cu.CU_MEMORYTYPE_DEVICE, cu.CU_MEMORYTYPE_ARRAY,
                                cu.CU_MEMORYTYPE_UNIFIED)
# CUDA_MEMCPY2D, 64-bit: per side X, Y, memory type, host, device, array, pitch; then width and height
_COPY2D = struct.Struct("<QQI4xQQQQ" "QQI4xQQQQ" "QQ")
# CUDA_MEMCPY3D: per side X, Y, Z, LOD, memory type, host, device, array, reserved, pitch, height; then
# width, height, depth
_COPY3D = struct.Struct("<QQQQI4xQQQQQQ" "QQQQI4xQQQQQQ" "QQQ")


def _side(kind: int, host: int, device: int, array: int, x: int, y: int, z: int, pitch: int, rows: int,
          width: int, height: int, depth: int) -> tuple[pb.CopySide, int, int]:
    """A side of a copy for the wire, and where its bytes are in the program's memory when they are
    host memory (address, length; else 0, 0). Unified addresses are decided here, from the session's
    allocations."""
    if kind == ARRAY:
        return pb.CopySide(type=ARRAY, array=array, x=x, y=y, z=z), 0, 0
    slice_rows = rows if depth > 1 else 0
    start = (host if kind == HOST else device) + (z * slice_rows + y) * pitch + x
    length = ((depth - 1) * slice_rows + height - 1) * pitch + width
    if kind == DEVICE or kind == UNIFIED and rt.client.is_device(start):
        return pb.CopySide(type=DEVICE, device=device, x=x, y=y, z=z, pitch=pitch, height=rows), 0, 0
    if kind not in (HOST, UNIFIED):
        raise rt.Fail(INVALID_VALUE)
    return pb.CopySide(type=HOST, pitch=pitch, height=rows), start, length


def _copy(dims: int, fields: tuple, stream: int | None, unaligned: bool = False) -> int:
    """cuMemcpy2D/3D: host sides travel as bytes; device and array sides as the server's addresses and
    handles (the server checks them). A copy between two host sides is the client's own."""
    if dims == 2:
        (sx, sy, stype, shost, sdev, sarray, spitch, dx, dy, dtype, dhost, ddev, darray, dpitch, width,
         height) = fields
        sz = dz = 0
        srows = drows = depth = 1
    else:
        (sx, sy, sz, _, stype, shost, sdev, sarray, _, spitch, srows, dx, dy, dz, _, dtype, dhost, ddev, darray, _,
         dpitch, drows, width, height, depth) = fields
    if width == 0 or height == 0 or depth == 0:
        return 0
    src, src_at, src_len = _side(stype, shost, sdev, sarray, sx, sy, sz, spitch, srows, width, height, depth)
    dst, dst_at, dst_len = _side(dtype, dhost, ddev, darray, dx, dy, dz, dpitch, drows, width, height, depth)
    if src_at and dst_at:  # host to host: the client's own memory
        for k in range(depth):
            for row in range(height):
                ffi.memmove(ffi.cast("char *", dst_at + (k * drows * (depth > 1) + row) * dpitch),
                            ffi.cast("char *", src_at + (k * srows * (depth > 1) + row) * spitch), width)
        return 0
    if src_at:
        src.host = rt.read(ffi.cast("void *", src_at), src_len)
    if dst_at:  # the gaps between rows come back as they are
        dst.host = rt.read(ffi.cast("void *", dst_at), dst_len)
    args = pb.Copy3D_Args(dims=dims, unaligned=unaligned, src=src, dst=dst, width=width, height=height, depth=depth)
    if stream is not None:
        args.stream = stream
    if dst_at:
        rt.expect(ffi.cast("void *", dst_at), dst_len)
    res = rt.call(rt.COPY_3D, args, pb.Copy3D_Result)
    if dst_at and res.status == 0:
        rt.write(ffi.cast("void *", dst_at), res.dst, dst_len)
    return res.status


def _copy_2d(pCopy, stream: int | None, unaligned: bool = False) -> int:
    if pCopy == ffi.NULL:
        return INVALID_VALUE
    return _copy(2, _COPY2D.unpack(bytes(ffi.buffer(ffi.cast("char *", pCopy), _COPY2D.size))), stream, unaligned)


def _copy_3d(pCopy, stream: int | None) -> int:
    if pCopy == ffi.NULL:
        return INVALID_VALUE
    return _copy(3, _COPY3D.unpack(bytes(ffi.buffer(ffi.cast("char *", pCopy), _COPY3D.size))), stream)


@ffi.def_extern(name="cuwire_py_cuMemcpy2D_v2", onerror=rt.on_error)
def cuMemcpy2D_v2(pCopy, pCopy_len):
    return _copy_2d(pCopy, None)


@ffi.def_extern(name="cuwire_py_cuMemcpy2DUnaligned_v2", onerror=rt.on_error)
def cuMemcpy2DUnaligned_v2(pCopy, pCopy_len):
    return _copy_2d(pCopy, None, unaligned=True)


@ffi.def_extern(name="cuwire_py_cuMemcpy2DAsync_v2", onerror=rt.on_error)
def cuMemcpy2DAsync_v2(pCopy, pCopy_len, hStream):
    return _copy_2d(pCopy, hStream)


@ffi.def_extern(name="cuwire_py_cuMemcpy3D_v2", onerror=rt.on_error)
def cuMemcpy3D_v2(pCopy, pCopy_len):
    return _copy_3d(pCopy, None)


@ffi.def_extern(name="cuwire_py_cuMemcpy3DAsync_v2", onerror=rt.on_error)
def cuMemcpy3DAsync_v2(pCopy, pCopy_len, hStream):
    return _copy_3d(pCopy, hStream)


# ---------------------------------------------------------------- errors


def _error_text(error: int, out: int, name: bool) -> int:
    if not out:
        return INVALID_VALUE
    text = rt.client.error_string(error, name=name)
    ffi.cast("uint64_t *", out)[0] = int(ffi.cast("uintptr_t", text))
    if text == ffi.NULL:
        return INVALID_VALUE
    if not name:  # (kept for the process's life: C answers the next asks, client/driver_local.c)
        lib.cuwire_keep_error_string(error, text)
    return 0


@ffi.def_extern(name="cuwire_py_cuGetErrorString", onerror=rt.on_error)
def cuGetErrorString(error, pStr):
    return _error_text(error, pStr, False)


# ---------------------------------------------------------------- pointer attributes

# CUpointer_attribute values answered here, and their sizes
CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER = (
    cu.CU_POINTER_ATTRIBUTE_CONTEXT, cu.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, cu.CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
    cu.CU_POINTER_ATTRIBUTE_HOST_POINTER)
SYNC_MEMOPS, BUFFER_ID, IS_MANAGED, DEVICE_ORDINAL = (
    cu.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, cu.CU_POINTER_ATTRIBUTE_BUFFER_ID, cu.CU_POINTER_ATTRIBUTE_IS_MANAGED,
    cu.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
RANGE_START_ADDR, RANGE_SIZE, MAPPED = (
    cu.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, cu.CU_POINTER_ATTRIBUTE_RANGE_SIZE, cu.CU_POINTER_ATTRIBUTE_MAPPED)


@ffi.def_extern(name="cuwire_py_cuPointerGetAttributes", onerror=rt.on_error)
def cuPointerGetAttributes(numAttributes, attributes, data, ptr):
    """What the client knows of its own session's memory: device allocations (and __device__ variables)
    are device memory of device 0; any other address is host memory CUDA does not know (type 0)."""
    attrs = ffi.cast("unsigned int *", attributes)
    out = ffi.cast("void **", data)
    for i in range(numAttributes):
        if out[i] != ffi.NULL:
            err = _pointer_attribute(attrs[i], out[i], ptr)
            if err:
                return err
    return 0


@ffi.def_extern(name="cuwire_py_cuPointerGetAttribute", onerror=rt.on_error)
def cuPointerGetAttribute(data, attribute, ptr):
    if not data:
        return INVALID_VALUE
    if rt.client.allocation_of(ptr) is None:
        return INVALID_VALUE  # one attribute of memory CUDA does not know: the driver refuses
    return _pointer_attribute(attribute, ffi.cast("void *", data), ptr)


@ffi.def_extern(name="cuwire_py_cuMemGetAddressRange_v2", onerror=rt.on_error)
def cuMemGetAddressRange_v2(pbase, psize, dptr):
    hit = rt.client.allocation(dptr)
    if hit is None:
        return NOT_FOUND
    if pbase != ffi.NULL:
        rt.write_scalar(pbase, "uint64_t", hit[0])
    if psize != ffi.NULL:
        rt.write_scalar(psize, "uint64_t", hit[1])
    return 0


def _pointer_attribute(a: int, slot, ptr: int) -> int:
    """Write one CUpointer_attribute of `ptr` into `slot`; 0, or INVALID_VALUE for one not answered here."""
    hit = rt.client.allocation(ptr)
    known = hit is not None
    base, size = hit or (0, 0)
    if a in (CONTEXT, DEVICE_POINTER, HOST_POINTER, BUFFER_ID, RANGE_START_ADDR, RANGE_SIZE):
        value = {CONTEXT: lib.cuwire_current_context() if known else 0, DEVICE_POINTER: ptr if known else 0,
                 HOST_POINTER: 0, BUFFER_ID: base, RANGE_START_ADDR: base, RANGE_SIZE: size}[a]
        ffi.cast("uint64_t *", slot)[0] = value
    elif a == MEMORY_TYPE:
        ffi.cast("unsigned int *", slot)[0] = DEVICE if known else 0
    elif a in (SYNC_MEMOPS, IS_MANAGED, MAPPED):  # booleans, read by the runtime as 32-bit
        ffi.cast("unsigned int *", slot)[0] = 1 if a == MAPPED and known else 0
    elif a == DEVICE_ORDINAL:
        ffi.cast("int *", slot)[0] = 0 if known else -2
    else:
        return INVALID_VALUE
    return 0
