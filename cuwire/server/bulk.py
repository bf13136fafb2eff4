"""Large copies between the program's host memory and the GPU, streamed through the session's small
page-locked buffer: the payload is copied to the GPU as it arrives, and a result is sent as it comes off
the GPU, CHUNK bytes at a time. The server never holds a whole copy in host memory, and a fresh host
buffer of that size (whose first touch costs as much as the network) is never needed.

The copies served so: cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, their Async forms, and cuMemcpy/cuMemcpyAsync
between host and device memory, when the buffer travels in the frame's payload (transport.BULK).
Anything else runs the generated handler on the whole payload. A compressed payload (a client on a slow
link, compression.py) is decompressed a chunk at a time into the same buffers (to_device_decompressed).

With a client on this host that took shared memory (cuwire/wire/ring.py), the payload is in that memory,
page-locked for the GPU: a copy goes between its slots and the GPU directly, a slot at a time, while
the client fills (or empties) the next; no chunk buffer, no socket.

A client over TCP whose session has stripes (cuwire/wire/stripes.py) sends and takes a large copy's bytes
over all of them at once: each stripe's part is streamed by a thread of its own (a Lane: the session's
context, a stream of its own, a pair of chunk buffers), its copies ordered after the work already on the
copy's stream (an event), all finished before the reply.

A streamed result's frame is announced before its later chunks are copied: if one of those copies
fails (the GPU faulted meanwhile), the rest of the bytes are sent as they are and the error surfaces at
the session's next call, as CUDA's own asynchronous errors do (Session.deferred_error).
"""

from __future__ import annotations

from collections.abc import Callable

from cuwire.generated import cuda_constants as cu
from cuwire.server.errors import WireError
from cuwire.wire import compression, stripes
from cuwire.wire.stripes import StripeError
from cuwire.wire.transport import Connection, TransportError

CHUNK = 8 << 20
STREAM_NON_BLOCKING = cu.CU_STREAM_NON_BLOCKING  # a lane's stream waits for nothing but its event
EVENT_DISABLE_TIMING = cu.CU_EVENT_DISABLE_TIMING


class IncomingPayload:
    """A batch's payload still on the connection, read as it is used; what is left unread is drained
    before the reply goes out."""

    def __init__(self, conn: Connection | None = None, size: int = 0):
        self.conn, self.size, self.left = conn, size, size

    @property
    def ring(self):
        """The shared memory the payload is in, or None (it comes on the socket)."""
        return getattr(self.conn, "ring", None)

    @property
    def striped(self) -> stripes.Reader | None:
        """The payload's stripes when it comes on them (stripes.py), else None."""
        return getattr(self.conn, "striped_in", None)

    def take_striped(self) -> tuple[int, list]:
        """All of a striped payload, to be read a part per thread: (the frame's number, its parts)."""
        reader = self.striped
        parts = reader.parts()
        self.conn.received += self.left
        self.left = 0
        return reader.number, parts

    def acquire(self) -> tuple[int, int]:
        """The payload's next slot of shared memory, used in place until the ring releases it: (address,
        bytes)."""
        address, n = self.ring.acquire()
        if n > self.left:
            raise TransportError(f"a slot of {n} bytes in shared memory for a payload with {self.left} left")
        self.left -= n
        self.conn.received += n
        return address, n

    def read_into(self, view: memoryview) -> None:
        if len(view) > self.left:
            raise WireError(f"the payload has {self.left} bytes left for {len(view)} more")
        self.conn.read_into(view)
        self.left -= len(view)

    def read(self, n: int) -> bytearray:
        """Up to n more bytes, fewer only at the payload's end: a file's read, for a decompressor to pull
        compressed bytes as it needs them (compression.Inflow)."""
        data = bytearray(min(n, self.left))
        self.read_into(memoryview(data))
        return data

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
    `first` are in the session's first chunk buffer already (Connection.send calls write_to, or for a
    striped frame write_span for each stripe's part). While one buffer goes out on the network, the GPU
    copies the next chunk into the other."""

    def __init__(self, s, src: int, size: int, stream, first: int, name: str):
        self.s, self.src, self.size, self.stream, self.first, self.name = s, src, size, stream, first, name
        self.context = current_context(s)

    def __len__(self) -> int:
        return self.size

    def write_to(self, sendall: Callable) -> None:
        spans = [(0, self.first)] + [(o, min(CHUNK, self.size - o)) for o in range(self.first, self.size, CHUNK)]
        send_from_device(self.s, sendall, self.src, spans, buffers(self.s), self.stream or default_stream(self.s),
                         self.name, ready=True)

    def write_span(self, sendall: Callable, start: int, stop: int, worker: int) -> None:
        """Bytes [start, stop) of the result, by stripe `worker`'s thread. The copy's stream has done its
        work already (from_device waited for the first chunk), so a lane needs no event."""
        ready = worker == 0 and start == 0  # the first chunk is in the session's first buffer
        head = min(self.first, stop) if ready else start
        spans = ([(0, head)] if ready else []) + [(o, min(CHUNK, stop - o)) for o in range(head, stop, CHUNK)]
        with Lane(self.s, self.context, worker) as lane:
            if lane.status:
                fail_late(self.s, lane.status, self.name, start)
            send_from_device(self.s, sendall, self.src, spans, lane.bufs, lane.stream, self.name, ready)


def samples(s, parts: list) -> list[bytes] | None:
    """compression.pays's samples of a reply's payload (its parts as sent: bytes, or results still on the
    GPU), read where they lie: a DeviceToHost part's first chunk from its buffer, its other samples off the
    GPU through the buffer its stream has not used yet (it sends nothing before this returns). None for a
    payload with other parts (they are gathered to be judged)."""
    if not all(isinstance(p, DeviceToHost) or not hasattr(p, "write_to") for p in parts):
        return None
    size = sum(len(p) for p in parts)
    out = []
    for start, n in compression.sample_spans(size):
        sample = bytearray()
        for part in parts:
            if n and start < len(part):
                take = min(n, len(part) - start)
                sample += _part_bytes(s, part, start, take)
                n -= take
                start = 0
            else:
                start -= len(part)
        out.append(bytes(sample))
    return out


def _part_bytes(s, part, start: int, n: int) -> bytes:
    if not isinstance(part, DeviceToHost):
        return bytes(memoryview(part).cast("B")[start:start + n])
    first, scratch = buffers(s)
    if start + n <= part.first:
        return bytes(s.ffi.buffer(first, part.first)[start:start + n])
    stream = part.stream or default_stream(s)
    status = copy_out(s, scratch, part.src + start, n, stream) or s.lib.cuStreamSynchronize(stream)
    return bytes(s.ffi.buffer(scratch, n)) if status == 0 else bytes(n)  # (a failed copy fails the call later)


def send_from_device(s, sendall: Callable, src: int, spans: list[tuple[int, int]], bufs: tuple, stream, name: str,
                     ready: bool) -> None:
    """Send the device bytes of `spans` ((offset, length) from src) through the buffer pair `bufs`: while
    one buffer goes out, the GPU copies the next span into the other. `ready`: the first span is in bufs[0]
    already. A copy that fails sends its buffer as it is; the error comes at the session's next call."""
    if spans and not ready:
        offset, n = spans[0]
        status = copy_out(s, bufs[0], src + offset, n, stream) or s.lib.cuStreamSynchronize(stream)
        if status:
            fail_late(s, status, name, offset)
    for i, (_, n) in enumerate(spans):
        started = 0
        if i + 1 < len(spans):  # the next chunk comes off the GPU while this one is sent
            offset, m = spans[i + 1]
            started = copy_out(s, bufs[(i + 1) % 2], src + offset, m, stream)
        sendall(s.ffi.buffer(bufs[i % 2], n))
        if i + 1 < len(spans):
            status = started or s.lib.cuStreamSynchronize(stream)
            if status:
                fail_late(s, status, name, spans[i + 1][0])


def fail_late(s, status: int, name: str, offset: int) -> None:
    """A streamed copy failed after its reply was announced: the session's next call says so."""
    if not s.deferred_error:
        s.deferred_error = (status, f"{name} (bytes {offset} and on of a streamed copy)")


class Lane:
    """One stripe's share of a striped copy, in a thread of its own: the copy's context made current
    there, a stream of the lane's own (waiting for `after`, an event of the copy's stream, when given),
    and the stripe's pair of chunk buffers. `status`: the first error in setting it up."""

    def __init__(self, s, context, worker: int, after=None):
        self.s, self.context, self.worker, self.after = s, context, worker, after
        self.stream, self.status = None, 0

    def __enter__(self) -> Lane:
        s = self.s
        self.bufs = buffers(s, self.worker)
        out = s.ffi.new("CUstream *")
        self.status = s.lib.cuCtxSetCurrent(self.context) or s.lib.cuStreamCreate(out, STREAM_NON_BLOCKING)
        if self.status == 0:
            self.stream = out[0]
            if self.after is not None:
                self.status = s.lib.cuStreamWaitEvent(self.stream, self.after, 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.stream is not None:
            self.s.lib.cuStreamSynchronize(self.stream)
            self.s.lib.cuStreamDestroy_v2(self.stream)


def current_context(s):
    """The context current on this thread (the session's), for a lane's thread to make current there."""
    out = s.ffi.new("CUcontext *")
    s.lib.cuCtxGetCurrent(out)
    return out[0]


class DeviceToRing:
    """A result copied off the GPU into the shared memory's slots, a slot at a time, while the client empties
    the one before; the first slot holds `first` bytes already (from_device; Connection.send calls
    write_to_ring once the reply's frame is out)."""

    def __init__(self, s, src: int, size: int, stream, first: int, name: str):
        self.s, self.src, self.size, self.stream, self.first, self.name = s, src, size, stream, first, name

    def __len__(self) -> int:
        return self.size

    def write_to_ring(self, ring) -> None:
        s = self.s
        ring.publish(self.first)
        for offset in range(self.first, self.size, ring.slot_size):
            n = min(ring.slot_size, self.size - offset)
            address = ring.claim()
            status = copy_out(s, s.ffi.cast("void *", address), self.src + offset, n, self.stream) \
                or s.lib.cuStreamSynchronize(self.stream)
            if status and not s.deferred_error:
                s.deferred_error = (status, f"{self.name} (bytes {offset} and on of a streamed copy)")
            ring.publish(n)


def to_device_from_ring(s, payload: IncomingPayload, dst: int, stream) -> int:
    """to_device for a payload in shared memory: each slot is copied to the GPU where it is; a slot is
    given back once its copy is done, while the client fills the next ones. After a failure the rest of
    the payload is taken and given back unread."""
    ring, status, offset = payload.ring, 0, 0
    try:
        while payload.left:
            address, n = payload.acquire()
            if status == 0:
                status = s.lib.cuStreamSynchronize(stream)  # the slot before's copy is done...
            ring.release(ring.held - 1)  # ...so it goes back to the client
            if status == 0:
                status = copy_in(s, dst + offset, s.ffi.cast("void *", address), n, stream)
            offset += n
        return status or s.lib.cuStreamSynchronize(stream)
    finally:
        ring.release_all()


def copy_in(s, dst: int, buf, n: int, stream) -> int:
    """Start copying n bytes of a chunk buffer to device address dst on `stream`."""
    return s.lib.cuMemcpyHtoDAsync_v2(dst, buf, n, stream)


def copy_out(s, buf, src: int, n: int, stream) -> int:
    """Start copying n bytes from device address src into a chunk buffer on `stream`."""
    return s.lib.cuMemcpyDtoHAsync_v2(buf, src, n, stream)


def buffers(s, worker: int = 0) -> tuple:
    """A pair of the session's chunk buffers: the first pair, or stripe `worker`'s (there is a pair for
    each of the session's stripes, made at once so that none moves while another is in use)."""
    base = s.chunk_buffer(max(1, len(s.stripes)))
    return base + 2 * CHUNK * worker, base + 2 * CHUNK * worker + CHUNK


def default_stream(s):
    """The legacy default stream: a synchronous copy's chunks go there, in order with the program's work."""
    return s.ffi.cast("CUstream", 0)


def to_device(s, payload: IncomingPayload, dst: int, size: int, stream) -> int:
    """The payload's `size` bytes to device address dst, chunk by chunk as they arrive: one chunk is
    received while the GPU copies the one before (from the other buffer); all are copied on return."""
    if payload.left != size:
        raise WireError(f"a {size}-byte copy came with a payload of {payload.left} bytes")
    stream = stream or default_stream(s)
    if payload.ring is not None:
        return to_device_from_ring(s, payload, dst, stream)
    if payload.striped is not None:
        return to_device_striped(s, payload, dst, stream)
    return receive_to_device(s, payload.read_into, dst, 0, size, buffers(s), stream)


def to_device_decompressed(s, read_into: Callable, dst: int, size: int, stream) -> int:
    """to_device for a compressed payload: `read_into` (Session.read_compressed) decompresses it a chunk at
    a time into the session's chunk buffers, while the GPU copies the chunk before. A payload that does not
    decompress fails the call once the copies already started are done (the buffers are used again)."""
    stream = stream or default_stream(s)
    try:
        return receive_to_device(s, read_into, dst, 0, size, buffers(s), stream)
    except WireError:
        s.lib.cuStreamSynchronize(stream)
        raise


def receive_to_device(s, read_into: Callable, dst: int, start: int, length: int, bufs: tuple, stream,
                      failed: int = 0) -> int:
    """Bytes [start, start + length) of a copy's payload to device address dst + start, a chunk at a time
    through the buffer pair `bufs`: one chunk is received (read_into) while the GPU copies the one before,
    on `stream`. After a failure (or with `failed` given) the rest is still received, so that the
    connection stays in step, and not copied. The first error, or the stream's once all is copied."""
    for i, offset in enumerate(range(start, start + length, CHUNK)):
        n = min(CHUNK, start + length - offset)
        buf = bufs[i % 2]  # its last copy (two chunks ago) finished before the previous one started
        read_into(memoryview(s.ffi.buffer(buf, n)))
        if not failed:
            failed = s.lib.cuStreamSynchronize(stream) or copy_in(s, dst + offset, buf, n, stream)
    return failed or s.lib.cuStreamSynchronize(stream)


def to_device_striped(s, payload: IncomingPayload, dst: int, stream) -> int:
    """to_device for a payload on the session's stripes: each stripe's part by a thread of its own, a
    chunk received while the GPU copies the one before, on the lane's stream, after the work already on
    `stream` (an event recorded there); all copied on return. A lane that fails still reads its part to
    the end, so that the stripes stay in step."""
    number, parts = payload.take_striped()
    context = current_context(s)
    event = s.ffi.new("CUevent *")
    status = s.lib.cuEventCreate(event, EVENT_DISABLE_TIMING)
    after = event[0] if status == 0 else None
    status = status or s.lib.cuEventRecord(after, stream)
    statuses = [status] * len(parts)

    def lane(i: int) -> None:
        conn, offset, length = parts[i]
        stripes.read_header(conn, number, offset, length)
        with Lane(s, context, i, after) as lane:
            statuses[i] = receive_to_device(s, conn.fill, dst, offset, length, lane.bufs, lane.stream,
                                            statuses[i] or lane.status)

    try:
        stripes.in_parallel(lane, len(parts), [conn for conn, _, _ in parts])
    except StripeError as e:
        raise TransportError(str(e)) from None
    finally:
        if after is not None:
            s.lib.cuEventDestroy_v2(after)
    return next((x for x in statuses if x), 0)


def from_device(s, src: int, size: int, stream, name: str) -> int:
    """Copy the first chunk from device address src (its status is the call's); the rest is copied as
    the reply's payload is sent (DeviceToHost)."""
    stream = stream or default_stream(s)
    if s.ring is not None:  # the first slot is filled now, published once the reply's frame is out
        first = min(s.ring.slot_size, size)
        buf, part = s.ffi.cast("void *", s.ring.claim()), DeviceToRing
    else:
        first = min(CHUNK, size)
        buf, part = buffers(s)[0], DeviceToHost
    status = copy_out(s, buf, src, first, stream) or s.lib.cuStreamSynchronize(stream)
    if status == 0:
        s.payload_out.append(part(s, src, size, stream, first, name))
    return status
