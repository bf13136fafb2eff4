"""TLS for sessions that cross a network: the client encrypts its connection and checks the server's
certificate (against a CA file, CUWIRE_TLS_CA, or a pinned fingerprint, CUWIRE_TLS_FINGERPRINT); the
server's listener ends the TLS and relays the plain bytes to the session over a socket pair, so the
session (its process, its C loop) never sees TLS and one port still serves everything.

A client on the server's host reaches it over the Unix socket, which needs no TLS. A server with a token
takes it only over TLS from other hosts: a plain connection from another host is refused by name.

TlsSocket is OpenSSL through the ssl module's memory BIOs, over a socket this module reads and writes
itself: every send is MSG_NOSIGNAL (a server gone mid-write is an error, never SIGPIPE in the program
that embeds the client), and it offers what transport.Connection uses of a socket.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import select
import socket
import ssl
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from cuwire.wire.stripes import shut

log = logging.getLogger("cuwire.server")
NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
HANDSHAKE = 0x16  # the first byte of a TLS record that opens a handshake
HANDSHAKE_TIMEOUT = 10.0
CHUNK = 1 << 20  # what one write encrypts at a time (a large payload is not encrypted all at once)


class TlsError(Exception):
    """The peer's certificate is not the one expected, or the handshake failed."""


def fingerprint(der: bytes) -> str:
    """A certificate's SHA-256 fingerprint, as CUWIRE_TLS_FINGERPRINT takes it."""
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _normal(text: str) -> str:
    """A fingerprint as given (sha256: prefix or not, colons or not, any case) reduced to hex."""
    return text.strip().lower().removeprefix("sha256:").replace(":", "")


class TlsSocket:
    """A connected socket with TLS on it (client or server side), handshaken on creation."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_side: bool,
                 server_hostname: str | None = None) -> None:
        self.raw = sock
        self.family = sock.family
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=server_side,
                                    server_hostname=server_hostname)
        try:
            self._do(self.obj.do_handshake)
        except ssl.SSLCertVerificationError as e:
            raise TlsError(f"the server's certificate was not accepted ({e.verify_message})") from None
        except ssl.SSLError as e:
            raise TlsError(f"TLS handshake failed ({e.reason or e})") from None
        except (EOFError, ConnectionResetError):
            raise TlsError("the server closed the connection during the TLS handshake (is TLS on there? "
                           "cuwire server --tls-cert and --tls-key, or --tls auto)") from None

    def peer_certificate(self) -> bytes:
        return self.obj.getpeercert(binary_form=True) or b""

    # --- raw bytes

    def _flush(self) -> None:
        data = self.outgoing.read()
        if data:
            self.raw.sendall(data, NOSIGNAL)

    def _feed(self) -> None:
        data = self.raw.recv(1 << 18)
        if not data:
            self.incoming.write_eof()
            raise EOFError
        self.incoming.write(data)

    def _do(self, op):
        """op() on the TLS object, feeding it from the socket as long as it wants more."""
        while True:
            try:
                result = op()
            except ssl.SSLWantReadError:
                self._flush()
                self._feed()
                continue
            self._flush()
            return result

    # --- what transport.Connection uses of a socket

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        n = nbytes or len(view)
        try:
            return self._do(lambda: self.obj.read(n, view))
        except (EOFError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return 0

    def recv(self, n: int, flags: int = 0) -> bytes:
        buf = bytearray(n)
        return bytes(buf[:self.recv_into(buf)])

    def send(self, data, flags: int = 0) -> int:
        view = memoryview(data).cast("B")
        for at in range(0, len(view), CHUNK):
            piece = view[at:at + CHUNK]
            self._do(lambda piece=piece: self.obj.write(piece))
        return len(view)

    def sendall(self, data, flags: int = 0) -> None:
        self.send(data)

    def pending(self) -> int:
        """Decrypted bytes ready to read."""
        return self.obj.pending()

    def fileno(self) -> int:
        return self.raw.fileno()

    def setsockopt(self, *args) -> None:
        self.raw.setsockopt(*args)

    def settimeout(self, timeout: float | None) -> None:
        self.raw.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self.raw.gettimeout()

    def shutdown(self, how: int) -> None:
        self.raw.shutdown(how)

    def close(self) -> None:
        self.raw.close()


# ---------------------------------------------------------------- the client


@dataclass
class ClientTls:
    """How a client checks the server: a CA file (and the server's name in its certificate), or a pinned
    fingerprint of the server's certificate."""

    ca: str = ""
    fingerprint: str = ""

    @classmethod
    def from_settings(cls, settings, place: int = 1, servers: int = 1) -> ClientTls | None:
        """How to check server `place` (from 1) of the `servers` a program names (a device list's): the CA
        file, or the fingerprint pinned for it. CUWIRE_TLS_FINGERPRINT pins every server with one, or each
        server of a list with its own, comma-separated in the list's order (servers started with
        `--tls auto` have certificates of their own)."""
        pins = [p.strip() for p in settings.tls_fingerprint.split(",") if p.strip()]
        if not settings.tls_ca and not pins:
            return None
        if len(pins) > 1 and len(pins) != servers:
            raise TlsError(f"CUWIRE_TLS_FINGERPRINT names {len(pins)} fingerprints for {servers} server"
                           f"{'s' if servers > 1 else ''}: one for every server, or one for each server of the "
                           "device list, in its order")
        return cls(settings.tls_ca, pins[place - 1 if len(pins) > 1 else 0] if pins else "")

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.fingerprint:  # the pin is the check
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            try:
                ctx.load_verify_locations(cafile=self.ca)
            except (OSError, ssl.SSLError) as e:
                raise TlsError(f"cannot read the CA file {self.ca} (CUWIRE_TLS_CA): {e}") from None
        return ctx

    def wrap(self, sock: socket.socket, host: str) -> TlsSocket:
        tls = TlsSocket(sock, self.context(), server_side=False, server_hostname=host)
        if self.fingerprint:
            got = fingerprint(tls.peer_certificate())
            if _normal(got) != _normal(self.fingerprint):
                tls.close()
                raise TlsError(f"the server's certificate is {got}, not the pinned {self.fingerprint} "
                               "(CUWIRE_TLS_FINGERPRINT)")
        return tls


# ---------------------------------------------------------------- the server


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate and key for `--tls auto` (made once with the openssl command, then kept in `folder`)."""
    cert, key = folder / "server.crt", folder / "server.key"
    if cert.exists() and key.exists():
        return cert, key
    folder.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-days", "3650", "-subj", f"/CN={host}", "-addext", f"subjectAltName=DNS:{host},DNS:localhost,IP:127.0.0.1",
           "-keyout", str(key), "-out", str(cert)]
    old = os.umask(0o077)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError("--tls auto needs the openssl command; or give --tls-cert and --tls-key") from None
    finally:
        os.umask(old)
    if r.returncode != 0:
        raise RuntimeError(f"openssl could not make a certificate: {r.stderr.strip()}")
    return cert, key


def certificate_fingerprint(cert: Path) -> str:
    return fingerprint(ssl.PEM_cert_to_DER_cert(cert.read_text()))


def _is_loopback(peer: str) -> bool:
    host = peer.rpartition(":")[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


class ServerTls:
    """What the listening socket does before a connection's first frame: ends TLS (relaying the plain
    bytes to the session over a socket pair), and refuses a plain connection from another host when the
    server has a token (it would cross the network in the clear)."""

    def __init__(self, cert: str = "", key: str = "", token: bool = False) -> None:
        self.context = None
        if cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                ctx.load_cert_chain(cert, key or None)
            except (OSError, ssl.SSLError) as e:
                raise RuntimeError(f"cannot load the TLS certificate {cert} and key {key}: {e}") from None
            self.context = ctx
        self.token = token

    def accept(self, sock: socket.socket, peer: str, refuse) -> tuple[socket.socket, str] | None:
        """The connection the session is to read (the socket itself, or the plain end of a relay), or None
        when it was refused here (`refuse(sock, peer, why)` tells the client)."""
        if sock.family == socket.AF_UNIX:
            return sock, peer
        # a deadline for the whole handshake, however slowly its bytes come (a timeout per read would let a
        # client that drips a byte at a time hold the connection for ever)
        deadline = threading.Timer(HANDSHAKE_TIMEOUT, shut, args=(sock,))
        deadline.start()
        try:
            return self._accept(sock, peer, refuse)
        finally:
            deadline.cancel()

    def _accept(self, sock: socket.socket, peer: str, refuse) -> tuple[socket.socket, str] | None:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            sock.close()
            return None
        if first and first[0] == HANDSHAKE:
            if self.context is None:
                log.info("refused %s: it speaks TLS and this server has no certificate (--tls-cert, --tls auto)",
                         peer)
                sock.close()
                return None
            try:
                tls = TlsSocket(sock, self.context, server_side=True)
            except (TlsError, OSError) as e:
                log.info("refused %s: %s", peer, e)
                sock.close()
                return None
            tls.settimeout(None)
            ours, theirs = socket.socketpair()
            threading.Thread(target=relay, args=(tls, ours), name=f"cuwire-tls-{peer}", daemon=True).start()
            return theirs, f"{peer} (TLS)"
        if self.token and not _is_loopback(peer):
            refuse(sock, peer, "this server takes its token only over TLS from another host: connect with "
                               "CUWIRE_TLS_FINGERPRINT or CUWIRE_TLS_CA set (the server needs --tls-cert and "
                               "--tls-key, or --tls auto)")
            return None
        sock.settimeout(None)
        return sock, peer


def peer_pid(sock: socket.socket) -> int:
    """The process at the other end of a Unix socket (0 when unknown: another pid namespace, or not a Unix
    socket)."""
    return peer_credentials(sock)[0]


def peer_uid(sock: socket.socket) -> int | None:
    """The user of the process at the other end of a Unix socket (None when unknown: not a Unix socket)."""
    return peer_credentials(sock)[1]


def peer_credentials(sock: socket.socket) -> tuple[int, int | None]:
    """SO_PEERCRED's pid and uid of a Unix socket's other end ((0, None) when unknown)."""
    if sock.family != socket.AF_UNIX:
        return 0, None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return 0, None
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def relayed(sock: socket.socket) -> bool:
    """Whether a Unix socket's other end is this server's own TLS relay (this process, or the listener that
    started it), not a client on this host: such a connection comes from another host, so it gets no
    shared memory."""
    return peer_pid(sock) in (os.getpid(), os.getppid())


def relay(tls: TlsSocket, plain: socket.socket) -> None:
    """Bytes both ways between a TLS connection and the plain socket the session reads, until either
    side ends; then the other is closed too."""
    raw = tls.raw

    def drain() -> None:
        """Every whole record received so far, decrypted, to the session (what the handshake read beyond
        itself, the client's hello, included)."""
        while True:
            try:
                data = tls.obj.read(CHUNK)
            except ssl.SSLWantReadError:
                return
            if not data:
                raise EOFError
            plain.sendall(data)

    try:
        drain()
        while True:
            ready, _, _ = select.select([raw, plain], [], [])
            if raw in ready:
                tls._feed()
                drain()
                tls._flush()  # (a key update the peer asked for)
            if plain in ready:
                data = plain.recv(CHUNK)
                if not data:
                    break
                tls.send(data)
    except (EOFError, OSError, ssl.SSLError):
        pass
    finally:
        for s in (plain, tls):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def server_tls(settings) -> tuple[ServerTls, str]:
    """The listening socket's TLS from the settings, and a line for the log that says what it is."""
    cert, key = settings.tls_cert, settings.tls_key
    if settings.tls == "auto" and not cert:
        made = self_signed(Path(settings.tls_dir))  # (apart from the module cache: a secret is no cache)
        cert, key = str(made[0]), str(made[1])
    elif settings.tls not in ("", "auto"):
        raise RuntimeError(f"unknown TLS setting {settings.tls!r} (CUWIRE_TLS: auto, or give a certificate)")
    tls = ServerTls(cert, key, token=bool(settings.token))
    if tls.context is not None:
        pin = certificate_fingerprint(Path(cert))
        return tls, (f"TLS on (certificate {cert}); clients connect with CUWIRE_TLS_FINGERPRINT={pin} or with a "
                     "CA file that signed it (CUWIRE_TLS_CA)")
    if settings.token:
        return tls, ("no TLS: clients on other hosts are refused (the token would cross the network in the clear); "
                     "give --tls-cert and --tls-key, or --tls auto")
    return tls, "no TLS and no token: anyone who reaches this port can use the GPUs"
