"""Parse CUDA fatbinaries, pick the entry a GPU can load, and read kernel parameter layouts.

A leaf both sides use: the client picks the entry to send, the server's module cache recognises images,
and the emulated device (tests) finds kernel names in them.

nvcc embeds one fatbin per translation unit (``__cudaRegisterFatBinary``); it holds several
entries (cubin ELF for some SM archs, PTX for others, LTO IR). cuwire ships only the entry the
server's GPU needs, so this module must read the container without the CUDA toolkit.

Layout, verified against nvcc/fatbinary 13.0 output (all little-endian)::

    fatbin header (16 bytes)
      0x00 u32 magic 0xBA55ED50      0x04 u16 version (1)
      0x06 u16 header_size (16)      0x08 u64 fat_size (bytes of entries after the header)
    entry header (header_size bytes, >= 64), followed by payload_size bytes of payload
      0x00 u16 kind (1 PTX, 2 ELF, 8 LTO IR)   0x02 u16 entry format version (0x0101)
      0x04 u32 header_size                     0x08 u64 payload_size (padded to 8 bytes)
      0x10 u32 compressed_size (0 unless compressed; payload_size minus padding)
      0x14 u32 options_offset: offset in this header of a (u32 offset, u32 size) pair that
               locates the option bytes (PTX: ptxas options text; sm_100+ ELF: binary), 0: none
      0x18 u16 minor  0x1a u16 major            (PTX: PTX ISA version, e.g. 9.0; ELF: 1.8)
      0x1c u32 arch (SM number: 90 for sm_90 / compute_90, 100 for sm_100a)
      0x20 u32 ident_offset  0x24 u32 ident_size (source file name, when -G / --ident)
      0x28 u64 flags (FLAG_*)
      0x30 u64 reserved (0, except a hash in LTO IR entries)
      0x38 u64 uncompressed_size (0 unless compressed)
      0x40 ... ident and options bytes (located by the offsets above; relative to the entry)

Compression is flagged per entry: FLAG_COMPRESSED_LZ4 (0x2000; an LZ4 block, what
``-compress-mode=speed`` and CUDA 11/12 write) or FLAG_COMPRESSED_ZSTD (0x8000; a zstd frame,
CUDA 13's default). The driver accepts compressed entries as they are; :func:`decompress`
exists so :func:`elf_kernel_params` can read compressed cubins.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import zstandard

HEADER_MAGIC = 0xBA55ED50
HEADER_SIZE = 16
WRAPPER_MAGIC = 0x466243B1  # __fatBinC_Wrapper_t.magic, what __cudaRegisterFatBinary receives
ENTRY_HEADER_MIN = 64

KIND_PTX = 1
KIND_ELF = 2
KIND_LTO = 8
KIND_NAMES = {KIND_PTX: "ptx", KIND_ELF: "elf", KIND_LTO: "lto"}

FLAG_64BIT = 0x1
FLAG_DEBUG = 0x2  # built with -G
FLAG_LINUX = 0x10
FLAG_COMPRESSED_LZ4 = 0x2000
FLAG_COMPRESSED_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a / compute_100a: runs only on exactly that arch
FLAG_FAMILY_SPECIFIC = 0x200000  # sm_100f: runs on that arch and later minors of its major
FLAG_COMPRESSED_MASK = FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD

_FATBIN_HEADER = struct.Struct("<IHHQ")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")
assert _ENTRY_HEADER.size == ENTRY_HEADER_MIN

# A fatbin or entry larger than this is corrupt, not big: it stops absurd sizes early.
_MAX_SIZE = 1 << 40


@dataclass(frozen=True)
class Entry:
    """One fatbin entry: decoded header fields plus its bytes exactly as stored."""

    kind: str  # "ptx", "elf", "lto" or "kind<N>"
    kind_code: int
    arch: int  # SM number: 90 for sm_90, 100 for sm_100a
    flags: int
    version: int  # entry format version (0x0101)
    header_size: int
    payload_size: int
    compressed_size: int
    uncompressed_size: int
    major: int  # PTX ISA version for PTX
    minor: int
    ident: str  # source file name when recorded, else ""
    options: bytes  # ptxas options (PTX) or binary options (sm_100+ ELF), else b""
    data: bytes  # header + payload, exactly as in the fatbin
    fatbin_version: int = 1  # header version of the fatbin it came from, kept by single_entry_fatbin

    @property
    def payload(self) -> bytes:
        """The bytes after the entry header, still compressed if the entry is."""
        return self.data[self.header_size :]

    @property
    def compressed(self) -> bool:
        return bool(self.flags & FLAG_COMPRESSED_MASK)

    @property
    def arch_specific(self) -> bool:
        """An 'a' target (sm_90a): loadable only on exactly that compute capability."""
        return bool(self.flags & FLAG_ARCH_SPECIFIC)

    @property
    def family_specific(self) -> bool:
        """An 'f' target (sm_100f): loadable on that arch and later minors of its major."""
        return bool(self.flags & FLAG_FAMILY_SPECIFIC)

    @property
    def arch_name(self) -> str:
        prefix = "compute" if self.kind == "ptx" else "sm"
        suffix = "a" if self.arch_specific else "f" if self.family_specific else ""
        return f"{prefix}_{self.arch}{suffix}"

    def __repr__(self) -> str:  # the bytes would swamp a debug print
        return (
            f"Entry({self.kind} {self.arch_name} flags={self.flags:#x} payload={self.payload_size}"
            f"{' compressed' if self.compressed else ''})"
        )


def fatbin_size(prefix: bytes) -> int:
    """Total bytes (header + entries) of the fatbin starting at prefix (needs its first 16 bytes).

    The registration wrapper gives only a pointer, so the client reads this much to copy it.
    """
    if len(prefix) < HEADER_SIZE:
        raise ValueError(f"fatbin header needs {HEADER_SIZE} bytes, got {len(prefix)}")
    magic, _version, header_size, fat_size = _FATBIN_HEADER.unpack_from(prefix, 0)
    if magic != HEADER_MAGIC:
        raise ValueError(f"not a fatbin: magic {magic:#010x}, expected {HEADER_MAGIC:#010x}")
    if header_size < HEADER_SIZE or fat_size > _MAX_SIZE:
        raise ValueError(f"fatbin header out of range: header_size={header_size} fat_size={fat_size}")
    return header_size + fat_size


ELF_MAGIC = b"\x7fELF"


def image_kind(image: bytes) -> str:
    """What a module image is, by its first bytes: "fatbin", "elf" (a cubin) or "ptx" (text)."""
    if image[:4] == HEADER_MAGIC.to_bytes(4, "little"):
        return "fatbin"
    return "elf" if image[:4] == ELF_MAGIC else "ptx"

_ELF64_HEADER = struct.Struct("<16xHHIQQQIHHHHHH")  # e_type .. e_shstrndx, after e_ident
_ELF64_SECTION = struct.Struct("<IIQQQQIIQQ")


def elf_size(header: bytes, sections: bytes | None = None) -> int:
    """Bytes of the 64-bit ELF (a cubin) whose first 64 bytes are `header`: where its section header
    table ends, or, given that table's bytes (`sections`), where its last section's data ends if later.

    A cubin handed to cuModuleLoadData comes as a bare pointer, so its size must be read from it."""
    if header[:4] != ELF_MAGIC or header[4] != 2:
        raise ValueError("not a 64-bit ELF image")
    (_t, _m, _v, _entry, phoff, shoff, _f, _eh, phentsize, phnum, shentsize, shnum, _x) = \
        _ELF64_HEADER.unpack_from(header, 0)
    end = max(shoff + shentsize * shnum, phoff + phentsize * phnum, 64)
    if sections is not None:
        for i in range(shnum):
            (_n, kind, _fl, _a, offset, size, _l, _i, _al, _es) = _ELF64_SECTION.unpack_from(sections, i * shentsize)
            if kind != 8:  # SHT_NOBITS takes no room in the file
                end = max(end, offset + size)
    if end > _MAX_SIZE:
        raise ValueError(f"ELF image of {end} bytes is out of range")
    return end


def image_length(read: Callable[[int, int], bytes]) -> int | None:
    """Bytes of the fatbin or 64-bit ELF image that `read(offset, size)` reads; None for anything else
    (PTX text, whose length is its NUL-terminated string's). Images are handed to the driver as bare
    pointers, so their size must be read from them."""
    head = read(0, 4)
    if int.from_bytes(head, "little") == HEADER_MAGIC:
        return fatbin_size(read(0, HEADER_SIZE))
    if head != ELF_MAGIC:
        return None
    header = read(0, 64)
    shoff = _ELF64_HEADER.unpack_from(header, 0)[5]
    return elf_size(header, read(shoff, elf_size(header) - shoff))


def _region(hdr: bytes, offset: int, size: int, what: str) -> bytes:
    if offset == 0 and size == 0:
        return b""
    if offset < ENTRY_HEADER_MIN or offset + size > len(hdr):
        raise ValueError(f"fatbin entry {what} ({offset}+{size}) outside its {len(hdr)}-byte header")
    return hdr[offset : offset + size]


def _parse_entry(blob: bytes, off: int, end: int, fatbin_version: int) -> Entry:
    if end - off < ENTRY_HEADER_MIN:
        raise ValueError(f"truncated fatbin entry header at offset {off}")
    (kind, version, header_size, payload_size, compressed_size, options_offset, minor, major, arch,
     ident_offset, ident_size, flags, _reserved, uncompressed_size) = _ENTRY_HEADER.unpack_from(blob, off)
    if header_size < ENTRY_HEADER_MIN or header_size > end - off:
        raise ValueError(f"fatbin entry at offset {off}: header size {header_size} out of range")
    if payload_size > end - off - header_size:
        raise ValueError(
            f"fatbin entry at offset {off}: payload size {payload_size} runs past the fatbin end"
        )
    if flags & FLAG_COMPRESSED_MASK and compressed_size > payload_size:
        raise ValueError(f"fatbin entry at offset {off}: compressed size {compressed_size} > payload")
    hdr = blob[off : off + header_size]
    ident = _region(hdr, ident_offset, ident_size, "ident").split(b"\0", 1)[0]
    options = b""
    if options_offset:
        loc = _region(hdr, options_offset, 8, "options locator")
        options = _region(hdr, *struct.unpack("<II", loc), "options")
    return Entry(
        kind=KIND_NAMES.get(kind, f"kind{kind}"),
        kind_code=kind,
        arch=arch,
        flags=flags,
        version=version,
        header_size=header_size,
        payload_size=payload_size,
        compressed_size=compressed_size,
        uncompressed_size=uncompressed_size,
        major=major,
        minor=minor,
        ident=ident.decode("utf-8", "replace"),
        options=options,
        data=bytes(blob[off : off + header_size + payload_size]),
        fatbin_version=fatbin_version,
    )


def parse(blob: bytes) -> list[Entry]:
    """All entries of the fatbin at the start of blob (bytes after its fat_size are ignored)."""
    total = fatbin_size(blob)
    if total > len(blob):
        raise ValueError(f"truncated fatbin: header says {total} bytes, have {len(blob)}")
    _magic, version, off, _fat_size = _FATBIN_HEADER.unpack_from(blob, 0)
    entries = []
    while off < total:
        entry = _parse_entry(blob, off, total, version)
        entries.append(entry)
        off += len(entry.data)  # >= 64, so the loop always advances
    return entries


def split(section: bytes) -> Iterator[bytes]:
    """The fatbins packed in a .nv_fatbin section (one per translation unit, 8-byte aligned)."""
    off = 0
    while off < len(section):
        if not any(section[off : off + 8]):  # alignment padding between fatbins
            off += 8
            continue
        size = fatbin_size(section[off : off + HEADER_SIZE])
        if off + size > len(section):
            raise ValueError(f"fatbin at section offset {off} ({size} bytes) runs past the section end")
        yield section[off : off + size]
        off += max(8, (size + 7) & ~7)


def _loadable_elf_rank(e: Entry, dev_major: int, dev_minor: int) -> tuple[int, ...] | None:
    """None if the cubin can't run on the device, else a rank (higher is better)."""
    major, minor = divmod(e.arch, 10)
    if e.arch_specific:  # sm_90a: exactly that arch only
        return (1, minor, 2) if (major, minor) == (dev_major, dev_minor) else None
    if major != dev_major or minor > dev_minor:
        return None
    return (int(minor == dev_minor), minor, 1 if e.family_specific else 0)


def _loadable_ptx_rank(e: Entry, dev_major: int, dev_minor: int) -> tuple[int, ...] | None:
    major, minor = divmod(e.arch, 10)
    if e.arch_specific:
        return (e.arch, 2) if (major, minor) == (dev_major, dev_minor) else None
    if e.family_specific:
        return (e.arch, 1) if major == dev_major and minor <= dev_minor else None
    return (e.arch, 0) if e.arch <= dev_major * 10 + dev_minor else None


def select(entries: Iterable[Entry], major: int, minor: int) -> Entry | None:
    """The entry to load on a device of compute capability major.minor, or None.

    Rule, in order of preference (what the driver itself prefers: machine code before a JIT):
      1. a cubin (ELF) built for exactly this arch; 'a' (arch-specific) before 'f' (family)
         before plain, since the specific build may use instructions the plain one lacks;
      2. a cubin of the same major with a lower minor (binary compatible within a major), the
         highest minor first;
      3. PTX with the highest arch <= the device's, JIT-compiled by the driver ('a' PTX only for
         exactly this arch, 'f' PTX only within this major).
    LTO IR and unknown kinds are never chosen: cuModuleLoadData can't load them.
    """
    entries = list(entries)

    def best(kind: str, rank_of, exact_only: bool = False) -> Entry | None:
        top: tuple[tuple[int, ...], Entry] | None = None
        for e in entries:
            if e.kind == kind:
                rank = rank_of(e, major, minor)
                if rank is not None and (not exact_only or rank[0] == 1) and (top is None or rank > top[0]):
                    top = (rank, e)
        return top[1] if top else None

    return (best("elf", _loadable_elf_rank, exact_only=True) or best("elf", _loadable_elf_rank)
            or best("ptx", _loadable_ptx_rank))


def single_entry_fatbin(entry: Entry) -> bytes:
    """A fatbin holding just this entry (bytes unchanged), for cuModuleLoadData / cuLibraryLoadData.

    Sending one entry instead of the whole fatbin saves the bytes of every other arch.
    """
    return fatbin_of([entry])


def for_models(blob: bytes, models: list[tuple[int, int]]) -> bytes | None:
    """Of a fatbin, what a server with GPUs of these models (compute capabilities) needs: the entry each model
    chooses (select), once each, in the models' order; None when no model has one."""
    entries = parse(blob)
    chosen = dict.fromkeys(e for e in (select(entries, *m) for m in dict.fromkeys(models)) if e is not None)
    return fatbin_of(list(chosen)) if chosen else None


def fatbin_of(entries: list[Entry]) -> bytes:
    """A fatbin holding these entries of one fatbin (bytes unchanged, in this order): what a server with GPUs
    of several models needs of a program's fatbin, each model's choice."""
    data = b"".join(e.data for e in entries)
    return _FATBIN_HEADER.pack(HEADER_MAGIC, entries[0].fatbin_version, HEADER_SIZE, len(data)) + data


# ---------------------------------------------------------------------------------------------
# Decompression


def decompress(entry: Entry) -> bytes:
    """The entry's payload uncompressed (the payload itself when it isn't compressed)."""
    if not entry.compressed:
        return entry.payload
    src = entry.payload[: entry.compressed_size]
    if entry.flags & FLAG_COMPRESSED_ZSTD:
        if not src.startswith(_ZSTD_MAGIC):
            raise NotImplementedError(
                f"{entry!r}: flag {FLAG_COMPRESSED_ZSTD:#x} set but the payload is no zstd frame "
                f"(flags {entry.flags:#x}; LTO IR entries are stored that way)"
            )
        out = zstd_decompress(src, entry.uncompressed_size)
    elif entry.flags & FLAG_COMPRESSED_LZ4:
        out = lz4_block_decompress(src, entry.uncompressed_size)
    else:  # pragma: no cover - FLAG_COMPRESSED_MASK has only the two bits
        raise NotImplementedError(f"compression flags {entry.flags & FLAG_COMPRESSED_MASK:#x}")
    if len(out) != entry.uncompressed_size:
        raise ValueError(
            f"{entry!r}: decompressed to {len(out)} bytes, header says {entry.uncompressed_size}"
        )
    return out


def _lz4_length(src: bytes, i: int, value: int, what: str) -> tuple[int, int]:
    """An LZ4 length continued in bytes of 255 and a last byte below; returns (length, next index)."""
    while True:
        if i >= len(src):
            raise ValueError(f"lz4: truncated {what}")
        b = src[i]
        i += 1
        value += b
        if b != 255:
            return value, i


def lz4_block_decompress(src: bytes, size: int) -> bytes:
    """Decode an LZ4 block (no frame) of at most size bytes; fatbinary's FLAG_COMPRESSED_LZ4."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            lit, i = _lz4_length(src, i, lit, "literal length")
        if i + lit > n:
            raise ValueError("lz4: literals run past the input")
        out += src[i : i + lit]
        i += lit
        if i >= n or len(out) >= size:  # the last sequence has literals only
            break
        if i + 2 > n:
            raise ValueError("lz4: truncated match offset")
        offset = src[i] | src[i + 1] << 8
        i += 2
        mlen = (token & 15) + 4
        if token & 15 == 15:
            mlen, i = _lz4_length(src, i, mlen, "match length")
        if offset == 0 or offset > len(out):
            raise ValueError(f"lz4: match offset {offset} outside the {len(out)} bytes decoded")
        if len(out) + mlen > size:
            raise ValueError("lz4: output exceeds the uncompressed size")
        _copy_match(out, offset, mlen)
    if len(out) > size:
        raise ValueError("lz4: output exceeds the uncompressed size")
    return bytes(out)


def _copy_match(out: bytearray, offset: int, length: int) -> None:
    """Append length bytes copied from offset back (overlapping copies repeat the pattern)."""
    start = len(out) - offset
    if offset >= length:
        out += out[start : start + length]
    else:
        chunk = out[start:]
        reps, rest = divmod(length, offset)
        out += chunk * reps + chunk[:rest]


def zstd_decompress(src: bytes, size: int) -> bytes:
    """The zstd frames of src decoded (skippable frames skipped): exactly `size` bytes, the size a fatbin
    entry's header gives, or ValueError. A frame that would inflate without end costs at most that."""
    out = bytearray()
    with zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True) as reader:
        try:
            while piece := reader.read(size + 1 - len(out)):
                out += piece
                if len(out) > size:
                    raise ValueError("zstd: output larger than allowed")
        except zstandard.ZstdError as e:
            raise ValueError(f"zstd: {e}") from None
    if len(out) != size:
        raise ValueError(f"zstd: decoded {len(out)} bytes where {size} were expected (a truncated frame?)")
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Kernel parameters from a cubin's .nv.info.<kernel> sections

EIFMT_NVAL = 0x01
EIFMT_BVAL = 0x02
EIFMT_HVAL = 0x03
EIFMT_SVAL = 0x04
EIATTR_PARAM_CBANK = 0x0A
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_KPARAM_INFO_V2 = 0x45  # used instead of KPARAM_INFO when a parameter is >= 16 KiB


def nv_info_attributes(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(format, attribute, value) for each record of a .nv.info section.

    Records are u8 format, u8 attribute, then: NVAL/BVAL/HVAL a 2-byte value (4 bytes in all);
    SVAL a u16 size and that many bytes.
    """
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f".nv.info: truncated record at {pos}")
        fmt, attr, half = struct.unpack_from("<BBH", data, pos)
        if fmt == EIFMT_SVAL:
            if pos + 4 + half > len(data):
                raise ValueError(f".nv.info: record at {pos} runs past the section")
            yield fmt, attr, data[pos + 4 : pos + 4 + half]
            pos += 4 + half
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            yield fmt, attr, data[pos + 2 : pos + 4]
            pos += 4
        else:
            raise ValueError(f".nv.info: unknown record format {fmt:#x} at {pos}")


def elf_sections(elf: bytes) -> dict[str, bytes]:
    """Section name -> contents for an ELF64 little-endian file (a cubin)."""
    if len(elf) < 64 or elf[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if elf[4] != 2 or elf[5] != 1:
        raise ValueError("only 64-bit little-endian ELF is supported")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(elf) or (shnum and shstrndx >= shnum):
        raise ValueError("ELF section header table out of range")
    headers = []
    for i in range(shnum):
        name, stype, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        if stype != 8 and off + size > len(elf):  # 8: SHT_NOBITS occupies no file space
            raise ValueError(f"ELF section {i} out of range")
        headers.append((name, stype, off, size))
    if not shnum:
        return {}
    _, _, stroff, strsize = headers[shstrndx]
    strtab = elf[stroff : stroff + strsize]
    sections = {}
    for name, stype, off, size in headers:
        end = strtab.find(b"\0", name)
        if name >= len(strtab) or end < 0:
            raise ValueError("ELF section name out of range")
        sections[strtab[name:end].decode("utf-8", "replace")] = b"" if stype == 8 else elf[off : off + size]
    return sections


def elf_kernel_params(cubin: bytes) -> dict[str, list[tuple[int, int]]]:
    """Kernel name -> [(offset, size)] of its parameters in ordinal order, from .nv.info.<kernel>.

    For when the driver can't say (cuFuncGetParamInfo needs CUDA 12.4). Records, 12 bytes each:
    u32 index, u16 ordinal, u16 offset, u32 bits. In KPARAM_INFO the bits are pointee log2
    alignment (0..7), space (8..11), cbank (12..17), size (18..31); KPARAM_INFO_V2, which nvcc 13
    writes for kernels with a parameter too big for 14 bits, has size (0..15), pointee log2
    alignment (16..23), space (24..27).
    """
    params: dict[str, list[tuple[int, int]]] = {}
    for name, data in elf_sections(cubin).items():
        if not name.startswith(".nv.info."):
            continue
        found: dict[int, tuple[int, int]] = {}
        for fmt, attr, value in nv_info_attributes(data):
            if attr in (EIATTR_KPARAM_INFO, EIATTR_KPARAM_INFO_V2) and fmt == EIFMT_SVAL:
                if len(value) < 12:
                    raise ValueError(f"{name}: short parameter record ({len(value)} bytes)")
                _index, ordinal, offset, bits = struct.unpack_from("<IHHI", value)
                size = bits >> 18 if attr == EIATTR_KPARAM_INFO else bits & 0xFFFF
                found[ordinal] = (offset, size)
        if sorted(found) != list(range(len(found))):
            raise ValueError(f"{name}: parameter ordinals {sorted(found)} are not 0..n-1")
        params[name[len(".nv.info.") :]] = [found[k] for k in sorted(found)]
    return params
