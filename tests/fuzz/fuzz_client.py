"""Coverage-guided fuzzing (atheris) of what the client does with bytes from the server: a reply frame
read by the transport, its payload and result decompressed and parsed, and the result written into the
program's buffers by the generated stub of the call it answers (generated/client_calls.py, through
client/runtime.py). The server is the fuzzer: its bytes come on the other end of a socket pair.

Whatever the reply, the stub must end as cffi ends it for the program: a CUDA error code (runtime.Fail,
which runtime.on_error turns into the code), never an exception of another kind (the program would see
an "internal error" traceback), and never a write outside the buffers the program passed, each of which
lies between guard bytes checked after every call.

The client library's own cffi module (`_cuwire`) is replaced by a stand-in: its C functions (the call
queue, the device map, output) do nothing here; memory is real, from cffi.

    python tests/fuzz/fuzz_client.py [-max_total_time=60] [tests/fuzz/client-corpus]
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import socket
import sys
import types
from pathlib import Path

import atheris
import cffi
import fields  # tests/fuzz/fields.py, beside this file
from google.protobuf.descriptor import FieldDescriptor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
GUARD = 64  # bytes of a known pattern before and after every buffer the program passes
PATTERN = 0xA5


class StandInFfi:
    """The client library's ffi as the Python halves use it: cffi's own for memory, def_extern recording
    each Python half (the C stubs would call it) with its error handler."""

    def __init__(self) -> None:
        self.real = cffi.FFI()
        self.externs: dict[str, tuple] = {}

    def def_extern(self, name: str | None = None, onerror=None):
        def register(fn):
            self.externs[name or fn.__name__] = (fn, onerror)
            return fn
        return register

    def __getattr__(self, attr: str):
        return getattr(self.real, attr)


class StandInLib:
    """The client library's C functions: nothing queued, no device map, output dropped."""

    def __getattr__(self, name: str):
        return lambda *args: 0


FFI = StandInFfi()
sys.modules["_cuwire"] = types.SimpleNamespace(ffi=FFI, lib=StandInLib())

with atheris.instrument_imports():
    from cuwire.client import runtime
    from cuwire.generated import client_calls  # noqa: F401  (registers the generated halves with FFI)
    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.wire import compression, transport

# The Python halves of the generated calls and their C signatures (generated/client_cdefs.h): which
# parameters are the program's pointers.
CDEFS = (ROOT / "cuwire" / "generated" / "client_cdefs.h").read_text()
SIGNATURES = {m[1]: [t.strip() for t in m[2].split(",")] if m[2].strip() != "void" else []
              for m in re.finditer(r'extern "Python\+C" int cuwire_py_(\w+)\(([^)]*)\)', CDEFS)}
STUBS = sorted(name for name in FFI.externs if name.startswith("cuwire_py_") and
               name.removeprefix("cuwire_py_") in SIGNATURES and hasattr(client_calls, name.removeprefix("cuwire_py_")))


class FakeSession:
    """The client's session, its transport one end of a socket pair; the fuzzer's reply waits on the other."""

    def __init__(self, sock: socket.socket):
        self.transport = transport.SocketTransport.over(transport.Connection(sock, "fuzz"), "fuzz")
        self.host = None


INT32, UINT32 = (-(1 << 31), (1 << 31) - 1), (0, (1 << 32) - 1)
NARROW = {FieldDescriptor.TYPE_INT32: INT32, FieldDescriptor.TYPE_ENUM: INT32, FieldDescriptor.TYPE_SINT32: INT32,
          FieldDescriptor.TYPE_UINT32: UINT32, FieldDescriptor.TYPE_FIXED32: UINT32}


def scalar(fdp, ctype: str, field) -> int | float:
    """A scalar argument as the C stub passes it: widened from the C parameter's own type, which the
    Args field's type tells (an int comes as int64_t but holds 32 bits)."""
    if ctype == "double":
        return fdp.ConsumeFloat()
    lo, hi = (-(1 << 63), (1 << 63) - 1) if ctype == "int64_t" else (0, (1 << 64) - 1)
    if field is not None and field.type in NARROW:
        lo, hi = NARROW[field.type]
    return fdp.ConsumeIntInRange(lo, hi)


def arguments(fdp, name: str, fn) -> tuple[list, list]:
    """The call's arguments as the C stub passes them, and the program's buffers among them (each with
    its guards, to check afterwards)."""
    params = list(inspect.signature(fn).parameters)
    ctypes_ = SIGNATURES[name]
    strings = set(re.findall(r"rt\.read_string\((\w+)\)", inspect.getsource(fn)))  # NUL-terminated
    values, buffers = [], []
    sizes = {p.removesuffix("_len"): None for p in params if p.endswith("_len")}
    for param, ctype in zip(params, ctypes_, strict=True):
        if ctype.endswith("*"):
            if fdp.ConsumeIntInRange(0, 15) == 15:
                values.append(FFI.NULL)
                continue
            size = fdp.ConsumeIntInRange(0, 256) if param in sizes else 8  # a scalar out-parameter: 8 at most
            if param in strings:
                size = fdp.ConsumeIntInRange(1, 64)
            sizes[param] = size
            memory = FFI.new("unsigned char[]", size + 2 * GUARD)
            FFI.memmove(memory, bytes([PATTERN]) * (size + 2 * GUARD), size + 2 * GUARD)
            if param in strings:
                FFI.memmove(memory + GUARD, fdp.ConsumeBytes(size - 1).ljust(size - 1, b"a") + b"\0", size)
            buffers.append((memory, size))
            values.append(FFI.cast("void *", memory + GUARD))
        elif param.endswith("_len") and sizes.get(param.removesuffix("_len")) is not None:
            values.append(sizes[param.removesuffix("_len")])
        else:
            args = getattr(pb, f"{name}_Args", None)
            values.append(scalar(fdp, ctype, args.DESCRIPTOR.fields_by_name.get(param) if args else None))
    return values, buffers


def field_value(fdp, field):
    v = fields.plain(fdp, field, 300)
    if v is not fields.NOT_PLAIN:
        return v
    lo, hi = fields.int_range(field)
    return fdp.ConsumeIntInRange(lo, hi)


def message(fdp, cls) -> bytes:
    """A message of `cls` with fuzzed fields (most of them set), or raw bytes."""
    if fdp.ConsumeIntInRange(0, 7) == 7:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
    out = cls()
    for field in cls.DESCRIPTOR.fields:
        if field.is_repeated or fdp.ConsumeIntInRange(0, 3) == 3:
            continue
        if field.name == "status" and fdp.ConsumeIntInRange(0, 7) != 7:
            continue  # success, mostly: the results are written back then
        value = field_value(fdp, field)
        if value is not None:
            setattr(out, field.name, value)
    return out.SerializeToString()


def compressed(fdp, data: bytes) -> tuple[bytes, int]:
    choice = fdp.ConsumeIntInRange(0, 5)
    if choice == 5:
        return compression.Policy("on").compress(data), pb.ZSTD
    if choice == 4:  # a frame that does not say its size, or another codec number
        return data, fdp.ConsumeIntInRange(0, 3)
    return data, pb.RAW


def reply_bytes(fdp, result_cls) -> bytes:
    """What the fuzzing server sends: a well-made frame around fuzzed messages, or raw bytes."""
    if fdp.ConsumeIntInRange(0, 9) == 9:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 400))
    reply = pb.Reply()
    reply.result, reply.result_codec = compressed(fdp, message(fdp, result_cls))
    if fdp.ConsumeIntInRange(0, 7) == 7:
        reply.error = fdp.ConsumeUnicodeNoSurrogates(40)
    if fdp.ConsumeIntInRange(0, 5) == 5:
        reply.queued_error = fdp.ConsumeIntInRange(0, 1000)
    if fdp.ConsumeIntInRange(0, 7) == 7:
        reply.output = fdp.ConsumeBytes(20)
    payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 600))
    if payload and fdp.ConsumeBool():
        payload, reply.payload_codec = compressed(fdp, payload)
    body = reply.SerializeToString()
    if fdp.ConsumeIntInRange(0, 9) == 9:  # a bomb: a small frame of a large size
        payload = compression.Policy("on").compress(bytes(fdp.ConsumeIntInRange(0, 1 << 26)))
        reply.payload_codec = pb.ZSTD
        body = reply.SerializeToString()
    size, payload_size = len(body), len(payload)
    if fdp.ConsumeIntInRange(0, 9) == 9:  # a header that lies about the sizes
        size, payload_size = fdp.ConsumeIntInRange(0, 1 << 32 - 1), fdp.ConsumeIntInRange(0, (1 << 64) - 1)
    return transport.HEADER.pack(transport.MAGIC, size, payload_size) + body + payload


def answer(name: str, reply: bytes, values: list) -> tuple[int, str]:
    """Make the call `name` (its Python half, as its C stub would) with `values`, the server sending
    `reply` and then ending the connection: (the CUDA error code the program gets, what the client said)."""
    fn, onerror = FFI.externs[f"cuwire_py_{name}"]
    ours, theirs = socket.socketpair()
    said = io.StringIO()  # what the client tells the program: kept out of the fuzzer's output
    try:
        theirs.sendall(reply)
        theirs.shutdown(socket.SHUT_WR)  # the reply, then the end: a short one is a lost server
        runtime.client.session, runtime.client.broken, runtime.client.told = FakeSession(ours), "", True
        runtime._bulk.state = runtime.Bulk()
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            try:
                code = fn(*values)
            except runtime.Fail as e:  # what on_error makes of it: the CUDA error code
                code = onerror(type(e), e, None)
    finally:
        runtime.client.session = None
        ours.close()
        theirs.close()
    if not isinstance(code, int):
        raise AssertionError(f"{name} returned {code!r}, not a CUDA error code")
    return code, said.getvalue()


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    name = STUBS[fdp.ConsumeIntInRange(0, len(STUBS) - 1)].removeprefix("cuwire_py_")
    values, buffers = arguments(fdp, name, FFI.externs[f"cuwire_py_{name}"][0])
    answer(name, reply_bytes(fdp, getattr(pb, f"{name}_Result", pb.Reply)), values)
    for memory, size in buffers:
        raw = bytes(FFI.buffer(memory, size + 2 * GUARD))
        if raw[:GUARD] != bytes([PATTERN]) * GUARD or raw[GUARD + size:] != bytes([PATTERN]) * GUARD:
            raise AssertionError(f"{name} wrote outside a {size}-byte buffer of the program")


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
