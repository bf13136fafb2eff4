"""One port, across a real network hop: a server in one network namespace, its clients in another, joined by
a veth pair (as the Docker image published as one port is reached from another host). The session, its
TLS, its token and the health endpoint all go through the one port; a plain client with the token is
refused by name. Needs root and iproute2 (skipped elsewhere)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import APPS, ROOT, two_hosts
from test_compression import netns_possible

pytestmark = pytest.mark.skipif(not netns_possible() or shutil.which("openssl") is None,
                                reason="needs root, iproute2 and openssl")
SERVER_IP, CLIENT_IP, PORT = "10.78.0.1", "10.78.0.2", 50551


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory, client_lib):
    """(server namespace, client namespace, the server's log, its pinned fingerprint)."""
    tmp = tmp_path_factory.mktemp("network")
    with two_hosts("cwn", SERVER_IP, CLIENT_IP) as (a, b, _, _):
        log = tmp / "server.log"
        server = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-m", "cuwire.server", "--listen",
                                   f"0.0.0.0:{PORT}", "--emulated", "--token", "secret", "--tls", "auto",
                                   "--cache-dir", str(tmp / "modules")], stdout=log.open("w"),
                                  stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            deadline = time.monotonic() + 30
            while "listening on" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            pin = re.search(r"CUWIRE_TLS_FINGERPRINT=(\S+)", log.read_text())
            assert pin, log.read_text()
            yield a, b, log, pin.group(1)
        finally:
            server.terminate()
            server.wait(15)


def in_client(ns: str, env: dict[str, str], *cmd: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CUWIRE_")}
    return subprocess.run(["ip", "netns", "exec", ns, "env", *(f"{k}={v}" for k, v in {**clean, **env}.items()),
                           *cmd], capture_output=True, text=True, timeout=180, cwd=ROOT)


@pytest.mark.parametrize("name", ["large_copies", "textures"])
def test_a_client_on_another_host_through_the_one_port(namespaces, name):
    _, b, log, pin = namespaces
    r = in_client(b, {"CUWIRE_TOKEN": "secret", "CUWIRE_TLS_FINGERPRINT": pin}, sys.executable, "-m", "cuwire.cli",
                  "run", "--server", f"{SERVER_IP}:{PORT}", "--stats", "--", str(APPS / "build" / name))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (APPS / "expected" / f"{name}.out").read_text()
    assert f"transport: TCP with TLS to {SERVER_IP}:{PORT}" in r.stderr
    assert f"({CLIENT_IP}:" in log.read_text()  # the session came from the other namespace


def test_a_plain_client_keeps_its_token(namespaces):
    """A client with a token and no TLS settings does not send it to another host (the server would refuse it too)."""
    _, b, _, _ = namespaces
    r = in_client(b, {"CUWIRE_TOKEN": "secret"}, sys.executable, "-m", "cuwire.cli", "info", "--server",
                  f"{SERVER_IP}:{PORT}")
    assert r.returncode != 0 and "not sending the token to" in r.stderr and "in the clear" in r.stderr, r.stderr


def test_health_over_tls_on_the_same_port(namespaces):
    _, b, _, _ = namespaces
    probe = ("import socket, ssl; c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); c.check_hostname = False; "
             "c.verify_mode = ssl.CERT_NONE; "
             f"s = c.wrap_socket(socket.create_connection(('{SERVER_IP}', {PORT}), 10)); "
             "s.sendall(b'GET /healthz HTTP/1.0\\r\\n\\r\\n'); print(s.recv(4096).decode())")
    r = in_client(b, {}, sys.executable, "-c", probe)
    assert r.returncode == 0 and r.stdout.startswith("HTTP/1."), r.stdout + r.stderr
    assert " 200 " in r.stdout.splitlines()[0], r.stdout
