"""A session whose connection drops goes on (cuwire/wire/stream.py, server/resume.py): links cut (reset) in
the middle of frames both ways, of large payloads, of queued work and of host functions waiting for the
client (the host-function connection), over TCP, TLS and the Unix socket,
end with the same results as an uncut run; a server that restarted, or a client that stays away past the
grace period, ends the session with a clear error; a program that ends is not waited for."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from conftest import ServerProcess, run_remote, wait_for
from cut_link import TO_CLIENT, TO_SERVER, CutLink

from cuwire.server._records import ffi, lib
from cuwire.wire.stream import Stream

# (direction, bytes): in the middle of frames and payloads of large_copies' session, which moves about 240
# MiB each way; cuts of the first kilobytes land in its first small calls
LARGE_CUTS = [(TO_SERVER, 1000), (TO_CLIENT, 20000), (TO_CLIENT, 30_000_000), (TO_SERVER, 50_000_003),
              (TO_CLIENT, 110_000_000), (TO_SERVER, 120_000_000)]
HOST_CUTS = [(TO_SERVER, 3000), (TO_CLIENT, 2000), (TO_SERVER, 12000)]  # (the host-function connection too)
STEP_CUTS = [(TO_SERVER, 5000), (TO_CLIENT, 3000), (TO_SERVER, 20011), (TO_CLIENT, 9007)]
ARGS = {"step_loop": ["150"]}


def pin_of(server: ServerProcess) -> str:
    return re.search(r"CUWIRE_TLS_FINGERPRINT=(\S+)", server.text()).group(1)


def transport_env(kind: str, server: ServerProcess) -> dict[str, str]:
    if kind == "tls":
        return {"CUWIRE_TRANSPORT": "tcp", "CUWIRE_TLS_FINGERPRINT": pin_of(server)}
    return {"CUWIRE_TRANSPORT": kind}


@pytest.fixture(scope="module", params=["tcp", "tls", "unix"])
def cut_server(request, tmp_path_factory):
    if request.param == "tls" and shutil.which("openssl") is None:
        pytest.skip("--tls auto needs the openssl command")
    s = ServerProcess(tmp_path_factory.mktemp("resume"), *(["--tls", "auto"] if request.param == "tls" else []))
    s.kind = request.param
    yield s
    s.stop()


@pytest.mark.parametrize("app, cuts, expected", [
    ("large_copies", LARGE_CUTS, "large_copies: PASS"),
    ("step_loop", STEP_CUTS, "150 steps on a stream and 150 on the null stream, 0 bytes read back wrong"),
    ("host_func_loop", HOST_CUTS, "200 of 200 host functions ran, 0 out of order"),
])
def test_a_cut_session_ends_as_an_uncut_one(cut_server, apps: Path, client_lib, app, cuts, expected):
    unix = cut_server.kind == "unix"
    link = CutLink(cut_server.port, cuts, unix=unix)
    try:
        r = run_remote(apps / app, client_lib, link.address, *ARGS.get(app, ()), env={
            **transport_env(cut_server.kind, cut_server), "CUWIRE_STATS": "1"})
    finally:
        link.close()
    assert r.returncode == 0 and expected in r.stdout, r.stdout + r.stderr + cut_server.text()[-3000:]
    # the Unix socket carries only messages (payloads go through shared memory): fewer of its cuts are reached
    assert len(link.done) >= (2 if unix else len(cuts)), (link.done, link.cuts)
    resumed = int(re.search(r"connection dropped and resumed: (\d+) times", r.stderr).group(1))
    assert resumed >= len([c for c in link.done if c[0] == TO_SERVER or not unix]) // 2, r.stderr
    uncut = run_remote(apps / app, client_lib, cut_server.address, *ARGS.get(app, ()),
                       env=transport_env(cut_server.kind, cut_server))
    assert r.stdout == uncut.stdout
    # a session that resumes keeps its large payloads on its one connection (stream.py)
    assert "more connections at once (stripes)" not in r.stderr, r.stderr


def test_a_cut_in_the_sending_threads_frames_is_resumed_by_the_next_call(cut_server, client_lib, tmp_path):
    """With CUWIRE_SEND_THREAD, the client's thread sends the queued calls early (client/sender.c); a cut in
    its frames leaves the connection to the program's next call, which resumes it and sends what did not
    arrive: the last value is read back, as uncut."""
    from conftest import QUEUED_ONLY, compile_against_client

    program = compile_against_client(QUEUED_ONLY, tmp_path, client_lib, "queued_only")
    link = CutLink(cut_server.port, [(TO_SERVER, 3000), (TO_SERVER, 6001), (TO_CLIENT, 2500)],
                   unix=cut_server.kind == "unix")
    try:
        r = run_remote(program, client_lib, link.address, env={
            **transport_env(cut_server.kind, cut_server), "CUWIRE_STATS": "1", "CUWIRE_SEND_THREAD": "1"})
    finally:
        link.close()
    assert r.returncode == 0 and r.stdout == "last value 200 (of 200)\n", r.stdout + r.stderr
    assert link.done, link.cuts
    assert re.search(r"connection dropped and resumed: [1-9]", r.stderr), r.stderr


def test_a_restarted_server_ends_the_session_clearly(tmp_path, apps: Path, client_lib):
    """The client comes back to a server that does not know its session (a restart): the program's calls fail
    with an error that says so, at once, not after the grace period."""
    first, second = ServerProcess(tmp_path), ServerProcess(tmp_path)
    link = CutLink(first.port, [(TO_SERVER, 30000)])
    try:
        link.then_port = second.port  # (what connects after the cut reaches the other server)
        started = time.monotonic()
        r = run_remote(apps / "step_loop", client_lib, link.address, "300", env={"CUWIRE_TRANSPORT": "tcp"})
        took = time.monotonic() - started
    finally:
        link.close()
        first.stop()
        second.stop()
    assert r.returncode != 0, r.stdout
    assert "the session could not resume" in r.stderr and "no open session has that key" in r.stderr, r.stderr
    assert took < 30, took


def test_past_the_grace_period_the_session_ends(tmp_path, apps: Path, client_lib):
    """No connection comes back within CUWIRE_RESUME: the client says so, and the server frees the session."""
    s = ServerProcess(tmp_path, env={"CUWIRE_RESUME": "1"})
    link = CutLink(s.port, [(TO_SERVER, 30000)])
    try:
        link.refuse_after_cut = True  # (the link stays down)
        r = run_remote(apps / "step_loop", client_lib, link.address, "300", env={"CUWIRE_TRANSPORT": "tcp"})
        assert r.returncode != 0
        assert "the session could not resume: it did not come back within 1 s" in r.stderr, r.stderr
        assert wait_for(lambda: "its client did not resume within 1 s" in s.text()
                        and "freed 2 allocations" in s.text()), s.text()
    finally:
        link.close()
        s.stop()


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_a_program_that_ends_is_not_waited_for(tmp_path, apps: Path, client_lib, kind):
    """The program's end says so (Batch.ending): its session ends at once, as without resume."""
    s = ServerProcess(tmp_path)
    try:
        r = run_remote(apps / "step_loop", client_lib, s.address, "10", env={"CUWIRE_TRANSPORT": kind})
        assert r.returncode == 0, r.stderr
        assert wait_for(lambda: "ended after" in s.text(), 5), s.text()
        assert "waiting up to" not in s.text()
    finally:
        s.stop()


def test_the_kept_bytes():
    """stream.h: the last `window` bytes sent are kept across the ring's wrap; what is older is not."""
    stream = Stream(ffi, lib, 1 << 17)
    data = bytes(range(256)) * 1024  # 256 KiB: twice the window
    for i in range(0, len(data), 10_000):
        stream.sent(data[i:i + 10_000])
    assert stream.sent_total == len(data)
    assert b"".join(stream.since(len(data) - 5000)) == data[-5000:]
    assert b"".join(stream.since(len(data) - (1 << 17))) == data[-(1 << 17):]
    assert stream.since(len(data) - (1 << 17) - 1) is None  # older than the window
    assert stream.since(len(data) + 1) is None  # more than was sent
    assert stream.since(len(data)) == []
    stream.received(7)
    assert stream.received_total == 7
    stream.close()


def test_the_kept_bytes_as_the_ring_grows():
    """stream.h: a ring that grows (doubling, then to a window no power of two) while what it holds wraps
    keeps every byte at its place, sends of every size."""
    window = 300_000
    stream = Stream(ffi, lib, window)
    data = bytes((i * 7 + i // 251) % 256 for i in range(1_000_000))
    at = 0
    for n in (1, 70_000, 3, 65_536, 100_000, 131_072, 9, 250_000, 200_001, 183_378):
        stream.sent(data[at:at + n])
        at += n
        kept = min(at, window)
        assert b"".join(stream.since(at - kept)) == data[at - kept:at], (n, at)
    assert at == len(data)
    stream.close()


def test_a_connection_dropped_in_the_hello_is_tried_again(server, apps: Path, client_lib):
    """Before the welcome there is no stream to resume: the session's hello goes again on a new connection."""
    link = CutLink(server.port, [(TO_SERVER, 50)])  # (in the middle of the hello)
    try:
        r = run_remote(apps / "vector_add", client_lib, link.address, env={"CUWIRE_TRANSPORT": "tcp"})
    finally:
        link.close()
    assert link.done == [(TO_SERVER, 50)] and link.connections == 2
    assert r.returncode == 0 and "vector_add: PASS" in r.stdout, r.stderr
