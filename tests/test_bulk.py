"""Streamed copies (server/bulk.py), run by a session of the emulated device in this process: large
copies go to and from the GPU in CHUNK-sized pieces, and nothing is lost or left unread when one fails."""

from __future__ import annotations

import io
from typing import Any

import pytest

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.server import bulk
from cuwire.server.bulk import CHUNK, IncomingPayload
from cuwire.server.service import CuWireServer
from cuwire.settings import Settings

SIZE = 2 * CHUNK + 5
DATA = (bytes(range(253)) * (SIZE // 253 + 1))[:SIZE]
IDS = {name: i for i, (name, _, _) in generated.HANDLERS.items()}


class FakeConnection:
    """The payload side of transport.Connection, from bytes."""

    def __init__(self, data: bytes):
        self.stream = io.BytesIO(data)

    def read_into(self, view: memoryview) -> None:
        assert self.stream.readinto(view) == len(view)

    def read_payload(self, n: int) -> bytearray:
        data = bytearray(self.stream.read(n))
        assert len(data) == n
        return data

    def unread(self) -> int:
        return len(self.stream.getbuffer()) - self.stream.tell()


@pytest.fixture
def session(tmp_path) -> Any:
    settings = Settings(backend="emulated", cache_dir=tmp_path)
    server = CuWireServer(settings)
    from cuwire.server.session import Session

    s = Session(server, "test", pb.Hello(), "bulk")
    yield s
    s.close()


def run(session, name: str, payload: bytes = b"", **fields) -> tuple[pb.Reply, Any, FakeConnection]:
    conn = FakeConnection(payload)
    batch = pb.Batch(fn=IDS[name], args=getattr(pb, f"{name}_Args")(**fields).SerializeToString())
    reply = session.run(batch, IncomingPayload(conn, len(payload)))
    return reply, getattr(pb, f"{name}_Result").FromString(reply.result), conn


def allocate(session) -> int:
    reply, res, _ = run(session, "cuMemAlloc_v2", bytesize=SIZE)
    assert res.status == 0
    return res.dptr


def sent(session) -> bytes:
    """What the reply's payload carries (as Connection.send would send it)."""
    out = bytearray()
    for part in session.payload_out:
        if hasattr(part, "write_to"):
            part.write_to(out.extend)
        else:
            out += bytes(part)
    session.payload_out = []
    return bytes(out)


def test_large_copies_go_in_chunks_both_ways(session, monkeypatch):
    calls = []
    for name in ("copy_in", "copy_out"):
        real = getattr(bulk, name)
        monkeypatch.setattr(bulk, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    device = allocate(session)
    reply, res, conn = run(session, "cuMemcpyHtoD_v2", DATA, dstDevice=device, ByteCount=SIZE)
    assert not reply.error and res.status == 0 and conn.unread() == 0
    assert calls == ["copy_in"] * 3
    reply, res, _ = run(session, "cuMemcpyDtoH_v2", srcDevice=device, ByteCount=SIZE)
    assert not reply.error and res.status == 0 and res.dstHost == b""
    assert sent(session) == DATA
    assert calls == ["copy_in"] * 3 + ["copy_out"] * 3


def test_a_late_failure_surfaces_at_the_next_call(session, monkeypatch):
    device = allocate(session)
    real, count = bulk.copy_out, []

    def failing(*a):
        count.append(1)
        return 700 if len(count) == 2 else real(*a)  # CUDA_ERROR_ILLEGAL_ADDRESS on the second chunk

    monkeypatch.setattr(bulk, "copy_out", failing)
    reply, res, _ = run(session, "cuMemcpyDtoH_v2", srcDevice=device, ByteCount=SIZE)
    assert res.status == 0 and len(sent(session)) == SIZE  # the frame's promised bytes all go out
    reply, res, _ = run(session, "cuCtxSynchronize")
    assert reply.queued_error == 700 and "cuMemcpyDtoH_v2" in reply.queued_error_fn
    reply, res, _ = run(session, "cuCtxSynchronize")
    assert reply.queued_error == 0  # said once


def test_a_wrong_payload_is_refused_and_drained(session):
    device = allocate(session)
    reply, _, conn = run(session, "cuMemcpyHtoD_v2", DATA[:CHUNK], dstDevice=device, ByteCount=SIZE)
    assert "came with a payload of" in reply.error and conn.unread() == 0
    reply, res, conn = run(session, "cuMemcpyHtoD_v2", DATA, dstDevice=device + SIZE * 4, ByteCount=SIZE)
    assert res.status != 0 and conn.unread() == 0  # the copy failed at its first chunk; the rest is read
    reply, res, conn = run(session, "cuMemcpy", DATA, dst=device + 1, src_host=b"", ByteCount=SIZE)
    assert res.status == 1 and conn.unread() == 0  # not the session's range: refused, payload read
