"""Before a client is authenticated, a connection costs the server a small fixed amount: its hello's
message is at most HELLO_MAX bytes, refused from the header before anything is allocated, and the whole
hello has HELLO_TIMEOUT, however slowly its bytes come (issue 36: 64 connections announcing 64 MiB hellos
made the listener allocate 4 GiB; connections dripping a byte every few seconds held every slot)."""

from __future__ import annotations

import socket
import time

from conftest import ServerProcess

from cuwire.server.listener import HELLO_TIMEOUT
from cuwire.transport import HEADER, HELLO_MAX, MAGIC


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=HELLO_TIMEOUT + 10)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server ends the connection (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def test_a_hello_announced_too_large_is_refused_at_its_header(tmp_path):
    s = ServerProcess(tmp_path)
    try:
        with connect(s.address) as sock:
            sock.sendall(HEADER.pack(MAGIC, 64 << 20, 0))  # a 64 MiB hello, none of its bytes sent
            assert closed_within(sock, 5)
        assert f"frame of {64 << 20} + 0 bytes is over the limit ({HELLO_MAX} + 0)" in s.text()
    finally:
        s.stop()


def test_a_hello_that_drips_is_cut_at_its_deadline(tmp_path):
    s = ServerProcess(tmp_path)
    try:
        with connect(s.address) as sock:
            start = time.monotonic()
            frame = HEADER.pack(MAGIC, 1000, 0)
            cut = False
            for byte in frame:  # one byte every second (16 bytes): each read is quick, the whole hello is not
                try:
                    sock.sendall(bytes([byte]))
                except OSError:  # (the server ended the connection)
                    cut = True
                    break
                time.sleep(1.0)
            assert cut or closed_within(sock, 5)
            assert time.monotonic() - start < HELLO_TIMEOUT + 3
        assert "closed before a session began" in s.text()
    finally:
        s.stop()
