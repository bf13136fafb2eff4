"""The fixed layouts of the wire, read from cuwire/wire/frames.h (the one definition the C of both sides
includes) through cffi: Python packs and unpacks them with struct.Struct objects made from that header's
fields, and takes its numbers (magics, limits) from its #define lines, instead of typing them again."""

from __future__ import annotations

import functools
import re
import struct
from pathlib import Path

import cffi

HEADER = Path(__file__).resolve().parent / "frames.h"
_LETTERS = {"uint8_t": "B", "int8_t": "b", "uint16_t": "H", "int16_t": "h", "uint32_t": "I", "int32_t": "i",
            "uint64_t": "Q", "int64_t": "q"}


@functools.cache
def _read() -> tuple[cffi.FFI, dict[str, int]]:
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    numbers = {m[0]: int(m[1], 0) for m in re.findall(r"^#define (CW_\w+) (0x[0-9A-Fa-f]+|\d+)\s*$", text, re.M)}
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    ffi = cffi.FFI()
    ffi.cdef(body.replace("CW_PACKED ", ""), packed=True)
    return ffi, numbers


def constant(name: str) -> int:
    """A number frames.h defines (CW_MAGIC, CW_MESSAGE_MAX, ...)."""
    return _read()[1][name]


def layout(name: str) -> struct.Struct:
    """struct.Struct for frames.h's `struct name`: its fields in order, arrays flattened, little-endian."""
    ffi = _read()[0]
    t = ffi.typeof(f"struct {name}")
    fmt = "<"
    for _field, f in t.fields:
        if f.type.kind == "array":
            fmt += f"{f.type.length}{_LETTERS[f.type.item.cname]}"
        else:
            fmt += _LETTERS[f.type.cname]
    packed = struct.Struct(fmt)
    if packed.size != ffi.sizeof(t):
        raise ValueError(f"{name}: {fmt} is {packed.size} bytes, the C struct {ffi.sizeof(t)}")
    return packed


def offsets(name: str) -> dict[str, int]:
    """Each field of frames.h's `struct name` and its offset, as cffi lays the packed struct out."""
    ffi = _read()[0]
    return {field: ffi.offsetof(f"struct {name}", field) for field, _ in ffi.typeof(f"struct {name}").fields}
