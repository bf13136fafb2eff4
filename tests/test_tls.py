"""TLS (cuwire/wire/tls.py): a session over TCP encrypted end to end, the server's certificate checked by a pinned
fingerprint or a CA file, every mistake named; a token taken only over TLS from another host."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import APPS, ROOT, ServerProcess, outward_address, run_remote

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.wire import ring, transport
from cuwire.wire.tls import ClientTls
from cuwire.wire.transport import TransportError, open_session

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="--tls auto needs the openssl command")
HELLO = pb.Hello(client_version="test", cuda_version=generated.CUDA_VERSION, api_digest=generated.API_DIGEST)


def pin_of(server: ServerProcess) -> str:
    return re.search(r"CUWIRE_TLS_FINGERPRINT=(\S+)", server.text()).group(1)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    # (sessions that do not resume: their large copies take the stripes, each a TLS connection; test_resume.py
    # has sessions over TLS that resume)
    s = ServerProcess(tmp_path_factory.mktemp("tls"), "--tls", "auto", env={"CUWIRE_RESUME": "0"})
    yield s
    s.stop()


def info(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuwire.cli", "info", "--server", address], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env={"PATH": "/usr/bin:/bin", **env})


@pytest.mark.parametrize("name", ["vector_add", "large_copies", "callbacks"])
def test_a_session_over_tls(name, tls_server, apps: Path, client_lib):
    """The whole session travels encrypted (large copies both ways, over the session's stripes, and host
    functions, on the session's host-function connection, included) and gives the same output."""
    r = run_remote(apps / name, client_lib, tls_server.address, env={
        "CUWIRE_TRANSPORT": "tcp", "CUWIRE_TLS_FINGERPRINT": pin_of(tls_server), "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == (APPS / "expected" / f"{name}.out").read_text()
    assert f"transport: TCP with TLS to {tls_server.address}" in r.stderr
    # large copies go over the session's stripes, each its own TLS connection through the listener
    assert ("over 4 more connections at once (stripes)" in r.stderr) == (name == "large_copies"), r.stderr


def test_the_certificate_is_checked(tls_server, tmp_path):
    """A CA file that signed the certificate (here: the self-signed one itself) is accepted; another CA,
    or another pin, is refused by name."""
    cert = Path(re.search(r"TLS on \(certificate (\S+)\)", tls_server.text()).group(1))
    assert info(tls_server.address, {"CUWIRE_TLS_CA": str(cert)}).returncode == 0
    other = tmp_path / "other.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-subj", "/CN=other", "-keyout", str(tmp_path / "other.key"), "-out", str(other)],
                   check=True, capture_output=True)
    r = info(tls_server.address, {"CUWIRE_TLS_CA": str(other)})
    assert r.returncode != 0 and "certificate was not accepted" in r.stderr, r.stderr
    r = info(tls_server.address, {"CUWIRE_TLS_FINGERPRINT": "sha256:" + "ab" * 32})
    assert r.returncode != 0 and "not the pinned" in r.stderr and pin_of(tls_server) in r.stderr, r.stderr
    r = info(tls_server.address, {"CUWIRE_TLS_CA": str(tmp_path / "missing.crt")})
    assert r.returncode != 0 and "cannot read the CA file" in r.stderr, r.stderr


def test_a_client_over_tls_gets_no_shared_memory(tls_server):
    """The session's end of a TLS relay is a Unix socket; a hello that asks for shared memory over it (no
    client on this host would) gets none: the client is on another host."""
    hello = pb.Hello()
    hello.CopyFrom(HELLO)
    hello.ring_size = ring.SIZE
    t, reply = open_session(tls_server.address, hello, mode="tcp", tls=ClientTls(fingerprint=pin_of(tls_server)))
    t.close()
    assert not reply.error and not reply.welcome.ring, reply
    assert "over TCP with TLS" in tls_server.text()


def test_a_tls_client_of_a_plain_server_is_told(server):
    r = info(server.address, {"CUWIRE_TLS_FINGERPRINT": "sha256:" + "ab" * 32})
    assert r.returncode != 0 and "is TLS on there?" in r.stderr, r.stderr


def test_a_token_is_taken_only_over_tls_from_another_host(tmp_path):
    address = outward_address()
    if address is None:
        pytest.skip("this host has no address but loopback")
    s = ServerProcess(tmp_path, "--listen", "0.0.0.0:0", "--token", "secret", "--tls", "auto")
    try:
        hello = pb.Hello()
        hello.CopyFrom(HELLO)
        hello.token = "secret"
        remote = f"{address}:{s.port}"
        with pytest.raises(TransportError, match="not sending the token to .* in the clear"):
            open_session(remote, hello, mode="tcp")  # the client keeps it
        with pytest.MonkeyPatch.context() as m:  # a client that would send it: the server refuses it all the same
            m.setattr(transport, "token_in_the_clear", lambda *args: "")
            t, reply = open_session(remote, hello, mode="tcp")
        t.close()
        assert reply.refusal == pb.TOKEN and "only over TLS" in reply.error, reply
        t, reply = open_session(remote, hello, mode="tcp", tls=ClientTls(fingerprint=pin_of(s)))
        assert not reply.error and reply.welcome.backend, reply
        t.close()
        t, reply = open_session(s.address, hello, mode="tcp")  # loopback: the same host, no TLS needed
        assert not reply.error, reply
        t.close()
    finally:
        s.stop()


def test_tls_with_sessions_in_threads(apps: Path, client_lib, tmp_path):
    s = ServerProcess(tmp_path, "--tls", "auto", "--isolation", "thread")
    try:
        r = run_remote(apps / "vector_add", client_lib, s.address,
                       env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_TLS_FINGERPRINT": pin_of(s)})
        assert r.returncode == 0 and r.stdout == (APPS / "expected" / "vector_add.out").read_text(), r.stderr
    finally:
        s.stop()


class _Peer:
    """A connected socket's family and peer, as token_in_the_clear reads them."""

    def __init__(self, family: int, peer: str):
        self.family, self.peer = family, peer

    def getpeername(self):
        return (self.peer, 50551)


def test_a_token_never_crosses_a_network_in_the_clear():
    """A client with a token refuses to send its hello over plain TCP to another host, before a byte goes, and
    says how to turn TLS on; over TLS, to this host's loopback, over the Unix socket, or with no token, it goes."""
    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.wire.tls import ClientTls
    from cuwire.wire.transport import token_in_the_clear

    with_token, without = pb.Hello(token="s3cret"), pb.Hello()
    remote = _Peer(socket.AF_INET, "10.1.2.3")
    said = token_in_the_clear(with_token, remote, None)
    assert "not sending the token to 10.1.2.3 in the clear" in said and "CUWIRE_TLS_FINGERPRINT" in said
    assert token_in_the_clear(with_token, _Peer(socket.AF_INET6, "2001:db8::1"), None)
    assert token_in_the_clear(with_token, remote, ClientTls(fingerprint="sha256:00")) == ""
    assert token_in_the_clear(without, remote, None) == ""
    assert token_in_the_clear(with_token, _Peer(socket.AF_INET, "127.0.0.1"), None) == ""
    assert token_in_the_clear(with_token, _Peer(socket.AF_INET6, "::1"), None) == ""
    assert token_in_the_clear(with_token, _Peer(socket.AF_UNIX, ""), None) == ""


def test_a_tls_handshake_that_drips_is_cut_at_its_deadline(tls_server):
    """The TLS handshake has a deadline for the whole of it (HANDSHAKE_TIMEOUT), not for each read: a client
    that sends a ClientHello a byte a second is cut, and holds no connection slot for longer."""
    import time

    from cuwire.wire.tls import HANDSHAKE_TIMEOUT

    host, port = tls_server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=HANDSHAKE_TIMEOUT + 10) as sock:
        start, cut = time.monotonic(), False
        hello = b"\x16\x03\x01\x02\x00" + bytes(512)  # a TLS record header announcing a 512-byte ClientHello
        for byte in hello:  # a byte a second: each read is quick, the whole handshake is not
            try:
                sock.sendall(bytes([byte]))
                sock.settimeout(0.01)
                if sock.recv(1) == b"":
                    cut = True
                    break
            except TimeoutError:
                pass
            except OSError:
                cut = True
                break
            if time.monotonic() - start > HANDSHAKE_TIMEOUT + 5:
                break
            time.sleep(1.0)
        assert cut, "the server still held the connection"
        assert time.monotonic() - start < HANDSHAKE_TIMEOUT + 4
