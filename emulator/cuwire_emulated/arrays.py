"""The emulated device's CUDA arrays, texture and surface objects, and the 2D and 3D copies between host
memory, device memory and arrays.

An array is rows of texels in host memory: slices (3D depth, layers, cube faces) of rows of `width`
texels. Texture objects sample it as the GPU does for what the test apps use: point and linear filtering
(the weights in 1/256ths, as the hardware's 8-bit fractions), wrap, mirror, clamp and border addressing,
normalized coordinates, integer formats read as normalized floats unless read as integers, cubemap
faces by direction, mipmap levels by the nearest level of detail. Kernels reach them through
EmulatedMemory.texture and .surface (registry.DeviceMemory).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

CData = Any
# CUarray_format -> struct code of one channel
FORMATS = {0x01: "B", 0x02: "H", 0x03: "I", 0x08: "b", 0x09: "h", 0x0A: "i", 0x10: "e", 0x20: "f"}
LAYERED, SURFACE_LDST, CUBEMAP = 0x01, 0x02, 0x04  # CUDA_ARRAY3D flags
WRAP, CLAMP, MIRROR, BORDER = 0, 1, 2, 3  # CUaddress_mode
POINT, LINEAR = 0, 1  # CUfilter_mode
READ_AS_INTEGER, NORMALIZED_COORDINATES = 0x01, 0x02  # CU_TRSF_*
RESOURCE_ARRAY, RESOURCE_MIPMAPPED_ARRAY, RESOURCE_LINEAR, RESOURCE_PITCH2D = 0, 1, 2, 3
HOST, DEVICE, ARRAY, UNIFIED = 1, 2, 3, 4  # CUmemorytype


class Fault(Exception):
    """A kernel touched memory outside every allocation, or a surface outside its array: CUDA's illegal
    address (the launch makes it the sticky error)."""


@dataclass
class Array:
    width: int
    height: int  # 0: a 1D array
    depth: int  # 0: no slices; else 3D depth, layers or cube faces
    format: int
    channels: int
    flags: int = 0
    data: bytearray = field(default_factory=bytearray)
    level_of: int = 0  # the mipmapped array it is a level of

    @property
    def texel(self) -> int:
        return struct.calcsize(FORMATS[self.format]) * self.channels

    @property
    def row_bytes(self) -> int:
        return self.width * self.texel

    @property
    def rows(self) -> int:
        return max(self.height, 1)

    @property
    def slices(self) -> int:
        return max(self.depth, 1)

    def offset(self, x_bytes: int, y: int, z: int) -> int:
        return (z * self.rows + y) * self.row_bytes + x_bytes


def make_array(width: int, height: int, depth: int, fmt: int, channels: int, flags: int) -> Array | None:
    """A zeroed array, or None when the description is not one CUDA accepts."""
    if width <= 0 or height < 0 or depth < 0 or fmt not in FORMATS or channels not in (1, 2, 4):
        return None
    if flags & CUBEMAP and (width != height or depth % 6 or not depth or depth != 6 and not flags & LAYERED):
        return None
    if flags & LAYERED and not depth:
        return None
    a = Array(width, height, depth, fmt, channels, flags)
    a.data = bytearray(a.row_bytes * a.rows * a.slices)
    return a


class Texture:
    """A texture object: where its texels are, and how it samples them (CUDA_TEXTURE_DESC)."""

    def __init__(self, levels: list[Array] | None, linear: tuple | None, desc: CData, kept: tuple[bytes, bytes, bytes],
                 memory: Any) -> None:
        self.levels = levels  # an array's texels (one level, or a mipmapped array's)
        self.linear = linear  # or (address, format, channels, width, height, pitch) in device memory
        self.memory = memory
        self.modes = [desc.addressMode[i] for i in range(3)]
        self.filter = desc.filterMode
        self.flags = desc.flags
        self.max_level = desc.maxMipmapLevelClamp
        self.border = [desc.borderColor[i] for i in range(4)]
        self.kept = kept  # the resource, texture and view descriptions as given (for the Get*Desc calls)

    # --- texels

    def _format(self) -> tuple[int, int]:
        if self.levels:
            return self.levels[0].format, self.levels[0].channels
        return self.linear[1], self.linear[2]

    def _convert(self, raw: tuple) -> tuple:
        fmt, _ = self._format()
        code = FORMATS[fmt]
        if code in "BHbh" and not self.flags & READ_AS_INTEGER:  # normalized float
            scale = float((1 << (8 * struct.calcsize(code) - (code.islower()))) - 1)
            return tuple(max(v / scale, -1.0) for v in raw)
        return raw

    def _load(self, level: int, x: int, y: int, z: int) -> tuple:
        fmt, channels = self._format()
        code = f"<{channels}{FORMATS[fmt]}"
        if self.levels:
            a = self.levels[level]
            return struct.unpack_from(code, a.data, a.offset(x * a.texel, y, z))
        address, _, _, _, _, pitch = self.linear
        size = struct.calcsize(code)
        return struct.unpack(code, self.memory.read(address + y * pitch + x * size, size))

    def fetch_index(self, i: int) -> tuple:
        """tex1Dfetch: texel i of linear memory (0 outside it)."""
        address, fmt, channels, width, _, _ = self.linear
        if not 0 <= i < width:
            return (0,) * channels
        return self._convert(self._load(0, i, 0, 0))

    # --- sampling

    def _size(self, level: int) -> tuple[int, int, int]:
        if self.levels:
            a = self.levels[level]
            return a.width, a.rows, a.slices if a.depth and not a.flags & (LAYERED | CUBEMAP) else 1
        return self.linear[3], self.linear[4], 1

    def _index(self, i: int, n: int, mode: int) -> int | None:
        normalized = self.flags & NORMALIZED_COORDINATES
        if mode == WRAP and normalized:
            return i % n
        if mode == MIRROR and normalized:
            m = i % (2 * n)
            return m if m < n else 2 * n - 1 - m
        if mode == BORDER:
            return i if 0 <= i < n else None
        return min(max(i, 0), n - 1)

    def sample(self, coords: tuple[float, ...], layer: int = 0, lod: float = 0.0) -> tuple:
        """The texture at (u[, v[, w]]): filtered, addressed, converted."""
        level = 0
        if self.levels and len(self.levels) > 1:
            level = min(max(int(math.floor(lod + 0.5)), 0), len(self.levels) - 1, int(self.max_level))
        sizes = self._size(level)
        taps = []  # per dimension: ((index, weight), ...)
        for d, c in enumerate(coords):
            n = sizes[d]
            if self.flags & NORMALIZED_COORDINATES:
                c *= n
            if self.filter == LINEAR:
                c -= 0.5
                i0 = math.floor(c)
                frac = round((c - i0) * 256) / 256
                taps.append(((i0, 1 - frac), (i0 + 1, frac)))
            else:
                taps.append(((math.floor(c), 1.0),))
        _, channels = self._format()
        total = [0.0] * channels
        for combo in _product(taps):
            weight = math.prod(w for _, w in combo)
            if weight == 0:
                continue
            at = [0, 0, layer]
            indices = [self._index(i, sizes[d], self.modes[d]) for d, (i, _) in enumerate(combo)]
            if any(i is None for i in indices):
                texel = tuple(self.border[:channels])
            else:
                at[:len(indices)] = indices
                texel = self._convert(self._load(level, at[0], at[1], at[2]))
            for ch in range(channels):
                total[ch] += weight * texel[ch]
        return tuple(total)

    def cube(self, x: float, y: float, z: float) -> tuple:
        """texCubemap: the face the direction's major axis picks, at (s, t) on it."""
        ax, ay, az = abs(x), abs(y), abs(z)
        if ax >= ay and ax >= az:
            face, s, t, m = (0, -z, -y, ax) if x >= 0 else (1, z, -y, ax)
        elif ay >= az:
            face, s, t, m = (2, x, z, ay) if y >= 0 else (3, x, -z, ay)
        else:
            face, s, t, m = (4, x, -y, az) if z >= 0 else (5, -x, -y, az)
        saved = self.flags
        self.flags |= NORMALIZED_COORDINATES
        try:
            return self.sample(((s / m + 1) / 2, (t / m + 1) / 2), layer=face)
        finally:
            self.flags = saved


def _product(taps: list) -> list:
    out: list = [()]
    for options in taps:
        out = [prefix + (o,) for prefix in out for o in options]
    return out


class Surface:
    """A surface object over an array: bytes read and written by (x in bytes, y, z)."""

    def __init__(self, array: Array, kept: bytes) -> None:
        self.array = array
        self.kept = kept

    def read(self, x_bytes: int, y: int, size: int, z: int = 0) -> bytes:
        a = self.array
        if not (0 <= x_bytes and x_bytes + size <= a.row_bytes and 0 <= y < a.rows and 0 <= z < a.slices):
            raise Fault(f"surface access of {size} bytes at ({x_bytes}, {y}, {z})")
        at = a.offset(x_bytes, y, z)
        return bytes(a.data[at:at + size])

    def write(self, data: bytes, x_bytes: int, y: int, z: int = 0) -> None:
        self.read(x_bytes, y, len(data), z)  # the same bounds
        at = self.array.offset(x_bytes, y, z)
        self.array.data[at:at + len(data)] = data


class EmulatedArrays:
    """The driver's array, texture, surface and pitched-copy functions, mixed into EmulatedLib."""

    ffi: Any
    drv: Any
    _memory: Any
    _arrays: dict[int, Array]
    _mipmaps: dict[int, list[int]]  # mipmapped array -> its level arrays' handles

    # --- arrays

    def _new_array(self, out: CData, width: int, height: int, depth: int, fmt: int, channels: int,
                   flags: int) -> int:
        a = make_array(width, height, depth, fmt, channels, flags)
        if a is None or self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if len(a.data) > self._memory.total - self._memory.used:
            return self.drv.CUDA_ERROR_OUT_OF_MEMORY
        handle = self._new_handle()
        self._arrays[handle] = a
        self._memory.used += len(a.data)
        return self._drv_put((out, handle))

    def cuArrayCreate_v2(self, pHandle: CData, pAllocateArray: CData) -> int:
        if self._is_null(pAllocateArray):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        d = pAllocateArray[0]
        return self._new_array(pHandle, d.Width, d.Height, 0, d.Format, d.NumChannels, 0)

    def cuArray3DCreate_v2(self, pHandle: CData, pAllocateArray: CData) -> int:
        if self._is_null(pAllocateArray):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        d = pAllocateArray[0]
        return self._new_array(pHandle, d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags)

    def _array(self, handle: CData | int) -> Array | None:
        return self._arrays.get(self._addr(handle))

    def cuArrayGetDescriptor_v2(self, pArrayDescriptor: CData, hArray: CData) -> int:
        a = self._array(hArray)
        if a is None or self._is_null(pArrayDescriptor):
            return self.drv.CUDA_ERROR_INVALID_HANDLE if a is None else self.drv.CUDA_ERROR_INVALID_VALUE
        d = pArrayDescriptor[0]
        d.Width, d.Height, d.Format, d.NumChannels = a.width, a.height, a.format, a.channels
        return 0

    def cuArray3DGetDescriptor_v2(self, pArrayDescriptor: CData, hArray: CData) -> int:
        a = self._array(hArray)
        if a is None or self._is_null(pArrayDescriptor):
            return self.drv.CUDA_ERROR_INVALID_HANDLE if a is None else self.drv.CUDA_ERROR_INVALID_VALUE
        d = pArrayDescriptor[0]
        d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags = (a.width, a.height, a.depth, a.format,
                                                                        a.channels, a.flags)
        return 0

    def cuArrayDestroy(self, hArray: CData) -> int:
        handle = self._addr(hArray)
        a = self._arrays.get(handle)
        if a is None or a.level_of:
            return self.drv.CUDA_ERROR_INVALID_HANDLE if a is None else self.drv.CUDA_ERROR_INVALID_VALUE
        del self._arrays[handle]
        self._memory.used -= len(a.data)
        return 0

    def cuMipmappedArrayCreate(self, pHandle: CData, pMipmappedArrayDesc: CData, numMipmapLevels: int) -> int:
        if self._is_null(pMipmappedArrayDesc) or self._is_null(pHandle) or numMipmapLevels <= 0:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        d = pMipmappedArrayDesc[0]
        if numMipmapLevels > 1 + int(math.log2(max(d.Width, d.Height, d.Depth, 1))):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        handle = self._new_handle()
        levels = []
        for i in range(numMipmapLevels):
            out = self.ffi.new("CUarray *")
            err = self._new_array(out, max(d.Width >> i, 1), d.Height and max(d.Height >> i, 1),
                                  d.Depth and max(d.Depth >> i, 1), d.Format, d.NumChannels, d.Flags)
            if err:
                for level in levels:
                    self._arrays[level].level_of = 0
                    self.cuArrayDestroy(level)
                return err
            level = self._addr(out[0])
            self._arrays[level].level_of = handle
            levels.append(level)
        self._mipmaps[handle] = levels
        return self._drv_put((pHandle, handle))

    def cuMipmappedArrayGetLevel(self, pLevelArray: CData, hMipmappedArray: CData, level: int) -> int:
        levels = self._mipmaps.get(self._addr(hMipmappedArray))
        if levels is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if not 0 <= level < len(levels):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((pLevelArray, levels[level]))

    def cuMipmappedArrayDestroy(self, hMipmappedArray: CData) -> int:
        levels = self._mipmaps.pop(self._addr(hMipmappedArray), None)
        if levels is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        for level in levels:
            self._arrays[level].level_of = 0
            self.cuArrayDestroy(level)
        return 0

    # --- copies

    def _copy_side(self, kind: int, host: CData, device: int, array: CData, x: int, y: int, z: int, pitch: int,
                   rows: int, width: int, height: int, depth: int):
        """(read row, write row) functions of (slice, row) for one side of a pitched copy, or None when the
        side is not valid for the whole copy."""
        if kind == ARRAY:
            a = self._array(array)
            if a is None or x + width > a.row_bytes or y + height > a.rows or z + depth > a.slices:
                return None

            def at(k: int, r: int) -> int:
                return a.offset(x, y + r, z + k)

            return (lambda k, r: bytes(a.data[at(k, r):at(k, r) + width]),
                    lambda k, r, data: a.data.__setitem__(slice(at(k, r), at(k, r) + width), data))
        base = self._addr(host) if kind == HOST else int(device)
        if kind not in (HOST, DEVICE, UNIFIED) or (height > 1 or depth > 1) and width > pitch:
            return None
        if depth > 1 and rows < height:
            return None
        slice_rows = rows if depth > 1 else 0
        start = base + (z * slice_rows + y) * pitch + x
        if kind == DEVICE and not self._memory.contains(start):
            return None
        if not self._valid(start, ((depth - 1) * slice_rows + height - 1) * pitch + width):
            return None

        def address(k: int, r: int) -> int:
            return start + (k * slice_rows + r) * pitch

        return (lambda k, r: self._load(address(k, r), width),
                lambda k, r, data: self._store(address(k, r), data))

    def _pitched_copy(self, src: tuple, dst: tuple, width: int, height: int, depth: int) -> int:
        if width == 0 or height == 0 or depth == 0:
            return 0
        reader = self._copy_side(*src, width, height, depth)
        writer = self._copy_side(*dst, width, height, depth)
        if reader is None or writer is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        rows = [(k, r, reader[0](k, r)) for k in range(depth) for r in range(height)]  # all read, then written
        for k, r, data in rows:
            writer[1](k, r, data)
        return 0

    def cuMemcpy2D_v2(self, pCopy: CData) -> int:
        """`Height` rows of `WidthInBytes` bytes between pitched host or device memory and arrays; every row
        is checked before any moves."""
        if self._is_null(pCopy):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = pCopy[0]
        src = (c.srcMemoryType, c.srcHost, c.srcDevice, c.srcArray, c.srcXInBytes, c.srcY, 0, c.srcPitch, 0)
        dst = (c.dstMemoryType, c.dstHost, c.dstDevice, c.dstArray, c.dstXInBytes, c.dstY, 0, c.dstPitch, 0)
        return self._pitched_copy(src, dst, c.WidthInBytes, c.Height, 1)

    cuMemcpy2DUnaligned_v2 = cuMemcpy2D_v2

    def cuMemcpy3D_v2(self, pCopy: CData) -> int:
        if self._is_null(pCopy):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        c = pCopy[0]
        if c.srcLOD or c.dstLOD:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        src = (c.srcMemoryType, c.srcHost, c.srcDevice, c.srcArray, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch,
               c.srcHeight)
        dst = (c.dstMemoryType, c.dstHost, c.dstDevice, c.dstArray, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch,
               c.dstHeight)
        return self._pitched_copy(src, dst, c.WidthInBytes, c.Height, c.Depth)

    def cuMemcpy2DAsync_v2(self, pCopy: CData, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemcpy2D_v2(pCopy)

    def cuMemcpy3DAsync_v2(self, pCopy: CData, hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemcpy3D_v2(pCopy)

    def cuMemcpyHtoA_v2(self, dstArray: CData, dstOffset: int, srcHost: CData, ByteCount: int) -> int:
        a = self._array_span(dstArray, dstOffset, ByteCount)
        if a is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        a.data[dstOffset:dstOffset + ByteCount] = self.ffi.buffer(self.ffi.cast("char *", srcHost), ByteCount)[:]
        return 0

    def cuMemcpyAtoH_v2(self, dstHost: CData, srcArray: CData, srcOffset: int, ByteCount: int) -> int:
        a = self._array_span(srcArray, srcOffset, ByteCount)
        if a is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self.ffi.memmove(dstHost, bytes(a.data[srcOffset:srcOffset + ByteCount]), ByteCount)
        return 0

    def _array_span(self, handle: CData, offset: int, count: int) -> Array | None:
        """The array, when [offset, offset + count) lies in its first row: the 1D copies (cuMemcpyHtoA and
        the like) take an array as its first row, as the driver does (on the H100, 64 bytes into a 16 x 8
        float array went and 512 were refused)."""
        a = self._array(handle)
        return a if a is not None and 0 <= offset and offset + count <= a.row_bytes else None

    def cuMemcpyHtoAAsync_v2(self, dstArray: CData, dstOffset: int, srcHost: CData, ByteCount: int,
                             hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemcpyHtoA_v2(dstArray, dstOffset, srcHost, ByteCount)

    def cuMemcpyAtoHAsync_v2(self, dstHost: CData, srcArray: CData, srcOffset: int, ByteCount: int,
                             hStream: CData) -> int:
        if self._stream(hStream) is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        return self.cuMemcpyAtoH_v2(dstHost, srcArray, srcOffset, ByteCount)

    def cuMemcpyAtoA_v2(self, dstArray: CData, dstOffset: int, srcArray: CData, srcOffset: int,
                        ByteCount: int) -> int:
        dst, src = self._array_span(dstArray, dstOffset, ByteCount), self._array_span(srcArray, srcOffset, ByteCount)
        if dst is None or src is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        dst.data[dstOffset:dstOffset + ByteCount] = src.data[srcOffset:srcOffset + ByteCount]
        return 0

    def cuMemcpyAtoD_v2(self, dstDevice: int, srcArray: CData, srcOffset: int, ByteCount: int) -> int:
        src = self._array_span(srcArray, srcOffset, ByteCount)
        if src is None or (ByteCount and self._memory.find(dstDevice, ByteCount) is None):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._store(dstDevice, bytes(src.data[srcOffset:srcOffset + ByteCount]))
        return 0

    def cuMemcpyDtoA_v2(self, dstArray: CData, dstOffset: int, srcDevice: int, ByteCount: int) -> int:
        dst = self._array_span(dstArray, dstOffset, ByteCount)
        if dst is None or (ByteCount and self._memory.find(srcDevice, ByteCount) is None):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        dst.data[dstOffset:dstOffset + ByteCount] = self._load(srcDevice, ByteCount)
        return 0

    # --- texture and surface objects

    def _description(self, pointer: CData, ctype: str) -> bytes:
        return b"" if self._is_null(pointer) else bytes(self.ffi.buffer(pointer, self.ffi.sizeof(ctype)))

    def _resource(self, r: CData) -> tuple[list[Array] | None, tuple | None] | None:
        kind = r.resType
        if kind == RESOURCE_ARRAY:
            a = self._array(r.res.array.hArray)
            return ([a], None) if a is not None else None
        if kind == RESOURCE_MIPMAPPED_ARRAY:
            levels = self._mipmaps.get(self._addr(r.res.mipmap.hMipmappedArray))
            return ([self._arrays[h] for h in levels], None) if levels is not None else None
        if kind == RESOURCE_LINEAR:
            lin = r.res.linear
            if lin.format not in FORMATS or lin.numChannels not in (1, 2, 4):
                return None
            texel = struct.calcsize(FORMATS[lin.format]) * lin.numChannels
            size = lin.sizeInBytes
            if not self._memory.find(lin.devPtr, size):
                # CUDA lets a linear texture run past its allocation; here it ends where the allocation does
                # (reads beyond see the address mode's answer; on a GPU, whatever lies there)
                held = self._memory.find(lin.devPtr, 1)
                if held is None:
                    return None
                size = min(size, len(held[0]) - held[1])
            return None, (lin.devPtr, lin.format, lin.numChannels, size // texel, 1, size)
        if kind == RESOURCE_PITCH2D:
            p = r.res.pitch2D
            if p.format not in FORMATS or p.numChannels not in (1, 2, 4):
                return None
            if not self._memory.find(p.devPtr, p.pitchInBytes * p.height):
                return None
            return None, (p.devPtr, p.format, p.numChannels, p.width, p.height, p.pitchInBytes)
        return None

    def cuTexObjectCreate(self, pTexObject: CData, pResDesc: CData, pTexDesc: CData, pResViewDesc: CData) -> int:
        if self._is_null(pResDesc) or self._is_null(pTexDesc):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        found = self._resource(pResDesc[0])
        if found is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        kept = (self._description(pResDesc, "CUDA_RESOURCE_DESC"), self._description(pTexDesc, "CUDA_TEXTURE_DESC"),
                self._description(pResViewDesc, "CUDA_RESOURCE_VIEW_DESC"))
        handle = self._new_handle()
        self._memory.textures[handle] = Texture(found[0], found[1], pTexDesc[0], kept, self._memory)
        return self._drv_put((pTexObject, handle))

    def cuTexObjectDestroy(self, texObject: int) -> int:
        return 0 if self._memory.textures.pop(texObject, None) else self.drv.CUDA_ERROR_INVALID_VALUE

    def _give(self, out: CData, kept: bytes) -> int:
        if self._is_null(out) or not kept:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self.ffi.memmove(out, kept, len(kept))
        return 0

    def cuTexObjectGetResourceDesc(self, pResDesc: CData, texObject: int) -> int:
        t = self._memory.textures.get(texObject)
        return self._give(pResDesc, t.kept[0]) if t else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuTexObjectGetTextureDesc(self, pTexDesc: CData, texObject: int) -> int:
        t = self._memory.textures.get(texObject)
        return self._give(pTexDesc, t.kept[1]) if t else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuTexObjectGetResourceViewDesc(self, pResViewDesc: CData, texObject: int) -> int:
        t = self._memory.textures.get(texObject)
        return self._give(pResViewDesc, t.kept[2]) if t else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuSurfObjectCreate(self, pSurfObject: CData, pResDesc: CData) -> int:
        if self._is_null(pResDesc) or pResDesc.resType != RESOURCE_ARRAY:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        a = self._array(pResDesc.res.array.hArray)
        if a is None or not a.flags & SURFACE_LDST:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        handle = self._new_handle()
        self._memory.surfaces[handle] = Surface(a, self._description(pResDesc, "CUDA_RESOURCE_DESC"))
        return self._drv_put((pSurfObject, handle))

    def cuSurfObjectDestroy(self, surfObject: int) -> int:
        return 0 if self._memory.surfaces.pop(surfObject, None) else self.drv.CUDA_ERROR_INVALID_VALUE

    def cuSurfObjectGetResourceDesc(self, pResDesc: CData, surfObject: int) -> int:
        s = self._memory.surfaces.get(surfObject)
        return self._give(pResDesc, s.kept) if s else self.drv.CUDA_ERROR_INVALID_VALUE
