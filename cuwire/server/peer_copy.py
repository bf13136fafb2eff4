"""Copies between the devices of two servers of a client's device list (docs/several-servers.md): the bytes
go from one server to the other, never through the client.

A copy is two calls of the client's (client/runtime.py, copy_between), each on its own session:

1. `cuwire.PeerOffer` to the source's session: the range, once the session's earlier work is done
   (cuCtxSynchronize), is copied to this process's memory and kept under a one-time key of 16 random
   bytes, for OFFER_SECONDS at most. In a session process, the key is told to the listener (over the
   channel the session's figures go back on), so that a connection naming it is handed to this process,
   as a stripe is (listener.py).
2. `cuwire.PeerFetch` to the destination's session, with the source server's address and the key: that
   session connects there, its hello naming the key (`Hello.peer_copy`), takes the bytes (`serve`, on the
   source's side: the offer is then forgotten), and copies them to its memory once its own earlier work is
   done.

The key is the credential: the client learnt it over its own session with the source server, and told it
to the destination over its session there; no token is asked of the fetching server, and a key serves
once. What an offer holds counts against OFFERS_MOST a server process: an offer past it is refused with
CUDA_ERROR_OUT_OF_MEMORY. A copy larger than MOST bytes goes in pieces (the client's). Not yet: a session
over TLS (the fetching server would need the source's certificate: the client refuses such a copy by name).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import cuwire
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import wire_ids
from cuwire.server.errors import OUT_OF_MEMORY, UNKNOWN, CudaFail, WireError
from cuwire.settings import host_port
from cuwire.wire.transport import Connection, TransportError

log = logging.getLogger("cuwire.server")

MOST = 64 << 20  # bytes of one offer (a piece of a larger copy)
OFFERS_MOST = 256 << 20  # bytes all offers of a server process hold at once
OFFER_SECONDS = 30.0  # an offer not fetched by then is forgotten
FETCH_TIMEOUT = 30.0  # seconds the fetching server waits on the offering one, connecting and reading


class Offers:
    """A server process's offers: key -> (the bytes, when they expire)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[bytes, tuple[bytearray, float]] = {}

    def add(self, size: int) -> tuple[bytes, bytearray]:
        """A new offer of `size` bytes, to fill: its key and its bytes, allocated only once the offers have room
        (a failed fill takes it back: `take`)."""
        key = os.urandom(16)
        now = time.monotonic()
        with self.lock:
            self.held = {k: v for k, v in self.held.items() if v[1] > now}  # the expired ones go
            if sum(len(d) for d, _ in self.held.values()) + size > OFFERS_MOST:
                raise CudaFail(OUT_OF_MEMORY, f"copies between servers hold {OFFERS_MOST} bytes here already "
                                              "(fetched or expired ones free it)")
            data = bytearray(size)
            self.held[key] = (data, now + OFFER_SECONDS)
        return key, data

    def take(self, key: bytes) -> bytearray | None:
        """The offer's bytes, forgotten here (a key serves once); None when there is none (or it expired)."""
        with self.lock:
            data, until = self.held.pop(key, (None, 0.0))
        return data if data is not None and until > time.monotonic() else None


def check_size(size: int) -> None:
    if not 0 < size <= MOST:
        raise WireError(f"a copy between servers moves 1 to {MOST} bytes a piece, not {size}")


def offer(s, a: pb.PeerOffer_Args) -> pb.PeerOffer_Result:
    """cuwire.PeerOffer: the range kept under a new key, once the session's earlier work is done."""
    check_size(a.size)
    s.device(a.src, a.size)  # (the session's memory, or refused)
    key, data = s.server.offers.add(a.size)
    status = s.lib.cuCtxSynchronize() or s.lib.cuMemcpyDtoH_v2(s.ffi.from_buffer(data), a.src, a.size)
    if status:
        s.server.offers.take(key)
        return pb.PeerOffer_Result(status=status)
    s.server.announce_offer(key)
    return pb.PeerOffer_Result(key=key)


def fetch(s, a: pb.PeerFetch_Args) -> pb.PeerFetch_Result:
    """cuwire.PeerFetch: the offer's bytes from the server at `address`, into the range."""
    check_size(a.size)
    if len(a.key) != 16:
        raise WireError("a copy between servers names a key of 16 bytes")
    s.device(a.dst, a.size)  # (the session's memory, or refused)
    try:
        data = take_offer(a.address, a.key, a.size)
    except (OSError, TransportError, EOFError, ValueError) as e:
        log.warning("session %s: a copy from the server at %s failed: %s", s.name, a.address, e)
        raise CudaFail(UNKNOWN, f"the copy from the server at {a.address} failed: {e}") from None
    status = s.lib.cuCtxSynchronize() or s.lib.cuMemcpyHtoD_v2(a.dst, s.ffi.from_buffer(data), a.size)
    return pb.PeerFetch_Result(status=status)


def take_offer(address: str, key: bytes, size: int) -> bytearray:
    """The bytes the server at `address` offers under `key`: exactly `size` of them, or an error."""
    host, port = host_port(address)
    with socket.create_connection((host, port), timeout=FETCH_TIMEOUT) as sock:
        sock.settimeout(FETCH_TIMEOUT)
        conn = Connection(sock, address)
        hello = pb.Hello(client_version=cuwire.__version__, cuda_version=wire_ids.CUDA_VERSION,
                         api_digest=wire_ids.API_DIGEST, pid=os.getpid(), host=socket.gethostname(), join=key,
                         peer_copy=True)
        conn.send(pb.Batch(hello=hello).SerializeToString())
        message, payload = conn.receive(max_payload=size)
        reply = pb.Reply.FromString(bytes(message))
        if reply.error:
            raise ValueError(reply.error)
        if len(payload) != size:
            raise ValueError(f"{len(payload)} bytes came, {size} were offered")
        return payload


def serve(offers: Offers, conn: Connection, hello: pb.Hello) -> None:
    """A fetching server's connection (its hello names an offer's key): the offer's bytes, in one frame."""
    data = offers.take(hello.join)
    if data is None:
        log.warning("refused a copy between servers to %s: no offer has that key (fetched, expired or never made)",
                    conn.peer)
        conn.send(pb.Reply(error="no offer has that key (fetched, expired or never made)",
                           refusal=pb.PROTOCOL).SerializeToString())
        return
    conn.send(pb.Reply().SerializeToString(), [data])
