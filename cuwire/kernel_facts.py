"""What a cubin says of its kernels, read on the client (issue 35: a kernel the client names must be
described without asking the server): each entry function's name and parameter layout, its registers,
static shared memory, stack frame, launch bounds and cluster dimensions, and from these the function
attributes the driver would answer (`attributes`).

The attributes are a model of the driver's answers, checked against the driver on a GPU by
tests/gpu_kernel_attributes.py (every kernel of PyTorch's and the test apps' images); an attribute whose
model has not matched there is left out (`CHECKED`), and a client asks the server for it.

ELF facts (nvcc 13, sm_90; .nv.info records as fatbin.nv_info_attributes reads them):
- an entry function is an STT_FUNC symbol with st_other bit 0x10 (STO_CUDA_ENTRY), of any binding (a
  static kernel's, or one in an anonymous namespace, is STB_LOCAL);
- the section .nv.info holds per-function records naming the function by symbol index:
  EIATTR_REGCOUNT (0x2f), EIATTR_FRAME_SIZE (0x11) and, in a linked cubin, EIATTR_MIN_STACK_SIZE (0x12:
  the kernel's frame and its callees' deepest, 0xffffffff where recursion or an indirect call leaves it
  unknown), each (u32 symbol, u32 value);
- .nv.info.<kernel> holds the kernel's: EIATTR_MAX_THREADS (0x05, u32 x, y, z: __launch_bounds__'s
  maximum), EIATTR_CTA_PER_CLUSTER (0x3d, u32 x, y, z: __cluster_dims__), EIATTR_EXPLICIT_CLUSTER (0x3e),
  EIATTR_NUM_BARRIERS (0x4c, its 2-byte value: the highest barrier a block uses, plus one; no record
  where it uses none);
- .nv.shared.<kernel> (NOBITS) is its static shared memory, after the 1 KiB the driver reserves a block
  where the cubin names .nv.reservedSmem.offset0 (ptxas -v counts the rest); .nv.constant3 is the module's
  __constant__ data;
- the SM version the code is for: e_flags bits 8-15 from ELF ABI version 8 (e_ident[8], nvcc 12.8 on),
  bits 0-7 before, where bits 16-23 held the PTX (virtual architecture) version it was compiled from;
- from ABI version 8 the PTX version is in the note .note.nv.cuinfo ("NVIDIA Corp", type 1000; its
  description: u16 version, u16 PTX version, u16 toolkit version, u16).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cuwire import fatbin

STO_CUDA_ENTRY = 0x10
EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
UNKNOWN_STACK = 0xFFFFFFFF
EIATTR_REGCOUNT = 0x2F
EIATTR_CTA_PER_CLUSTER = 0x3D
EIATTR_EXPLICIT_CLUSTER = 0x3E
EIATTR_NUM_BARRIERS = 0x4C
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size
SHT_SYMTAB, SHT_NOBITS, ET_REL = 2, 8, 1
RESERVED_SYMBOL, RESERVED_SHARED = ".nv.reservedSmem", 1024
ABI_V2 = 8  # e_ident[EI_ABIVERSION] of a cubin whose e_flags carry the SM in bits 8-15
CUINFO_NOTE, CUINFO_TYPE = ".note.nv.cuinfo", 1000


@dataclass
class KernelFacts:
    """One entry function of a cubin, as its ELF describes it."""

    name: str
    params: list[tuple[int, int]] = field(default_factory=list)  # (offset, size) in ordinal order
    registers: int = 0
    frame: int = 0  # bytes of stack frame a thread (local memory)
    stack: int | None = 0  # bytes of stack a thread with its callees' (None: not known before it runs)
    shared: int = 0  # bytes of static shared memory (its section's, less what the driver reserves)
    max_threads: int = 0  # __launch_bounds__'s maximum threads a block (0: none given)
    cluster: tuple[int, int, int] = (0, 0, 0)  # __cluster_dims__ (0: none given)
    explicit_cluster: bool = False
    barriers: int = 0  # named barriers a block uses (__syncthreads is barrier 0): occupancy.py


@dataclass
class CubinFacts:
    """A cubin's kernels, and what applies to all of them."""

    sm: int  # the SM version its code is for (90: sm_90)
    ptx: int | None  # the PTX version its code was compiled from (80: compute_80; None: not said)
    flags: int  # e_flags, whole (tests/gpu_kernel_attributes.py prints them beside the driver's answers)
    constant: int  # bytes of the module's __constant__ data
    reserved_shared: int  # bytes of each kernel's shared memory section the driver reserves (sm_80 on)
    kernels: dict[str, KernelFacts]


def _sections(elf: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, link) of each section: NOBITS ones keep their size, which
    fatbin.elf_sections leaves out. The header and the table's bounds checked by fatbin.elf_sections first."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    raw = [struct.unpack_from("<IIQQQQI", elf, shoff + i * shentsize) for i in range(shnum)]
    _, _, _, _, stroff, strsize, _ = raw[shstrndx]
    names = elf[stroff:stroff + strsize]
    out = []
    for name, kind, _flags, _addr, off, size, link in raw:
        end = names.find(b"\0", name)
        out.append((names[name:end].decode("utf-8", "replace"), kind, off, size, link))
    return out


def read(cubin: bytes) -> CubinFacts:
    """The facts of a cubin (a 64-bit little-endian CUDA ELF). ValueError if it is not one, or not one as
    read here (a client then loads it as asked, and the driver judges it)."""
    try:
        return _read(cubin)
    except (struct.error, IndexError) as e:
        raise ValueError(f"a cubin not as kernel_facts reads one: {e}") from e


def _read(cubin: bytes) -> CubinFacts:
    contents = fatbin.elf_sections(cubin)  # (first: it checks the header and the section table's bounds)
    sections = _sections(cubin)
    flags, = struct.unpack_from("<I", cubin, 0x30)
    symbols: dict[int, str] = {}
    entries: set[str] = set()
    for _name, kind, off, size, link in sections:
        if kind != SHT_SYMTAB:
            continue
        _, _, stroff, strsize, _ = sections[link]
        strings = cubin[stroff:stroff + strsize]
        for i in range(size // _SYMBOL.size):
            name, info, other, _shndx, _value, _size = _SYMBOL.unpack_from(cubin, off + i * _SYMBOL.size)
            text = strings[name:strings.find(b"\0", name)].decode("utf-8", "replace")
            symbols[i] = text
            if info & 0xF == 2 and other & STO_CUDA_ENTRY:  # STT_FUNC, entry (local too: static, anonymous namespace)
                entries.add(text)
    params = fatbin.elf_kernel_params(cubin)
    kernels = {name: KernelFacts(name, params.get(name, [])) for name in sorted(entries)}
    by_symbol = {i: kernels[n] for i, n in symbols.items() if n in kernels}
    stacks: dict[str, int] = {}
    relocatable = struct.unpack_from("<H", cubin, 0x10)[0] == ET_REL  # (its calls resolved when linked)
    for fmt, attribute, value in fatbin.nv_info_attributes(contents.get(".nv.info", b"")):
        if fmt != fatbin.EIFMT_SVAL or len(value) < 8:
            continue
        symbol, number = struct.unpack_from("<II", value)
        k = by_symbol.get(symbol)
        if k is not None and attribute == EIATTR_REGCOUNT:
            k.registers = number
        elif k is not None and attribute == EIATTR_FRAME_SIZE:
            k.frame = number
        elif k is not None and attribute == EIATTR_MIN_STACK_SIZE:
            stacks[k.name] = number
    sizes = {name: size for name, _kind, _off, size, _link in sections}
    # a kernel's shared memory section starts with the 1 KiB the driver reserves, where the code uses it
    reserved = RESERVED_SHARED if any(n.startswith(RESERVED_SYMBOL) for n in symbols.values()) else 0
    for k in kernels.values():
        stack = stacks.get(k.name, k.frame)  # (no record: a kernel that calls nothing)
        k.stack = None if stack == UNKNOWN_STACK or relocatable else stack
        k.shared = max(0, sizes.get(f".nv.shared.{k.name}", 0) - reserved)
        for fmt, attribute, value in fatbin.nv_info_attributes(contents.get(f".nv.info.{k.name}", b"")):
            if fmt == fatbin.EIFMT_SVAL and attribute == EIATTR_MAX_THREADS and len(value) >= 12:
                x, y, z = struct.unpack_from("<III", value)
                k.max_threads = x * y * z
            elif fmt == fatbin.EIFMT_SVAL and attribute == EIATTR_CTA_PER_CLUSTER and len(value) >= 12:
                k.cluster = struct.unpack_from("<III", value)
            elif attribute == EIATTR_EXPLICIT_CLUSTER:
                k.explicit_cluster = True
            elif fmt != fatbin.EIFMT_SVAL and attribute == EIATTR_NUM_BARRIERS and len(value) >= 2:
                k.barriers, = struct.unpack_from("<H", value)
    if cubin[8] >= ABI_V2:
        sm, ptx = (flags >> 8) & 0xFF, _noted_ptx(contents.get(CUINFO_NOTE, b""))
    else:
        sm, ptx = flags & 0xFF, (flags >> 16) & 0xFF
    return CubinFacts(sm, ptx, flags, sizes.get(".nv.constant3", 0), reserved, kernels)


def _noted_ptx(note: bytes) -> int | None:
    """The PTX version .note.nv.cuinfo gives (an ELF note: u32 name size, description size, type; the
    name and the description, each padded to 4 bytes), or None where it is missing or not as read."""
    if len(note) < 12:
        return None
    namesz, descsz, kind = struct.unpack_from("<III", note)
    desc = 12 + (namesz + 3) // 4 * 4
    if kind != CUINFO_TYPE or descsz < 4 or len(note) < desc + 4:
        return None
    return struct.unpack_from("<H", note, desc + 2)[0] or None


@dataclass(frozen=True)
class Device:
    """What of a GPU the attributes depend on (its CUdevice attributes, from the device snapshot)."""

    max_threads_per_block: int = 1024
    registers_per_multiprocessor: int = 65536
    shared_per_block: int = 49152


REGISTER_UNIT = 256  # registers are given to a warp in units of this many
WARP = 32
SUB_PARTITIONS = 4  # an SM's register file is split among this many schedulers, each its warps'


def max_threads_per_block(k: KernelFacts, device: Device) -> int:
    """The largest block the kernel can run: the device's, its launch bounds', and as many warps as the
    register file holds when each warp's registers come in REGISTER_UNIT units, per sub-partition."""
    most = device.max_threads_per_block
    if k.max_threads:
        most = min(most, k.max_threads)
    if k.registers:
        per_warp = -(-k.registers * WARP // REGISTER_UNIT) * REGISTER_UNIT
        per_partition = device.registers_per_multiprocessor // SUB_PARTITIONS
        most = min(most, per_partition // per_warp * SUB_PARTITIONS * WARP)
    return most


def model(facts: CubinFacts, k: KernelFacts, device: Device) -> dict[int, int]:
    """CU_FUNC_ATTRIBUTE number -> the value the model gives the kernel: each of the 16, but LOCAL_SIZE_BYTES
    (3) where the stack is not known before the kernel runs, and PTX_VERSION (5) where the cubin does not
    say it."""
    values = {
        0: max_threads_per_block(k, device),  # MAX_THREADS_PER_BLOCK
        1: k.shared,  # SHARED_SIZE_BYTES
        2: facts.constant,  # CONST_SIZE_BYTES
        4: k.registers,  # NUM_REGS
        6: facts.sm,  # BINARY_VERSION
        7: 0,  # CACHE_MODE_CA
        8: device.shared_per_block - k.shared,  # MAX_DYNAMIC_SHARED_SIZE_BYTES
        9: -1,  # PREFERRED_SHARED_MEMORY_CARVEOUT
        10: int(k.explicit_cluster),  # CLUSTER_SIZE_MUST_BE_SET
        11: k.cluster[0], 12: k.cluster[1], 13: k.cluster[2],  # REQUIRED_CLUSTER_WIDTH, HEIGHT, DEPTH
        14: 0,  # NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        15: 0,  # CLUSTER_SCHEDULING_POLICY_PREFERENCE
    }
    if k.stack is not None:
        values[3] = k.stack  # LOCAL_SIZE_BYTES: the frame, and the deepest of its callees'
    if facts.ptx is not None:
        values[5] = facts.ptx  # PTX_VERSION
    return dict(sorted(values.items()))


def attributes(facts: CubinFacts, k: KernelFacts, device: Device) -> dict[int, int]:
    """The model's values of the attributes in CHECKED: those a client may answer itself."""
    return {a: v for a, v in model(facts, k, device).items() if a in CHECKED}


# The attributes whose model matched the driver for every kernel tests/gpu_kernel_attributes.py read on a
# GPU (an H200: 58,680 kernels of PyTorch's, NVIDIA's libraries' and the test apps' images, 2026-11-28): a
# client asks the server for any other, and for one the model leaves out of a kernel's.
CHECKED: frozenset[int] = frozenset(range(16))
