"""Host implementations of the test apps' kernels (tests/test_apps/*.cu), for the emulated device.

Tests only (CUWIRE_BACKEND=emulated). Each kernel is registered under the mangled name the app's cubin
gives it, with the parameter sizes and alignments of its `.nv.info` (EIATTR_KPARAM_INFO); each
`__device__`/`__constant__` variable under the name the app registers it by, with its size.

A kernel here does what the CUDA source does, with the same results: float32 values are rounded to
float32 after every operation (array('f') / struct 'f'), a multiply-add that nvcc contracts into an
FMA (the default, --fmad=true) is rounded once, and int arithmetic wraps at 32 bits. Each reads the
buffers it needs once, computes over them whole, and writes them back once. Only the x dimension of
the grid and block is used, as in the apps.
"""

from __future__ import annotations

import math
import operator
import struct
from array import array
from fractions import Fraction

from cuwire_emulated.registry import TENSOR_ELEMENT_SIZES, TENSOR_MAP, Dim3, KernelFn, Params, device_global, kernel
from cuwire_emulated.registry import DeviceMemory as Mem

# ---------------------------------------------------------------------------------------------------------
# helpers


def _threads(grid: Dim3, block: Dim3) -> int:
    """Threads along x: gridDim.x * blockDim.x (the apps index with blockIdx.x * blockDim.x + threadIdx.x)."""
    return grid[0] * block[0]


def _active(grid: Dim3, block: Dim3, n: int) -> int:
    """How many leading elements a `if (i < n)` kernel touches."""
    return max(0, min(n, _threads(grid, block)))


def _read(mem: Mem, typecode: str, address: int, count: int) -> array:
    out = array(typecode)
    if count > 0:
        out.frombytes(mem.read(address, count * out.itemsize))
    return out


def _write(mem: Mem, address: int, values: array) -> None:
    if len(values):
        mem.write(address, values.tobytes())


def _wrap32(values) -> array:
    """int32 array from Python ints, wrapping like 32-bit two's-complement arithmetic."""
    return array("i", [((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000 for v in values])


def _f32(x: float) -> float:
    """Round a double to the nearest float32, as a C cast does (inf past the float32 range)."""
    return array("f", (x,))[0]


_F32_MAX = float.fromhex("0x1.fffffep+127")


def _round_fraction_f32(q: Fraction) -> float:
    """An exact rational rounded once to float32, to nearest, ties to even (q != 0)."""
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()  # 2**e <= q < 2**(e+2)
    if Fraction(2) ** e > q:
        e -= 1
    elif Fraction(2) ** (e + 1) <= q:
        e += 1
    e = max(e, -126)  # subnormals share the smallest normal exponent
    scale = 23 - e
    m = round(q * Fraction(2) ** scale)  # Fraction rounds half to even
    value = math.ldexp(m, -scale)
    if value > _F32_MAX:
        return sign * math.inf
    return sign * value


def _fma32(a: float, b: float, c: float) -> float:
    """fmaf(a, b, c) for float32 inputs: a * b + c rounded once to float32."""
    p = a * b  # exact: a product of two float32 values fits a double
    s = p + c
    if not math.isfinite(s):
        return _f32(s)
    t = s - p
    err = (p - (s - t)) + (c - t)  # TwoSum: s + err == p + c exactly
    if err == 0:
        return _f32(s)
    return _round_fraction_f32(Fraction(a) * Fraction(b) + Fraction(c))


def _fma64(a: float, b: float, c: float) -> float:
    """fma(a, b, c) for doubles: a * b + c rounded once."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        return a * b + c  # the sign of an exact zero, as IEEE gives it
    return float(q)  # int / int division in Python is correctly rounded


# ---------------------------------------------------------------------------------------------------------
# vector_add.cu


@kernel("_Z9vectorAddPKfS0_Pfi", params=[8, 8, 8, 4])
def vector_add(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """c[i] = a[i] + b[i] for i < n."""
    a, b, c, n = p.ptr(0), p.ptr(1), p.ptr(2), p.i32(3)
    count = _active(grid, block, n)
    x = _read(mem, "f", a, count)
    y = _read(mem, "f", b, count)
    # a float32 sum computed in double and rounded to float32 is the correctly rounded float32 sum
    _write(mem, c, array("f", map(operator.add, x, y)))


# ---------------------------------------------------------------------------------------------------------
# events.cu


@kernel("_Z10eventsIotaPiii", params=[8, 4, 4])
def events_iota(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[i] = base + i."""
    out, base, n = p.ptr(0), p.i32(1), p.i32(2)
    _write(mem, out, _wrap32(range(base, base + _active(grid, block, n))))


# ---------------------------------------------------------------------------------------------------------
# streams.cu


@kernel("_Z10streamFillPiii", params=[8, 4, 4])
def stream_fill(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[i] = v + (i & 15)."""
    ptr, v, n = p.ptr(0), p.i32(1), p.i32(2)
    _write(mem, ptr, _wrap32(v + (i & 15) for i in range(_active(grid, block, n))))


@kernel("_Z14streamScaleAddPiPKiiii", params=[8, 8, 4, 4, 4])
def stream_scale_add(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """dst[i] = src[i] * mul + add (dst may be src)."""
    dst, src, mul, add, n = p.ptr(0), p.ptr(1), p.i32(2), p.i32(3), p.i32(4)
    x = _read(mem, "i", src, _active(grid, block, n))
    _write(mem, dst, _wrap32(v * mul + add for v in x))


@kernel("_Z8addToOddPii", params=[8, 4])
def add_to_odd(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[2t + 1] += 1 for each thread t (managed_memory.cu)."""
    ptr, n = p.ptr(0), p.i32(1)
    count = max(0, min(n, 2 * _threads(grid, block)))
    x = _read(mem, "i", ptr, count)
    for i in range(1, count, 2):
        x[i] += 1
    _write(mem, ptr, _wrap32(x))


# ---------------------------------------------------------------------------------------------------------
# graph_conditional.cu


@kernel("_Z8loopBodyPiyi", params=[8, 8, 4])
def loop_body(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """c = ++*count; the condition: c < limit."""
    count, handle, limit = p.ptr(0), p.ptr(1), p.i32(2)
    c = _read(mem, "i", count, 1)[0] + 1
    _write(mem, count, _wrap32([c]))
    mem.conditionals[handle] = int(c < limit)


@kernel("_Z7setFlagyi", params=[8, 4])
def set_flag(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    mem.conditionals[p.ptr(0)] = p.i32(1)


@kernel("_Z10writeValuePii", params=[8, 4])
def write_value(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    _write(mem, p.ptr(0), _wrap32([p.i32(1)]))


@kernel("_Z6addOnePj", params=[8])
def add_one_unsigned(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """*p += 1 (stream_memops.cu)."""
    x = _read(mem, "I", p.ptr(0), 1)
    _write(mem, p.ptr(0), _wrap32([x[0] + 1]))


@kernel("_Z13streamAddIntoPiPKii", params=[8, 8, 4])
def stream_add_into(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """dst[i] += src[i]."""
    dst, src, n = p.ptr(0), p.ptr(1), p.i32(2)
    count = _active(grid, block, n)
    x = _read(mem, "i", dst, count)
    y = _read(mem, "i", src, count)
    _write(mem, dst, _wrap32(map(operator.add, x, y)))


# ---------------------------------------------------------------------------------------------------------
# device_symbols.cu: __device__ int symArray[16]; __device__ float symScale; __constant__ int symTable[8]

device_global("symArray", 64)
device_global("symScale", 4)
device_global("symTable", 32)


@kernel("_Z12symbolsApplyPfi", params=[8, 4])
def symbols_apply(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """v = symArray[i] * symTable[i % 8] + i; symArray[i] = v; out[i] = (float)v * symScale."""
    out, n = p.ptr(0), p.i32(1)
    count = _active(grid, block, n)
    arr_addr = mem.global_address("symArray")
    values = _read(mem, "i", arr_addr, count)
    table = _read(mem, "i", mem.global_address("symTable"), 8)
    scale = _read(mem, "f", mem.global_address("symScale"), 1)[0]
    new = _wrap32(v * table[i % 8] + i for i, v in enumerate(values))
    _write(mem, arr_addr, new)
    _write(mem, out, array("f", [_f32(v) * scale for v in new]))


@kernel("_Z18symbolsDoubleScalev", params=[])
def symbols_double_scale(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """Thread 0 of block 0: symScale = symScale * 2."""
    if _threads(grid, block) == 0:
        return
    addr = mem.global_address("symScale")
    _write(mem, addr, array("f", [_read(mem, "f", addr, 1)[0] * 2.0]))


@kernel("_Z24symbolsAddThroughPointerPiii", params=[8, 4, 4])
def symbols_add_through_pointer(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[i] += add (p points into symArray, from cudaGetSymbolAddress)."""
    ptr, add, n = p.ptr(0), p.i32(1), p.i32(2)
    x = _read(mem, "i", ptr, _active(grid, block, n))
    _write(mem, ptr, _wrap32(v + add for v in x))


# ---------------------------------------------------------------------------------------------------------
# templated.cu: template <typename T> axpy(T a, const T *x, T *y, int n): y[i] = a * x[i] + y[i]


@kernel("_Z4axpyIiEvT_PKS0_PS0_i", params=[4, 8, 8, 4])
def axpy_int(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    a, x_addr, y_addr, n = p.i32(0), p.ptr(1), p.ptr(2), p.i32(3)
    count = _active(grid, block, n)
    x = _read(mem, "i", x_addr, count)
    y = _read(mem, "i", y_addr, count)
    _write(mem, y_addr, _wrap32(a * u + v for u, v in zip(x, y, strict=True)))


@kernel("_Z4axpyIfEvT_PKS0_PS0_i", params=[4, 8, 8, 4])
def axpy_float(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    a, x_addr, y_addr, n = p.f32(0), p.ptr(1), p.ptr(2), p.i32(3)
    count = _active(grid, block, n)
    x = _read(mem, "f", x_addr, count)
    y = _read(mem, "f", y_addr, count)
    _write(mem, y_addr, array("f", [_fma32(a, u, v) for u, v in zip(x, y, strict=True)]))


@kernel("_Z4axpyIdEvT_PKS0_PS0_i", params=[8, 8, 8, 4])
def axpy_double(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    a, x_addr, y_addr, n = p.f64(0), p.ptr(1), p.ptr(2), p.i32(3)
    count = _active(grid, block, n)
    x = _read(mem, "d", x_addr, count)
    y = _read(mem, "d", y_addr, count)
    _write(mem, y_addr, array("d", [_fma64(a, u, v) for u, v in zip(x, y, strict=True)]))


# ---------------------------------------------------------------------------------------------------------
# struct_arg.cu

# struct Mixed { char tag; double scale; int offset; short count; float bias; char flag; }: 32 bytes, align 8
_MIXED = struct.Struct("<b7xdih2xfb3x")
assert _MIXED.size == 32


@kernel("_Z11structApply5MixedPKfPfi", params=[32, 8, 8, 4], aligns=[8, 8, 8, 4])
def struct_apply(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """v = (float)((double)in[i] * scale + (double)offset);
    out[i] = v + bias * (float)count + (flag ? tag : 0)."""
    tag, scale, offset, count_field, bias, flag = _MIXED.unpack(p.raw(0))
    in_addr, out_addr, n = p.ptr(1), p.ptr(2), p.i32(3)
    count = _active(grid, block, n)
    x = _read(mem, "f", in_addr, count)
    fcount = float(count_field)
    ftag = float(tag) if flag else 0.0
    out = array("f")
    for u in x:
        v = _f32(_fma64(u, scale, float(offset)))
        out.append(_f32(_fma32(bias, fcount, v) + ftag))
    _write(mem, out_addr, out)


@kernel("_Z8blockSumPKiPii", params=[8, 8, 4])
def block_sum(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[b] = sum of in[b * blockDim.x + t] for t < blockDim.x (0 past n), in blockDim.x ints of dynamic
    shared memory."""
    in_addr, out_addr, n = p.ptr(0), p.ptr(1), p.i32(2)
    bd = block[0]
    if shared < bd * 4:
        raise ValueError(f"blockSum needs {bd * 4} bytes of dynamic shared memory, launched with {shared}")
    x = _read(mem, "i", in_addr, _active(grid, block, n))
    # int additions wrap mod 2**32, so the tree's order does not change the result
    _write(mem, out_addr, _wrap32(sum(x[b * bd : (b + 1) * bd]) for b in range(grid[0])))


# ---------------------------------------------------------------------------------------------------------
# two_units_a.cu, two_units_b.cu


@kernel("_Z10unitAScalePffi", params=[8, 4, 4])
def unit_a_scale(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[i] = p[i] * f."""
    ptr, f, n = p.ptr(0), p.f32(1), p.i32(2)
    x = _read(mem, "f", ptr, _active(grid, block, n))
    _write(mem, ptr, array("f", [v * f for v in x]))


@kernel("_Z11unitBOffsetPffi", params=[8, 4, 4])
def unit_b_offset(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[i] = p[i] + offset."""
    ptr, offset, n = p.ptr(0), p.f32(1), p.i32(2)
    x = _read(mem, "f", ptr, _active(grid, block, n))
    _write(mem, ptr, array("f", [v + offset for v in x]))


# ---------------------------------------------------------------------------------------------------------
# error_paths.cu


@kernel("_Z11errorsTouchPii", params=[8, 4])
def errors_touch(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[i] = 2 * i + 1."""
    ptr, n = p.ptr(0), p.i32(1)
    _write(mem, ptr, _wrap32(2 * i + 1 for i in range(_active(grid, block, n))))


# ---------------------------------------------------------------------------------------------------------
# launch_api.cu


@kernel("_Z8scaleAddPfPKffi", params=[8, 8, 4, 4])
def scale_add(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[i] = in[i] * scale + 1 for i < n, as one fused multiply-add (what nvcc emits)."""
    out, src, scale, n = p.ptr(0), p.ptr(1), p.f32(2), p.i32(3)
    x = _read(mem, "f", src, _active(grid, block, n))
    _write(mem, out, array("f", (_fma32(v, scale, 1.0) for v in x)))


# ---------------------------------------------------------------------------------------------------------
# attribute_sets.cu


@kernel("_Z6addOnePf", params=[8])
def add_one(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[threadIdx.x] += 1 (one block)."""
    ptr = p.ptr(0)
    _write(mem, ptr, array("f", (v + 1.0 for v in _read(mem, "f", ptr, block[0]))))


@kernel("_Z5twicePf", params=[8])
def twice(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[threadIdx.x] *= 2 (one block)."""
    ptr = p.ptr(0)
    _write(mem, ptr, array("f", (v * 2.0 for v in _read(mem, "f", ptr, block[0]))))


# ---------------------------------------------------------------------------------------------------------
# static_app.cu


@kernel("_Z4fillPii", params=[8, 4])
def static_fill(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """p[threadIdx.x] = v (one block)."""
    ptr, v = p.ptr(0), p.i32(1)
    _write(mem, ptr, _wrap32(v for _ in range(block[0])))


# ---------------------------------------------------------------------------------------------------------
# driver_api.c: PTX text with extern "C" kernels and __device__ int launches

device_global("launches", 4)


@kernel("axpb", params=[8, 8, 4, 4, 4])
def axpb(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[i] = in[i] * a + b for i < n, as one fused multiply-add (fma.rn.f32 in the PTX)."""
    out, src, a, b, n = p.ptr(0), p.ptr(1), p.f32(2), p.f32(3), p.i32(4)
    x = _read(mem, "f", src, _active(grid, block, n))
    _write(mem, out, array("f", (_fma32(v, a, b) for v in x)))


@kernel("count_launch", params=[])
def count_launch(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """Thread 0 of block 0: launches += 1."""
    if _threads(grid, block) == 0:
        return
    addr = mem.global_address("launches")
    _write(mem, addr, _wrap32([_read(mem, "i", addr, 1)[0] + 1]))


# ---------------------------------------------------------------------------------------------------------
# cooperative.cu


@kernel("_Z10coopRotatePiS_i", params=[8, 8, 4])
def coop_rotate(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """a[i] = 7 i; the grid synchronises; b[i] = a[(i + blockDim.x) % n] (whole grids run at once here)."""
    a, b, n = p.ptr(0), p.ptr(1), p.i32(2)
    count = _active(grid, block, n)
    _write(mem, a, _wrap32(7 * i for i in range(count)))
    values = _read(mem, "i", a, n)
    _write(mem, b, array("i", (values[(i + block[0]) % n] for i in range(count))))


# ---------------------------------------------------------------------------------------------------------
# device_printf.cu


@kernel("_Z5helloi", params=[4])
def hello(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """printf from threads 0-3: written to this process's stdout, as the driver writes device printf."""
    import os

    lines = "".join(f"device: round {p.i32(0)}, thread {t}\n" for t in range(min(4, _threads(grid, block))))
    os.write(1, lines.encode())


# ---------------------------------------------------------------------------------------------------------
# textures.cu: textures and surfaces sample the emulated device's objects (cuwire_emulated/arrays.py)


def _grid_2d(grid: Dim3, block: Dim3, w: int, h: int):
    """(x, y) of `x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y`, inside w x h."""
    return ((x, y) for y in range(min(grid[1], h)) for x in range(min(grid[0] * block[0], w)))


def _write_rows(mem: Mem, out: int, w: int, cells, typecode: str = "f") -> None:
    """Each ((x, y), value) into out[y * w + x]."""
    for (x, y), v in cells:
        _write(mem, out + (y * w + x) * 4, array(typecode, (v,)))


@kernel("_Z10texShift2DPfyiif", params=[8, 8, 4, 4, 4])
def tex_shift_2d(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[y * w + x] = tex2D(t, x + 0.5 + dx, y + 0.5)."""
    out, t, w, h, dx = p.ptr(0), mem.texture(p.u64(1)), p.i32(2), p.i32(3), p.f32(4)
    _write_rows(mem, out, w, (((x, y), t.sample((_f32(_f32(x + 0.5) + dx), y + 0.5))[0])
                              for x, y in _grid_2d(grid, block, w, h)))


@kernel("_Z15texNormalized2DPfyii", params=[8, 8, 4, 4])
def tex_normalized_2d(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[y * w + x] = tex2D(t, (x + 0.25) / w + 1, (y + 0.75) / h)."""
    out, t, w, h = p.ptr(0), mem.texture(p.u64(1)), p.i32(2), p.i32(3)
    _write_rows(mem, out, w, (((x, y), t.sample((_f32(_f32((x + 0.25) / w) + 1.0), _f32((y + 0.75) / h)))[0])
                              for x, y in _grid_2d(grid, block, w, h)))


@kernel("_Z9texRead3DPfyiii", params=[8, 8, 4, 4, 4])
def tex_read_3d(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """x, y, z = threadIdx.x, blockIdx.x, blockIdx.y: out[(z h + y) w + x] = tex3D(t, x + .5, y + .5, d - z - .5)."""
    out, t, w, h, d = p.ptr(0), mem.texture(p.u64(1)), p.i32(2), p.i32(3), p.i32(4)
    values = array("f", [0.0] * (w * h * d))
    for z in range(min(grid[1], d)):
        for y in range(min(grid[0], h)):
            for x in range(min(block[0], w)):
                values[(z * h + y) * w + x] = t.sample((x + 0.5, y + 0.5, d - z - 0.5))[0]
    _write(mem, out, values)


@kernel("_Z14texReadLayeredPfyiii", params=[8, 8, 4, 4, 4])
def tex_read_layered(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[(l * h + y) * w + x] = tex2DLayered(t, x + .5, y + .5, layers - 1 - l)."""
    out, t, w, h, layers = p.ptr(0), mem.texture(p.u64(1)), p.i32(2), p.i32(3), p.i32(4)
    values = array("f", [0.0] * (w * h * layers))
    for layer in range(min(grid[1], layers)):
        for y in range(min(grid[0], h)):
            for x in range(min(block[0], w)):
                values[(layer * h + y) * w + x] = t.sample((x + 0.5, y + 0.5), layer=layers - 1 - layer)[0]
    _write(mem, out, values)


@kernel("_Z11texReadCubePfyPK6float4i", params=[8, 8, 8, 4])
def tex_read_cube(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[i] = texCubemap(t, dirs[i].x, dirs[i].y, dirs[i].z)."""
    out, t, dirs, n = p.ptr(0), mem.texture(p.u64(1)), p.ptr(2), p.i32(3)
    count = _active(grid, block, n)
    d = _read(mem, "f", dirs, 4 * count)
    _write(mem, out, array("f", (t.cube(d[4 * i], d[4 * i + 1], d[4 * i + 2])[0] for i in range(count))))


@kernel("_Z14texFetchLinearPiyi", params=[8, 8, 4])
def tex_fetch_linear(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """out[i] = tex1Dfetch<int>(t, n - 1 - i)."""
    out, t, n = p.ptr(0), mem.texture(p.u64(1)), p.i32(2)
    _write(mem, out, _wrap32(int(t.fetch_index(n - 1 - i)[0]) for i in range(_active(grid, block, n))))


@kernel("_Z6texLodPfyif", params=[8, 8, 4, 4])
def tex_lod(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """x = threadIdx.x, y = blockIdx.x: out[y * w + x] = tex2DLod(t, (x + .5) / w, (y + .5) / w, lod)."""
    out, t, w, lod = p.ptr(0), mem.texture(p.u64(1)), p.i32(2), p.f32(3)
    values = array("f", [0.0] * (w * w))
    for y in range(min(grid[0], w)):
        for x in range(min(block[0], w)):
            values[y * w + x] = t.sample((_f32((x + 0.5) / w), _f32((y + 0.5) / w)), lod=lod)[0]
    _write(mem, out, values)


@kernel("_Z9surfScaleyii", params=[8, 4, 4])
def surf_scale(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """x = threadIdx.x, y = blockIdx.x: v = surf2Dread<int>(s, 4x, y); surf2Dwrite(2v + y, s, 4x, y)."""
    s, w, h = mem.surface(p.u64(0)), p.i32(1), p.i32(2)
    for y in range(min(grid[0], h)):
        for x in range(min(block[0], w)):
            v = struct.unpack("<i", s.read(4 * x, y, 4))[0]
            s.write(_wrap32([2 * v + y]).tobytes(), 4 * x, y)


# ---------------------------------------------------------------------------------------------------------
# clusters.cu


def _cluster_neighbour(mem: Mem, grid: Dim3, size: int, out: int) -> None:
    """Block b (cluster rank r) writes r * 1000 + the next rank's shared value, (its block index) * 10."""
    values = []
    for b in range(grid[0]):
        rank = b % size
        values.append(rank * 1000 + (b - rank + (rank + 1) % size) * 10)
    _write(mem, out, _wrap32(values))


@kernel("_Z16clusterNeighbourPi", params=[8])
def cluster_neighbour(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """Clusters as the launch's attribute says."""
    _cluster_neighbour(mem, grid, mem.cluster[0], p.ptr(0))


@kernel("_Z21clusterNeighbourFixedPi", params=[8])
def cluster_neighbour_fixed(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """Clusters of 4 (__cluster_dims__(4, 1, 1), compiled into the kernel)."""
    _cluster_neighbour(mem, grid, 4, p.ptr(0))


# ---------------------------------------------------------------------------------------------------------
# tensor_map.cu


@kernel("_Z7tmaTile14CUtensorMap_stPfii", params=[128, 8, 4, 4], aligns=[64, 8, 4, 4])
def tma_tile(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
    """One box of a 2D tensor map (the emulated device's encoding, registry.TENSOR_MAP) from (x0, y0) to
    out, row by row; elements outside the tensor read as zeros (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)."""
    fields = TENSOR_MAP.unpack(p.raw(0))
    dtype, address, (w, h), pitch, (bx, by) = fields[0], fields[3], fields[4:6], fields[9], fields[13:15]
    size, out, x0, y0 = TENSOR_ELEMENT_SIZES[dtype], p.ptr(1), p.i32(2), p.i32(3)
    rows = []
    for y in range(y0, y0 + by):
        row = bytearray(bx * size)
        if 0 <= y < h:
            lo, hi = max(x0, 0), min(x0 + bx, w)
            if lo < hi:
                row[(lo - x0) * size:(hi - x0) * size] = mem.read(address + y * pitch + lo * size, (hi - lo) * size)
        rows.append(bytes(row))
    mem.write(out, b"".join(rows))


# ---------------------------------------------------------------------------------------------------------
# many_kernels.cu: template <int N> fill(int *out): out[0] = N, for N = 1..300 (one module of more kernels
# than the server describes with a load)


def _fill(n: int) -> KernelFn:
    def fill(mem: Mem, grid: Dim3, block: Dim3, shared: int, p: Params) -> None:
        _write(mem, p.ptr(0), _wrap32([n]))
    return fill


for _n in range(1, 301):
    kernel(f"_Z4fillILi{_n}EEvPi", params=[8])(_fill(_n))
