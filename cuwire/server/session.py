"""One client's session on the server: runs its batches in order and owns what it allocated.

Generated handlers (generated/server_handlers.py) receive the session as `s` and use its checked
conversions from wire values to C values; nothing from the wire reaches CUDA unchecked in size.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from pathlib import Path

from google.protobuf.message import DecodeError

from cuwire import address_space
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.server import (
    attributes,
    bulk,
    contexts,
    custom,
    graphs,
    host_files,
    ipc,
    memops,
    overflow,
    records,
    tensor_maps,
    textures,
    vmm,
)
from cuwire.server._records import lib as records_lib
from cuwire.server.errors import (
    INVALID_HANDLE,
    INVALID_VALUE,
    NOT_SUPPORTED,
    OUT_OF_MEMORY,
    UNKNOWN,
    CudaFail,
    WireError,
)
from cuwire.server.records import CALL_REPLY, RecordLoop
from cuwire.wire import compression, layouts
from cuwire.wire.stripes import shut
from cuwire.wire.transport import BULK, MAX_MESSAGE, TransportError

log = logging.getLogger("cuwire.server")
COPY_SHARED = generated.OP_IDS["CopyShared"]
HOST_FUNC = generated.OP_IDS["HostFunc"]
HOST_COPY = generated.OP_IDS["HostCopy"]
RECORD_IDS = tuple(generated.OP_IDS[n] for n in ("LaunchKernel", "LaunchKernelEx", "SetContext", "CopyToDevice",
                                                  "CopyFromDevice", "KernelNodeSet"))
MEMHOSTALLOC_PORTABLE = 0x01
MEMHOSTREGISTER_PORTABLE = 0x01
CAPTURE_MODE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
MEMHOSTREGISTER_DEVICEMAP = 0x02
STREAM_KIND = "CUstream_st"
CONTEXT_KIND = "CUctx_st"
SPECIAL_STREAMS = (1, 2)  # CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
HANDLE_ERRORS = {"nvmlDevice_st": 2}  # NVML_ERROR_INVALID_ARGUMENT; CUDA handles: INVALID_HANDLE
# what a session's handles are destroyed with when it ends (a device's default pool refuses: harmless)
DESTROY = {"CUgraphExec_st": "cuGraphExecDestroy", "CUgraph_st": "cuGraphDestroy", "CUstream_st": "cuStreamDestroy_v2",
           "CUevent_st": "cuEventDestroy_v2", "CUmemPoolHandle_st": "cuMemPoolDestroy", "CUarray_st": "cuArrayDestroy",
           "CUmipmappedArray_st": "cuMipmappedArrayDestroy"}
MAX_CASTS = 1 << 16  # typed handles kept (Session.handle) before the memo starts over
NAME_TAG = layouts.constant("CW_NAME_TAG")  # (a handle the client named: Session.give_name)



def _handlers() -> dict:
    """The generated handlers, with the hand-written ones (`server = ...` in the annotations) filled in."""
    table = {}
    for fn, (name, args, handler) in generated.HANDLERS.items():
        halves = (vmm, textures, graphs, attributes, tensor_maps, ipc, memops, contexts)
        handler = handler or next((m.HANDLERS[name] for m in halves if name in m.HANDLERS), None)
        if handler is None:
            raise ImportError(f"{name} is annotated with a hand-written server half that no module defines")
        table[fn] = (name, args, handler)
    return table


HANDLERS = _handlers()
# the calls a batch sent without waiting may carry, where they name the handle they make (Session.give_name)
UNANSWERED = {generated.OP_IDS["LoadModule"]: (pb.LoadModule_Args, "name"),
              generated.OP_IDS["GetKernel"]: (pb.GetKernel_Args, "name_as")}


class Session:
    def __init__(self, server, peer: str, hello: pb.Hello, name: str):
        self.server = server
        self.ffi = server.ffi
        self.lib = server.lib
        self.peer = peer
        self.hello = hello
        self.name = name
        self.max_buffer = server.settings.max_buffer
        self.allocations: dict[int, int] = {}  # device address -> size, freed when the session ends
        self.allocated = 0  # their sum, against CUWIRE_SESSION_MEMORY (those backed by host memory aside)
        self.host_backed: set[int] = set()  # allocations the GPU had no room for, in host memory (overflow.py)
        self.overflowed = 0  # their sum, against CUWIRE_HOST_OVERFLOW
        self.globals: dict[int, int] = {}  # __device__ variables of loaded modules: address -> size
        # what graphs' memory allocation nodes gave (address -> size): a graph makes it again at the same
        # address at every launch, so it stays the session's range when one launch's memory is freed
        self.graph_memory: dict[int, int] = {}
        # handle kind (struct tag) -> handles this session made, of the kinds its record loop does not keep
        # (those it keeps are there alone: Session.owned)
        self.handles: dict[str, set[int]] = {}
        self.handles_outside, self.kinds_outside = 0, set()  # (a device list's session: outside_windows)
        self.modules: set[int] = set()
        self.kernels: dict[int, object] = {}  # CUkernel or CUfunction -> its CUfunction
        self.kernel_kind: dict[int, str] = {}  # the same handles -> "kernel" or "function"
        self.layouts: dict[int, tuple[list[int], list[int]]] = {}  # the same -> parameter offsets and sizes
        self.names: dict[int, int] = {}  # a handle the client named (CW_NAME_TAG) -> the driver's (give_name)
        self.named_as: dict[int, int] = {}  # ...and back: what the client knows the driver's handle as
        self.pinned: Path | None = None  # the module cache's images the welcome listed, pinned (module_cache.py)
        self.calls = 0
        self.started = time.monotonic()
        self.payload = bulk.IncomingPayload()  # the running batch's payload, as it arrives (run)
        self.payload_codec = pb.RAW
        self.payload_in: memoryview | None = None  # ...read whole, at the first buffer that asks (payload_bytes)
        self.inflow: compression.Inflow | None = None  # ...or a compressed one, decompressed as buffers ask
        self.zstd = compression.decompressor()  # (the session's own: a decompressor is not thread-safe)
        self.payload_taken = 0
        self.payload_out: list = []  # result buffers for the reply's payload (take)
        self.deferred_error: tuple[int, str] | None = None  # a streamed copy's late failure (bulk.py)
        self.casts: dict[int, dict[str, object]] = {}  # handle -> C type -> the handle as that type (handle)
        self.chunk: tuple[object, object, int] | None = None  # (char *, owner, pairs): streaming buffers (bulk.py)
        self.ring = None  # shared memory with a client on this host, which payloads go through (ring.Ring)
        self.ring_registered = False  # page-locked for the GPU (cuMemHostRegister)
        self.host_base = self.host_size = 0  # host memory the client's page-locked allocations live in
        self.host_client_base = 0  # where the client has that memory
        self.host_ranges: dict[int, int] = {}  # offset -> size of the ranges registered for the client (RegisterHost)
        self.host_fd = -1  # the shared host memory's descriptor, to map parts of it at the client's addresses
        self.registered_at: dict[int, int] = {}  # offset -> the client's address it is mapped at (register_host)
        self.files_at: dict[int, tuple[int, tuple[int, int]]] = {}  # the client's address -> (size, the memory
        # file's device and inode) mapped there (register_file)
        self.mapped_at: dict[int, int] = {}  # the client's address -> size of memory mapped there over TCP (map_host)
        self.memory_files = host_files.Kept()  # their descriptors
        self.peer_uid: int | None = None  # the user of a client on this host (its files: host_files.py)
        self.vmm: vmm.Vmm | None = None  # reservations, physical allocations and mappings (virtual memory)
        self.objects: textures.Objects | None = None  # texture and surface objects, mipmap levels
        self.graph_parts: graphs.Parts | None = None  # conditional handles and bodies, graph memory
        self.ipc: ipc.Ipc | None = None  # memory and events shared with other sessions (cuIpc*)
        self.join_key = b""  # what the session's stripes say in their hello (service.py join)
        self.resumable = None  # its connection's stream, when a drop waits for the client (server/resume.py)
        self.stripes: list = []  # its connection's stripes, which large copies go over at once (bulk.py)
        self.callbacks = None  # over TCP: the connection its client runs host functions on (use_callbacks)
        # queued calls run in C; it checks handles and kernels against what owns_handle and _describe tell it
        self.records = RecordLoop(server.record_functions, RECORD_IDS)
        self.records.spin(server.settings.spin_us)
        self.records.idle(server.settings.idle_timeout)
        self.records.own_context(bool(server.settings.session_name))  # (the listener names a process's session)
        self.use_primary_context()
        for d in server.devices:  # the client hands these out itself (cuDevicePrimaryCtxRetain)
            self.owns_handle(CONTEXT_KIND, d.primary_context)

    def use_primary_context(self) -> None:
        """Make the first device's primary context (which the server holds) current on this thread."""
        if self.server.devices:
            self.lib.cuCtxSetCurrent(self.ffi.cast("CUcontext", self.server.devices[0].primary_context))

    # ---------------------------------------------------------------- running batches

    def run(self, batch: pb.Batch, payload: bulk.IncomingPayload | None = None) -> pb.Reply:
        """Run one batch: its queued calls, then its call. Large buffers come in `payload` (beside the
        message, in the order the call's code takes them: in_buffer), or streamed to the GPU as they
        arrive by a handler whose annotation says it streams (streams_in); large results go out the same
        way, in self.payload_out, for the caller to send beside the reply."""
        reply = pb.Reply()
        payload = payload or bulk.IncomingPayload()
        self.payload, self.payload_codec = payload, batch.payload_codec
        self.payload_in, self.inflow, self.payload_taken, self.payload_out = None, None, 0, []
        if self.deferred_error:
            (reply.queued_error, reply.queued_error_fn), self.deferred_error = self.deferred_error, None
        try:
            unanswered = self.unanswered_args(batch) if batch.no_reply and batch.fn else None
            if batch.no_reply and batch.fn and unanswered is None:
                raise WireError("a batch sent without waiting for a reply carries queued calls only (or a load or "
                                "lookup that names its handle)")
            if batch.records:
                err, fn = self.run_records(self.server.decode(batch.records, batch.records_codec, MAX_MESSAGE))
                if err and not reply.queued_error:
                    reply.queued_error, reply.queued_error_fn = err, fn
            if batch.fn:
                name, args_cls, handler = self.lookup(batch.fn)
                try:  # (an unanswered call's were read already, to see that it names its handle)
                    args = unanswered if unanswered is not None else args_cls.FromString(
                        self.server.decode(batch.args, batch.args_codec, MAX_MESSAGE))
                except DecodeError as e:
                    raise WireError(f"malformed arguments for {name}: {e}") from e
                self.calls += 1
                try:
                    result = handler(self, args)
                except CudaFail as e:
                    log.info("session %s: %s: %s", self.name, name, e)
                    result = getattr(pb, f"{name.removeprefix('cuwire.')}_Result")(status=e.code)
                    if e.code == NOT_SUPPORTED:  # (the program's own errors are CUDA's to tell)
                        reply.refused = f"{name}: {e}"
                reply.result = result.SerializeToString()
                if batch.no_reply and getattr(result, "status", 0) and not reply.queued_error:
                    reply.queued_error, reply.queued_error_fn = result.status, name  # (a named load's, lookup's)
        except (TransportError, OSError):
            raise  # the connection broke mid-payload: the session ends
        except WireError as e:
            log.warning("session %s: refused a call: %s", self.name, e)
            reply.error, reply.refusal = str(e), pb.PROTOCOL
        except Exception as e:  # a handler bug must not end the server, nor the session
            log.exception("session %s: internal error", self.name)
            reply.error, reply.refusal = f"internal server error: {type(e).__name__}: {e}", pb.INTERNAL
        reply.output = records.output_take()  # device printf output gathered by now (records.c)
        if reply.error:
            self.payload_out = []
        elif batch.reply_codec == pb.ZSTD and self.ring is None and sum(len(p) for p in self.payload_out) >= BULK:
            self.compress_payload(reply, batch)
        self.payload_in = self.inflow = None  # (self.payload, drained below, stays until the next batch)
        payload.drain()  # what a call did not use (it failed, or it had none) keeps the stream in step
        if batch.no_reply:  # nobody waits for this reply: its first error goes with the next one
            if reply.error:
                log.warning("session %s: refused queued calls sent early: %s", self.name, reply.error)
                reply.queued_error, reply.queued_error_fn = UNKNOWN, f"queued calls refused: {reply.error}"
            if reply.queued_error and not self.deferred_error:
                self.deferred_error = (reply.queued_error, reply.queued_error_fn)
        return reply

    def unanswered_args(self, batch: pb.Batch):
        """The arguments of the batch's call where it is a load or lookup that names its handle
        (LoadModule_Args.name, GetKernel_Args.name_as: the client gave the program the handle already, and
        need not wait), else None."""
        named = UNANSWERED.get(batch.fn)
        if named is None:
            return None
        args_cls, field = named
        try:
            args = args_cls.FromString(self.server.decode(batch.args, batch.args_codec, MAX_MESSAGE))
        except DecodeError as e:
            raise WireError(f"malformed arguments for an unanswered call: {e}") from e
        return args if getattr(args, field) else None

    def compress_payload(self, reply: pb.Reply, batch: pb.Batch) -> None:
        """The reply's payload, compressed (the client asked: its link is slow, compression.py): gathered
        whole first, streamed results included, since a frame says its payload's size up front. (Never
        over shared memory, whose streamed results fill its slots in place.) Where the client asks only
        for payloads that pay (it tells its link's rate), samples decide first, read off the GPU for a
        result still there: one that does not pay streams as it is, never gathered."""
        sampled = bulk.samples(self, self.payload_out) if batch.link_rate else None
        if sampled is not None and not compression.samples_pay(sampled, batch.link_rate):
            return  # compressing would cost more than it saves: sent as it is (compression.py)
        gathered = bytearray()

        def gather(data) -> None:
            gathered.extend(memoryview(data).cast("B"))

        for part in self.payload_out:
            if hasattr(part, "write_to"):
                part.write_to(gather)
            else:
                gather(part)
        if sampled is None and batch.link_rate and not compression.pays(gathered, batch.link_rate):
            self.payload_out = [gathered]
            return
        self.payload_out = [self.server.compress(gathered)]
        reply.payload_codec = pb.ZSTD

    def figures(self) -> dict:
        """What the server's metrics show of this session (metrics.py)."""
        return {"calls": self.calls, "device_memory": self.allocated, "host_memory": sum(self.host_ranges.values()),
                "client": self.hello.host, "pid": self.hello.pid, **self.records.figures()}

    def lookup(self, fn: int):
        hit = HANDLERS.get(fn) or custom.OPS.get(fn)
        if hit is None:
            raise WireError(f"unknown function id {fn:#x} (client and server built from different APIs?)")
        return hit

    def run_call(self, data: bytes) -> bytes:
        """A records frame (client/wire.c): its queued calls, then the call the client waits for, run by the
        C loop; the answer (records.CALL_REPLY, the result, a refusal's text)."""
        status = first = fn = 0
        result, refusal = b"", b""
        try:
            status, first, fn, count, result = self.records.call(data)
            self.calls += count
        except WireError as e:
            log.warning("session %s: refused a call: %s", self.name, e)
            refusal = str(e).encode()
        if self.deferred_error:  # a failure of calls sent early, or of a streamed copy: it comes now
            if not first:
                first, fn = self.deferred_error[0], 0
            self.deferred_error = None
        if first:
            self.log_queued_failure(self.record_name(fn), first)
        output = records.output_take()
        return CALL_REPLY.pack(status, first, fn, len(result), len(refusal), len(output)) + result + refusal + output

    def serve_records(self, conn) -> bool:
        """Wait for the next frame in C (records.c) and serve the records frames that come, Python out of
        the way, until a frame of another kind, which the connection then reads as usual; False at the
        connection's end."""
        pending = conn.take_pending()
        given = self.deferred_error
        done = self.records.serve(conn.sock.fileno(), pending, given[0] if given else 0)
        self.calls += done.count
        if not done.deferred_error:
            self.deferred_error = None  # an answer took it
        elif done.deferred_fn or done.refusal or not given:
            self.deferred_error = (done.deferred_error, done.refusal or self.record_name(done.deferred_fn))
            self.log_queued_failure(self.deferred_error[1], done.deferred_error)
        if done.header is None:
            return False
        conn.unread(done.header + pending[done.used:])
        return True

    def run_records(self, data: bytes) -> tuple[int, str]:
        """Run queued calls in order (in C: records.py); return the first error and the function that made it."""
        first, fn, count = self.records.run(data)
        self.calls += count
        if not first:
            return 0, ""
        name = self.record_name(fn)
        self.log_queued_failure(name, first)
        return first, name

    def log_queued_failure(self, name: str, error: int) -> None:
        """A queued call failed (its error reaches the client with the next answer): said in the log, with the
        range it named outside the session's memory when that was why."""
        why = self.records.refused_range()
        log.info("session %s: queued %s failed with CUDA error %d%s", self.name, name, error,
                 f" ({why})" if why else "")

    @staticmethod
    def record_name(fn: int) -> str:
        hit = generated.RECORDS.get(fn)
        return hit[0] if hit else custom.RECORD_OPS.get(fn, f"{fn:#x}")

    # ---------------------------------------------------------------- conversions the handlers use

    def ptr(self, ctype: str, value: int):
        return self.ffi.cast(ctype, value)

    def scalar(self, value) -> int | float:
        """A C value as a wire value (pointers become their address)."""
        if isinstance(value, self.ffi.CData):
            return int(self.ffi.cast("uintptr_t", value))
        return value

    def address_of(self, buf) -> int:
        """A prepared buffer (device range or server-side host buffer) as the integer a CUdeviceptr takes."""
        return int(self.ffi.cast("uintptr_t", buf))

    def check_size(self, size: int) -> int:
        if size < 0 or size > self.max_buffer:
            raise WireError(f"buffer of {size} bytes is outside 0..{self.max_buffer} (CUWIRE_MAX_BUFFER)")
        return size

    def payload_bytes(self, data: bytes, size: int):
        """A buffer's bytes: the field's, or for an empty field of a large buffer the next `size` bytes of
        the batch's payload (client/runtime.py, read)."""
        self.check_size(size)
        if not data and size and self.payload_codec == pb.ZSTD:
            data = bytearray(size)
            self.read_compressed(memoryview(data))
        elif not data and size:
            if self.payload_in is None:  # the first buffer of the call that is in the payload: read it whole
                self.payload_in = memoryview(self.payload.read_all())
            left = len(self.payload_in) - self.payload_taken
            if left < size:
                raise WireError(f"the payload has {left} bytes left for a {size}-byte buffer")
            data = self.payload_in[self.payload_taken:self.payload_taken + size]
            self.payload_taken += size
        if len(data) != size:
            raise WireError(f"sent {len(data)} bytes for a {size}-byte buffer")
        return data

    def read_compressed(self, view: memoryview) -> None:
        """The next len(view) bytes of a compressed payload, decompressed as they are asked for
        (compression.Inflow): the server never holds more of it than the call's buffers."""
        if self.inflow is None:  # (both callers ask only of a ZSTD payload)
            self.inflow = compression.Inflow(self.zstd, self.payload)
        try:
            self.inflow.read_into(view)
        except ValueError as e:
            raise WireError(f"a compressed payload that does not decompress: {e}") from None

    def streams_in(self, data: bytes, size: int) -> bool:
        """Whether a host buffer (annotation `streams`) is a large one in the payload, still unread, so its
        generated handler copies it to the GPU as it arrives (stream_to_device) instead of reading it whole.
        A compressed payload is decompressed as it goes, whatever came before it."""
        if data or size < BULK:
            return False
        return self.payload_codec == pb.ZSTD or (self.payload_codec == pb.RAW and self.payload_in is None)

    def streams_out(self, size: int) -> bool:
        """Whether a result buffer (annotation `streams`) is large enough to go from the GPU to the connection
        in pieces (stream_from_device) instead of whole."""
        return size >= BULK

    def stream_to_device(self, dst: int, size: int, stream) -> int:
        """The payload's `size` bytes to device address dst (the handler checked it as the session's)."""
        if self.payload_codec == pb.ZSTD:
            return bulk.to_device_decompressed(self, self.read_compressed, dst, self.check_size(size), stream)
        return bulk.to_device(self, self.payload, dst, self.check_size(size), stream)

    def stream_from_device(self, src: int, size: int, stream, name: str) -> int:
        """`size` bytes from device address src (checked as the session's) as the reply's payload."""
        return bulk.from_device(self, src, self.check_size(size), stream, name)

    def in_buffer(self, data: bytes, size: int):
        data = self.payload_bytes(data, size)
        return self.ffi.from_buffer(data) if len(data) else self.ffi.new("char[]", 1)

    def handles_in(self, kind: str, ctype: str, data: bytes, size: int):
        """A host buffer of handles (`size` bytes, 8 a handle: a graph's dependencies, say), each checked as
        the session's as a handle passed by value is (handle): a C array of them, or NULL for none."""
        data = self.payload_bytes(data, size)
        if size % 8:
            raise WireError(f"an array of {ctype} of {size} bytes (8 each)")
        values = [int.from_bytes(data[i:i + 8], "little") for i in range(0, size, 8)]
        return self.ffi.new(f"{ctype}[]", [self.handle(kind, ctype, v) for v in values]) if values else self.ffi.NULL

    def out_buffer(self, size: int):
        return self.ffi.new("char[]", max(self.check_size(size), 1))

    def inout_buffer(self, data: bytes, size: int):
        data = self.payload_bytes(data, size)
        buf = self.out_buffer(size)
        self.ffi.memmove(buf, data, size)
        return buf

    def take(self, buf, size: int | None = None) -> bytes:
        """A result buffer's bytes for the Result message; a large one goes out in the payload instead
        (sent from the buffer as it is) and its field stays empty."""
        if size is not None and size >= BULK:
            self.payload_out.append(self.ffi.buffer(buf, size))
            return b""
        return bytes(self.ffi.buffer(buf, size) if size is not None else self.ffi.buffer(buf))

    def struct_in(self, ctype: str, data: bytes):
        p = self.ffi.new(ctype + " *")
        if len(data) != self.ffi.sizeof(ctype):
            raise WireError(f"{ctype}: sent {len(data)} bytes, expected {self.ffi.sizeof(ctype)}")
        self.ffi.memmove(p, data, len(data))
        return p

    def string(self, text: str):
        return self.ffi.new("char[]", text.encode())

    def handle(self, kind: str, ctype: str, value: int):
        """A handle from the wire, if this session made it (NULL and the special streams always pass); one
        the client named stands for the driver's it was given (give_name)."""
        if value & NAME_TAG:
            value = self.real(value)
        if value and not self.owned(kind, value) and not (kind == STREAM_KIND and value in SPECIAL_STREAMS):
            code = HANDLE_ERRORS.get(kind, INVALID_HANDLE)
            raise CudaFail(code, f"{ctype} {value:#x} was not created by this session")
        casts = self.casts.setdefault(value, {})  # handles are used over and over (queued records name them)
        cast = casts.get(ctype)
        if cast is None:
            cast = casts[ctype] = self.ffi.cast(ctype, value)
        return cast

    def real(self, value: int) -> int:
        """The driver's handle for `value`: itself, or the one a name stands for (a name the client gave no
        load or lookup stays itself, which no session owns: refused as any unknown handle)."""
        return self.names.get(value, value) if value & NAME_TAG else value

    def give_name(self, name: int, real: int) -> None:
        """The client gave the program `name` for what the driver gave as `real` (a library or a kernel it
        loaded or looked up without waiting): the session takes the one for the other from then on, here
        and in its record loop (a kernel's name launches as its key: records.kernel)."""
        if not name & NAME_TAG:
            raise WireError(f"a name must have the bit CW_NAME_TAG set: {name:#x}")
        if self.names.get(name, real) != real:
            raise WireError(f"the name {name:#x} stands for another handle already")
        most = self.server.settings.max_handles
        if most and name not in self.names and len(self.names) >= most:  # (a client naming in a loop is bounded)
            raise CudaFail(OUT_OF_MEMORY, f"the session holds {most} names of handles (CUWIRE_MAX_HANDLES)")
        self.names[name] = real
        self.named_as.setdefault(real, name)

    def as_named(self, real: int) -> int:
        """A driver's handle going to the client: the name the client gave it, if it named one (the program
        holds that: NVIDIA's runtime finds its kernels by it), else itself."""
        return self.named_as.get(real, real)

    def at_most(self, value: int, most: int, what: str) -> None:
        """A value that sizes an output buffer (annotation at_most): the client passes at most what the call
        ever writes, so that a reply is never larger: a larger one comes from no cuwire client, and is
        refused as a malformed request, before anything is allocated for it."""
        if value > most:
            raise WireError(f"{what} of {value}: the call writes at most {most} bytes, and cuwire's client "
                            "passes no more")

    def room_for(self, kind: str) -> None:
        """Before a call that makes a handle of `kind`: the session may hold CUWIRE_MAX_HANDLES of each kind
        at once (a program that makes streams or events in a loop and never destroys them is bounded)."""
        most = self.server.settings.max_handles
        if most and self.handle_count(kind) >= most:
            log.warning("session %s: holds %d handles of kind %s, the most a session may (CUWIRE_MAX_HANDLES)",
                        self.name, most, kind)
            raise CudaFail(OUT_OF_MEMORY, f"the session holds {most} {kind} handles (CUWIRE_MAX_HANDLES)")

    def owns_handle(self, kind: str, value: int) -> None:
        if not value:
            return
        if self.server.windows and not address_space.within(self.server.windows, value, 1):
            self.outside_windows(kind, value)
        if self.records.checks(kind):
            self.records.own(kind, value)
        else:
            self.handles.setdefault(kind, set()).add(value)
        if len(self.casts) > MAX_CASTS:  # (a queued destroy, run in C, leaves its handle's here)
            self.casts.clear()

    def outside_windows(self, kind: str, value: int) -> None:
        """A handle of a session of a device list that lies outside its windows of address space, where the
        driver's handles lie (they point into its memory): another server's session could give the same
        value, which would then name two things to the client. Said once a kind, and counted."""
        self.handles_outside += 1
        if kind not in self.kinds_outside:
            self.kinds_outside.add(kind)
            log.warning("session %s: a %s handle %#x lies outside the session's windows of address space "
                        "(another server of the program's device list could give the same value)", self.name,
                        kind, value)

    def disowns_handle(self, kind: str, value: int) -> None:
        self.handles.get(kind, set()).discard(value)
        self.records.disown(kind, value)
        self.casts.pop(value, None)  # a program that makes and destroys handles in a loop must not grow it

    def owned(self, kind: str, value: int) -> bool:
        """Whether the session made this handle of `kind` and has not destroyed it."""
        return self.records.owns(kind, value) if self.records.checks(kind) else value in self.handles.get(kind, ())

    def handles_of(self, kind: str) -> Collection[int]:
        """The session's handles of `kind`."""
        return self.records.handles(kind) if self.records.checks(kind) else self.handles.get(kind, set())

    def handle_count(self, kind: str) -> int:
        return self.records.count(kind) if self.records.checks(kind) else len(self.handles.get(kind, ()))

    def chunk_buffer(self, pairs: int = 1):
        """The session's buffers for streamed copies (bulk.py): `pairs` pairs of bulk.CHUNK bytes one after
        the other (the network fills or drains one of a pair while the GPU copies the other; a striped copy
        takes a pair per stripe): page-locked memory of the driver's when the backend is a GPU (made in the
        primary context, which lives as long as the server), else ordinary memory. Made at the first
        streamed copy (again, larger, once the session's stripes join), kept until the session ends."""
        if self.chunk is not None and self.chunk[2] < pairs:
            self.free_chunks()
        if self.chunk is None:
            ffi, lib = self.ffi, self.lib
            size = 2 * bulk.CHUNK * pairs
            if self.server.backend == "cuda" and self.server.devices:
                out = ffi.new("void **")
                err = self.in_primary_context(lambda: lib.cuMemHostAlloc(out, size, MEMHOSTALLOC_PORTABLE))
                if err == 0:
                    self.chunk = (ffi.cast("char *", out[0]), None, pairs)
                else:
                    log.warning("session %s: no page-locked memory for copies (error %d)", self.name, err)
            if self.chunk is None:
                owner = ffi.new("char[]", size)
                self.chunk = (ffi.cast("char *", owner), owner, pairs)
        return self.chunk[0]

    def free_chunks(self) -> None:
        if self.chunk is not None and self.chunk[1] is None:
            self.in_primary_context(lambda: self.lib.cuMemFreeHost(self.chunk[0]))
        self.chunk = None

    def use_ring(self, shared) -> None:
        """Payloads go through this shared memory (a client on this host): page-locked for the driver, so
        streamed copies go between it and the GPU directly (bulk.py). If the driver refuses, the copies
        still work, staged by the driver."""
        self.ring = shared
        self.records.ring(HOST_FUNC, shared)
        if self.server.backend == "cuda":
            err = self.in_primary_context(lambda: self.lib.cuMemHostRegister_v2(
                self.ffi.cast("void *", shared.address), shared.size, MEMHOSTREGISTER_PORTABLE))
            self.ring_registered = err == 0
            if err:
                log.warning("session %s: shared memory not page-locked (error %d): copies are staged", self.name, err)

    def callbacks_refusal(self) -> str:
        """Why the session takes no host-function connection now ("" when it does: use_callbacks)."""
        if self.ring is not None:
            return "the session posts host functions through shared memory"
        if self.callbacks is not None and self.resumable is None:
            return "the session has its host-function connection already"
        return ""

    def use_callbacks(self, conn) -> None:
        """Over TCP: the client's host functions (HostFunc records, graph host nodes) are posted on this
        connection of the session's (Hello.callbacks; server/records.c), welcomed already (a post that
        waited for it goes at once). A second one is the client's after the first dropped: a post waiting
        on the old one goes again on it."""
        old = self.callbacks
        if old is not None:
            shut(old.sock)  # (a post waiting on it returns, and waits for this one)
        self.callbacks = conn
        self.records.callbacks(HOST_FUNC, conn.sock.fileno(), self.resumable.grace if self.resumable else 0.0)
        if old is not None:
            old.close()  # (the C loop took the new one: nothing uses the old one now)
            log.info("session %s: its host-function connection came back", self.name)
        else:
            log.info("session %s: host functions go to the client on a connection of their own", self.name)

    def use_host_memory(self, address: int, size: int, client_address: int, fd: int = -1) -> None:
        """The client carves its page-locked allocations from this memory (shared with it, mapped here at
        `address`, the client's own `client_address` for it when it could be): copies between them and the
        GPU name offsets in it (CopyShared records, run by the C loop). `fd` (the session's to close) maps
        parts of it elsewhere: memory the program registers itself (register_host)."""
        self.host_base, self.host_size, self.host_client_base = address, size, client_address
        self.host_fd = fd
        self.records.shared(COPY_SHARED, address, size)

    def shared_host(self, address: int, size: int) -> int | None:
        """Where this server has `size` bytes at the client's host `address`, when they lie in one of the
        client's page-locked allocations (registered here, so the GPU reaches them as natively); else None."""
        offset = address - self.host_client_base
        if not self.host_client_base or offset < 0 or size <= 0:
            return None
        for o, n in self.host_ranges.items():
            if o <= offset and offset + size <= o + n:
                return self.host_base + offset
        return None

    def client_host(self, address: int) -> int:
        """The client's address of this server's `address` in the shared host memory (shared_host's
        inverse); any other address as it is."""
        if self.host_client_base and self.host_base <= address < self.host_base + self.host_size:
            return self.host_client_base + address - self.host_base
        return address

    def register_host(self, offset: int, size: int, at: int = 0) -> int:
        """A page-locked allocation of the client's: its range of the shared host memory is page-locked
        here too, and mapped for the GPU, as page-locked memory is natively with unified addressing
        (kernels may use its address). With `at`: memory the program registered itself (cuMemHostRegister),
        whose pages the client moved into this range of the shared memory and maps at `at`, its own
        address: mapped here at `at` too, over the client's address space this process holds
        (address_space.py), so that the GPU reaches it at its address."""
        if not self.host_size:
            raise WireError("this session has no shared host memory")
        if size <= 0 or offset % 4096 or offset > self.host_size - size or offset in self.host_ranges:
            raise CudaFail(INVALID_VALUE, f"{size} bytes at offset {offset} of the shared host memory")
        if any(o < offset + size and offset < o + n for o, n in self.host_ranges.items()):
            raise CudaFail(INVALID_VALUE, f"{size} bytes at offset {offset} overlap a registered range")
        address = self.host_base + offset
        if at:
            address = self.map_at(offset, size, at)
        err = self.register_for_gpu(address, size)
        if err != 0:
            if at:
                records_lib.cw_hold_over(at, size)
            return err
        self.host_ranges[offset] = size
        if at:
            self.registered_at[offset] = at
        self.records.add_memory(address, size)  # the GPU's memory too (copies, memsets)
        return err

    def map_at(self, offset: int, size: int, at: int) -> int:
        """Map `size` bytes of the shared host memory from `offset` at the client's address `at`, which
        must lie in the client's address space this process holds (and not be mapped already)."""
        self.check_room_at(at, size)
        if self.host_fd < 0 or not records_lib.cw_map_shared_over(self.host_fd, offset, size, at):
            if self.host_fd >= 0:
                records_lib.cw_hold_over(at, size)  # (a failed MAP_FIXED may have unmapped what was there)
            raise CudaFail(NOT_SUPPORTED, f"the server cannot map {size} bytes at {at:#x}")
        return at

    def check_room_at(self, at: int, size: int) -> None:
        """[at, at + size) is the client's address space this process holds, none of it mapped already."""
        taken = [(a, self.host_ranges[o]) for o, a in self.registered_at.items()]
        taken += [(a, n) for a, (n, _) in self.files_at.items()]
        taken += list(self.mapped_at.items())
        if at % 4096 or size % 4096 or not address_space.within(self.server.held_spans, at, size) or any(
                a < at + size and at < a + n for a, n in taken):
            raise CudaFail(NOT_SUPPORTED, f"the server cannot map {size} bytes at {at:#x} (not address space it "
                                          "holds for the client): the GPU cannot reach this memory at its address")

    def register_file(self, at: int, size: int, file: pb.FileRange) -> int:
        """Memory the program registered (cuMemHostRegister) that is a shared mapping of a memory file, as
        NCCL's /dev/shm segments are: the same file mapped here at the client's address `at`, over the
        client's address space this process holds, and registered, so that the GPU reaches it at its
        address, the program and the GPU sharing its pages (the file's own: nothing is copied)."""
        if self.host_fd < 0:
            raise CudaFail(NOT_SUPPORTED, "memory files are mapped for clients on this host only (this session "
                                          "shares no host memory)")
        self.check_room_at(at, size)
        key = (file.device, file.inode)
        fd = self.memory_files.take(file, size, self.peer_uid)
        if not records_lib.cw_map_shared_over(fd, file.offset, size, at):
            records_lib.cw_hold_over(at, size)  # (a failed MAP_FIXED may have unmapped what was there)
            self.memory_files.give_back(key)
            raise CudaFail(NOT_SUPPORTED, f"the server cannot map {file.path!r} at {at:#x}")
        err = self.register_for_gpu(at, size)
        if err != 0:
            records_lib.cw_hold_over(at, size)
            self.memory_files.give_back(key)
            return err
        self.files_at[at] = (size, key)
        self.records.add_memory(at, size)  # the GPU's memory too (copies, memsets)
        return err

    def map_host(self, at: int, size: int) -> int:
        """Page-locked memory of a client over TCP that the GPU is to reach (client/host_memory.c: a call passed
        its address as a device address): memory of this process's own mapped at the client's address `at`,
        over the client's address space this process holds, and registered for the GPU, so that the GPU
        reaches it at the client's pointer, as natively with unified addressing. Runs of it mapped before
        that lie in [at, at + size) keep their bytes and become part of this one (one registration: a copy
        or a kernel may cross what were two). The client keeps the two copies in step at its calls (HostCopy
        records, made by this process's CPU; client/managed.c). Within the session's host memory budget
        (CUWIRE_HOST_MEMORY)."""
        joined = {a: n for a, n in self.mapped_at.items() if at <= a and a + n <= at + size}
        budget = self.server.settings.host_memory
        if sum(self.mapped_at.values()) - sum(joined.values()) + size > budget:
            raise CudaFail(OUT_OF_MEMORY, f"{size} more bytes of host memory mapped for the GPU would take the "
                                          f"session past its budget ({budget} bytes, CUWIRE_HOST_MEMORY)")
        for a in joined:
            self.mapped_at.pop(a)
        try:
            self.check_room_at(at, size)
        except CudaFail:
            self.mapped_at.update(joined)
            raise
        for a in joined:  # (their pages stay, and their bytes)
            self.records.remove_host(a)
            self.records.remove_memory(a)
            self.unregister_for_gpu(a)
        gaps, cursor = [], at
        for a, n in sorted(joined.items()):
            gaps.append((cursor, a - cursor))
            cursor = a + n
        gaps.append((cursor, at + size - cursor))
        gaps = [(a, n) for a, n in gaps if n]
        if any(records_lib.cw_map_private_over(a, n) != 0 for a, n in gaps):
            records_lib.cw_hold_over(at, size)
            raise CudaFail(NOT_SUPPORTED, f"the server cannot map {size} bytes at {at:#x}")
        try:
            self.records.add_host(HOST_COPY, at, size)
        except CudaFail:
            records_lib.cw_hold_over(at, size)
            raise
        err = self.register_for_gpu(at, size)
        if err != 0:
            self.records.remove_host(at)
            records_lib.cw_hold_over(at, size)
            return err
        self.mapped_at[at] = size
        self.records.add_memory(at, size)  # the GPU's memory too (copies, memsets)
        return err

    def unregister_at(self, at: int) -> int:
        """What this session mapped at the client's address `at` and registered: its own memory for page-locked
        memory over TCP (map_host), or a memory file (register_file)."""
        return self.unmap_host(at) if at in self.mapped_at else self.unregister_file(at)

    def unmap_host(self, at: int) -> int:
        size = self.mapped_at.pop(at)
        self.records.remove_host(at)
        self.records.remove_memory(at)
        err = self.unregister_for_gpu(at)
        records_lib.cw_hold_over(at, size)  # the client's address space again, held
        return err

    def unregister_file(self, at: int) -> int:
        if at not in self.files_at:
            raise CudaFail(INVALID_VALUE, f"no memory file registered at {at:#x}")
        size, key = self.files_at.pop(at)
        self.memory_files.give_back(key)
        self.records.remove_memory(at)
        err = self.unregister_for_gpu(at)
        records_lib.cw_hold_over(at, size)  # the client's address space again, held
        return err

    def unregister_host(self, offset: int) -> int:
        if offset not in self.host_ranges:
            raise CudaFail(INVALID_VALUE, f"no registered range at offset {offset} of the shared host memory")
        size = self.host_ranges.pop(offset)
        at = self.registered_at.pop(offset, 0)
        address = at or self.host_base + offset
        self.records.remove_memory(address)
        err = self.unregister_for_gpu(address)
        if at:
            records_lib.cw_hold_over(at, size)  # the client's address space again, held
        return err

    def register_for_gpu(self, address: int, size: int) -> int:
        """Page-lock `size` bytes of this process's memory at `address` and map them for the GPU, for every
        context (registered in the primary context, whatever a stream captures): 0 or the CUDA error."""
        return self.in_primary_context(lambda: self.relaxed_capture(lambda: self.lib.cuMemHostRegister_v2(
            self.ffi.cast("void *", address), size, MEMHOSTREGISTER_PORTABLE | MEMHOSTREGISTER_DEVICEMAP)))

    def unregister_for_gpu(self, address: int) -> int:
        return self.in_primary_context(lambda: self.relaxed_capture(
            lambda: self.lib.cuMemHostUnregister(self.ffi.cast("void *", address))))

    def relaxed_capture(self, call):
        """call() with this thread's stream capture mode relaxed: registering host memory while one of the
        session's streams captures in the global mode (a stand-in for a captured copy of pageable memory,
        client/graph_copies.c) would otherwise invalidate the capture, as cudaMalloc would (PyTorch relaxes
        the mode around its allocations during capture the same way)."""
        mode = self.ffi.new("CUstreamCaptureMode *", CAPTURE_MODE_RELAXED)
        self.lib.cuThreadExchangeStreamCaptureMode(mode)
        try:
            return call()
        finally:
            self.lib.cuThreadExchangeStreamCaptureMode(mode)

    def in_primary_context(self, call):
        """call() with the first device's primary context current (memory made or registered there is the
        server's for its life), then the caller's context again."""
        current = self.ffi.new("CUcontext *")
        self.lib.cuCtxGetCurrent(current)
        self.lib.cuCtxSetCurrent(self.ffi.cast("CUcontext", self.server.devices[0].primary_context))
        try:
            return call()
        finally:
            self.lib.cuCtxSetCurrent(current[0])

    def device(self, address: int, size: int):
        """A device range from the wire, if it lies in this session's memory: else CUDA would take it for
        a host address in the server's own memory."""
        self.check_size(size)
        if self.records.in_memory(address, size):
            return self.ffi.cast("void *", address)
        raise CudaFail(INVALID_VALUE, f"{size} bytes at {address:#x} are not in this session's device memory")

    def device_read_only(self, address: int, size: int):
        """A device range a texture reads: its first byte in this session's memory. With a process of the
        session's own (isolation=process), the rest may run past the allocation, as the driver lets it (a
        texture may only read, and that process holds no other session's memory; CUDA's own samples make
        textures larger than their allocation); with sessions sharing a process, all of it as `device`."""
        if not self.server.settings.session_name:  # (the listener names the session of a process of its own)
            return self.device(address, size)
        self.check_size(size)
        if self.records.in_memory(address, 1):
            return self.ffi.cast("void *", address)
        raise CudaFail(INVALID_VALUE, f"{address:#x} is not in this session's device memory")

    @staticmethod
    def pitched_length(pitch: int, rows: int, width: int, height: int, depth: int) -> int:
        """The bytes one side of a pitched copy (2D, or 3D with `rows` rows a slice) spans from its first
        byte to its last; refused when its rows or slices would overlap."""
        if (height > 1 or depth > 1) and pitch < width or depth > 1 and rows < height:
            raise CudaFail(INVALID_VALUE, f"a pitch of {pitch} bytes and {rows} rows a slice for rows of {width} "
                                          f"bytes, {height} rows")
        return ((depth - 1) * (rows if depth > 1 else 0) + height - 1) * pitch + width

    @staticmethod
    def pitched_offset(x: int, y: int, z: int, pitch: int, rows: int, depth: int) -> int:
        """Where one side of a pitched copy starts, from its base: x bytes, y rows and z slices in."""
        return (z * (rows if depth > 1 else 0) + y) * pitch + x

    def pitched_device(self, device: int, x: int, y: int, z: int, pitch: int, rows: int, width: int, height: int,
                       depth: int) -> int:
        """A device side of a pitched copy, from its offsets on, all in this session's memory (as `device`
        checks); its length."""
        length = self.pitched_length(pitch, rows, width, height, depth)
        self.device(device + self.pitched_offset(x, y, z, pitch, rows, depth), length)
        return length

    def device_range(self, address: int, size: int) -> None:
        """A device range a generated handler's call touches (annotations: `range`): none, or all of it in
        this session's memory (checked like `device`)."""
        if size and not (size < 1 << 64 and self.records.in_memory(address, size)):
            raise CudaFail(INVALID_VALUE, f"{size} bytes at {address:#x} are not in this session's device memory")

    def reserve(self, size: int) -> None:
        """Before a device allocation of `size` bytes: refused, without reaching CUDA, when it would take
        the session past its budget (CUWIRE_SESSION_MEMORY)."""
        if not self.fits(size):
            budget = self.server.settings.session_memory
            raise CudaFail(OUT_OF_MEMORY, f"{size} more bytes of device memory would take the session past its "
                                          f"budget ({self.allocated} of {budget} bytes held, CUWIRE_SESSION_MEMORY)")

    OUT_OF_MEMORY = OUT_OF_MEMORY  # (for the generated handlers)

    def fits(self, size: int) -> bool:
        """Whether a device allocation of `size` bytes keeps the session within its budget (CUWIRE_SESSION_MEMORY)."""
        budget = self.server.settings.session_memory
        return not budget or self.allocated + size <= budget

    def over_budget(self, size: int) -> int:
        """An allocation past the session's budget (fits): CUDA_ERROR_OUT_OF_MEMORY, for host memory to
        serve it (overflow), or refused at once, saying why, where the server has no overflow."""
        if not self.server.settings.host_overflow:
            self.reserve(size)  # raises
        return OUT_OF_MEMORY

    def overflow(self, dptr, size: int) -> int:
        """An allocation the GPU or the budget had no room for, from host memory where the server allows it."""
        return overflow.allocate(self, dptr, size)

    def owns(self, address: int, size: int) -> None:
        """A device allocation the session made. One whose size only the call could tell (a pitch) and that
        takes the session past its budget is freed again at once and refused."""
        size = max(int(size), 1)
        if address in self.host_backed:  # (overflow.py) not the GPU's memory: the budget does not count it
            self.allocations[address] = size
            self.records.add_memory(address, size)
            return
        if not self.fits(size):
            self.lib.cuMemFree_v2(address)
            self.reserve(size)  # raises: the call fails with CUDA_ERROR_OUT_OF_MEMORY
        self.allocated += size - self.allocations.get(address, 0)
        self.allocations[address] = size
        self.records.add_memory(address, size)

    def freeable(self, address: int) -> None:
        """Before a free of device memory: the session's own allocation (with `--isolation thread` sessions
        share a process, and the driver would free another session's memory)."""
        if address and address not in self.allocations and address not in self.graph_memory:
            raise CudaFail(INVALID_VALUE, f"{address:#x} is no allocation of this session")

    def disowns(self, address: int) -> None:
        size = self.allocations.pop(address, 0)
        if address in self.host_backed:
            self.host_backed.discard(address)
            self.overflowed -= size
        else:
            self.allocated -= size
        if address not in self.globals and address not in self.graph_memory:
            self.records.remove_memory(address)

    def owns_global(self, address: int, size: int) -> None:
        self.globals[address] = size
        self.records.add_memory(address, size)

    # ---------------------------------------------------------------- the end

    def close(self) -> None:
        """Free everything the client left behind (it may have died mid-run)."""
        if self.callbacks is not None:  # host functions still waiting for the client are skipped
            self.records.callbacks_stop()
        self.use_primary_context()  # this thread may be another than the one that ran the calls
        for address in sorted(self.allocations):
            self.lib.cuMemFree_v2(address)
        graphs.close(self)  # (a conditional node's bodies go with their graph, never by themselves)
        ipc.close(self)  # (memory other sessions exported, closed before its events go)
        destroyed = vmm.close(self) + textures.close(self)  # (objects before the arrays they use)
        for kind, destroy in DESTROY.items():
            for h in self.handles_of(kind):
                getattr(self.lib, destroy)(self.ffi.cast("void *", h))
                destroyed += 1
        primary = {d.primary_context for d in self.server.devices}
        for ctx in set(self.handles_of(CONTEXT_KIND)) - primary:  # made with cuCtxCreate
            self.lib.cuCtxDestroy_v2(self.ffi.cast("CUcontext", ctx))
            destroyed += 1
        log.info("session %s (%s) ended after %d calls in %.1f s; freed %d allocations, destroyed %d objects "
                 "(streams, events, contexts, arrays, textures, virtual memory...)", self.name, self.peer, self.calls,
                 time.monotonic() - self.started, len(self.allocations), destroyed)
        self.allocations.clear()
        self.allocated = 0
        self.handles.clear()
        self.free_chunks()
        self.memory_files.close()
        self.drop_ring()
        if self.pinned is not None:
            self.server.modules.unpin(self.pinned)
            self.pinned = None
        if self.callbacks is not None:
            self.in_primary_context(self.lib.cuCtxSynchronize)  # no host function uses the connection now
            self.records.callbacks(HOST_FUNC, -1)
            self.callbacks.close()
            self.callbacks = None

    def drop_ring(self) -> None:
        """The shared memory is no longer the GPU's to copy from (before the connection unmaps it)."""
        if self.ring is not None:
            self.records.ring(0, None)
            self.ring.lib.cw_ring_stop_callbacks(self.ring.c)  # (a host function waiting for the client: skipped)
        if self.ring is not None or self.host_ranges:  # host functions and copies using it end first
            self.in_primary_context(self.lib.cuCtxSynchronize)
        for offset in list(self.host_ranges):
            self.unregister_host(offset)
        if self.host_size:
            self.records.shared(0, 0, 0)
            records_lib.cw_unmap(self.host_base, self.host_size)
            self.host_base = self.host_size = 0
        if self.host_fd >= 0:
            os.close(self.host_fd)
            self.host_fd = -1
        if self.ring_registered:
            self.in_primary_context(lambda: self.lib.cuMemHostUnregister(self.ffi.cast("void *", self.ring.address)))
            self.ring_registered = False
        self.ring = None
