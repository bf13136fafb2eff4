"""The session server: accepts sessions (framed sockets, cuwire/wire/transport.py), checks the handshake,
runs each session's batches.

It runs the sessions as threads of its own process. With isolation=process (the default), the
listener (server/listener.py) starts one of these per session and hands it the session's connection.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

import zstandard
from google.protobuf.message import DecodeError

import cuwire
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import wire_ids
from cuwire.server import metrics, nvml_view, peer_copy, program_lists, visible_devices
from cuwire.server._records import ffi as records_ffi
from cuwire.server._records import lib as records_lib
from cuwire.server.backend import open_backend
from cuwire.server.bulk import IncomingPayload
from cuwire.server.errors import WireError
from cuwire.server.module_cache import ModuleCache
from cuwire.server.program_lists import ProgramLists
from cuwire.server.records import function_table
from cuwire.server.resume import SessionStream, unknown_key
from cuwire.server.session import Session
from cuwire.settings import Settings, host_port
from cuwire.wire import compression, layouts, ring
from cuwire.wire.hello import gpu_arch, same_api, this_api
from cuwire.wire.tls import ServerTls, peer_uid, relayed, server_tls
from cuwire.wire.transport import (
    HELLO_MAX,
    MAGIC,
    MAX_MESSAGE,
    Connection,
    TransportError,
    is_loopback,
    local_name,
    serves_loopback,
)

LOCAL_PEER = "this host (Unix socket)"  # how a client on the Unix socket is named (logs, caps)
log = logging.getLogger("cuwire.server")
# images a named load may come without (cuwire/wire/frames.h): the module cache's larger ones, this many at most
IMAGE_WITH_LOAD_MOST, LARGE_IMAGES_MOST = (layouts.constant(n) for n in ("CW_IMAGE_WITH_LOAD_MOST",
                                                                          "CW_LARGE_IMAGES_MOST"))


ATTRIBUTE_UNSUPPORTED = -(2**31)  # in Device.attributes: the driver refused this attribute number
COMPUTE_CAPABILITY = (75, 76)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR


def host_memory_size(settings: Settings, hello: pb.Hello) -> int:
    """The host memory a client on this host shares with its session: what it asked for, within the limit."""
    return min(settings.host_memory, hello.host_span or settings.host_memory)


class CuWireServer:
    """What all sessions share: the backend, the module cache, the devices."""

    def __init__(self, settings: Settings, nvml_uuids: list[str] | None = None):
        """`nvml_uuids`: the GPUs the server exposes, which NVML is limited to (nvml_view.py); a session's
        process is told them by the listener, any other process sees them as its own devices."""
        self.settings = settings
        self.held_host = 0  # the client's host-memory range, kept free here before CUDA started (run_one_session)
        self.held_spans: list[tuple[int, int]] = []  # ...and the client's address space (address_space.py)
        self.windows: list[tuple[int, int]] = []  # ...and, in a device list, where its mappings are kept
        if settings.devices:
            os.environ["CUDA_VISIBLE_DEVICES"] = settings.devices
        self.ffi, self.lib, self.backend = open_backend(settings.backend)
        self.modules = ModuleCache(settings.cache_dir, settings.module_cache_size)
        self.lists = ProgramLists(settings.cache_dir / "lists")
        self.devices = self.query_devices()
        self.record_functions = function_table(self.ffi, self.lib)  # what sessions' record loops call
        self.session_ids = itertools.count(1)
        self.sessions: dict[str, Session] = {}  # open ones, by name (metrics.py)
        self.final: dict[str, dict] = {}  # the figures of those that ended
        self.zstd_c = zstandard.ZstdCompressor(level=3, threads=-1)
        self.zstd_lock = threading.Lock()  # sessions share the compressor (isolation=thread)
        # join key -> the session, its connection and the stripes that joined it so far (join)
        self.joins: dict[bytes, tuple[Session, Connection, list[Connection]]] = {}
        self.joins_lock = threading.Lock()
        self.stopping = threading.Event()  # the server is ending: sessions whose connection drops end too
        self.offers = peer_copy.Offers()  # copies between servers, offered to another server (peer_copy.py)
        # a new offer's key told to the listener, in a session process of its own (run_one_session sets it)
        self.announce_offer: Callable[[bytes], None] = lambda key: None
        if nvml_uuids is None and not settings.session_name and visible_devices.server_exposes(settings) is not None:
            nvml_uuids = self.device_uuids()  # (some of the machine's GPUs)
        if nvml_uuids:  # last: the record loop's table (above) takes the library's own functions
            self.lib = nvml_view.NvmlView(self.lib, self.ffi, nvml_uuids)

    def program_list_name(self, hello: pb.Hello) -> str:
        """The name of the list kept for the program that `hello` names, with its token, on this server's GPUs
        (program_lists.py); "" when it names none."""
        if not hello.program or len(hello.program) > program_lists.MAX_NAME:
            return ""
        return program_lists.key(hello.token, hello.program, gpu_arch(self.devices))

    def query_devices(self) -> list[pb.Device]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("int *")
        err = lib.cuInit(0) or lib.cuDeviceGetCount(count)
        if err != 0:
            text = ffi.new("const char **")
            why = ffi.string(text[0]).decode() if lib.cuGetErrorString(err, text) == 0 and text[0] else "unknown"
            raise RuntimeError(f"no usable GPU: the driver returned error {err} ({why}). "
                               "For tests without a GPU, run the server with --emulated.")
        out = []
        for i in range(count[0]):
            dev, name, memory = ffi.new("CUdevice *"), ffi.new("char[256]"), ffi.new("size_t *")
            lib.cuDeviceGet(dev, i)
            lib.cuDeviceGetName(name, 256, dev[0])
            lib.cuDeviceTotalMem_v2(memory, dev[0])
            attributes = self.device_attributes(dev[0])
            out.append(pb.Device(name=ffi.string(name).decode(errors="replace"),
                                 major=attributes[COMPUTE_CAPABILITY[0]], minor=attributes[COMPUTE_CAPABILITY[1]],
                                 total_memory=memory[0], attributes=attributes, uuid=self.device_uuid(dev[0]),
                                 **self.primary_context(dev[0])))
        return out

    def primary_context(self, device: int) -> dict[str, int]:
        """Retain the device's primary context for the life of this process (sessions use it)."""
        ffi, lib = self.ffi, self.lib
        ctx, flags, active = ffi.new("CUcontext *"), ffi.new("unsigned int *"), ffi.new("int *")
        if lib.cuDevicePrimaryCtxRetain(ctx, device) != 0:
            return {}
        lib.cuDevicePrimaryCtxGetState(device, flags, active)
        return {"primary_context": int(ffi.cast("uintptr_t", ctx[0])), "primary_flags": flags[0]}

    def device_attributes(self, device: int) -> list[int]:
        """Every cuDeviceGetAttribute value of the device, once: clients answer from this snapshot."""
        ffi, lib = self.ffi, self.lib
        value = ffi.new("int *")
        count = ffi.typeof("CUdevice_attribute").relements["CU_DEVICE_ATTRIBUTE_MAX"]
        return [value[0] if lib.cuDeviceGetAttribute(value, attr, device) == 0 else ATTRIBUTE_UNSUPPORTED
                for attr in range(count)]

    def device_uuids(self) -> list[str]:
        """The exposed GPUs' UUIDs as NVML writes them ("GPU-..."), in the order the client numbers them."""
        return [nvml_view.uuid_text(d.uuid) for d in self.devices]

    def device_uuid(self, device: int) -> bytes:
        uuid = self.ffi.new("CUuuid *")
        return bytes(self.ffi.buffer(uuid)) if self.lib.cuDeviceGetUuid_v2(uuid, device) == 0 else b""

    def driver_version(self) -> int:
        version = self.ffi.new("int *")
        self.lib.cuDriverGetVersion(version)
        return version[0]

    def compress(self, data) -> bytes:
        """A reply's payload for a client on a slow link (compression.py)."""
        with self.zstd_lock:
            return self.zstd_c.compress(data)

    def decode(self, data: bytes, codec: int, most: int | None = None) -> bytes:
        """Decompress what the client compressed, never to more than `most` bytes (default CUWIRE_MAX_BUFFER;
        a call's arguments and queued records: MAX_MESSAGE, what they may be uncompressed): a small frame
        must not make the server allocate gigabytes. (A decompressor of its own: sessions in threads share
        the server, and a decompressor is not safe to share.)"""
        if codec != pb.ZSTD:
            return data
        most = self.settings.max_buffer if most is None else min(most, self.settings.max_buffer)
        try:
            return compression.decompress(compression.decompressor(), data, most)
        except ValueError as e:
            raise WireError(f"a compressed message that does not decompress to {most} bytes at most: {e}") from None

    def welcome(self, hello: pb.Hello, conn: Connection, join_key: bytes = b"") -> Session | None:
        """Check the handshake and answer it; a mismatch gets one clear message and no session. A client on
        this host (a Unix socket) that offers to take shared memory for payloads gets it with the welcome;
        one over TCP may open more connections (join: stripes, and its host-function connection), with
        `join_key` (the listener's) or a key made here."""
        refusal = check_hello(self.settings, hello)
        if refusal is not None:
            conn.send(refusal.SerializeToString())
            return None
        if hello.check:  # only checked: no session (its GPUs, for a device list's client)
            conn.send(pb.Reply(devices=self.device_uuids()).SerializeToString())
            return None
        if (hello.HasField("visible_devices") and not self.settings.session_name  # (sessions share this process)
                and not visible_devices.shared_process_allows(len(self.devices), hello.visible_devices,
                                                              visible_devices.server_exposes(self.settings),
                                                              self.device_uuids())):
            why = (f"the program's CUDA_VISIBLE_DEVICES={hello.visible_devices!r} asks for some of this server's "
                   f"{len(self.devices)} devices, and this server runs every session in one process "
                   "(--isolation thread), which sees them all: unset it, or use a server with --isolation process")
            return refuse_session(conn, why, pb.NO_DEVICE)
        if hello.server_number and not self.settings.session_name:  # (sessions share this process)
            why = (f"the program's device list names this server as number {hello.server_number}, and this server "
                   "runs every session in one process (--isolation thread), which cannot keep one session's memory "
                   "in windows of address space of its own: use a server with --isolation process")
            return refuse_session(conn, why, pb.PROTOCOL)
        name = self.settings.session_name or f"{next(self.session_ids)}"
        session = Session(self, conn.peer, hello, name)
        self.sessions[name] = session
        reply = pb.Reply(welcome=pb.Welcome(
            server_version=cuwire.__version__, cuda_version=wire_ids.CUDA_VERSION,
            api_digest=wire_ids.API_DIGEST, backend=self.backend, devices=self.devices, session=name,
            driver_version=self.driver_version()))
        list_name = self.program_list_name(hello)
        if list_name:
            reply.welcome.program_list = self.lists.get(list_name)
        if hello.names_large_loads:  # (a load may name one of these by its digest alone: pinned till the end)
            large = self.modules.large_images(IMAGE_WITH_LOAD_MOST, LARGE_IMAGES_MOST)
            session.pinned, pinned = self.modules.pin(large, name)
            reply.welcome.large_images.extend(pinned)
        shared, fds = None, []
        from_relay = conn.sock.family == socket.AF_UNIX and relayed(conn.sock)  # TLS from another host
        joined: list[Connection] = []
        resumes = hello.resumes and self.settings.resume > 0  # (a client that comes back after a drop)
        if conn.sock.family != socket.AF_UNIX or from_relay or resumes:
            # the key the session's more connections name: its stripes and host-function connection (over
            # TCP), and a resume of its connection
            session.join_key = join_key or os.urandom(16)
            with self.joins_lock:
                self.joins[session.join_key] = (session, conn, joined)
            reply.welcome.join_key = session.join_key
        if (conn.sock.family != socket.AF_UNIX or from_relay) and not resumes:
            # (a session that resumes keeps its large payloads on its one connection: a drop in the middle of
            # a striped one could leave each side waiting on another connection than the one it lost)
            reply.welcome.stripes = max(self.settings.stripes, 0)
            session.stripes = conn.stripes
        reply.welcome.resume_grace = self.settings.resume if resumes else 0.0
        if hello.ring_size and conn.sock.family == socket.AF_UNIX and not from_relay:
            try:
                shared, fd = ring.create(records_ffi, records_lib, hello.ring_size, conn.sock.fileno(),
                                         self.settings.spin_us, self.settings.ring_slot)
                fds.append(fd)
                session.use_ring(shared)
                reply.welcome.ring = True
                size = host_memory_size(self.settings, hello)
                if size > 0:
                    address, fd = ring.host_memory(records_lib, size, hello.host_address, self.held_host)
                    fds.append(fd)
                    session.use_host_memory(address, size, hello.host_address, os.dup(fd))
                    session.peer_uid = peer_uid(conn.sock)  # (its memory files: host_files.py)
                    reply.welcome.host_memory, reply.welcome.host_address = size, address
                    if address != hello.host_address:
                        log.info("session %s: shared host memory at %#x here, not at the client's %#x: kernels "
                                 "reach it through cuMemHostGetDevicePointer only", name, address,
                                 hello.host_address)
            except (OSError, TransportError) as e:
                log.warning("session %s: no shared memory (%s): payloads go on the socket", name, e)
        try:
            conn.send(reply.SerializeToString(), fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        conn.ring = shared
        if resumes:  # from here on, the connection is a stream that survives a drop
            session.resumable = SessionStream(self.settings, name, conn, from_relay, self.stopping)
            session.records.stream(conn)
            if shared is not None:  # (host functions posted through it wait for the resume too)
                shared.lib.cw_ring_resume(shared.c, int(self.settings.resume * 1e9), session.resumable.pid)
        log.info("session %s opened for pid %d on %s (%s), backend %s, over %s", name, hello.pid,
                 printable(hello.host), conn.peer, self.backend, "TCP with TLS" if from_relay else conn.kind)
        if self.backend == "emulated":
            log.warning("session %s runs on the EMULATED device (tests only)", name)
        return session


    def join(self, hello: pb.Hello, conn: Connection) -> bool:
        """A stripe for the session whose join key its hello names (stripes.py): kept aside until the
        client's last one joins, then the session's large payloads go over all of them. Or the session's
        host-function connection (Hello.callbacks). Anything out of order is refused, and the session goes
        on without it."""
        if hello.peer_copy:  # another server of a client's device list, fetching an offer (peer_copy.py)
            peer_copy.serve(self.offers, conn, hello)
            return False
        taker = None
        with self.joins_lock:
            found = self.joins.get(hello.join)
            if found is None:
                why = unknown_key(hello)
            elif hello.resume:
                resumable = found[0].resumable
                why = resumable.offer(conn, hello) if resumable else "this server does not resume sessions"
                if not why:
                    return True  # (the session's thread answers it)
            elif hello.callbacks:
                why = found[0].callbacks_refusal()
                taker = found[0]
            elif not 0 < hello.stripes <= self.settings.stripes:
                why = f"{hello.stripes} stripes asked for, {self.settings.stripes} offered"
            elif hello.stripe != len(found[2]) or found[1].stripes:
                why = f"stripe {hello.stripe} joins out of order"
            else:
                why = ""
                session, main, joined = found
                joined.append(conn)
                if len(joined) == hello.stripes:
                    main.stripes.extend(joined)
                    log.info("session %s: %d more connections joined, for large payloads", session.name,
                             len(joined))
        if why:
            log.warning("refused a connection joining a session from %s: %s", conn.peer, why)
            conn.send(pb.Reply(error=f"the connection was refused: {why}", refusal=pb.PROTOCOL).SerializeToString())
            return False
        # a session's first host-function connection is in place before its welcome (the client may queue a
        # host function at once); one that replaces a dropped one after (a post that waited goes at once)
        again = hello.callbacks and taker.callbacks is not None
        if hello.callbacks and not again:
            taker.use_callbacks(conn)
        conn.send(pb.Reply(welcome=pb.Welcome(session=self.settings.session_name)).SerializeToString())
        if again:
            taker.use_callbacks(conn)
        return True

    def forget(self, session: Session) -> None:
        """A session ended: its stripes close with its connection, and nothing joins it any more."""
        with self.joins_lock:
            _, _, joined = self.joins.pop(session.join_key, (None, None, []))
        for conn in joined:
            conn.close()


def printable(text: str, limit: int = 200) -> str:
    """A client's text for the server's log: one line, bounded (a newline must not forge a log line)."""
    return "".join(c if c.isprintable() else " " for c in text[:limit])


def refuse_session(conn: Connection, why: str, refusal: int) -> None:
    """A session not served: said in the log, and to its client (which then ends the connection)."""
    log.warning("session refused: %s", why)
    conn.send(pb.Reply(error=why, refusal=refusal).SerializeToString())


def check_hello(settings: Settings, hello: pb.Hello) -> pb.Reply | None:
    """The refusal for a Hello with the wrong token or from another API version, else None. A server fetching
    a copy offered to it (Hello.peer_copy) names the offer's one-time key instead of the token (peer_copy.py)."""
    if settings.token and hello.token != settings.token and not (hello.peer_copy and hello.join):
        return pb.Reply(error="the server refused the token (set CUWIRE_TOKEN to the server's token)",
                        refusal=pb.TOKEN)
    if not same_api(hello):
        return pb.Reply(error=(
            f"version mismatch: the client (cuwire {hello.client_version}) was generated for CUDA "
            f"{hello.cuda_version} with API digest {hello.api_digest}, the server (cuwire {cuwire.__version__}) "
            f"for {this_api()}; build both from the same cuwire version"), refusal=pb.VERSION)
    return None


def read_batch(conn: Connection, message: bytes, hello: bool) -> pb.Batch | None:
    """The Batch in `message`; None, after telling the client why, when it does not parse or when a
    session's first message is not its hello."""
    try:
        batch = pb.Batch.FromString(message) if conn.magic == MAGIC else None
    except DecodeError:
        why = "a request that does not parse"
    else:  # (a records frame, client/wire.c, is no Batch: one may not open a session)
        if batch is not None and (not hello or batch.HasField("hello")):
            return batch
        why = "a session starts with a hello"
    conn.send(pb.Reply(error=why, refusal=pb.PROTOCOL).SerializeToString())
    return None


def serve_connection(state: CuWireServer, conn: Connection, first: bytes | None = None,
                     join_key: bytes = b"") -> None:
    """One session on one connection: its hello, then its batches until the client goes; then free what
    it left. `first` is the hello when the listener read it already, with the session's `join_key`. A
    hello that joins a session as its stripe hands the connection to that session instead."""
    session = None
    arrived = 0  # when the frame being served came (for the metrics' service times)
    kept = False  # the connection went to another session, as its stripe
    try:
        while True:
            payload = IncomingPayload()
            if first is not None:
                message, first = first, None
            else:
                try:
                    message, size = conn.receive_message(max_payload=state.settings.max_buffer,
                                                         max_message=MAX_MESSAGE if session else HELLO_MAX)
                except EOFError:
                    return
                arrived = time.perf_counter_ns()
                payload = IncomingPayload(conn, size)  # read by the session as it runs the batch
                if conn.magic != MAGIC:  # records frames are served in C (below), and only in a session
                    log.warning("a records frame before the hello: connection closed")
                    return
            batch = read_batch(conn, message, hello=session is None)
            if batch is None:
                return
            if session is None:
                payload.drain()
                if batch.hello.join:  # a stripe of a session (stripes.py)
                    kept = join_with(state, conn, batch.hello)
                    return
                session = state.welcome(batch.hello, conn, join_key)
                if session is None:
                    return
            else:
                if batch.ending and session.resumable:
                    session.resumable.ending = True
                reply = session.run(batch, payload)
                received = conn.received
                if not batch.no_reply:
                    conn.send(reply.SerializeToString(), session.payload_out)
                session.payload_out = []
                session.records.observe(time.perf_counter_ns() - arrived, received,
                                        0 if batch.no_reply else conn.sent)
            if not session.serve_records(conn):  # the next frame is waited for in C (a call is cheaper)
                return
    except (TransportError, OSError) as e:
        log.info("session %s: the connection ended (%s)", session.name if session else "(no hello)", e)
    finally:
        if session is not None:
            session.drop_ring()  # the connection unmaps it
            state.forget(session)
        if not kept:
            conn.close()
        if session is not None:
            session.close()
            state.final[session.name] = session.figures()
            state.sessions.pop(session.name, None)


def join_with(state: CuWireServer, conn: Connection, hello: pb.Hello) -> bool:
    """A stripe's hello, checked like a session's, then joined to its session; whether it was."""
    refusal = check_hello(state.settings, hello)
    if refusal is not None:
        conn.send(refusal.SerializeToString())
        return False
    return state.join(hello, conn)


def serve_stripe(state: CuWireServer, conn: Connection, message: bytes) -> None:
    """A connection the listener handed over as a stripe of this process's session (message: its hello)."""
    try:
        batch = read_batch(conn, message, hello=True)
        if batch is not None and not batch.hello.join:
            conn.send(pb.Reply(error="a session process takes stripes only", refusal=pb.PROTOCOL).SerializeToString())
        elif batch is not None and join_with(state, conn, batch.hello):
            return
    except (TransportError, OSError) as e:
        log.info("a stripe from %s: the connection ended (%s)", conn.peer, e)
    conn.close()


class SocketServer:
    """Accepts connections on a listening socket and serves each in a thread of its own: `handle(sock,
    peer)`. Beyond `max_sessions` at once, a client is refused at once, with a message."""

    def __init__(self, address: str, handle, max_sessions: int, tls: ServerTls | None = None):
        host, port = host_port(address)
        self.sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                         backlog=128)
        self.port = self.sock.getsockname()[1]
        self.local = self.listen_local(host)
        self.handle = handle
        self.max_sessions = max_sessions
        self.tls = tls or ServerTls()  # TLS ended here, and plain connections from other hosts checked (tls.py)
        self.active = threading.BoundedSemaphore(max_sessions)
        self.busy = 0  # connections refused because max_sessions were open (metrics.py)
        # one client address may hold at most half of those connections at once (before their sessions
        # start, in process isolation), so that one that holds connections open does not lock out the
        # others; this host's loopback counts with no limit (its users are trusted as local GPU users are)
        self.per_address_max = max(1, max_sessions // 2)
        self.per_address: Counter = Counter()
        self.stopped = threading.Event()
        self.draining = threading.Event()  # SIGTERM: new sessions are refused (server/__main__.py, drain)
        self.lock = threading.Lock()
        self.running: dict[threading.Thread, socket.socket] = {}  # session threads and their connections
        self.threads = [threading.Thread(target=self.accept_loop, args=(listening,), name="cuwire-accept", daemon=True)
                        for listening in (self.sock, self.local) if listening is not None]

    def listen_local(self, host: str) -> socket.socket | None:
        """The Unix socket that clients on this host reach the same server by (transport.local_name), when
        the TCP port serves loopback; None when the name is taken (another server of the same port)."""
        if not serves_loopback(host):
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(local_name(self.port))
            sock.listen(128)
        except OSError as e:
            log.warning("no Unix socket for local clients (%s): they connect over TCP", e)
            sock.close()
            return None
        return sock

    def start(self) -> SocketServer:
        for thread in self.threads:
            thread.start()
        return self

    def accept_loop(self, listening: socket.socket) -> None:
        while not self.stopped.is_set():
            try:
                sock, addr = listening.accept()
            except OSError:
                return  # the listening socket was closed: stop
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else LOCAL_PEER
            host = addr[0] if isinstance(addr, tuple) and not is_loopback(addr[0]) else ""
            with self.lock:
                crowded = host and self.per_address[host] >= self.per_address_max
                if not crowded and host:
                    self.per_address[host] += 1
            if crowded:
                self.busy += 1
                threading.Thread(target=self.refuse_crowd, args=(sock, peer), daemon=True).start()
                continue
            if not self.active.acquire(blocking=False):
                self.busy += 1
                self.left(host)
                threading.Thread(target=self.refuse, args=(sock, peer), daemon=True).start()
                continue
            thread = threading.Thread(target=self.run_one, args=(sock, peer, host), name=f"cuwire-{peer}",
                                      daemon=True)
            with self.lock:
                self.running[thread] = sock
            thread.start()

    def left(self, host: str) -> None:
        """A connection from `host` (counted per address; "" for loopback) is done with."""
        if host:
            with self.lock:
                self.per_address[host] -= 1
                if not self.per_address[host]:
                    del self.per_address[host]

    def run_one(self, sock: socket.socket, peer: str, host: str = "") -> None:
        try:
            accepted = self.tls.accept(sock, peer, self.refuse_with)
            if accepted is None:
                return
            if accepted[0] is not sock:  # the plain end of a TLS relay: the one to shut at stop
                sock, peer = accepted
                with self.lock:
                    self.running[threading.current_thread()] = sock
            if self.draining.is_set() and not metrics.is_http(sock):
                log.info("refused %s: the server is shutting down", peer)
                self.refuse_with(sock, peer, "the server is shutting down (it was sent SIGTERM): it takes no new "
                                             "session; try again, or another server", pb.BUSY)
                return
            self.handle(sock, peer)
        except Exception:  # a bug in one session must not take the accept loop or the others down
            log.exception("session from %s failed", peer)
        finally:
            with self.lock:
                self.running.pop(threading.current_thread(), None)
            self.active.release()
            self.left(host)

    def refuse_crowd(self, sock: socket.socket, peer: str) -> None:
        log.warning("refused %s: its address holds %d connections already", peer, self.per_address_max)
        self.refuse_with(sock, peer, f"the server is busy: your address holds {self.per_address_max} connections "
                                     "at once already, the most one address may; try again when one ends", pb.BUSY)

    def refuse(self, sock: socket.socket, peer: str) -> None:
        log.warning("refused %s: %d connections already", peer, self.max_sessions)
        self.refuse_with(sock, peer, f"the server is busy: it serves {self.max_sessions} connections at once; "
                                     "try again when one ends", pb.BUSY)

    @staticmethod
    def refuse_with(sock: socket.socket, peer: str, why: str, refusal: int = pb.TOKEN) -> None:
        """Read the client's hello and answer it with a refusal (the client says why, by name)."""
        if refusal == pb.TOKEN:
            log.warning("refused %s: %s", peer, why)
        conn = Connection(sock, peer)
        try:
            sock.settimeout(5)
            conn.receive(max_payload=0, max_message=HELLO_MAX)
            conn.send(pb.Reply(error=why, refusal=refusal).SerializeToString())
        except (TransportError, OSError, EOFError):
            pass
        conn.close()

    def stop(self, grace: float = 2.0) -> None:
        """Stop accepting; end every connection, giving each session `grace` seconds to finish its call
        and free what it holds."""
        self.stopped.set()
        listening = [s for s in (self.sock, self.local) if s is not None]
        for sock in [*listening, *self.running_sockets()]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for sock in listening:
            sock.close()
        with self.lock:
            threads = list(self.running)
        for t in threads:
            t.join(grace)

    def running_sockets(self) -> list[socket.socket]:
        with self.lock:
            return list(self.running.values())


def serve(settings: Settings, max_sessions: int = 64) -> tuple[SocketServer, CuWireServer, int]:
    """Start listening; returns the socket server, the shared state and the bound port."""
    state = CuWireServer(settings)
    try:
        tls, said = server_tls(settings)
        server = SocketServer(settings.listen, lambda sock, peer: serve_connection(state, Connection(sock, peer)),
                              max_sessions, tls)
        log.info("%s", said)
    except (OSError, ValueError) as e:
        raise RuntimeError(f"cannot listen on {settings.listen} ({e})") from None
    return server.start(), state, server.port
