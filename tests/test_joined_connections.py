"""Connections that join a session over TCP, through the server's one port, with the join key its welcome
brought: stripes (cuwire/wire/stripes.py), over which large payloads travel at once, and the host-function
connection (client/callbacks.c). The bytes are the same as over one connection, and every way a joined
connection can go wrong ends in a clear error or a refusal, never a hang or wrong bytes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import APPS, ServerProcess, run_remote
from test_wire_errors import HELLO, allocate, fn_id, serving

from cuwire.generated import cuwire_pb2 as pb
from cuwire.wire import layouts, stripes
from cuwire.wire.transport import SocketTransport, TransportError, open_session

SIZE = (24 << 20) + 5  # over stripes.MIN, in parts that do not all end on a boundary
DATA = os.urandom(SIZE)


@pytest.mark.parametrize("size", [stripes.MIN, SIZE, (1 << 30) + 1, 5 << 20])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 8])
def test_parts_cover_the_payload_once_in_order(size, count):
    parts = stripes.split(size, count)
    assert 1 <= len(parts) <= count
    assert [offset for offset, _ in parts] == [sum(n for _, n in parts[:i]) for i in range(len(parts))]
    assert sum(n for _, n in parts) == size and all(n > 0 for _, n in parts)
    views = [memoryview(bytearray(7)), memoryview(bytearray(0)), memoryview(bytearray(5))]
    assert [len(v) for v in stripes.slices(views, 3, 10)] == [4, 0, 3]


@pytest.fixture(params=["process", "thread"])
def any_server(request, tmp_path):
    s = ServerProcess(tmp_path, "--isolation", request.param)
    yield s
    s.stop()


def striped_session(address: str, count: int = 4) -> SocketTransport:
    t, reply = open_session(address, HELLO, mode="tcp")
    assert not reply.error and reply.welcome.stripes == 4 and len(reply.welcome.join_key) == 16, reply
    t.may_join(HELLO, reply.welcome, count)
    return t


def copy_in(t: SocketTransport, device: int, data: bytes) -> int:
    reply, _, _ = t.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=pb.cuMemcpyHtoD_v2_Args(
        dstDevice=device, ByteCount=len(data)).SerializeToString()), [data])
    assert not reply.error, reply.error
    return pb.cuMemcpyHtoD_v2_Result.FromString(reply.result).status


def copy_out(t: SocketTransport, device: int, size: int) -> bytes:
    out = bytearray(size)
    reply, rest, direct = t.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyDtoH_v2"), args=pb.cuMemcpyDtoH_v2_Args(
        srcDevice=device, ByteCount=size).SerializeToString()), into=[out], max_payload=size)
    assert not reply.error and pb.cuMemcpyDtoH_v2_Result.FromString(reply.result).status == 0, reply
    assert direct == size and not rest
    return bytes(out)


def test_large_copies_go_over_the_stripes(any_server):
    """Both ways, with either isolation: the bytes come back as they went, and went over the stripes."""
    t = striped_session(any_server.address)
    device = allocate(t, SIZE)
    assert copy_in(t, device, DATA) == 0
    assert len(t.connection.stripes) == 4 and t.connection.striped_bytes == SIZE
    assert copy_out(t, device, SIZE) == DATA
    assert t.connection.striped_bytes == 2 * SIZE
    small = copy_out(t, device, 1 << 20)  # under stripes.MIN: on the session's own connection
    assert small == DATA[:1 << 20] and t.connection.striped_bytes == 2 * SIZE
    t.close()
    assert "4 more connections joined, for large payloads" in any_server.text()


@pytest.mark.parametrize("wanted", ["0", "2"])
def test_the_client_opens_as_many_stripes_as_asked(wanted, apps: Path, client_lib, tmp_path):
    """A program over TCP: the same output with no stripes (CUWIRE_STRIPES=0) or two; --stats says so (on a
    server that does not resume sessions: a session that resumes has no stripes, test_resume.py)."""
    server = ServerProcess(tmp_path, env={"CUWIRE_RESUME": "0"})
    try:
        r = run_remote(apps / "large_copies", client_lib, server.address,
                       env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_STRIPES": wanted,
                            # (on a loaded machine loopback may measure slow: compressed payloads take no stripes)
                            "CUWIRE_COMPRESS": "off"})
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    assert r.stdout == (APPS / "expected" / "large_copies.out").read_text()
    assert (f"over {wanted} more connections at once (stripes)" in r.stderr) == (wanted != "0"), r.stderr


def join_hello(key: bytes, stripe: int = 0, count: int = 1, token: str = "") -> pb.Hello:
    hello = pb.Hello()
    hello.CopyFrom(HELLO)
    hello.join, hello.stripe, hello.stripes, hello.token = key, stripe, count, token
    return hello


def try_join(address: str, hello: pb.Hello) -> pb.Reply:
    t = SocketTransport(address)
    try:
        return t.exchange(pb.Batch(hello=hello))
    finally:
        t.close()


def test_a_stripe_that_names_no_session_or_joins_out_of_order_is_refused(any_server):
    t, reply = open_session(any_server.address, HELLO, mode="tcp")
    key = reply.welcome.join_key
    refused = try_join(any_server.address, join_hello(os.urandom(16)))
    assert refused.refusal == pb.PROTOCOL and "no open session has that join key" in refused.error, refused
    refused = try_join(any_server.address, join_hello(key, stripe=1, count=2))
    assert refused.refusal == pb.PROTOCOL and "out of order" in refused.error, refused
    refused = try_join(any_server.address, join_hello(key, count=9))
    assert refused.refusal == pb.PROTOCOL and "9 stripes asked for, 4 offered" in refused.error, refused
    assert serving(t) and not t.connection.stripes  # the session goes on, on its one connection
    t.close()


def test_a_stripe_needs_the_token(tmp_path):
    s = ServerProcess(tmp_path, "--token", "secret")
    try:
        hello = pb.Hello()
        hello.CopyFrom(HELLO)
        hello.token = "secret"
        t, reply = open_session(s.address, hello, mode="tcp")
        refused = try_join(s.address, join_hello(reply.welcome.join_key, token="wrong"))
        assert refused.refusal == pb.TOKEN, refused
        t.may_join(hello, reply.welcome, 4)
        device = allocate(t, SIZE)
        assert copy_in(t, device, DATA) == 0 and len(t.connection.stripes) == 4  # with the token: joined
        t.close()
    finally:
        s.stop()


def test_stripes_the_server_refuses_leave_large_copies_on_one_connection(tmp_path, capfd):
    """A server that offers none (CUWIRE_STRIPES=0) refuses them; one that refuses a join (here: it
    is shutting down) leaves the session on its one connection, said once; the bytes are the same."""
    s = ServerProcess(tmp_path, env={"CUWIRE_STRIPES": "0"})
    try:
        t, reply = open_session(s.address, HELLO, mode="tcp")
        assert reply.welcome.stripes == 0
        refused = try_join(s.address, join_hello(reply.welcome.join_key))
        assert refused.refusal == pb.PROTOCOL and "1 stripes asked for, 0 offered" in refused.error, refused
        t.close()
    finally:
        s.stop()
    s = ServerProcess(tmp_path, "--drain-seconds", "30")
    try:
        t = striped_session(s.address)
        device = allocate(t, SIZE)
        s.proc.terminate()  # draining: new connections are refused, the open session goes on
        deadline = time.monotonic() + 10
        while "draining" not in s.text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert copy_in(t, device, DATA) == 0 and not t.connection.stripes
        assert copy_out(t, device, SIZE) == DATA
        assert "large copies go over one connection: stripe 0 of 4 could not join" in capfd.readouterr().err
        t.close()
    finally:
        s.stop()


def test_a_broken_stripe_ends_the_session_clearly(any_server):
    """A stripe that breaks mid-session: the next striped copy fails at once with TransportError (no
    hang), the server frees the session and goes on serving others."""
    t = striped_session(any_server.address)
    device = allocate(t, SIZE)
    assert copy_in(t, device, DATA) == 0
    stripes.shut(t.connection.stripes[2].sock)
    started = time.monotonic()
    with pytest.raises(TransportError, match="stripe"):
        copy_out(t, device, SIZE)
    assert time.monotonic() - started < 10
    t.close()
    other = striped_session(any_server.address)
    assert serving(other)
    device = allocate(other, SIZE)
    assert copy_in(other, device, DATA) == 0 and copy_out(other, device, SIZE) == DATA
    other.close()


def test_a_stripe_out_of_step_ends_the_session(any_server, monkeypatch):
    """A part header that names another frame is found, not read as data: the session ends."""
    t = striped_session(any_server.address)
    device = allocate(t, SIZE)
    assert copy_in(t, device, DATA) == 0
    real = stripes.send_header
    monkeypatch.setattr(stripes, "send_header", lambda conn, number, offset, length: real(conn, number + 7, offset,
                                                                                           length))
    with pytest.raises(TransportError):
        t.connection.sock.settimeout(10)
        copy_in(t, device, DATA)
    t.close()
    deadline = time.monotonic() + 10
    while "out of step" not in any_server.text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "a stripe is out of step" in any_server.text()


def test_host_functions_over_tcp_wait_for_the_client_and_end_with_it(any_server):
    """The session's host-function connection (Hello.callbacks): the server posts a host function's id
    and the stream waits until the client writes it back; a second connection for it is refused; a
    client that goes while a host function waits for it ends its session, and the server goes on."""
    import socket
    import struct

    from cuwire.generated import server_handlers as generated

    t = striped_session(any_server.address)
    fd = t.open_callbacks()
    channel = socket.socket(fileno=os.dup(fd))
    channel.settimeout(20)
    with pytest.raises(TransportError, match="host-function connection already"):
        t.open_callbacks()
    res = pb.cuStreamCreate_Result.FromString(t.exchange(pb.Batch(
        fn=fn_id("cuStreamCreate"), args=pb.cuStreamCreate_Args(Flags=0).SerializeToString())).result)
    assert res.status == 0
    host_func = struct.pack("<II", generated.OP_IDS["HostFunc"], 16) + struct.pack("<QQ", res.phStream, 77)
    t.send_only(pb.Batch(records=host_func, no_reply=True))
    post = layouts.layout("cw_host_post")  # (id, the post's number)
    assert post.unpack(channel.recv(post.size, socket.MSG_WAITALL)) == (77, 1)  # the stream reached it
    channel.sendall(struct.pack("<Q", 1))  # ran: the stream goes on
    sync = pb.Batch(fn=fn_id("cuStreamSynchronize"),
                    args=pb.cuStreamSynchronize_Args(hStream=res.phStream).SerializeToString())
    assert pb.cuStreamSynchronize_Result.FromString(t.exchange(sync).result).status == 0
    t.send_only(pb.Batch(records=host_func.replace(struct.pack("<Q", 77), struct.pack("<Q", 78)), no_reply=True))
    assert post.unpack(channel.recv(post.size, socket.MSG_WAITALL)) == (78, 2)
    channel.close()
    t.close()  # the client goes while the host function waits for it
    deadline = time.monotonic() + 15
    while "ended after" not in any_server.text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "ended after" in any_server.text(), any_server.text()
    other = striped_session(any_server.address)
    assert serving(other)
    other.close()
