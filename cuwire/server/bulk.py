"""Large copies between the program's host memory and the GPU, streamed through the session's small
page-locked buffer: the payload is copied to the GPU as it arrives, and a result is sent as it comes off
the GPU, CHUNK bytes at a time. The server never holds a whole copy in host memory, and a fresh host
buffer of that size (whose first touch costs as much as the network) is never needed.

The copies served so: cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, their Async forms, and cuMemcpy/cuMemcpyAsync
between host and device memory, when the buffer travels in the frame's payload (transport.BULK).
Anything else runs the generated handler on the whole payload.

A streamed result's frame is announced before its later chunks are copied: if one of those copies
fails (the GPU faulted meanwhile), the rest of the bytes are sent as they are and the error surfaces at
the session's next call, as CUDA's own asynchronous errors do (Session.deferred_error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import WireError
from cuwire.transport import BULK, Connection

CHUNK = 8 << 20


class IncomingPayload:
    """A batch's payload still on the connection, read as it is used; what is left unread is drained
    before the reply goes out."""

    def __init__(self, conn: Connection | None = None, size: int = 0):
        self.conn, self.size, self.left = conn, size, size

    def read_into(self, view: memoryview) -> None:
        if len(view) > self.left:
            raise WireError(f"the payload has {self.left} bytes left for {len(view)} more")
        self.conn.read_into(view)
        self.left -= len(view)

    def read_all(self) -> bytearray:
        data = self.conn.read_payload(self.left) if self.left else bytearray()
        self.left = 0
        return data

    def drain(self) -> None:
        scratch = memoryview(bytearray(min(self.left, CHUNK)))
        while self.left:
            self.read_into(scratch[:min(self.left, CHUNK)])


class DeviceToHost:
    """A result sent straight off the GPU: len() bytes from device address `src`, of which the first
    `first` are in the session's first chunk buffer already (Connection.send calls write_to). While one
    buffer goes out on the network, the GPU copies the next chunk into the other."""

    def __init__(self, s, src: int, size: int, stream, first: int, name: str):
        self.s, self.src, self.size, self.stream, self.first, self.name = s, src, size, stream, first, name

    def __len__(self) -> int:
        return self.size

    def write_to(self, sendall: Callable) -> None:
        s = self.s
        bufs = buffers(s)
        stream = self.stream or default_stream(s)
        spans = [(0, self.first)] + [(o, min(CHUNK, self.size - o)) for o in range(self.first, self.size, CHUNK)]
        for i, (_, n) in enumerate(spans):
            started = 0
            if i + 1 < len(spans):  # the next chunk comes off the GPU while this one is sent
                offset, m = spans[i + 1]
                started = copy_out(s, bufs[(i + 1) % 2], self.src + offset, m, stream)
            sendall(s.ffi.buffer(bufs[i % 2], n))
            if i + 1 < len(spans):
                status = started or s.lib.cuStreamSynchronize(stream)
                if status and not s.deferred_error:
                    s.deferred_error = (status, f"{self.name} (bytes {spans[i + 1][0]} and on of a streamed copy)")


def copy_in(s, dst: int, buf, n: int, stream) -> int:
    """Start copying n bytes of a chunk buffer to device address dst on `stream`."""
    return s.lib.cuMemcpyHtoDAsync_v2(dst, buf, n, stream)


def copy_out(s, buf, src: int, n: int, stream) -> int:
    """Start copying n bytes from device address src into a chunk buffer on `stream`."""
    return s.lib.cuMemcpyDtoHAsync_v2(buf, src, n, stream)


def buffers(s) -> tuple:
    """The session's two chunk buffers."""
    base = s.chunk_buffer()
    return base, base + CHUNK


def default_stream(s):
    """The legacy default stream: a synchronous copy's chunks go there, in order with the program's work."""
    return s.ffi.cast("CUstream", 0)


def to_device(s, payload: IncomingPayload, dst: int, size: int, stream) -> int:
    """The payload's `size` bytes to device address dst, chunk by chunk as they arrive: one chunk is
    received while the GPU copies the one before (from the other buffer); all are copied on return."""
    if payload.left != size:
        raise WireError(f"a {size}-byte copy came with a payload of {payload.left} bytes")
    bufs = buffers(s)
    stream = stream or default_stream(s)
    for i, offset in enumerate(range(0, size, CHUNK)):
        n = min(CHUNK, size - offset)
        buf = bufs[i % 2]  # its last copy (two chunks ago) finished before the previous one started
        payload.read_into(memoryview(s.ffi.buffer(buf, n)))
        status = s.lib.cuStreamSynchronize(stream) or copy_in(s, dst + offset, buf, n, stream)
        if status:
            return status  # the rest of the payload is drained
    return s.lib.cuStreamSynchronize(stream)


def from_device(s, src: int, size: int, stream, name: str) -> int:
    """Copy the first chunk from device address src (its status is the call's); the rest is copied as
    the reply's payload is sent (DeviceToHost)."""
    first = min(CHUNK, size)
    stream = stream or default_stream(s)
    status = copy_out(s, buffers(s)[0], src, first, stream) or s.lib.cuStreamSynchronize(stream)
    if status == 0:
        s.payload_out.append(DeviceToHost(s, src, size, stream, first, name))
    return status


def _stream(s, handle: int):
    return s.handle("CUstream_st", "CUstream", handle)


def _address(s, address: int, size: int) -> int:
    """A device range the session owns (cuMemcpy's sides are checked, as its generated handler does)."""
    return int(s.ffi.cast("uintptr_t", s.device(address, size)))


@dataclass(frozen=True)
class Streamed:
    applies: Callable  # (args) -> whether this call's buffer is in the payload, so it streams
    run: Callable  # (session, args, payload) -> the Result


def _htod(name: str, async_: bool) -> Streamed:
    def run(s, a, payload):
        stream = _stream(s, a.hStream) if async_ else None
        return getattr(pb, f"{name}_Result")(status=to_device(s, payload, a.dstDevice, a.ByteCount, stream))
    return Streamed(lambda a: not a.srcHost and a.ByteCount >= BULK, run)


def _dtoh(name: str, async_: bool) -> Streamed:
    def run(s, a, payload):
        stream = _stream(s, a.hStream) if async_ else None
        return getattr(pb, f"{name}_Result")(status=from_device(s, a.srcDevice, a.ByteCount, stream, name))
    return Streamed(lambda a: a.ByteCount >= BULK, run)


def _unified(name: str, async_: bool) -> Streamed:
    """cuMemcpy(Async): host to device or device to host (host to host never leaves the client)."""
    def applies(a) -> bool:
        host_to_device = a.HasField("src_host") and not a.src_host and not a.HasField("dst_host")
        device_to_host = a.HasField("dst_host") and not a.HasField("src_host")
        return a.ByteCount >= BULK and (host_to_device or device_to_host)

    def run(s, a, payload):
        stream = _stream(s, a.hStream) if async_ else None
        if a.HasField("src_host"):
            status = to_device(s, payload, _address(s, a.dst, a.ByteCount), a.ByteCount, stream)
        else:
            status = from_device(s, _address(s, a.src, a.ByteCount), a.ByteCount, stream, name)
        return getattr(pb, f"{name}_Result")(status=status)
    return Streamed(applies, run)


STREAMED: dict[str, Streamed] = {
    "cuMemcpyHtoD_v2": _htod("cuMemcpyHtoD_v2", False),
    "cuMemcpyHtoDAsync_v2": _htod("cuMemcpyHtoDAsync_v2", True),
    "cuMemcpyDtoH_v2": _dtoh("cuMemcpyDtoH_v2", False),
    "cuMemcpyDtoHAsync_v2": _dtoh("cuMemcpyDtoHAsync_v2", True),
    "cuMemcpy": _unified("cuMemcpy", False),
    "cuMemcpyAsync": _unified("cuMemcpyAsync", True),
}
