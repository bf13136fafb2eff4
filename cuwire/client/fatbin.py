"""Parse CUDA fatbinaries, pick the entry a GPU can load, and read kernel parameter layouts.

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
    header = _FATBIN_HEADER.pack(HEADER_MAGIC, entry.fatbin_version, HEADER_SIZE, len(entry.data))
    return header + entry.data


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
        out = zstd_decompress(src)
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


# --- zstd (RFC 8878), a small pure-Python decoder: the stdlib has none before Python 3.14 ---

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MAX_BLOCK = 128 * 1024

_LL_DEFAULT = (4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1,
               1, 1, 1, 1, -1, -1, -1, -1)
_ML_DEFAULT = (1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1)
_OF_DEFAULT = (1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1,
               -1, -1)
_LL_BASE = tuple(range(16)) + (16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048,
                               4096, 8192, 16384, 32768, 65536)
_LL_BITS = (0,) * 16 + (1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
_ML_BASE = tuple(range(3, 35)) + (35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027,
                                  2051, 4099, 8195, 16387, 32771, 65539)
_ML_BITS = (0,) * 32 + (1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)


class _BackBits:
    """A zstd backward bitstream: read from the end, most significant bits first."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        if not data or data[-1] == 0:
            raise ValueError("zstd: bitstream lacks its end marker")
        self.data = data
        self.pos = len(data) * 8 - 9 + data[-1].bit_length()  # bits left, below the marker

    def read(self, n: int) -> int:
        """n bits; past the start of the stream reads zeros (pos goes negative)."""
        if n == 0:
            return 0
        end = self.pos
        start = end - n
        self.pos = start
        if end <= 0:
            return 0
        lo = max(start, 0)
        v = int.from_bytes(self.data[lo >> 3 : (end + 7) >> 3], "little") >> (lo & 7)
        v &= (1 << (end - lo)) - 1
        return v << (lo - start)

    def peek(self, n: int) -> int:
        pos = self.pos
        v = self.read(n)
        self.pos = pos
        return v


def _fse_read_counts(src: bytes, pos: int, max_symbol: int, max_log: int) -> tuple[list[int], int, int]:
    """Decode an FSE table description at src[pos:]: (normalized counts, accuracy log, new pos)."""
    bits = int.from_bytes(src[pos : pos + 512], "little")  # a description is far shorter
    avail = min(len(src) - pos, 512) * 8
    bitpos = 0

    def take(n: int) -> int:
        nonlocal bitpos
        if bitpos + n > avail:
            raise ValueError("zstd: truncated FSE table description")
        v = (bits >> bitpos) & ((1 << n) - 1)
        bitpos += n
        return v

    log = take(4) + 5
    if log > max_log:
        raise ValueError(f"zstd: FSE accuracy log {log} > {max_log}")
    remaining = (1 << log) + 1
    threshold = 1 << log
    nbits = log + 1
    counts: list[int] = []
    while remaining > 1:
        if len(counts) > max_symbol:
            raise ValueError("zstd: FSE table has too many symbols")
        maxv = 2 * threshold - 1 - remaining
        if bitpos + nbits - 1 > avail:
            raise ValueError("zstd: truncated FSE table description")
        low = (bits >> bitpos) & (threshold - 1)
        if low < maxv:
            value = low
            bitpos += nbits - 1
        else:
            value = take(nbits)
            if value >= threshold:
                value -= maxv
        count = value - 1
        remaining -= abs(count)
        counts.append(count)
        if count == 0:
            while True:
                rep = take(2)
                counts.extend([0] * rep)
                if rep != 3:
                    break
            if len(counts) > max_symbol + 1:
                raise ValueError("zstd: FSE table has too many symbols")
        while remaining < threshold and threshold > 1:
            nbits -= 1
            threshold >>= 1
    if remaining != 1:
        raise ValueError("zstd: FSE probabilities don't add up")
    return counts, log, pos + (bitpos + 7) // 8


def _fse_table(counts: Iterable[int], log: int) -> list[tuple[int, int, int]]:
    """Decoding table: per state (symbol, bits to read, base of the next state)."""
    size = 1 << log
    symbols = [0] * size
    high = size - 1
    nxt = []
    for s, c in enumerate(counts):
        if c == -1:
            symbols[high] = s
            high -= 1
            nxt.append(1)
        else:
            nxt.append(c)
    step = (size >> 1) + (size >> 3) + 3
    pos = 0
    for s, c in enumerate(counts):
        for _ in range(max(c, 0)):
            symbols[pos] = s
            pos = (pos + step) & (size - 1)
            while pos > high:
                pos = (pos + step) & (size - 1)
    if pos != 0:
        raise ValueError("zstd: malformed FSE distribution")
    table = []
    for s in symbols:
        n = nxt[s]
        nxt[s] += 1
        nb = log - (n.bit_length() - 1)
        table.append((s, nb, (n << nb) - size))
    return table


def _fse_rle(symbol: int) -> list[tuple[int, int, int]]:
    return [(symbol, 0, 0)]


_LL_TABLE = _fse_table(_LL_DEFAULT, 6)
_ML_TABLE = _fse_table(_ML_DEFAULT, 6)
_OF_TABLE = _fse_table(_OF_DEFAULT, 5)


def _huffman_table(src: bytes, pos: int) -> tuple[list[tuple[int, int]], int, int]:
    """Read a Huffman tree description: (table indexed by max_bits peeked bits, max_bits, new pos)."""
    if pos >= len(src):
        raise ValueError("zstd: truncated Huffman tree description")
    header = src[pos]
    pos += 1
    if header >= 128:
        count = header - 127
        nbytes = (count + 1) // 2
        if pos + nbytes > len(src):
            raise ValueError("zstd: truncated Huffman weights")
        weights = []
        for b in src[pos : pos + nbytes]:
            weights += (b >> 4, b & 15)
        weights = weights[:count]
        pos += nbytes
    else:
        end = pos + header
        if end > len(src):
            raise ValueError("zstd: truncated Huffman weights")
        counts, log, p = _fse_read_counts(src[:end], pos, 255, 6)
        table = _fse_table(counts, log)
        bs = _BackBits(src[p:end])
        s1, s2 = bs.read(log), bs.read(log)
        weights = []
        while True:
            if len(weights) > 255:
                raise ValueError("zstd: too many Huffman weights")
            sym, nb, base = table[s1]
            weights.append(sym)
            s1 = base + bs.read(nb)
            if bs.pos < 0:
                weights.append(table[s2][0])
                break
            sym, nb, base = table[s2]
            weights.append(sym)
            s2 = base + bs.read(nb)
            if bs.pos < 0:
                weights.append(table[s1][0])
                break
        pos = end
    if len(weights) > 255:
        raise ValueError("zstd: too many Huffman weights")
    if any(w > 11 for w in weights):
        raise ValueError("zstd: Huffman weight out of range")
    total = sum(1 << (w - 1) for w in weights if w)
    if total == 0:
        raise ValueError("zstd: empty Huffman tree")
    max_bits = total.bit_length()
    rest = (1 << max_bits) - total
    if rest & (rest - 1) or max_bits > 11:
        raise ValueError("zstd: Huffman weights don't form a complete tree")
    weights.append(rest.bit_length())
    table: list[tuple[int, int]] = []
    for w in range(1, max_bits + 1):
        for s, sw in enumerate(weights):
            if sw == w:
                table += [(s, max_bits + 1 - w)] * (1 << (w - 1))
    return table, max_bits, pos


def _huffman_stream(data: bytes, count: int, table: list[tuple[int, int]], max_bits: int) -> bytes:
    pos = _BackBits(data).pos
    mask = (1 << max_bits) - 1
    out = bytearray(count)
    frombytes = int.from_bytes
    for i in range(count):
        start = pos - max_bits
        if start >= 0:  # max_bits <= 11, so 3 bytes always hold the window
            idx = (frombytes(data[start >> 3 : (start >> 3) + 3], "little") >> (start & 7)) & mask
        elif pos > 0:  # the last bits of the stream: pad with zeros below
            idx = (frombytes(data[:2], "little") & ((1 << pos) - 1)) << -start
        else:
            raise ValueError("zstd: Huffman stream overrun")
        out[i], nb = table[idx]
        pos -= nb
    if pos != 0:
        raise ValueError("zstd: Huffman stream not consumed exactly")
    return bytes(out)


class _ZstdState:
    __slots__ = ("huffman", "ll", "of", "ml", "rep")

    def __init__(self) -> None:
        self.huffman: tuple[list[tuple[int, int]], int] | None = None
        self.ll: list[tuple[int, int, int]] | None = None
        self.of: list[tuple[int, int, int]] | None = None
        self.ml: list[tuple[int, int, int]] | None = None
        self.rep = [1, 4, 8]


def _literals(src: bytes, st: _ZstdState) -> tuple[bytes, int]:
    """Decode a block's literals section: (literals, bytes consumed)."""
    b0 = src[0]
    ltype, sfmt = b0 & 3, (b0 >> 2) & 3
    if ltype in (0, 1):  # raw, RLE
        hl = (1, 2, 1, 3)[sfmt]
        if len(src) < hl:
            raise ValueError("zstd: truncated literals header")
        if hl == 1:
            size = b0 >> 3
        else:
            size = int.from_bytes(src[:hl], "little") >> 4
        if ltype == 0:
            if hl + size > len(src):
                raise ValueError("zstd: raw literals run past the block")
            return bytes(src[hl : hl + size]), hl + size
        if hl >= len(src):
            raise ValueError("zstd: truncated RLE literals")
        return bytes([src[hl]]) * size, hl + 1
    hl, fieldbits = {0: (3, 10), 1: (3, 10), 2: (4, 14), 3: (5, 18)}[sfmt]
    if len(src) < hl:
        raise ValueError("zstd: truncated literals header")
    h = int.from_bytes(src[:hl], "little") >> 4
    mask = (1 << fieldbits) - 1
    regen, csize = h & mask, (h >> fieldbits) & mask
    streams = 1 if sfmt == 0 else 4
    if regen > _MAX_BLOCK or hl + csize > len(src):
        raise ValueError("zstd: literals sizes out of range")
    body = src[hl : hl + csize]
    pos = 0
    if ltype == 2:
        table, max_bits, pos = _huffman_table(body, 0)
        st.huffman = (table, max_bits)
    elif st.huffman is None:
        raise ValueError("zstd: treeless literals without a previous Huffman table")
    table, max_bits = st.huffman
    if streams == 1:
        return _huffman_stream(body[pos:], regen, table, max_bits), hl + csize
    if pos + 6 > len(body):
        raise ValueError("zstd: truncated literals jump table")
    s1, s2, s3 = struct.unpack_from("<HHH", body, pos)
    pos += 6
    s4 = len(body) - pos - s1 - s2 - s3
    if s4 < 0:
        raise ValueError("zstd: literals jump table out of range")
    per = (regen + 3) // 4
    sizes = (per, per, per, regen - 3 * per)
    if sizes[3] < 0:
        raise ValueError("zstd: literals size too small for 4 streams")
    out = b""
    for length, n in zip((s1, s2, s3, s4), sizes, strict=True):
        out += _huffman_stream(body[pos : pos + length], n, table, max_bits)
        pos += length
    return out, hl + csize


def _seq_table(
    src: bytes, pos: int, mode: int, default: list[tuple[int, int, int]],
    prev: list[tuple[int, int, int]] | None, max_symbol: int, max_log: int,
) -> tuple[list[tuple[int, int, int]], int]:
    if mode == 0:
        return default, pos
    if mode == 1:
        if pos >= len(src):
            raise ValueError("zstd: truncated RLE sequence table")
        if src[pos] > max_symbol:
            raise ValueError("zstd: RLE sequence symbol out of range")
        return _fse_rle(src[pos]), pos + 1
    if mode == 2:
        counts, log, pos = _fse_read_counts(src, pos, max_symbol, max_log)
        return _fse_table(counts, log), pos
    if prev is None:
        raise ValueError("zstd: repeat sequence table without a previous one")
    return prev, pos


def _log_of(table: list[tuple[int, int, int]]) -> int:
    return (len(table) - 1).bit_length()


def _block(src: bytes, st: _ZstdState, out: bytearray) -> None:
    """Decode one compressed block, appending to out (which holds the frame so far)."""
    if not src:
        raise ValueError("zstd: empty compressed block")
    lits, pos = _literals(src, st)
    if pos >= len(src):
        raise ValueError("zstd: truncated sequences header")
    nseq = src[pos]
    if nseq == 0:
        if pos + 1 != len(src):
            raise ValueError("zstd: bytes after an empty sequences section")
        out += lits
        return
    if nseq < 128:
        pos += 1
    elif nseq < 255:
        if pos + 2 > len(src):
            raise ValueError("zstd: truncated sequences header")
        nseq = ((nseq - 128) << 8) + src[pos + 1]
        pos += 2
    else:
        if pos + 3 > len(src):
            raise ValueError("zstd: truncated sequences header")
        nseq = src[pos + 1] + (src[pos + 2] << 8) + 0x7F00
        pos += 3
    if pos >= len(src):
        raise ValueError("zstd: truncated sequences header")
    modes = src[pos]
    pos += 1
    if modes & 3:
        raise ValueError("zstd: reserved bits set in sequence modes")
    st.ll, pos = _seq_table(src, pos, modes >> 6, _LL_TABLE, st.ll, 35, 9)
    st.of, pos = _seq_table(src, pos, (modes >> 4) & 3, _OF_TABLE, st.of, 31, 8)
    st.ml, pos = _seq_table(src, pos, (modes >> 2) & 3, _ML_TABLE, st.ml, 52, 9)
    ll_t, of_t, ml_t = st.ll, st.of, st.ml
    bs = _BackBits(src[pos:])
    ll_s = bs.read(_log_of(ll_t))
    of_s = bs.read(_log_of(of_t))
    ml_s = bs.read(_log_of(ml_t))
    rep = st.rep
    lit_pos = 0
    limit = len(out) + _MAX_BLOCK
    read = bs.read
    for i in range(nseq):
        ll_code, ll_nb, ll_base = ll_t[ll_s]
        of_code, of_nb, of_base = of_t[of_s]
        ml_code, ml_nb, ml_base = ml_t[ml_s]
        if of_code > 31 or ll_code > 35 or ml_code > 52:
            raise ValueError("zstd: sequence code out of range")
        offset_value = (1 << of_code) + read(of_code)
        match_len = _ML_BASE[ml_code] + read(_ML_BITS[ml_code])
        lit_len = _LL_BASE[ll_code] + read(_LL_BITS[ll_code])
        if offset_value > 3:
            offset = offset_value - 3
            rep[2], rep[1], rep[0] = rep[1], rep[0], offset
        else:
            idx = offset_value - (1 if lit_len else 0)  # 0..3
            if idx == 0:
                offset = rep[0]
            elif idx == 1:
                offset = rep[1]
                rep[1], rep[0] = rep[0], offset
            elif idx == 2:
                offset = rep[2]
                rep[2], rep[1], rep[0] = rep[1], rep[0], offset
            else:
                offset = rep[0] - 1
                if offset == 0:
                    raise ValueError("zstd: zero repeat offset")
                rep[2], rep[1], rep[0] = rep[1], rep[0], offset
        if lit_pos + lit_len > len(lits):
            raise ValueError("zstd: sequence uses more literals than decoded")
        out += lits[lit_pos : lit_pos + lit_len]
        lit_pos += lit_len
        if offset > len(out):
            raise ValueError(f"zstd: match offset {offset} before the frame start")
        if len(out) + match_len > limit:
            raise ValueError("zstd: block decodes to more than 128 KiB")
        _copy_match(out, offset, match_len)
        if i != nseq - 1:
            ll_s = ll_base + read(ll_nb)
            ml_s = ml_base + read(ml_nb)
            of_s = of_base + read(of_nb)
        if bs.pos < 0:
            raise ValueError("zstd: sequence bitstream overrun")
    if bs.pos != 0:
        raise ValueError("zstd: sequence bitstream not consumed exactly")
    out += lits[lit_pos:]


def zstd_decompress(src: bytes, max_size: int = 1 << 32) -> bytes:
    """Decode concatenated zstd frames (no dictionaries); checksums are not verified."""
    out_all = bytearray()
    pos = 0
    while pos < len(src):
        if len(src) - pos < 4:
            raise ValueError("zstd: truncated frame magic")
        magic = int.from_bytes(src[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 8 > len(src):
                raise ValueError("zstd: truncated skippable frame")
            pos += 8 + int.from_bytes(src[pos + 4 : pos + 8], "little")
            continue
        if src[pos : pos + 4] != _ZSTD_MAGIC:
            raise ValueError(f"zstd: bad frame magic {magic:#010x}")
        pos += 4
        if pos >= len(src):
            raise ValueError("zstd: truncated frame header")
        fhd = src[pos]
        pos += 1
        fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
        if fhd & 8:
            raise ValueError("zstd: reserved frame header bit set")
        pos += 0 if single else 1  # window descriptor: our output buffer holds everything anyway
        dict_len = (0, 1, 2, 4)[dict_flag]
        if dict_len and any(src[pos : pos + dict_len]):
            raise NotImplementedError("zstd: frames with a dictionary")
        pos += dict_len
        fcs_len = (1 if single else 0, 2, 4, 8)[fcs_flag]
        if pos + fcs_len > len(src):
            raise ValueError("zstd: truncated frame header")
        content_size = int.from_bytes(src[pos : pos + fcs_len], "little") if fcs_len else None
        if fcs_len == 2 and content_size is not None:
            content_size += 256
        pos += fcs_len
        out = bytearray()
        st = _ZstdState()
        while True:
            if pos + 3 > len(src):
                raise ValueError("zstd: truncated block header")
            bh = int.from_bytes(src[pos : pos + 3], "little")
            pos += 3
            last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
            if bsize > _MAX_BLOCK:
                raise ValueError("zstd: block larger than 128 KiB")
            if btype == 1:  # RLE: one byte, repeated bsize times
                if pos >= len(src):
                    raise ValueError("zstd: truncated RLE block")
                out += bytes([src[pos]]) * bsize
                pos += 1
            else:
                if pos + bsize > len(src):
                    raise ValueError("zstd: block runs past the input")
                if btype == 0:
                    out += src[pos : pos + bsize]
                elif btype == 2:
                    _block(src[pos : pos + bsize], st, out)
                else:
                    raise ValueError("zstd: reserved block type")
                pos += bsize
            if len(out_all) + len(out) > max_size:
                raise ValueError("zstd: output larger than allowed")
            if last:
                break
        if checksum:
            if pos + 4 > len(src):
                raise ValueError("zstd: truncated frame checksum")
            pos += 4
        if content_size is not None and content_size != len(out):
            raise ValueError(f"zstd: frame decoded to {len(out)} bytes, header says {content_size}")
        out_all += out
    return bytes(out_all)


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
