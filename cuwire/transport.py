"""How batches travel: one small interface, with gRPC (a bidirectional stream per session) as the default.

A framed socket or shared memory can stand behind the same interface later; the session code on both
sides only ever sees Batch in, Reply out.
"""

from __future__ import annotations

import queue
from typing import Protocol

import grpc

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import cuwire_pb2_grpc as pb_grpc

# Large enough for bulk copies; the server checks every size against its own limit anyway.
MAX_MESSAGE = 2**31 - 1
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.enable_retries", 0),
]


class TransportError(Exception):
    """The peer is gone or the connection broke: the session cannot continue."""


class Transport(Protocol):
    def exchange(self, batch: pb.Batch) -> pb.Reply:
        """Send one batch and wait for its reply."""
        ...

    def close(self) -> None: ...


class GrpcTransport:
    """One session = one Session stream; requests are fed through a queue, replies read in order."""

    def __init__(self, address: str, connect_timeout: float = 10.0):
        self.address = address
        self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError as e:
            self._channel.close()
            raise TransportError(f"cannot reach the cuwire server at {address} "
                                 f"(nothing answered within {connect_timeout:.0f} s)") from e
        self._requests: queue.SimpleQueue[pb.Batch | None] = queue.SimpleQueue()
        self._replies = pb_grpc.CuWireStub(self._channel).Session(iter(self._requests.get, None))

    def exchange(self, batch: pb.Batch) -> pb.Reply:
        self._requests.put(batch)
        try:
            return next(self._replies)
        except grpc.RpcError as e:
            raise TransportError(f"lost the cuwire server at {self.address}: {e.code().name}: {e.details()}") from e
        except StopIteration as e:
            raise TransportError(f"the cuwire server at {self.address} ended the session") from e

    def close(self) -> None:
        self._requests.put(None)
        self._channel.close()


def open_session(address: str, hello: pb.Hello, connect_timeout: float = 10.0) -> tuple[GrpcTransport, pb.Reply]:
    """Connect, say hello, and follow the listener to the session's own process where it sends us.

    Returns the transport of the session and the server's first reply (a Welcome, or a refusal).
    """
    transport = GrpcTransport(address, connect_timeout)
    reply = transport.exchange(pb.Batch(hello=hello))
    if reply.error or not reply.welcome.redirect_port:
        return transport, reply
    transport.close()
    host = address.rpartition(":")[0]
    again = pb.Hello()
    again.CopyFrom(hello)
    again.token = reply.welcome.session_token
    transport = GrpcTransport(f"{host}:{reply.welcome.redirect_port}", connect_timeout)
    return transport, transport.exchange(pb.Batch(hello=again))
