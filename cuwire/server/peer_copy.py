"""Copies between the devices of two servers of a client's device list (docs/several-servers.md): the bytes
go from one server to the other, never through the client.

A copy is two calls of the client's (client/runtime.py, copy_between), each on its own session:

1. `cuwire.PeerOffer` to the source's session: the range, once the session's earlier work is done
   (cuCtxSynchronize), is copied to this process's memory and kept under a one-time key of 16 random
   bytes, for OFFER_SECONDS at most. In a session process, the key is told to the listener (over the
   channel the session's figures go back on), so that a connection naming it is handed to this process,
   as a stripe is (listener.py).
2. `cuwire.PeerFetch` to the destination's session, with the source server's address and the key: that
   session, once its own earlier work is done, connects there, its hello naming the key (`Hello.peer_copy`),
   takes the bytes (`serve`, on the source's side: the offer is then forgotten) and copies each CHUNK to
   its memory as it comes.

The key is the credential: the client learnt it over its own session with the source server, and told it
to the destination over its session there; no token is asked of the fetching server, and a key serves
once. Where the client's session with the source is TLS, the fetching server connects with TLS too, pinned
to the certificate the client checked there (PeerFetch_Args.fingerprint). What an offer holds counts against
OFFERS_MOST a server process (the buffers kept for later copies too): an offer past it is refused with
CUDA_ERROR_OUT_OF_MEMORY; a fetching process keeps one buffer of MOST bytes at most. A copy larger than MOST
bytes goes in pieces (the client's).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import cuwire
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import wire_ids
from cuwire.server.errors import NOT_PERMITTED, OUT_OF_MEMORY, UNKNOWN, CudaFail, WireError
from cuwire.settings import host_port, peer_fetch_allows
from cuwire.wire.tls import ClientTls, TlsError, relayed
from cuwire.wire.transport import PEER_PIECE as MOST
from cuwire.wire.transport import Connection, TransportError

log = logging.getLogger("cuwire.server")

OFFERS_MOST = 256 << 20  # bytes all offers of a server process hold at once
OFFER_SECONDS = 30.0  # an offer not fetched by then is forgotten
CHUNK = 8 << 20  # bytes a fetch copies to the GPU at a time, while the next ones arrive
FETCH_TIMEOUT = 30.0  # seconds the fetching server waits on the offering one, connecting and reading


class Offers:
    """A server process's offers (key -> the bytes, how many, when they expire), and the buffers it copies
    through, kept for its next copies: a buffer's pages are touched once, not on every copy (a new 64 MiB
    one costs more than the GPU's copy into it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[bytes, tuple[bytearray, int, float]] = {}
        self.free: list[bytearray] = []  # offers' buffers, fetched and kept for the next offers
        self.landing = bytearray()  # where a fetch lands (one at a time: the session's thread)

    def add(self, size: int) -> tuple[bytes, memoryview]:
        """A new offer of `size` bytes, to fill: its key and its bytes, allocated (or a kept buffer taken)
        only once the offers have room (a failed fill takes it back: `take`, then `give_back`)."""
        key = os.urandom(16)
        now = time.monotonic()
        with self.lock:
            for k in [k for k, (_, _, until) in self.held.items() if until <= now]:  # the expired ones go
                self.free.append(self.held.pop(k)[0])
            held = sum(len(buf) for buf, _, _ in self.held.values())
            if held + size > OFFERS_MOST:
                raise CudaFail(OUT_OF_MEMORY, f"copies between servers hold {OFFERS_MOST} bytes here already "
                                              "(fetched or expired ones free it)")
            buf = min((b for b in self.free if len(b) >= size), key=len, default=None)
            if buf is not None:  # (a kept one: what the offers and the kept ones hold stays as it was)
                self.free.remove(buf)
            else:  # a new one: the kept ones count too, the oldest given up for room
                while self.free and held + size + sum(map(len, self.free)) > OFFERS_MOST:
                    self.free.pop(0)
                buf = bytearray(size)
            self.held[key] = (buf, size, now + OFFER_SECONDS)
        return key, memoryview(buf)[:size]

    def take(self, key: bytes) -> tuple[bytearray, int] | None:
        """The offer's buffer and size, forgotten here (a key serves once); None when there is none (or it
        expired). Its buffer comes back with `give_back` once sent."""
        with self.lock:
            buf, size, until = self.held.pop(key, (None, 0, 0.0))
        if buf is not None and until <= time.monotonic():
            self.give_back(buf)
            return None
        return None if buf is None else (buf, size)

    def give_back(self, buf: bytearray) -> None:
        with self.lock:
            self.free.append(buf)

    def landing_for(self, size: int) -> memoryview:
        """A fetch's buffer: the kept one, grown to `size` (MOST at most) when smaller."""
        if len(self.landing) < size:
            self.landing = bytearray(size)
        return memoryview(self.landing)[:size]


def check_size(size: int) -> None:
    if not 0 < size <= MOST:
        raise WireError(f"a copy between servers moves 1 to {MOST} bytes a piece, not {size}")


def offer(s, a: pb.PeerOffer_Args) -> pb.PeerOffer_Result:
    """cuwire.PeerOffer: the range kept under a new key, once the session's earlier work is done."""
    check_size(a.size)
    s.device(a.src, a.size)  # (the session's memory, or refused)
    offers = s.server.offers
    key, data = offers.add(a.size)
    status = s.lib.cuCtxSynchronize() or s.lib.cuMemcpyDtoH_v2(s.ffi.from_buffer(data), a.src, a.size)
    if status:
        taken = offers.take(key)
        if taken:
            offers.give_back(taken[0])
        return pb.PeerOffer_Result(status=status)
    s.server.announce_offer(key)
    return pb.PeerOffer_Result(key=key)


def fetch(s, a: pb.PeerFetch_Args) -> pb.PeerFetch_Result:
    """cuwire.PeerFetch: the offer's bytes from the server at `address`, into the range, once the session's
    earlier work is done: each CHUNK copied to the GPU as it comes, while the next one arrives."""
    check_size(a.size)
    if len(a.key) != 16:
        raise WireError("a copy between servers names a key of 16 bytes")
    s.device(a.dst, a.size)  # (the session's memory, or refused)
    if not peer_fetch_allows(s.server.settings.peer_fetch, a.address):
        log.warning("session %s: a copy from the server at %s refused: CUWIRE_PEER_FETCH is %r", s.name,
                    a.address, s.server.settings.peer_fetch)
        raise CudaFail(NOT_PERMITTED, f"this server may not fetch a copy from {a.address} "
                       "(its CUWIRE_PEER_FETCH setting)")
    status = s.lib.cuCtxSynchronize()
    if status:
        return pb.PeerFetch_Result(status=status)
    landing = s.server.offers.landing_for(a.size)
    status = 0

    def arrived(at: int, n: int) -> None:
        nonlocal status
        status = status or s.lib.cuMemcpyHtoD_v2(a.dst + at, s.ffi.from_buffer(landing[at:at + n]), n)

    try:
        take_offer(a.address, a.key, landing, arrived, a.fingerprint)
    except (OSError, TransportError, EOFError, ValueError, TlsError) as e:
        # (why, in the log alone: the client names the address, and the error's kind would tell it what
        # answers there, a scan of this server's network)
        log.warning("session %s: a copy from the server at %s failed: %s", s.name, a.address, e)
        raise CudaFail(UNKNOWN, f"the copy from the server at {a.address} failed (the fetching server's log "
                       "says why)") from None
    return pb.PeerFetch_Result(status=status)


def take_offer(address: str, key: bytes, into: memoryview, arrived: Callable[[int, int], None],
               pin: str = "") -> None:
    """The bytes the server at `address` offers under `key`, exactly len(into) of them, into `into`: each
    CHUNK told to `arrived(at, n)` as it comes. Over TLS when `pin` names the server's certificate's
    fingerprint (the one the client checked). Or an error."""
    host, port = host_port(address)
    with socket.create_connection((host, port), timeout=FETCH_TIMEOUT) as plain:
        plain.settimeout(FETCH_TIMEOUT)
        sock = ClientTls(fingerprint=pin).wrap(plain, host) if pin else plain
        conn = Connection(sock, address)
        hello = pb.Hello(client_version=cuwire.__version__, cuda_version=wire_ids.CUDA_VERSION,
                         api_digest=wire_ids.API_DIGEST, pid=os.getpid(), host=socket.gethostname(), join=key,
                         peer_copy=True)
        conn.send(pb.Batch(hello=hello).SerializeToString())
        message, size = conn.receive_message(max_payload=len(into))
        reply = pb.Reply.FromString(message)
        if reply.error:
            raise ValueError(reply.error)
        if size != len(into):
            raise ValueError(f"{size} bytes come, {len(into)} were offered")
        for at in range(0, size, CHUNK):
            n = min(CHUNK, size - at)
            conn.read_into(into[at:at + n])
            arrived(at, n)


def serve(offers: Offers, conn: Connection, hello: pb.Hello) -> None:
    """A fetching server's connection (its hello names an offer's key): the offer's bytes, in one frame."""
    taken = offers.take(hello.join)
    if taken is None:
        log.warning("refused a copy between servers to %s: no offer has that key (fetched, expired or never made)",
                    conn.peer)
        conn.send(pb.Reply(error="no offer has that key (fetched, expired or never made)",
                           refusal=pb.PROTOCOL).SerializeToString())
        return
    buf, size = taken
    try:
        conn.send(pb.Reply().SerializeToString(), [memoryview(buf)[:size]])
    finally:
        offers.give_back(buf)
    over = "TCP with TLS" if conn.sock.family == socket.AF_UNIX and relayed(conn.sock) else conn.kind
    log.info("copied %d bytes to the server at %s (a copy between servers, over %s)", size, conn.peer, over)
