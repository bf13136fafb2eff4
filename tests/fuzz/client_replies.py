"""Replies a broken or hostile server could send, each checked for what the program gets (run by
tests/test_fuzz.py in a process of its own: fuzz_client.py replaces the client library's cffi module)."""

from __future__ import annotations

import sys

import fuzz_client as f

from cuwire.generated import cuwire_pb2 as pb
from cuwire.wire import compression, transport

UNKNOWN, DEVICE_UNAVAILABLE = 999, 46


def frame(reply: pb.Reply, payload: bytes = b"", payload_size: int | None = None) -> bytes:
    body = reply.SerializeToString()
    size = len(payload) if payload_size is None else payload_size
    return transport.HEADER.pack(transport.MAGIC, len(body), size) + body + payload


def copy_back(size: int, reply: bytes) -> tuple[int, str, bytes]:
    """cuMemcpyDtoH of `size` bytes answered with `reply`: (code, what the client said, the buffer)."""
    out = f.FFI.new("char[]", size)
    code, said = f.answer("cuMemcpyDtoH_v2", reply, [f.FFI.cast("void *", out), size, 0x1000, size])
    return code, said, bytes(f.FFI.buffer(out, size))


def check(what: str, ok: bool, said: str) -> None:
    print(f"{'OK' if ok else 'FAILED'}: {what}" + ("" if ok else f" (the client said: {said!r})"))
    if not ok:
        sys.exit(1)


big = 128 << 10  # a copy large enough to come back in the payload (transport.BULK)
data = bytes(range(256)) * (big // 256)
code, said, out = copy_back(big, frame(pb.Reply(), data))
check("a well-made answer fills the buffer", code == 0 and out == data, said)

code, said, out = copy_back(16, frame(pb.Reply(), payload_size=1 << 30))
check("a payload larger than the call asked for ends the session before it is read",
      code == DEVICE_UNAVAILABLE and "over the limit" in said and out == bytes(16), said)

bomb = compression.Policy("on").compress(bytes(200 << 20))
code, said, _ = copy_back(16, frame(pb.Reply(result=bomb, result_codec=pb.ZSTD)))
check("a compressed result that would inflate past the message limit is refused",
      code == UNKNOWN and "does not decompress" in said and "over the limit" in said, said)

inflating = compression.Policy("on").compress(bytes(64 << 20))
code, said, out = copy_back(big, frame(pb.Reply(payload_codec=pb.ZSTD), inflating))
check("a compressed payload that would inflate past what the call asked for is refused",
      code == UNKNOWN and "over the limit" in said and out == bytes(big), said)

too_long = pb.cuMemcpyDtoH_v2_Result(dstHost=b"x" * 64).SerializeToString()
code, said, out = copy_back(16, frame(pb.Reply(result=too_long)))
check("a result larger than the program's buffer is refused, the buffer untouched",
      code == UNKNOWN and "64 bytes for a 16-byte buffer" in said and out == bytes(16), said)

code, said, _ = copy_back(16, frame(pb.Reply(result=b"\xff\xff\xff")))
check("a result that does not parse is refused by name",
      code == UNKNOWN and "does not parse as cuMemcpyDtoH_v2_Result" in said, said)

code, said, _ = copy_back(16, b"HTTP/1.0 200 OK\r\n\r\n")
check("something that is not a cuwire frame ends the session",
      code == DEVICE_UNAVAILABLE and "not a cuwire frame" in said, said)
