"""How batches travel: frames on one persistent socket per session: TCP, or for a server on this host a
Unix socket (with shared memory for payloads, cuwire/wire/ring.py).

A frame is a 16-byte header, a protobuf message (a Batch from the client, a Reply from the server), and
a payload of raw bytes beside it, for bulk data that must not pass through protobuf:

    u32 magic 0x31575543 ("CUW1")   u32 message length   u64 payload length
    message bytes                    payload bytes

The session code on both sides sees Batch in, Reply out (and the payload). No gRPC: a unary gRPC call
through Python costs ~0.4 ms, a frame on a socket a few tens of microseconds.

A server listens on its TCP port and, when that port serves loopback, on the abstract Unix socket
`cuwire.PORT` (local_name) too. A client whose server address is a loopback one connects there instead
(CUWIRE_TRANSPORT=auto, the default; `tcp` or `unix` force one): a round trip costs about half, and the
session can take shared memory for its payloads (Connection.ring). Abstract Unix sockets belong to a
network namespace, as loopback does: a client reaches the socket exactly when it shares the server's.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from cuwire.generated import cuwire_pb2 as pb
from cuwire.settings import Settings, host_port
from cuwire.wire import layouts
from cuwire.wire import stripes as striping
from cuwire.wire.stream import Stream
from cuwire.wire.stripes import MAGIC_STRIPED, StripeError
from cuwire.wire.tls import ClientTls, TlsError, TlsSocket, relay

Buffer = Any  # bytes, a memoryview, a cffi buffer: anything with the buffer protocol (3.12 names it)
# The frame's layout and magics, from cuwire/wire/frames.h (the C of both sides uses the same): a protobuf
# message; a records frame (client/wire.c: queued-call records, the last one a call the client waits for,
# answered by a records frame, server/records.c); queued calls only, sent early (no answer; their first
# error comes with the next answer).
MAGIC, MAGIC_RECORDS, MAGIC_QUEUED = (layouts.constant(n) for n in ("CW_MAGIC", "CW_MAGIC_RECORDS", "CW_MAGIC_QUEUED"))
HEADER = layouts.layout("cw_frame_header")
MAX_MESSAGE = layouts.constant("CW_MESSAGE_MAX")  # protobuf messages carry calls and small results; bulk bytes
# go in the payload
HELLO_MAX = 64 << 10  # a hello's message: what a connection not yet authenticated may make a server read
BULK = 64 << 10  # buffers this large travel in the payload, both ways (client/runtime.py read, session.py take)
# what the client accepts as a payload; the server checks every size against CUWIRE_MAX_BUFFER itself
MAX_PAYLOAD = 1 << 40
# the most bytes one piece of a copy between two servers of a device list moves (server/peer_copy.py takes no
# more in an offer or a fetch; client/runtime.py copy_between cuts a larger copy into pieces of it)
PEER_PIECE = 64 << 20
READ_AHEAD = 64 << 10  # what a receive asks the socket for at least (Connection.fill)
KEEP_PIECE = 1 << 20  # a resumable session's bytes are kept and sent this many at a time (Connection.send_raw)
RATE_SAMPLE = 1 << 20  # a payload this large times the link (Connection.rate)...
RATE_SKIP = 256 << 10  # ...a received one from its first bytes on
PAYLOAD_GROW_FROM = 1 << 20  # a received payload's buffer starts this large and doubles as bytes come


def _growing(parts: list[bytearray], size: int):
    """Buffers to read `size` bytes into, in order, each appended to `parts` only once the one before it
    was read: the first PAYLOAD_GROW_FROM bytes, then as many as came so far, doubling."""
    done = 0
    while done < size:
        part = bytearray(min(max(done, PAYLOAD_GROW_FROM), size - done))
        parts.append(part)
        yield memoryview(part)
        done += len(part)


def _joined(parts: list[bytearray]) -> bytearray:
    """What _growing's buffers received, as one buffer (the only one when one sufficed)."""
    return parts[0] if len(parts) == 1 else bytearray().join(parts)


NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
POLLRDHUP = getattr(select, "POLLRDHUP", 0)
KEEPALIVE_PROBES = 4  # TCP keepalive probes unanswered before a peer counts as gone (CUWIRE_KEEPALIVE: when)
WELCOME_TIMEOUT = 60.0  # for the server's answer to the hello: a session process starts and opens the GPU


TRANSPORTS = ("auto", "tcp", "unix")


def local_name(port: int) -> str:
    """The abstract Unix socket of the server whose TCP port is `port` (the leading NUL makes it abstract)."""
    return f"\0cuwire.{port}"


def is_loopback(host: str) -> bool:
    """Whether a host names this machine's loopback (where a Unix socket reaches the same server)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serves_loopback(host: str) -> bool:
    """Whether a server listening on `host` is reachable on loopback (so it listens on its Unix socket too)."""
    return host in ("", "0.0.0.0", "::") or is_loopback(host)


class TransportError(Exception):
    """The peer is gone, the connection broke or the peer spoke no cuwire: the session cannot continue.
    `refusal`: the server's reason (pb.Refusal) where it refused the session."""

    def __init__(self, message: str = "", refusal: int = 0):
        super().__init__(message)
        self.refusal = refusal


class Dropped(TransportError):
    """The connection closed or was reset under a frame (what a session open tries again)."""


class ServerGone(TransportError):
    """Nothing listens where the server was (the connection was refused): its sessions ended with it."""


class Transport(Protocol):
    def exchange(self, batch: pb.Batch) -> pb.Reply:
        """Send one batch and wait for its reply."""
        ...

    def exchange_with_payload(self, batch: pb.Batch, payload: Sequence[Buffer] = (),
                              into: Sequence[Buffer] = ()) -> tuple[pb.Reply, bytearray, int]:
        """The same, with payloads beside the messages both ways: the reply's is received into `into`
        first (Connection.read_payload_into)."""
        ...

    def close(self) -> None: ...


def keepalive_options(seconds: float) -> dict[str, int]:
    """The TCP options that notice a vanished peer in about `seconds`: keepalive probes from a third of it
    on, KEEPALIVE_PROBES of them a sixth apart, while the connection waits or idles; data sent and not
    acknowledged for all of it (a host gone mid-copy)."""
    return {"TCP_KEEPIDLE": max(1, round(seconds / 3)), "TCP_KEEPINTVL": max(1, round(seconds / 6)),
            "TCP_KEEPCNT": KEEPALIVE_PROBES, "TCP_USER_TIMEOUT": max(1000, round(seconds * 1000))}


def tune(sock: socket.socket) -> None:
    """Small frames go out at once (no Nagle); a peer that vanished is noticed within CUWIRE_KEEPALIVE
    seconds, both sides (the listener tunes what it accepts, and a session process keeps the options)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in keepalive_options(Settings().keepalive).items():
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class Connection:
    """Frames over one connected socket. Not thread-safe: one exchange at a time (callers hold a lock)."""

    def __init__(self, sock: socket.socket, peer: str = ""):
        self.sock = sock
        self.peer = peer
        tune(sock)
        # what one recv brought beyond what was asked: a frame's header and message come in one syscall
        self.ahead = memoryview(bytearray(READ_AHEAD))
        self.ahead_start = self.ahead_end = 0
        self.sent = self.received = 0  # bytes of the last frame sent and received, headers included
        self.magic = MAGIC  # of the last frame received
        self.ring = None  # shared memory that payloads go through instead of the socket (ring.Ring)
        self.rate = 0.0  # bytes per second of the last large payload sent or received (compression.py)
        # more connections of the same session, that large payloads go over at once (stripes.py)
        self.stripes: list[Connection] = []
        self.striped_sent = self.striped_received = 0  # striped frames so far, each way (their numbers)
        self.striped_bytes = 0  # payload bytes that went over the stripes, both ways
        self.striped_in: striping.Reader | None = None  # the striped payload being received
        # the session's stream, counted and kept for a resume (stream.py); None: a drop ends the session
        self.stream: Stream | None = None

    @property
    def kind(self) -> str:
        """How this connection travels, for messages and --stats."""
        local = self.sock.family == socket.AF_UNIX
        if local:
            return "Unix socket and shared memory" if self.ring else "Unix socket"
        return "TCP with TLS" if isinstance(self.sock, TlsSocket) else "TCP"

    def pending(self) -> int:
        """Bytes received and not read yet."""
        return self.ahead_end - self.ahead_start

    def take_pending(self) -> bytes:
        """The bytes received and not read yet, which the caller reads from now on (server/records.c)."""
        data = bytes(self.ahead[self.ahead_start:self.ahead_end])
        self.ahead_start = self.ahead_end = 0
        return data

    def unread(self, data: bytes) -> None:
        """Bytes to read before the socket's next (what take_pending's reader left)."""
        if len(data) > len(self.ahead):
            self.ahead = memoryview(bytearray(len(data)))
        self.ahead[:len(data)] = data
        self.ahead_start, self.ahead_end = 0, len(data)

    def send(self, message: bytes, payload: Sequence[Buffer] = (), magic: int = MAGIC,
             fds: Sequence[int] = ()) -> None:
        """One frame: the message, then the payload parts as one payload, each sent from where it is (the
        socket, or the ring when there is one). A part may also produce its bytes as it goes: len(part)
        of them, through part.write_to(sendall), or part.write_to_ring(ring) to fill slots in place.
        fds: descriptors that go with the frame's first bytes (a Unix socket's SCM_RIGHTS)."""
        size = sum(len(p) for p in payload)
        striped = magic == MAGIC and self.stripes and self.ring is None and size >= striping.MIN
        head = HEADER.pack(MAGIC_STRIPED if striped else magic, len(message), size) + message
        if fds:
            socket.send_fds(self.sock, [head], list(fds))  # a frame this small goes in one sendmsg
        else:
            self.send_raw(head)
        self.sent = HEADER.size + len(message) + size
        self.rate = 0.0
        ring = self.ring
        started = time.perf_counter()
        if striped:
            self.striped_sent += 1
            self.striped_bytes += size
            try:
                striping.send(self.stripes, self.striped_sent, size, payload)
            except StripeError as e:
                raise TransportError(str(e)) from None
            payload = ()
        for part in payload:
            if ring is not None and hasattr(part, "write_to_ring"):
                part.write_to_ring(ring)
            elif hasattr(part, "write_to"):
                part.write_to(ring.write if ring is not None else self.send_raw)
            elif ring is not None:
                ring.write(part)
            else:
                self.send_raw(part)
        if ring is not None and size:
            ring.flush()
        if size >= RATE_SAMPLE:
            self.rate = size / max(time.perf_counter() - started, 1e-9)

    def receive_fds(self, max_fds: int) -> list[int]:
        """The descriptors that came with the next frame (its first bytes are read here and kept for it)."""
        data, fds, _flags, _addr = socket.recv_fds(self.sock, HEADER.size, max_fds)
        if not data:
            for fd in fds:
                os.close(fd)
            raise EOFError
        self.unread(bytes(self.ahead[self.ahead_start:self.ahead_end]) + data if self.pending() else data)
        return fds

    def send_raw(self, data: Buffer) -> None:
        """Send all of data. A peer that closes while we wait to send (its window full, as when a server
        stops reading and exits) ends the send with TransportError: a blocking sendall would wait for
        good. MSG_NOSIGNAL: a peer that is gone is an error here, not SIGPIPE, which would kill a C
        program that embeds the client (its Python leaves signals as the program set them)."""
        view = memoryview(data).cast("B")
        if self.stream is None:
            self._send_all(view)
            return
        # a resumable session keeps what it sends (stream.py): a piece at a time, each kept then sent, so
        # that copying a large payload into the window overlaps the network (kept whole first, a 64 MiB
        # copy left the link idle for its 14 ms)
        for start in range(0, len(view), KEEP_PIECE):
            piece = view[start:start + KEEP_PIECE]
            self.stream.sent(piece)
            self._send_all(piece)

    def _send_all(self, view: memoryview) -> None:
        """send_raw of bytes noted in the stream already, if the connection has one."""
        while view:
            try:
                try:
                    n = self.sock.send(view, NOSIGNAL | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    self._wait_writable()
                    continue
            except (OSError, TransportError):
                if self.resumed():  # (the resume sent the rest of the piece, from the stream's kept bytes)
                    return
                raise
            view = view[n:]

    def resumed(self) -> bool:
        """The connection broke: whether the session's stream resumed it (on a new socket under the same
        descriptor, the peer's missing bytes sent again), so that the send or receive goes on."""
        return self.stream is not None and self.stream.resume is not None and self.stream.resume(self)

    def _wait_writable(self) -> None:
        """Until the socket takes more bytes. The peer sends nothing while a frame comes in (replies follow
        whole frames), so readable means it closed or broke the connection."""
        poller = select.poll()
        poller.register(self.sock, select.POLLOUT | select.POLLIN | POLLRDHUP)
        timeout = self.sock.gettimeout()  # a socket with a deadline (the hello) keeps it here too
        ready = poller.poll(None if timeout is None else timeout * 1000)
        if not ready:
            raise TimeoutError("timed out sending a frame")
        events = ready[0][1]
        if events & (select.POLLIN | POLLRDHUP | select.POLLHUP | select.POLLERR):
            raise TransportError("the peer closed the connection while a frame was being sent")

    def receive(self, max_payload: int = MAX_PAYLOAD, max_message: int = MAX_MESSAGE) -> tuple[bytes, bytearray]:
        """The next frame's message and payload. Raises EOFError at the end of the stream, TransportError
        when it breaks mid-frame or on a frame that is not cuwire's or is larger than the limits."""
        message, payload_size = self.receive_message(max_payload, max_message)
        payload, _ = self.read_payload_into(payload_size)
        return message, payload

    def read_payload_into(self, size: int, into: Sequence[Buffer] = ()) -> tuple[bytearray, int]:
        """The payload being received, its first bytes straight into the buffers `into`, in order: (the
        rest of it, bytes received into `into`). The rest's buffer grows as its bytes arrive (never more
        than twice what came, plus PAYLOAD_GROW_FROM): a frame that announces gigabytes and sends little
        costs little. (A striped payload, whose parts come over several connections at once, is received
        into its whole size.)"""
        views, direct = [], 0
        for buffer in into:
            view = memoryview(buffer).cast("B")
            n = min(len(view), size - direct)
            if n == 0:
                break
            views.append(view[:n])
            direct += n
        if self.striped_in is not None:
            rest = bytearray(size - direct)
            views.append(memoryview(rest))
            started = time.perf_counter()
            reader, self.striped_in = self.striped_in, None
            try:
                striping.receive(reader.stripes, reader.number, size, views)
            except StripeError as e:
                raise TransportError(str(e)) from None
            self.received += size
            if size >= RATE_SAMPLE:
                self.rate = size / max(time.perf_counter() - started, 1e-9)
            return rest, direct
        parts: list[bytearray] = []
        # the link's rate: timed from the payload's first bytes on (not the peer's work before it)
        skip, started = min(RATE_SKIP, size), None
        for view in itertools.chain(views, _growing(parts, size - direct)):
            if skip and len(view):
                k = min(skip, len(view))
                self.read_into(view[:k])
                view, skip = view[k:], skip - k
                if not skip:
                    started = time.perf_counter()
            if len(view):
                self.read_into(view)
        if started is not None and size - RATE_SKIP >= RATE_SAMPLE:
            self.rate = (size - RATE_SKIP) / max(time.perf_counter() - started, 1e-9)
        return _joined(parts), direct

    def receive_message(self, max_payload: int = MAX_PAYLOAD, max_message: int = MAX_MESSAGE) -> tuple[bytes, int]:
        """The next frame's message, and the size of its payload, which the caller reads next (read_into,
        read_payload) before anything else. Nothing is allocated for a frame over the limits."""
        self.received = 0
        magic, size, payload_size = HEADER.unpack(self._exactly(HEADER.size, at_start=True))
        self.magic = magic
        if magic not in (MAGIC, MAGIC_RECORDS, MAGIC_QUEUED, MAGIC_STRIPED):
            raise TransportError(f"{self.peer or 'the peer'} sent something that is not a cuwire frame")
        if size > max_message or payload_size > max_payload:
            raise TransportError(f"frame of {size} + {payload_size} bytes is over the limit "
                                 f"({max_message} + {max_payload})")
        message = bytes(self._exactly(size))
        self.striped_in = None
        if magic == MAGIC_STRIPED:  # a Batch or Reply whose payload comes on the stripes
            if not self.stripes or payload_size < striping.MIN:
                raise TransportError(f"{self.peer or 'the peer'} sent a striped frame of {payload_size} bytes "
                                     f"on a connection with {len(self.stripes)} stripes")
            self.magic = MAGIC
            self.striped_received += 1
            self.striped_bytes += payload_size
            self.striped_in = striping.Reader(self.stripes, self.striped_received, payload_size)
        self.rate = 0.0
        if payload_size and self.ring is not None:
            self.ring.begin_read()
        return message, payload_size

    def read_into(self, view: memoryview) -> None:
        """The next len(view) bytes of the payload being received, into view."""
        if self.ring is not None:
            self.ring.read_into(view)
            self.received += len(view)
        elif self.striped_in is not None:
            try:
                self.striped_in.read_into(view)
            except (StripeError, EOFError) as e:
                raise TransportError(f"a stripe of the session broke ({e or 'closed'})") from None
            self.received += len(view)
        else:
            self.fill(view)

    def read_payload(self, n: int) -> bytearray:
        """The next n bytes of the payload being received, into a buffer that grows as they arrive (an
        announced size alone allocates little: _growing)."""
        parts: list[bytearray] = []
        for view in _growing(parts, n):
            self.read_into(view)
        return _joined(parts)

    def _exactly(self, n: int, at_start: bool = False) -> bytearray:
        buf = bytearray(n)
        self.fill(memoryview(buf), at_start)
        return buf

    def fill(self, view: memoryview, at_start: bool = False) -> None:
        got, n = 0, len(view)
        self.received += n
        if self.ahead_end > self.ahead_start:
            got = min(n, self.ahead_end - self.ahead_start)
            view[:got] = self.ahead[self.ahead_start:self.ahead_start + got]
            self.ahead_start += got
        while got < n:
            small = n - got < READ_AHEAD
            try:
                k = self.sock.recv_into(self.ahead if small else view[got:], READ_AHEAD if small else n - got)
            except OSError:
                if self.resumed():
                    continue
                raise
            if k == 0:
                if self.resumed():
                    continue
                if at_start and got == 0:
                    raise EOFError
                raise Dropped("the connection closed in the middle of a frame")
            if self.stream is not None:
                self.stream.received(k)
            if small:
                used = min(k, n - got)
                view[got:got + used] = self.ahead[:used]
                self.ahead_start, self.ahead_end = used, k
                k = used
            got += k

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        for stripe in self.stripes:
            stripe.close()
        self.stripes = []
        try:
            self.sock.close()
        except OSError:
            pass
        if self.stream is not None:  # (its C memory; nothing sends on the connection any more)
            self.stream.close()


def resend(sock: socket.socket, parts: Sequence[memoryview]) -> None:
    """What the peer of a resumed connection lacks (Stream.since), on its new socket: not counted again."""
    for view in parts:
        while view:
            view = view[sock.send(view, NOSIGNAL):]


def _tries(seconds: float):
    """Attempts at connecting again within `seconds` (a server's grace): the first at once, the others after
    pauses that double from 50 ms to 1 s; each gets the deadline."""
    deadline, pause = time.monotonic() + seconds, 0.05
    while time.monotonic() < deadline:
        yield deadline
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 1.0)


def _frame_exactly(sock: socket.socket) -> bytes:
    """One frame's message (one without payload: a welcome), read byte-exact: what follows it on the socket
    is left there for whoever reads next (client/wire.c, when a resume's resend follows)."""
    def exactly(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    magic, size, payload_size = HEADER.unpack(exactly(HEADER.size))
    if magic != MAGIC or size > HELLO_MAX or payload_size:
        raise TransportError("the server's answer to a resume is not a welcome")
    return exactly(size)


def connect_local(port: int, timeout: float) -> socket.socket | None:
    """The server's Unix socket on this host (local_name), or None when nothing listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(local_name(port))
    except OSError:
        sock.close()
        return None
    return sock


class SocketTransport:
    """The client's end of a session: one connection to the server, over TCP or (for a server on this
    host) its Unix socket; `mode` is CUWIRE_TRANSPORT (auto, tcp, unix). With `tls`, a TCP connection is
    encrypted and the server's certificate checked (tls.py); a Unix socket, on this host, needs none."""

    def __init__(self, address: str, connect_timeout: float = 10.0, mode: str = "tcp", tls: ClientTls | None = None):
        try:
            host, port = host_port(address)
        except ValueError as e:
            raise TransportError(f"server address: {e}") from None
        if mode not in TRANSPORTS:
            raise TransportError(f"unknown transport {mode!r} (CUWIRE_TRANSPORT: {', '.join(TRANSPORTS)})")
        if mode == "unix" and not is_loopback(host):
            raise TransportError(f"a Unix socket reaches only a server on this host, and {address} is not a loopback "
                                 "address (CUWIRE_TRANSPORT=unix)")
        self.start(address)
        self.host, self.port, self.tls, self.connect_timeout = host, port, tls, connect_timeout
        if mode in ("auto", "unix") and is_loopback(host):
            sock = connect_local(port, connect_timeout)
            if sock is not None:
                sock.settimeout(None)
                self.connection = Connection(sock, address)
                return
            if mode == "unix":
                raise TransportError(f"cannot reach the cuwire server at {address} over its Unix socket (nothing "
                                     "listens there in this network namespace; CUWIRE_TRANSPORT=unix)")
        self.connection = Connection(self.connect_tcp(), address)

    def start(self, address: str) -> None:
        """What a transport holds besides its connection."""
        self.address = address
        self.rate = 0.0  # the link's bytes per second in the last exchange, when it moved a large payload
        self.join: pb.Hello | None = None  # the hello of the session's more connections (may_join)
        self.stripes_wanted = 0  # stripes to open at the first large payload (open_stripes)
        self.extra: list = []  # the host-function connection's sockets (open_callbacks), closed with the session
        self.resume_hello: pb.Hello | None = None  # what a resume says (resumable)
        self.resume_grace = 0.0  # how long the server waits for it
        self.resume_refused = ""  # why the server would not take a resume, the last time it would not

    @classmethod
    def over(cls, connection: Connection, address: str) -> SocketTransport:
        """A transport over a connection made elsewhere (a test's socket pair, say)."""
        transport = object.__new__(cls)
        transport.start(address)
        transport.connection = connection
        return transport

    def connect_tcp(self, timeout: float | None = None) -> socket.socket:
        """A new TCP connection to the server (with TLS when the session has it), within `timeout` seconds
        (the transport's connect timeout when None)."""
        address, host, port, tls = self.address, self.host, self.port, self.tls
        connect_timeout = self.connect_timeout if timeout is None else timeout
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except socket.gaierror as e:
            raise TransportError(f"cannot reach the cuwire server at {address}: host {host!r} unknown "
                                 f"({e.strerror})") from None
        except TimeoutError:
            raise TransportError(f"cannot reach the cuwire server at {address} (nothing answered within "
                                 f"{connect_timeout:.0f} s)") from None
        except ConnectionRefusedError:
            raise ServerGone(f"cannot reach the cuwire server at {address}: connection refused "
                             "(no server on that port)") from None
        except OSError as e:
            raise TransportError(f"cannot reach the cuwire server at {address} ({e.strerror or e})") from None
        if tls is not None:
            try:
                sock = tls.wrap(sock, host)
            except TlsError as e:
                sock.close()
                raise TransportError(f"cannot reach the cuwire server at {address} over TLS: {e}") from None
            except OSError as e:
                sock.close()
                raise TransportError(f"cannot reach the cuwire server at {address} over TLS "
                                     f"({e.strerror or e})") from None
        sock.settimeout(None)
        return sock

    def may_join(self, hello: pb.Hello, welcome: pb.Welcome, stripes: int) -> None:
        """Over TCP, the session may open more connections to the server, which its welcome's join key
        lets in: stripes (stripes.py; as many as the server offers and `stripes`, at its first large
        payload) and a host-function connection (open_callbacks). `hello` is the session's own (its token
        goes with each)."""
        if welcome.join_key and self.connection.sock.family != socket.AF_UNIX:
            self.join = pb.Hello()
            self.join.CopyFrom(hello)
            self.join.join = welcome.join_key
            self.stripes_wanted = max(min(stripes, welcome.stripes), 0)

    def resumable(self, hello: pb.Hello, welcome: pb.Welcome, ffi, lib, window: int) -> None:
        """From the welcome on, the connection is a stream that survives a drop (stream.py), where the server
        waits for a resume: `ffi`, `lib` are the client library's (its C sends on the connection too)."""
        if welcome.resume_grace <= 0 or not welcome.join_key:
            return
        self.resume_hello = pb.Hello()
        self.resume_hello.CopyFrom(hello)
        self.resume_hello.ClearField("keep_free")
        self.resume_hello.ring_size = self.resume_hello.host_address = self.resume_hello.host_span = 0
        self.resume_hello.join, self.resume_hello.resume = welcome.join_key, True
        self.resume_grace = welcome.resume_grace
        self.connection.stream = Stream(ffi, lib, window, resume=self.resume)
        ring = self.connection.ring
        if ring is not None:  # (host functions posted through it wait for the resume too)
            ring.lib.cw_ring_resume(ring.c, int(self.resume_grace * 1e9), 0)

    def resume(self, conn: Connection) -> bool:
        """The session's connection broke (the wire lock held): connect again, within the server's grace,
        and pick up where it was. True when the stream goes on, on a new socket under the same descriptor
        (client/wire.c keeps its number); False, with resume_refused set, when the server no longer has the
        session or the time ran out."""
        stream = conn.stream
        self.resume_refused = f"it did not come back within {self.resume_grace:.0f} s"
        for deadline in _tries(self.resume_grace):
            new = None
            try:
                new = self.reconnect(max(0.5, min(self.connect_timeout, deadline - time.monotonic())))
                hello = pb.Hello()
                hello.CopyFrom(self.resume_hello)
                hello.received = stream.received_total
                new.sock.settimeout(max(0.5, min(WELCOME_TIMEOUT, deadline - time.monotonic())))
                new.send(pb.Batch(hello=hello).SerializeToString())
                reply = self._parse(_frame_exactly(new.sock))  # (no byte after it read: the server's resend)
                if not reply.HasField("welcome"):
                    new.close()
                    self.resume_refused = reply.error or "the server refused it"
                    return False
                missing = stream.since(reply.welcome.received)
                if missing is None:
                    new.close()
                    self.resume_refused = ("more bytes were in flight when it dropped than CUWIRE_RESUME_WINDOW "
                                           "keeps")
                    return False
                new.sock.settimeout(None)
                if isinstance(conn.sock, TlsSocket) or isinstance(new.sock, TlsSocket):  # (swapped below)
                    conn.sock = new.sock  # (client/wire.c does not send over TLS)
                else:
                    os.dup2(new.sock.fileno(), conn.sock.fileno(), inheritable=False)
                    new.sock.close()
                resend(conn.sock, missing)
            except ServerGone as e:  # (not a dropped connection: the server, and the session with it, ended)
                self.resume_refused = str(e)
                return False
            except (TransportError, OSError, EOFError, ValueError) as e:
                if new is not None and new.sock is not conn.sock:
                    new.close()
                self.resume_refused = f"it did not come back within {self.resume_grace:.0f} s ({e or type(e).__name__})"
                continue
            stream.resumes += 1
            self.resume_refused = ""
            return True
        return False

    def reconnect(self, timeout: float) -> Connection:
        """A new connection to the server, as the session's first one went (its Unix socket, or TCP with
        TLS when the session has it)."""
        if self.connection.sock.family == socket.AF_UNIX and self.tls is None:
            sock = connect_local(self.port, timeout)
            if sock is None:
                raise ServerGone(f"nothing listens on the Unix socket of the cuwire server at {self.address}")
            return Connection(sock, self.address)
        return Connection(self.connect_tcp(timeout), self.address)

    def joined(self, **fields) -> Connection:
        """One more connection of the session's, welcomed (TransportError with the server's reason if not)."""
        hello = pb.Hello()
        hello.CopyFrom(self.join)
        for name, value in fields.items():
            setattr(hello, name, value)
        conn = Connection(self.connect_tcp(), self.address)
        try:
            conn.sock.settimeout(WELCOME_TIMEOUT)
            conn.send(pb.Batch(hello=hello).SerializeToString())
            reply = self._parse(_frame_exactly(conn.sock))  # (what follows is the connection's: a host function)
            if not reply.HasField("welcome"):
                raise TransportError(reply.error or "the server did not take it", reply.refusal or pb.PROTOCOL)
            conn.sock.settimeout(None)
        except (TransportError, OSError, EOFError):
            conn.close()
            raise
        return conn

    def open_stripes(self) -> None:
        """Open the session's stripes, once. If one cannot be opened, large payloads keep to the one
        connection (said once on stderr): slower, never wrong."""
        count, self.stripes_wanted = self.stripes_wanted, 0
        opened: list[Connection] = []
        try:
            for i in range(count):
                opened.append(self.joined(stripe=i, stripes=count))
        except (TransportError, OSError, EOFError) as e:
            for conn in opened:
                conn.close()
            print(f"cuwire: large copies go over one connection: stripe {len(opened)} of {count} could not "
                  f"join the session ({e or type(e).__name__})", file=sys.stderr)
            return
        self.connection.stripes = opened

    def exchange(self, batch: pb.Batch) -> pb.Reply:
        reply, _, _ = self.exchange_with_payload(batch)
        return reply

    def exchange_with_payload(self, batch: pb.Batch | None, payload: Sequence[Buffer] = (),
                              into: Sequence[Buffer] = (), max_payload: int = MAX_PAYLOAD
                              ) -> tuple[pb.Reply, bytearray, int]:
        """(batch None: only the reply, to a frame sent already.) A reply whose payload is larger than
        `max_payload` (what the call can have asked for) ends the session before any of it is read."""
        self.rate = 0.0
        told = max_payload if max_payload != MAX_PAYLOAD else 0  # what the reply may bring, when the caller says
        if self.stripes_wanted and max(told, sum(len(p) for p in payload)) >= striping.MIN:
            self.open_stripes()
        try:
            if batch is not None:
                self.connection.send(batch.SerializeToString(), payload)
                self.rate = self.connection.rate
            message, size = self.connection.receive_message(max_payload)
            reply = self._parse(message)
            # a compressed payload is decompressed by the caller: it cannot go straight into `into`
            back, direct = self.connection.read_payload_into(size, () if reply.payload_codec else into)
            self.rate = max(self.rate, self.connection.rate if not reply.payload_codec else 0.0)
        except EOFError:
            raise Dropped(f"lost the cuwire server at {self.address}: it ended the session"
                          f"{self.resume_note()}") from None
        except OSError as e:
            kind = Dropped if isinstance(e, ConnectionError) else TransportError
            raise kind(f"lost the cuwire server at {self.address} ({e.strerror or e}){self.resume_note()}") from None
        except TransportError as e:
            raise type(e)(f"lost the cuwire server at {self.address}: {e}{self.resume_note()}") from None
        return reply, back, direct

    def resumes(self) -> int:
        """How many times the session's connection dropped and resumed (what --stats says)."""
        stream = self.connection.stream
        return stream.resumes if stream is not None else 0

    def resume_note(self) -> str:
        """Why the session did not resume, for the message that says it is lost ("" when none was tried)."""
        return f"; the session could not resume: {self.resume_refused}" if self.resume_refused else ""

    def _parse(self, message: bytes) -> pb.Reply:
        try:
            return pb.Reply.FromString(message)
        except Exception as e:  # protobuf's DecodeError: a reply we cannot read
            raise TransportError(f"the cuwire server at {self.address} sent a reply that does not parse ({e})") \
                from None

    def send_only(self, batch: pb.Batch) -> None:
        """Send a batch that gets no reply (Batch.no_reply)."""
        try:
            self.connection.send(batch.SerializeToString())
        except OSError as e:
            raise TransportError(f"lost the cuwire server at {self.address} ({e.strerror or e})"
                                 f"{self.resume_note()}") from None
        except TransportError as e:
            raise TransportError(f"lost the cuwire server at {self.address}: {e}{self.resume_note()}") from None

    def open_callbacks(self) -> int:
        """The session's host-function connection (Hello.callbacks): the server posts the program's host
        functions on it as its streams reach them (client/callbacks.c runs them). Its descriptor, which
        client/callbacks.c reads and writes itself: over TLS, the plain end of a relay to it."""
        if self.join is None:
            raise TransportError("the server gave this session no join key (it is older than this client, or "
                                 "the session is not over TCP)")
        conn = self.joined(callbacks=True)
        if not isinstance(conn.sock, TlsSocket):
            self.extra.append(conn)
            return conn.sock.fileno()
        ours, theirs = socket.socketpair()
        threading.Thread(target=relay, args=(conn.sock, ours), name="cuwire-callbacks-tls", daemon=True).start()
        self.extra.append(theirs)
        return theirs.fileno()

    def reopen_callbacks(self) -> int:
        """The host-function connection dropped (client/callbacks.c's thread): a new one, within the server's
        grace, where the session resumes; its descriptor, or -1 (the old one is closed either way)."""
        old, self.extra = self.extra, []
        for extra in old:
            extra.close()
        if self.resume_hello is None:
            return -1
        for _ in _tries(self.resume_grace):
            try:
                return self.open_callbacks()
            except ServerGone:
                return -1
            except TransportError as e:
                if e.refusal:  # (the server no longer has the session)
                    return -1
            except OSError:
                pass
        return -1

    def close(self) -> None:
        self.say_ending()
        for extra in self.extra:
            extra.close()
        self.extra = []
        self.connection.close()

    def say_ending(self) -> None:
        """A resumable session's last word (Batch.ending, no reply): the client is done with it, so the
        server ends it when the connection closes, instead of waiting for a resume."""
        conn = self.connection
        if conn.stream is None or conn.stream.resume is None:
            return
        conn.stream.resume = None  # (a drop from now on is the end)
        try:
            conn.send(pb.Batch(ending=True, no_reply=True).SerializeToString())
        except (OSError, TransportError):
            pass


class SharedMemory(Protocol):
    """What a client on this host does about shared memory (client/runtime.py; ring.py)."""

    def offer(self, hello: pb.Hello) -> None:
        """Say in the hello what the client takes (Hello.ring_size, host_address, host_span)."""
        ...

    def attach(self, fds: list[int], welcome: pb.Welcome, sock_fd: int) -> Any:
        """Take the server's descriptors (and close them); return the ring (ring.Ring)."""
        ...


def token_in_the_clear(hello: pb.Hello, sock: socket.socket, tls: ClientTls | None) -> str:
    """Why this hello may not go ("" when it may): it holds a token, and would cross a network in the clear
    (plain TCP to an address that is not this host's loopback). Refused before a byte is sent, so that no
    one between here and there, or posing as the server, learns the token."""
    if not hello.token or tls is not None or sock.family == socket.AF_UNIX or is_loopback(sock.getpeername()[0]):
        return ""
    return (f"not sending the token to {sock.getpeername()[0]} in the clear: connect over TLS with "
            "CUWIRE_TLS_FINGERPRINT (the server's log prints it) or CUWIRE_TLS_CA")


def client_tls(settings, place: int = 1, servers: int = 1) -> ClientTls | None:
    """How the client checks server `place` of the `servers` it names (ClientTls.from_settings); a setting
    that cannot fit them (a pin count neither one nor one a server) as the TransportError a session's opening
    raises, so that every caller says it where it says a server it cannot reach."""
    try:
        return ClientTls.from_settings(settings, place, servers)
    except TlsError as e:
        raise TransportError(str(e)) from None


def open_session(address: str, hello: pb.Hello, connect_timeout: float = 10.0, mode: str = "tcp",
                 shared: SharedMemory | None = None, tls: ClientTls | None = None) -> tuple[SocketTransport, pb.Reply]:
    """Connect and say hello. Returns the transport of the session and the server's first reply (a
    Welcome, or a refusal). With process isolation the listener hands the connection itself to the
    session's process, which answers: one port serves everything. Over a Unix socket, with `shared`,
    the client offers to take shared memory (shared.offer); the server's welcome brings its descriptors,
    which shared.attach takes."""
    transport = SocketTransport(address, connect_timeout, mode, tls)
    conn = transport.connection
    refusal = token_in_the_clear(hello, conn.sock, tls)
    if refusal:
        transport.close()
        raise TransportError(refusal)
    local = conn.sock.family == socket.AF_UNIX and shared is not None
    if local:
        shared.offer(hello)
    conn.sock.settimeout(WELCOME_TIMEOUT)  # a server that accepts and never answers
    try:
        fds = []
        try:
            conn.send(pb.Batch(hello=hello).SerializeToString())
            if local:
                fds = conn.receive_fds(2)
        except (OSError, EOFError) as e:
            kind = Dropped if isinstance(e, (ConnectionError, EOFError)) else TransportError
            raise kind(f"lost the cuwire server at {address} ({e or type(e).__name__})") from None
        try:
            reply, _, _ = transport.exchange_with_payload(None, max_payload=0)  # a welcome has no payload
        except TransportError:
            for fd in fds:
                os.close(fd)
            raise
        if fds and reply.welcome.ring:
            conn.ring = shared.attach(fds, reply.welcome, conn.sock.fileno())
        else:
            for fd in fds:
                os.close(fd)
    except TransportError:
        transport.close()
        raise
    conn.sock.settimeout(None)
    return transport, reply
