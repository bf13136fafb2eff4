"""bench/delay_link, the forwarder the distance and link-rate benches put between client and server: every
byte arrives, in order, with a delay and with a rate; a peer that goes away ends the forwarded connection
instead of leaving the other side waiting (its reader may be waiting for room on a full link)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def delay_link(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("delay_link") / "delay_link"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(out), str(ROOT / "bench" / "delay_link.c")], check=True)
    return out


def forwarder(binary: Path, target: int, *args: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([str(binary), "0", str(target), *args], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    return p, int(re.search(r"listening on (\d+)", line).group(1))


def serve_once(handle) -> tuple[socket.socket, threading.Thread]:
    """A listening socket whose first connection `handle` gets, in a thread."""
    listening = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = listening.accept()
        with conn:
            handle(conn)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return listening, t


def echo(conn: socket.socket) -> None:
    while data := conn.recv(1 << 20):
        conn.sendall(data)


@pytest.mark.parametrize("args", [("100",), ("100", "2000")], ids=["delay", "delay and rate"])
def test_every_byte_arrives_in_order_both_ways(delay_link, args):
    listening, served = serve_once(echo)
    p, port = forwarder(delay_link, listening.getsockname()[1], *args)
    data = os.urandom(6 << 20)
    back = bytearray()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            reader = threading.Thread(target=lambda: back.extend(read_all(s, len(data))), daemon=True)
            reader.start()
            s.sendall(data)
            reader.join(60)
        assert bytes(back) == data
    finally:
        p.kill()
        listening.close()
    served.join(10)
    assert not served.is_alive()


def read_all(s: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n and (chunk := s.recv(n - len(got))):
        got += chunk
    return bytes(got)


def test_a_target_that_goes_away_ends_the_senders_connection(delay_link):
    """The target reads a little and closes while the link (100 Mbit/s) is full: the sender's send fails,
    it does not hang on a forwarder whose reader waits for room."""
    listening, served = serve_once(lambda conn: conn.recv(1 << 20))
    p, port = forwarder(delay_link, listening.getsockname()[1], "50", "100")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            with pytest.raises((BrokenPipeError, ConnectionResetError)):
                for _ in range(256):  # 256 MiB at most: far more than the link, its buffer and the sockets hold
                    s.sendall(bytes(1 << 20))
        assert p.poll() is None  # (the forwarder itself goes on, for the next connection)
    finally:
        p.kill()
        listening.close()
    served.join(10)
