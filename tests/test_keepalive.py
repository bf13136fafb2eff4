"""A peer that vanishes without closing its connection (a host down, a link cut: a half-open connection) is
noticed on both sides within CUWIRE_KEEPALIVE seconds: the client's waiting call fails with "lost the
cuwire server", the server ends the session and frees what it held. A slow call is told apart from it: a
session process that computes (here, stopped) for several keepalive periods keeps its client waiting, and
the call then completes. A server in one network namespace, its client in another, joined by a veth pair;
the link is cut by dropping every packet both ways (a tc queue of length 0). Needs root, iproute2 and tc (skipped
elsewhere)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, two_hosts, wait_for
from test_compression import netns_possible

pytestmark = pytest.mark.skipif(not netns_possible() or shutil.which("tc") is None, reason="needs root, iproute2, tc")
SERVER_IP, CLIENT_IP, PORT = "10.79.0.1", "10.79.0.2", 50552
KEEPALIVE = 2  # seconds: what both sides are given (CUWIRE_KEEPALIVE)

# The client: a session over TCP, one allocation, then one call per line read (its outcome and how long it
# waited); the Python wire alone, as the client library's embedded Python speaks it.
CLIENT = r"""
import os, sys, time
from cuwire.generated import cuwire_pb2 as pb, server_handlers as generated
from cuwire.wire.transport import TransportError, open_session

hello = pb.Hello(client_version="test", cuda_version=generated.CUDA_VERSION, api_digest=generated.API_DIGEST,
                 pid=os.getpid())
ids = {name: i for i, (name, _, _) in generated.HANDLERS.items()}
t, reply = open_session(sys.argv[1], hello)
assert not reply.error, reply.error

def call(name, **fields):
    reply = t.exchange(pb.Batch(fn=ids[name], args=getattr(pb, f"{name}_Args")(**fields).SerializeToString()))
    return getattr(pb, f"{name}_Result").FromString(reply.result).status

print("alloc", call("cuMemAlloc_v2", bytesize=1 << 20), flush=True)
while sys.stdin.readline():
    print("calling", flush=True)
    start = time.monotonic()
    try:
        print(f"call {call('cuCtxSynchronize')} {time.monotonic() - start:.1f}", flush=True)
    except TransportError as e:
        print(f"lost {time.monotonic() - start:.1f} {e}", flush=True)
        break
"""


@pytest.fixture
def link(tmp_path, client_lib):
    """(server namespace, client namespace, the two ends' devices, the server's log)."""
    with two_hosts("cwk", SERVER_IP, CLIENT_IP) as (a, b, dev_a, dev_b):
        log = tmp_path / "server.log"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("CUWIRE_")},
               "CUWIRE_KEEPALIVE": str(KEEPALIVE), "CUWIRE_FROZEN_AFTER": "120"}
        server = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-m", "cuwire.server", "--listen",
                                   f"0.0.0.0:{PORT}", "--emulated", "--cache-dir", str(tmp_path / "modules")],
                                  stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            deadline = time.monotonic() + 30
            while "listening on" not in log.read_text():
                assert time.monotonic() < deadline and server.poll() is None, log.read_text()
                time.sleep(0.1)
            yield a, b, (dev_a, dev_b), log
        finally:
            server.terminate()
            server.wait(15)


def start_client(ns: str, tmp_path) -> subprocess.Popen:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CUWIRE_")},
           "CUWIRE_KEEPALIVE": str(KEEPALIVE), "PYTHONPATH": str(ROOT)}
    client = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(script), f"{SERVER_IP}:{PORT}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=tmp_path)
    assert client.stdout.readline().split() == ["alloc", "0"], client.stderr.read()
    return client


def session_process(log, client: subprocess.Popen) -> int:
    """The pid of the session process serving `client` (the listener's log names it)."""
    found = re.search(r"session (\S+) for pid \d+ on .*: process (\d+)", log.read_text())
    assert found, log.read_text()
    return int(found.group(2))


def stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped (state T in /proc)."""
    return all(Path(task, "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
               for task in Path(f"/proc/{pid}/task").iterdir())


def test_a_slow_call_is_not_cut_short(link, tmp_path):
    """A call that takes four keepalive periods (its session process stopped meanwhile) waits and completes:
    the peer's system answers the probes, so a computing server is not a vanished one."""
    _, b, _, log = link
    client = start_client(b, tmp_path)
    worker = session_process(log, client)
    os.kill(worker, signal.SIGSTOP)
    try:
        # a stop takes effect as each of the process's threads is next scheduled: none may answer before
        assert wait_for(lambda: stopped(worker), 10), Path(f"/proc/{worker}/cmdline").read_bytes()
        client.stdin.write("go\n")
        client.stdin.flush()
        assert client.stdout.readline() == "calling\n"
        time.sleep(4 * KEEPALIVE)
        # still waiting, not lost (else: what the client said, and the server's log)
        assert client.poll() is None, (client.stdout.read(), client.stderr.read(), log.read_text())
    finally:
        os.kill(worker, signal.SIGCONT)
    words = client.stdout.readline().split()
    assert words[:2] == ["call", "0"] and float(words[2]) >= 4 * KEEPALIVE - 0.5, (words, log.read_text())
    client.stdin.close()
    assert client.wait(30) == 0


def test_a_vanished_peer_is_noticed_on_both_sides(link, tmp_path):
    """The link cut both ways (every packet dropped, no FIN gets through): the client's call fails within a
    few keepalive periods, and the server ends the session (its process exits, its memory freed with it)."""
    a, b, (dev_a, dev_b), log = link
    client = start_client(b, tmp_path)
    worker = session_process(log, client)
    for ns, dev in ((a, dev_a), (b, dev_b)):
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "pfifo", "limit", "0"],
                       check=True, capture_output=True)  # a queue of no packets: each one dropped, silently
    client.stdin.write("go\n")
    client.stdin.flush()
    assert client.stdout.readline() == "calling\n"
    words = client.stdout.readline().split()
    assert words[:1] == ["lost"] and float(words[1]) < 6 * KEEPALIVE, (words, client.stderr.read())
    client.wait(30)

    def ended() -> bool:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        return False

    assert wait_for(ended, 8 * KEEPALIVE), log.read_text()
    assert re.search(r"session \S+: the connection ended \(.*timed out", log.read_text()), log.read_text()
