"""Tests for client/fatbin.py: synthetic fatbins for the rules, nvcc-built ones for the format.

Tests that need nvcc (or cuobjdump, or a GPU) skip when it is missing, so the parser's rules are
still checked everywhere; the format itself is pinned to what nvcc really writes.
"""

from __future__ import annotations

import ctypes
import os
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cuwire import fatbin as F

# --------------------------------------------------------------------------------------------
# Synthetic fatbins


def make_entry(
    kind: int = F.KIND_ELF,
    arch: int = 90,
    flags: int = F.FLAG_64BIT | F.FLAG_LINUX,
    payload: bytes = b"\x7fELF" + bytes(12),
    compressed_size: int = 0,
    uncompressed_size: int = 0,
    extra: bytes = b"",
    options_offset: int = 0,
    ident: tuple[int, int] = (0, 0),
    version: tuple[int, int] = (1, 8),
) -> bytes:
    """Entry bytes laid out as nvcc writes them (header, extra header bytes, padded payload)."""
    header_size = F.ENTRY_HEADER_MIN + len(extra)
    padded = payload + bytes(-len(payload) % 8)
    header = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x0101, header_size, len(padded), compressed_size, options_offset,
        version[1], version[0], arch, ident[0], ident[1], flags, 0, uncompressed_size,
    )
    return header + extra + padded


def make_fatbin(*entries: bytes, version: int = 1) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", F.HEADER_MAGIC, version, 16, len(body)) + body


def entries_of(*specs: tuple[str, int, int]) -> list[F.Entry]:
    """Entries from (kind, arch, extra flags) triples."""
    codes = {"elf": F.KIND_ELF, "ptx": F.KIND_PTX, "lto": F.KIND_LTO}
    blob = make_fatbin(*(make_entry(kind=codes[k], arch=a, flags=0x11 | fl) for k, a, fl in specs))
    return F.parse(blob)


A, FAM = F.FLAG_ARCH_SPECIFIC, F.FLAG_FAMILY_SPECIFIC


def test_fatbin_size() -> None:
    blob = make_fatbin(make_entry(), make_entry(kind=F.KIND_PTX, payload=b".version 9.0\n"))
    assert F.fatbin_size(blob[:16]) == len(blob)
    assert F.fatbin_size(blob) == len(blob)
    with pytest.raises(ValueError, match="magic"):
        F.fatbin_size(b"\0" * 16)
    with pytest.raises(ValueError, match="16 bytes"):
        F.fatbin_size(blob[:15])


def test_parse_fields() -> None:
    ptx = b"\n.version 9.0\n.target sm_90\n"
    extra = b"k.cu\0\0\0\0" + struct.pack("<II", 0x50, 4) + b"-O3\0"  # ident, options locator, text
    blob = make_fatbin(
        make_entry(),
        make_entry(kind=F.KIND_PTX, arch=90, payload=ptx, extra=extra, options_offset=0x48,
                   ident=(0x40, 4), version=(9, 0)),
        make_entry(kind=7, arch=75),
        version=1,
    )
    elf, p, other = F.parse(blob)
    assert (elf.kind, elf.arch, elf.compressed, elf.header_size, elf.major, elf.minor) == ("elf", 90, False, 64, 1, 8)
    assert elf.payload == b"\x7fELF" + bytes(12)
    assert elf.arch_name == "sm_90"
    assert (p.kind, p.major, p.minor, p.ident, p.options) == ("ptx", 9, 0, "k.cu", b"-O3\0")
    assert p.payload.rstrip(b"\0") == ptx and p.arch_name == "compute_90"
    assert other.kind == "kind7"
    assert b"".join(e.data for e in (elf, p, other)) == blob[16:]


def test_single_entry_fatbin_roundtrip() -> None:
    blob = make_fatbin(make_entry(arch=80), make_entry(arch=90, flags=0x11 | A), version=1)
    for e in F.parse(blob):
        one = F.single_entry_fatbin(e)
        assert F.fatbin_size(one) == len(one) == 16 + len(e.data)
        assert one[4:6] == blob[4:6]  # same header version
        assert F.parse(one) == [e]
    odd = F.parse(make_fatbin(make_entry(), version=3))[0]
    assert F.single_entry_fatbin(odd)[4:6] == b"\x03\x00"


def test_a_fatbin_of_some_entries() -> None:
    """Each model's choice of a fatbin for a server with GPUs of two models: the entries, bytes unchanged."""
    entries = F.parse(make_fatbin(make_entry(arch=80), make_entry(arch=86), make_entry(arch=90), version=1))
    two = F.fatbin_of([entries[2], entries[0]])
    assert F.fatbin_size(two) == len(two) and F.parse(two) == [entries[2], entries[0]]
    assert F.select(F.parse(two), 9, 0) == entries[2] and F.select(F.parse(two), 8, 0) == entries[0]
    blob = make_fatbin(*(make_entry(arch=a) for a in (80, 86, 90)), version=1)
    assert F.for_models(blob, [(9, 0), (8, 6), (9, 0)]) == F.fatbin_of([entries[2], entries[1]])
    assert F.for_models(blob, [(9, 0)]) == F.single_entry_fatbin(entries[2])  # (one model: as before)
    assert F.for_models(blob, [(7, 0)]) is None


@pytest.mark.parametrize(
    ("cc", "want"),
    [
        ((9, 0), ("elf", 90, A)),  # exact cubin; the 'a' build preferred
        ((8, 0), ("elf", 80, 0)),
        ((8, 6), ("elf", 80, 0)),  # binary compatible cubin of the same major
        ((8, 9), ("elf", 80, 0)),
        ((10, 0), ("ptx", 90, 0)),  # newer major: JIT the newest PTX
        ((12, 1), ("ptx", 90, 0)),
        ((7, 5), None),
    ],
)
def test_select_basic(cc: tuple[int, int], want: tuple[str, int, int] | None) -> None:
    entries = entries_of(("elf", 80, 0), ("elf", 90, 0), ("ptx", 90, 0), ("elf", 90, A))
    got = F.select(entries, *cc)
    assert (got.kind, got.arch, got.flags & (A | FAM)) == want if want else got is None


def test_select_rules() -> None:
    def pick(specs: list[tuple[str, int, int]], cc: tuple[int, int]) -> tuple[str, int, int] | None:
        got = F.select(entries_of(*specs), *cc)
        return None if got is None else (got.kind, got.arch, got.flags & (A | FAM))

    # exact cubin beats any PTX; plain cubin is fine without an 'a' one
    assert pick([("ptx", 90, 0), ("elf", 90, 0)], (9, 0)) == ("elf", 90, 0)
    # an older-minor cubin beats PTX (machine code before a JIT, as the driver chooses)
    assert pick([("elf", 80, 0), ("ptx", 75, 0), ("ptx", 86, 0), ("ptx", 89, 0)], (8, 6)) == ("elf", 80, 0)
    # without one, the highest PTX <= the device
    assert pick([("elf", 75, 0), ("ptx", 75, 0), ("ptx", 86, 0), ("ptx", 89, 0)], (8, 6)) == ("ptx", 86, 0)
    # 'a' targets only on exactly that arch
    assert pick([("elf", 90, A), ("ptx", 90, A)], (10, 0)) is None
    assert pick([("ptx", 90, A), ("ptx", 80, 0)], (10, 0)) == ("ptx", 80, 0)
    assert pick([("ptx", 90, A), ("ptx", 90, 0)], (9, 0)) == ("ptx", 90, A)
    assert pick([("elf", 100, A)], (10, 3)) is None
    # 'f' targets on later minors of the same major, not on other majors
    assert pick([("elf", 100, FAM)], (10, 3)) == ("elf", 100, FAM)
    assert pick([("elf", 103, FAM)], (10, 0)) is None
    assert pick([("ptx", 100, FAM)], (10, 3)) == ("ptx", 100, FAM)
    assert pick([("ptx", 100, FAM)], (12, 0)) is None
    # among older-minor cubins the highest minor wins; other majors never
    assert pick([("elf", 80, 0), ("elf", 86, 0), ("elf", 75, 0)], (8, 9)) == ("elf", 86, 0)
    assert pick([("elf", 75, 0), ("elf", 90, 0)], (8, 0)) is None
    # LTO IR and unknown kinds can't be loaded
    assert pick([("lto", 90, 0)], (9, 0)) is None
    assert F.select([], 9, 0) is None


def test_parse_rejects_malformed() -> None:
    good = make_fatbin(make_entry(), make_entry(kind=F.KIND_PTX, payload=b"x" * 100))
    for n in range(len(good)):
        with pytest.raises(ValueError):
            F.parse(good[:n])
    bad_cases = {
        "header size": make_fatbin(make_entry()[:4] + struct.pack("<I", 8) + make_entry()[8:]),
        "header size big": make_fatbin(make_entry()[:4] + struct.pack("<I", 10**6) + make_entry()[8:]),
        "payload": make_fatbin(make_entry()[:8] + struct.pack("<Q", 2**63) + make_entry()[16:]),
        "ident": make_fatbin(make_entry(ident=(0x40, 8))),
        "options": make_fatbin(make_entry(options_offset=0x100)),
        "compressed size": make_fatbin(make_entry(flags=0x8011, compressed_size=10**6)),
        "fat size": struct.pack("<IHHQ", F.HEADER_MAGIC, 1, 16, 2**62) + make_entry(),
    }
    for what, blob in bad_cases.items():
        with pytest.raises(ValueError):
            F.parse(blob)
            pytest.fail(what)
    # trailing bytes after fat_size are not part of the fatbin
    assert len(F.parse(good + b"junk")) == 2
    assert F.parse(make_fatbin()) == []


def test_parse_fuzz() -> None:
    rnd = random.Random(1234)
    seeds = [
        make_fatbin(make_entry(), make_entry(kind=F.KIND_PTX, payload=b"p" * 77, extra=bytes(16))),
        make_fatbin(make_entry(flags=0x8011, compressed_size=12, uncompressed_size=99)),
    ]
    for _ in range(3000):
        blob = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 4)):
            blob[rnd.randrange(len(blob))] = rnd.getrandbits(8)
        if rnd.random() < 0.3:
            blob = blob[: rnd.randrange(len(blob) + 1)]
        try:
            entries = F.parse(bytes(blob))
        except ValueError:
            continue
        F.select(entries, 9, 0)
        for e in entries:
            try:
                F.decompress(e)
            except (ValueError, NotImplementedError):
                pass
    for _ in range(500):
        blob = struct.pack("<IHHQ", F.HEADER_MAGIC, 1, 16, rnd.randrange(0, 400)) + rnd.randbytes(rnd.randrange(400))
        try:
            F.parse(blob)
        except ValueError:
            pass


def test_split_section() -> None:
    one = make_fatbin(make_entry())
    two = make_fatbin(make_entry(arch=80), make_entry(kind=F.KIND_PTX))
    assert list(F.split(one + bytes(8) + two)) == [one, two]
    with pytest.raises(ValueError):
        list(F.split(one + two[:-8]))
    with pytest.raises(ValueError):
        list(F.split(one + b"garbage!"))


# --------------------------------------------------------------------------------------------
# Decompression


def test_lz4_block() -> None:
    # token 0x23: 2 literals, match of 3+4 at offset 2; then a final literal-only sequence
    assert F.lz4_block_decompress(b"\x23ab\x02\x00\x10z", 10) == b"ab" + b"abababa" + b"z"
    long_lit = bytes([0xF0, 240]) + b"q" * 255  # 15 + 240 literals: extended length
    assert F.lz4_block_decompress(long_lit, 255) == b"q" * 255
    long_match = b"\x1fa\x01\x00\xff\x03\x00"  # 1 literal, match len 15+4+255+3 at offset 1
    assert F.lz4_block_decompress(long_match, 278) == b"a" * 278
    for bad in (b"\x23ab\x05\x00", b"\x23ab\x00\x00", b"\xf0", b"\x50abc", b"\x1fa\x01\x00\xff"):
        with pytest.raises(ValueError):
            F.lz4_block_decompress(bad, 1000)
    with pytest.raises(ValueError):
        F.lz4_block_decompress(long_match, 100)


def _lz4_cli_block(data: bytes, tmp: Path) -> bytes:
    """The single LZ4 block of an lz4(1) frame (independent blocks, no checksums)."""
    src = tmp / "in.bin"
    src.write_bytes(data)
    subprocess.run(["lz4", "-q", "-f", "-BI", "-B7", "--no-frame-crc", str(src), str(tmp / "o.lz4")], check=True)
    frame = (tmp / "o.lz4").read_bytes()
    assert frame[:4] == b"\x04\x22\x4d\x18"
    pos = 4 + 2 + (8 if frame[4] & 8 else 0) + 1
    (size,) = struct.unpack_from("<I", frame, pos)
    assert not size & 0x80000000, "stored uncompressed"
    return frame[pos + 4 : pos + 4 + size]


@pytest.mark.skipif(shutil.which("lz4") is None, reason="lz4 command not installed")
def test_lz4_matches_reference(tmp_path: Path) -> None:
    rnd = random.Random(5)
    texts = [
        Path(F.__file__).read_bytes(),
        bytes(rnd.choice(b"aaaabbc\n") for _ in range(70000)),
        b"xy" * 50000,
    ]
    for data in texts:
        assert F.lz4_block_decompress(_lz4_cli_block(data, tmp_path), len(data)) == data


def test_zstd_frames_within_their_size() -> None:
    """zstd payloads decode through the zstandard package: streamed frames (no content size), skippable
    frames between, and nothing past the size the entry header gives (a frame that inflates without end
    costs at most that)."""
    import zstandard

    data = Path(F.__file__).read_bytes() * 20
    cobj = zstandard.ZstdCompressor(level=5, write_checksum=True, write_content_size=False).compressobj()
    streamed = cobj.compress(data) + cobj.flush()
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    assert F.zstd_decompress(streamed + skippable + streamed, 2 * len(data)) == data * 2
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (64 << 20))
    with pytest.raises(ValueError, match="larger than allowed"):
        F.zstd_decompress(bomb, 1 << 20)
    for broken in (b"\x28\xb5\x2f", b"not zstd", streamed[: len(streamed) // 2]):
        with pytest.raises(ValueError):
            F.zstd_decompress(broken, len(data))


def test_decompress_entry_flags() -> None:
    zstandard = pytest.importorskip("zstandard")
    data = b"\x7fELF" + Path(F.__file__).read_bytes()[:5000]
    z = zstandard.ZstdCompressor().compress(data)
    e = F.parse(make_fatbin(make_entry(flags=0x8011, payload=z, compressed_size=len(z),
                                       uncompressed_size=len(data))))[0]
    assert e.compressed and F.decompress(e) == data
    lz = b"\x23ab\x02\x00\x10z"
    e = F.parse(make_fatbin(make_entry(flags=0x2011, payload=lz, compressed_size=len(lz), uncompressed_size=10)))[0]
    assert e.compressed and F.decompress(e) == b"ababababaz"
    plain = F.parse(make_fatbin(make_entry(payload=b"abc")))[0]
    assert not plain.compressed and F.decompress(plain) == plain.payload
    weird = F.parse(make_fatbin(make_entry(flags=0x18011, payload=b"\x71\x8d" * 8, compressed_size=16,
                                           uncompressed_size=40)))[0]
    with pytest.raises(NotImplementedError, match="0x8000"):
        F.decompress(weird)
    wrong_size = F.parse(make_fatbin(make_entry(flags=0x8011, payload=z, compressed_size=len(z),
                                                uncompressed_size=len(data) + 1)))[0]
    with pytest.raises(ValueError, match="expected"):
        F.decompress(wrong_size)


# --------------------------------------------------------------------------------------------
# Real fatbins from nvcc

KERNELS_CU = r"""
struct S { int a; double b; char c[3]; };
struct Big { char b[20000]; };
extern "C" __global__ void k_ptr(float *out, int n) { int i = threadIdx.x; if (i < n) out[i] = i; }
extern "C" __global__ void k_mix(S s, double d, int *p, char c) { if (p) p[0] = s.a + (int)d + s.c[1] + c; }
extern "C" __global__ void k_none() {}
extern "C" __global__ void k_big(Big b, int *o) { o[0] = b.b[19999]; }
template <typename T> __global__ void k_tmpl(T *p, T v, short s, float4 f) { p[0] = v + s + f.x; }
template __global__ void k_tmpl<double>(double *, double, short, float4);
"""

EXPECTED_PARAMS = {
    "k_ptr": [(0, 8), (8, 4)],
    "k_mix": [(0, 24), (24, 8), (32, 8), (40, 1)],
    "k_none": [],
    "k_big": [(0, 20000), (20000, 8)],
    "_Z6k_tmplIdEvPT_S0_s6float4": [(0, 8), (8, 8), (16, 2), (32, 16)],
}

GENCODE = [
    "-gencode", "arch=compute_80,code=sm_80",
    "-gencode", "arch=compute_90,code=[sm_90,compute_90]",
    "-gencode", "arch=compute_90a,code=sm_90a",
]
VARIANTS = {
    "default": GENCODE,
    "none": [*GENCODE, "-Xfatbin", "-compress-mode=none"],
    "zstd": [*GENCODE, "-Xfatbin", "-compress-all"],
    "size": [*GENCODE, "-Xfatbin", "-compress-all", "-Xfatbin", "-compress-mode=size"],
    "lz4": [*GENCODE, "-Xfatbin", "-compress-all", "-Xfatbin", "-compress-mode=speed"],
    "family": [
        "-gencode", "arch=compute_100a,code=[sm_100a,compute_100a]",
        "-gencode", "arch=compute_100f,code=[sm_100f,compute_100f]",
        "-gencode", "arch=compute_103f,code=sm_103f",
        "-gencode", "arch=compute_120,code=[sm_120,compute_120]",
    ],
    "debug": ["-G", "-gencode", "arch=compute_80,code=[sm_80,compute_80]"],
}


def _nvcc() -> str:
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("nvcc not installed")
    return nvcc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    nvcc = _nvcc()
    d = tmp_path_factory.mktemp("fatbin")
    src = d / "k.cu"
    src.write_text(KERNELS_CU)
    out = {}
    for name, flags in VARIANTS.items():
        out[name] = d / f"{name}.fatbin"
        subprocess.run([nvcc, *flags, "-fatbin", "-o", str(out[name]), str(src)], check=True, cwd=d)
    out["cubin90"] = d / "k90.cubin"
    subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(out["cubin90"]), str(src)], check=True, cwd=d)
    out["obj"] = d / "k.o"
    subprocess.run([nvcc, "-cudart", "shared", *GENCODE, "-c", "-o", str(out["obj"]), str(src)], check=True, cwd=d)
    out["lto"] = d / "lto.fatbin"
    subprocess.run([nvcc, "-dc", "-gencode", "arch=compute_90,code=lto_90", "-fatbin", "-o", str(out["lto"]),
                    str(src)], check=True, cwd=d)
    return out


def _summary(entries: list[F.Entry]) -> list[tuple[str, str, bool]]:
    return [(e.kind, e.arch_name, e.compressed) for e in entries]


def test_nvcc_entries(built: dict[str, Path]) -> None:
    default = F.parse(built["default"].read_bytes())
    # nvcc 13 compresses PTX (zstd) by default, cubins only with -compress-all
    assert _summary(default) == [("elf", "sm_80", False), ("elf", "sm_90", False),
                                 ("ptx", "compute_90", True), ("elf", "sm_90a", False)]
    for e in default:
        assert e.flags & (F.FLAG_64BIT | F.FLAG_LINUX) == F.FLAG_64BIT | F.FLAG_LINUX
        assert e.fatbin_version == 1 and e.version == 0x0101
        assert len(e.data) == e.header_size + e.payload_size and e.payload_size % 8 == 0
        if e.kind == "elf":
            assert e.payload.startswith(b"\x7fELF") and e.header_size == 64
        else:
            assert (e.major, e.minor, e.header_size) == (9, 0, 80)
            assert F.decompress(e).lstrip(b"\n").startswith(b".version 9.0\n.target sm_90\n")
    for name, flag in (("zstd", F.FLAG_COMPRESSED_ZSTD), ("size", F.FLAG_COMPRESSED_ZSTD),
                       ("lz4", F.FLAG_COMPRESSED_LZ4)):
        entries = F.parse(built[name].read_bytes())
        assert all(e.compressed and e.flags & F.FLAG_COMPRESSED_MASK == flag for e in entries), name
        assert all(e.compressed_size <= e.payload_size < e.compressed_size + 8 for e in entries)
    assert not any(e.compressed for e in F.parse(built["none"].read_bytes()))
    family = F.parse(built["family"].read_bytes())
    assert [e.arch_name for e in family] == [
        "sm_100a", "compute_100a", "sm_100f", "compute_100f", "sm_103f", "sm_120", "compute_120"]
    assert all(e.options for e in family if e.kind == "elf")  # sm_100+ cubins carry binary options
    debug = F.parse(built["debug"].read_bytes())
    assert all(e.flags & F.FLAG_DEBUG for e in debug)
    assert all(e.ident.endswith("/k.cu") for e in debug)  # -G records the source path
    assert b"-g" in next(e for e in debug if e.kind == "ptx").options
    (lto,) = F.parse(built["lto"].read_bytes())
    assert (lto.kind, lto.arch) == ("lto", 90) and F.select([lto], 9, 0) is None


def test_nvcc_decompress_matches_uncompressed(built: dict[str, Path]) -> None:
    # uncompressed payloads are padded to 8 bytes (PTX with NULs); decompressed ones are exact
    reference = [F.decompress(e).rstrip(b"\0") for e in F.parse(built["none"].read_bytes())]
    assert F.parse(built["none"].read_bytes())[1].payload == built["cubin90"].read_bytes()
    for name in ("default", "zstd", "size", "lz4"):
        got = [F.decompress(e).rstrip(b"\0") for e in F.parse(built[name].read_bytes())]
        assert got == reference, name


def test_nvcc_select_and_single_entry(built: dict[str, Path]) -> None:
    blob = built["zstd"].read_bytes()
    entries = F.parse(blob)
    assert F.select(entries, 9, 0).arch_name == "sm_90a"
    assert F.select(entries, 8, 6).arch_name == "sm_80"
    assert F.select(entries, 12, 0).arch_name == "compute_90"
    one = F.single_entry_fatbin(F.select(entries, 9, 0))
    assert one[:16] == struct.pack("<IHHQ", F.HEADER_MAGIC, 1, 16, len(one) - 16)
    assert one[16:] in blob
    fam = F.parse(built["family"].read_bytes())
    assert F.select(fam, 10, 0).arch_name == "sm_100a"
    assert F.select(fam, 10, 3).arch_name == "sm_103f"
    assert F.select(fam, 10, 1).arch_name == "sm_100f"  # an older-minor cubin before PTX
    assert F.select([e for e in fam if e.kind == "elf"], 10, 1).arch_name == "sm_100f"
    assert F.select(fam, 12, 1).arch_name == "sm_120"
    assert F.select([e for e in fam if e.kind == "ptx"], 12, 1).arch_name == "compute_120"
    assert F.select(fam, 12, 0).arch_name == "sm_120"
    assert F.select(fam, 11, 0) is None  # no cubin or PTX of major 11 or below


def test_nvcc_kernel_params(built: dict[str, Path]) -> None:
    assert F.elf_kernel_params(built["cubin90"].read_bytes()) == EXPECTED_PARAMS
    for name in ("default", "zstd", "lz4", "debug"):
        for e in F.parse(built[name].read_bytes()):
            if e.kind == "elf":
                assert F.elf_kernel_params(F.decompress(e)) == EXPECTED_PARAMS, (name, e)


ALIGNED_PTX = """
.version 8.1
.target sm_80
.address_size 64
.visible .entry k_v2(.param .align 4 .b8 big[20000], .param .u64 .ptr .global .align 16 p)
{
 .reg .b64 %rd<3>;
 .reg .b32 %r<2>;
 ld.param.u64 %rd1, [p];
 ld.param.u32 %r1, [big+16];
 cvta.to.global.u64 %rd2, %rd1;
 st.global.u32 [%rd2], %r1;
 ret;
}
.visible .entry k_v1(.param .u32 x, .param .u64 .ptr .global .align 16 p)
{
 .reg .b64 %rd<3>;
 .reg .b32 %r<2>;
 ld.param.u64 %rd1, [p];
 ld.param.u32 %r1, [x];
 cvta.to.global.u64 %rd2, %rd1;
 st.global.u32 [%rd2], %r1;
 ret;
}
"""


def test_kernel_params_pointee_alignment(tmp_path: Path) -> None:
    """Pointer alignment and space share the size's word: the size must be masked out of it."""
    ptxas = Path(_nvcc()).parent / "ptxas"
    if not ptxas.exists():
        pytest.skip("ptxas not next to nvcc")
    (tmp_path / "a.ptx").write_text(ALIGNED_PTX)
    subprocess.run([str(ptxas), "-arch=sm_80", "-o", str(tmp_path / "a.cubin"), str(tmp_path / "a.ptx")],
                   check=True)
    cubin = (tmp_path / "a.cubin").read_bytes()
    kparams = {
        (attr, v[8:12]) for name, data in F.elf_sections(cubin).items() if name.startswith(".nv.info.")
        for _, attr, v in F.nv_info_attributes(data) if attr in (F.EIATTR_KPARAM_INFO, F.EIATTR_KPARAM_INFO_V2)
    }
    assert (F.EIATTR_KPARAM_INFO, struct.pack("<I", 8 << 18 | 0x1F << 12 | 4 << 8 | 4)) in kparams
    assert (F.EIATTR_KPARAM_INFO_V2, struct.pack("<I", 4 << 24 | 4 << 16 | 8)) in kparams
    assert F.elf_kernel_params(cubin) == {"k_v1": [(0, 4), (8, 8)], "k_v2": [(0, 20000), (20000, 8)]}


def test_kernel_params_fuzz(built: dict[str, Path]) -> None:
    cubin = built["cubin90"].read_bytes()
    sections = F.elf_sections(cubin)
    info_offsets = [cubin.find(v) for k, v in sections.items() if k.startswith(".nv.info") and v]
    rnd = random.Random(3)
    for _ in range(1500):
        b = bytearray(cubin)
        for _ in range(rnd.randint(1, 3)):
            if rnd.random() < 0.5:  # the ELF and section headers
                i = rnd.choice([rnd.randrange(64), len(b) - rnd.randrange(1, 64 * 30)])
            else:  # .nv.info records
                i = rnd.choice(info_offsets) + rnd.randrange(64)
            b[i] = rnd.getrandbits(8)
        if rnd.random() < 0.2:
            b = b[: rnd.randrange(len(b))]
        try:
            F.elf_kernel_params(bytes(b))
        except ValueError:
            pass
    with pytest.raises(ValueError, match="not an ELF"):
        F.elf_kernel_params(b"\0" * 100)
    with pytest.raises(ValueError, match="unknown record format"):
        list(F.nv_info_attributes(b"\x09\x17\x00\x00"))


def test_nvcc_host_object(built: dict[str, Path]) -> None:
    """The .nv_fatbin section of a host object holds the fatbin the wrapper points at."""
    section = F.elf_sections(built["obj"].read_bytes())[".nv_fatbin"]
    fatbins = list(F.split(section))
    assert len(fatbins) == 1
    assert [(e.kind, e.arch_name) for e in F.parse(fatbins[0])] == [
        ("elf", "sm_80"), ("elf", "sm_90"), ("ptx", "compute_90"), ("elf", "sm_90a")]
    if shutil.which("objcopy"):
        out = built["obj"].with_suffix(".sec")
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(built["obj"]), str(out)],
                       check=True)
        assert out.read_bytes() == section


# --------------------------------------------------------------------------------------------
# Cross-checks against cuobjdump (not in every toolkit install)


def _cuobjdump() -> str:
    tool = shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None)
    if tool is None:
        pytest.skip("cuobjdump not installed")
    return tool


@pytest.mark.parametrize("variant", ["default", "zstd", "lz4", "family", "debug"])
def test_cuobjdump_listing_and_extraction(built: dict[str, Path], variant: str, tmp_path: Path) -> None:
    tool = _cuobjdump()
    path = built[variant]
    listing = subprocess.run([tool, "-lelf", "-lptx", str(path)], check=True, capture_output=True,
                             text=True).stdout
    listed = re.findall(r"^(ELF|PTX) file\s+\d+: \S*?sm_(\d+)([af]?)\.(?:cubin|ptx)$", listing, re.M)
    entries = F.parse(path.read_bytes())
    assert [(k.lower(), int(a)) for k, a, _ in listed] == [(e.kind, e.arch) for e in entries]
    for (_, _, suffix), e in zip(listed, entries, strict=True):
        if suffix == "a":
            assert e.arch_specific
        if suffix == "f":
            assert e.family_specific
    # extracted images equal ours, decompressed
    subprocess.run([tool, "-xelf", "all", "-xptx", "all", str(path)], check=True, cwd=tmp_path,
                   capture_output=True)
    ours = [F.decompress(e) for e in entries if e.kind == "elf"]
    assert sorted(p.read_bytes() for p in tmp_path.glob("*.cubin")) == sorted(ours)
    ptx = sorted(p.read_bytes().rstrip(b"\0") for p in tmp_path.glob("*.ptx"))
    assert ptx == sorted(F.decompress(e).rstrip(b"\0") for e in entries if e.kind == "ptx")


def test_cuobjdump_kernel_params(built: dict[str, Path]) -> None:
    tool = _cuobjdump()
    text = subprocess.run([tool, "-elf", str(built["cubin90"])], check=True, capture_output=True,
                          text=True).stdout
    found = {
        (int(o, 16), int(off, 16), int(sz, 16))
        for o, off, sz in re.findall(r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+"
                                     r"Size\s*:\s*(0x[0-9a-f]+)", text)
    }
    ours = {(i, off, size) for params in EXPECTED_PARAMS.values() for i, (off, size) in enumerate(params)}
    assert found == ours


# --------------------------------------------------------------------------------------------
# On a GPU: the driver loads what select + single_entry_fatbin make, and agrees on parameters


class _Driver:
    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            pytest.skip("no CUDA driver")
        if self.lib.cuInit(0) != 0:
            pytest.skip("cuInit failed: no usable GPU")
        self.dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(self.dev), 0))
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, self.dev))
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, self.dev))
        self.cc = (major.value, minor.value)
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.dev))
        self.check(self.lib.cuCtxSetCurrent(ctx))

    @staticmethod
    def check(rc: int) -> None:
        assert rc == 0, f"CUDA driver error {rc}"

    def params(self, image: bytes, names: list[str]) -> dict[str, list[tuple[int, int]]]:
        """Load image with cuModuleLoadData and cuLibraryLoadData; each kernel's (offset, size)."""
        buf = ctypes.create_string_buffer(image, len(image))
        mod = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), buf))
        out = {}
        for name in names:
            fn = ctypes.c_void_p()
            self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()))
            params = []
            while True:
                off, size = ctypes.c_size_t(), ctypes.c_size_t()
                if self.lib.cuFuncGetParamInfo(fn, len(params), ctypes.byref(off), ctypes.byref(size)) != 0:
                    break
                params.append((off.value, size.value))
            out[name] = params
        self.check(self.lib.cuModuleUnload(mod))
        lib = ctypes.c_void_p()
        self.check(self.lib.cuLibraryLoadData(ctypes.byref(lib), buf, None, None, 0, None, None, 0))
        kernel = ctypes.c_void_p()
        self.check(self.lib.cuLibraryGetKernel(ctypes.byref(kernel), lib, names[0].encode()))
        self.check(self.lib.cuLibraryUnload(lib))
        return out


@pytest.mark.gpu
def test_gpu_loads_selected_entries(tmp_path: Path) -> None:
    drv = _Driver()
    nvcc = _nvcc()
    major, minor = drv.cc
    arch = f"{major}{minor}"
    src = tmp_path / "k.cu"
    src.write_text(KERNELS_CU)
    names = list(EXPECTED_PARAMS)
    for extra in ([], ["-Xfatbin", "-compress-all"], ["-Xfatbin", "-compress-all", "-Xfatbin", "-compress-mode=speed"]):
        out = tmp_path / "k.fatbin"
        subprocess.run([nvcc, "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                        "-gencode", f"arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
                        *extra, "-fatbin", "-o", str(out), str(src)], check=True)
        entries = F.parse(out.read_bytes())
        chosen = F.select(entries, major, minor)
        assert (chosen.kind, chosen.arch) == ("elf", major * 10 + minor)
        loadable = [chosen, *(e for e in entries if e.kind == "ptx")]  # PTX: the driver JITs it
        for e in loadable:
            got = drv.params(F.single_entry_fatbin(e), names)
            assert got == EXPECTED_PARAMS, (extra, e)
            if e.kind == "elf":
                assert F.elf_kernel_params(F.decompress(e)) == got
