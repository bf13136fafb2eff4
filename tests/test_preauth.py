"""Before a client is authenticated, a connection costs the server a small fixed amount: its hello's
message is at most HELLO_MAX bytes, refused from the header before anything is allocated, and the whole
hello has HELLO_TIMEOUT, however slowly its bytes come (issue 36: 64 connections announcing 64 MiB hellos
made the listener allocate 4 GiB; connections dripping a byte every few seconds held every slot)."""

from __future__ import annotations

import socket
import time

import pytest
from conftest import ServerProcess, outward_address

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.server.listener import HELLO_TIMEOUT
from cuwire.wire.transport import HEADER, HELLO_MAX, MAGIC, open_session

HELLO = pb.Hello(client_version="test", cuda_version=generated.CUDA_VERSION, api_digest=generated.API_DIGEST)


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


def test_sessions_are_capped_and_refused_by_name(client_lib, tmp_path):
    """CUWIRE_MAX_SESSIONS_PER_HOST (clients of one host over TCP; this host's Unix socket clients count
    only towards the other) and CUWIRE_MAX_SESSIONS: past either, a new session is refused by name ("busy"),
    and served again once one ends."""
    import os
    import subprocess

    from conftest import compile_against_client

    holder = compile_against_client(HOLDER, tmp_path, client_lib, "holder")
    for variable in ("CUWIRE_MAX_SESSIONS_PER_HOST", "CUWIRE_MAX_SESSIONS"):
        s = ServerProcess(tmp_path, env={variable: "2"})
        transport = "tcp" if variable == "CUWIRE_MAX_SESSIONS_PER_HOST" else "unix"
        env = {**os.environ, "CUWIRE_SERVER": s.address, "CUWIRE_TRANSPORT": transport}
        held = [subprocess.Popen([str(holder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                for _ in range(2)]
        try:
            for p in held:
                assert p.stdout.readline().strip() == "holding"
            third = subprocess.run([str(holder), "once"], capture_output=True, text=True, env=env, timeout=60)
            assert third.returncode != 0 and "the server is busy" in third.stderr and variable in third.stderr, \
                third.stderr
            held[0].stdin.close()  # one ends: a new one is served
            held[0].wait(20)
            deadline = time.monotonic() + 20
            while True:
                again = subprocess.run([str(holder), "once"], capture_output=True, text=True, env=env, timeout=60)
                if again.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert again.returncode == 0, again.stderr
        finally:
            for p in held:
                p.kill()
                p.wait()
            s.stop()


# A client that holds its session until its stdin closes (with an argument: ends at once).
HOLDER = r"""
#include <stdio.h>
#include "cuda_api.h"
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUdeviceptr d;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuMemAlloc_v2(&d, 4096)) return 2;
    if (argc > 1) return 0;
    printf("holding\n"); fflush(stdout);
    char line[8];
    while (fgets(line, sizeof line, stdin)) {}
    return 0;
}
"""


def test_one_address_holds_at_most_half_the_connections(tmp_path):
    """A client address that holds connections open in their hello is refused by name past half of the
    listener's 64 (so another address always finds room); this host's loopback has no such limit."""
    address = outward_address()
    if address is None:
        pytest.skip("this host has no address but loopback")
    s = ServerProcess(tmp_path, "--listen", "0.0.0.0:0")
    held = []
    try:
        for _ in range(32):
            held.append(socket.create_connection((address, s.port), timeout=5))
        time.sleep(0.5)  # (accepted, and counted)
        with socket.create_connection((address, s.port), timeout=5) as extra:
            extra.sendall(HEADER.pack(MAGIC, 8, 0) + bytes(8))
            answer = extra.recv(4096)
        assert b"your address holds 32 connections" in answer, answer
        t, reply = open_session(s.address, HELLO, mode="tcp")  # loopback: served all the same
        assert not reply.error, reply
        t.close()
    finally:
        for sock in held:
            sock.close()
        s.stop()
