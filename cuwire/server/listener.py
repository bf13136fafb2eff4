"""The listener: with isolation=process, each session gets a process of its own, on the listener's port.

The listener accepts a connection, reads the client's Hello (within HELLO_TIMEOUT) and checks it
(token, versions); then it hands the connection itself (the socket's descriptor, with the Hello and the
session's name, over a Unix socket) to a session process (`python -m cuwire.server --one-session`) that it
started ahead, imports done, so that the client does not wait for Python's start (make_spare). The session
process answers the Hello and serves the session; the client never connects anywhere else, so a server
published as one port (a firewall, `docker run -p`, a Kubernetes Service) serves remote clients. A
session's stripes (more connections for large payloads, cuwire/wire/stripes.py) come the same way: their
hello names the session's join key, which the listener made, and it hands them to that session's
process on the same channel; so does the client's new connection when one of the session's dropped (a
resume, server/resume.py). The listener never touches CUDA: one client's crash, leak or bad pointer
stays in its own process and CUDA context.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from cuwire import SAFE_PATH
from cuwire.generated import cuwire_pb2 as pb
from cuwire.server import metrics
from cuwire.server.resume import unknown_key
from cuwire.server.service import LOCAL_PEER, check_hello, printable, read_batch
from cuwire.server.visible_devices import server_exposes
from cuwire.settings import Settings
from cuwire.wire.stripes import shut
from cuwire.wire.transport import HELLO_MAX, Connection, TransportError

log = logging.getLogger("cuwire.server")
START_TIMEOUT = 60.0
HELLO_TIMEOUT = 10.0  # a connection that says nothing is closed after this long
HANDOFF_SIZE = 1 << 20  # the largest handoff message: the peer's address and the Hello
REAP_TIMEOUT = 5.0  # how long a session process whose channel closed is waited for, to say how it ended
MOST_OFFERS = 64  # the keys of a session's copies between servers routed to it at once (offered)


def send_handoff(channel: socket.socket, sock: socket.socket, peer: str, hello: bytes, join_key: bytes = b"",
                 name: str = "") -> None:
    """Give the session process a client's connection, its address and its Hello: the session's own, with
    the session's join key and name, or one of its stripes (no key, no name)."""
    socket.send_fds(channel, [b"\0".join((peer.encode(), join_key.hex().encode(), name.encode(), hello))],
                    [sock.fileno()])


def receive_handoff(channel: socket.socket) -> tuple[socket.socket, str, bytes, bytes, str]:
    """The session process's end of send_handoff: (connection, peer, hello, join key, session name)."""
    message, fds, _flags, _addr = socket.recv_fds(channel, HANDOFF_SIZE, 1)
    if not fds:
        raise RuntimeError("the listener handed over no connection")
    peer, key, name, hello = message.split(b"\0", 3)
    return socket.socket(fileno=fds[0]), peer.decode(), hello, bytes.fromhex(key.decode()), name.decode()


def host_of(peer: str) -> str:
    """The client's address without its port ("10.0.0.7:51234" -> "10.0.0.7"; the Unix socket as it is)."""
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() else peer


class Listener:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.children: dict[str, tuple[subprocess.Popen, str]] = {}  # session -> its process, its client's host
        self.lock = threading.Lock()
        self.count = 0
        self.figures = metrics.Figures()  # what GET /metrics shows (metrics.py)
        self.socket_server = None  # the accepting SocketServer, for its refusals (run_listener sets it)
        self.nvml_uuids: list[str] = []  # the GPUs a server given some of its machine's exposes (probe)
        self.exposed: list[str] = []  # the UUIDs of the GPUs the server exposes, in its numbering (probe)
        self.heard: dict[str, tuple[float, subprocess.Popen]] = {}  # session -> (its last report, its process)
        self.joins: dict[bytes, socket.socket] = {}  # a session's join key -> the channel to its process
        self.offers: dict[bytes, socket.socket] = {}  # an offer's key -> its session's channel (peer_copy.py)
        self.offered_by: dict[str, list[bytes]] = {}  # session -> the keys of its offers in `offers`
        # a session process started ahead, its imports done, waiting for the next client (take_spare)
        self.spare: tuple[subprocess.Popen, socket.socket] | None = None
        self.stopping = False

    def session_command(self, *extra: str) -> list[str]:
        return [sys.executable, *SAFE_PATH, "-m", "cuwire.server", *extra]

    def session_env(self, name: str) -> dict[str, str]:
        env = {**os.environ, **self.settings.to_env()}
        env.update(CUWIRE_ISOLATION="thread", CUWIRE_SESSION_NAME=name)
        return env

    def spawn(self) -> tuple[subprocess.Popen, socket.socket]:
        """A session process, and the channel its client will come on (it learns its name with the client)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            nvml = ["--nvml-uuids", ",".join(self.nvml_uuids)] if self.nvml_uuids else []
            proc = subprocess.Popen(self.session_command("--one-session", "--handoff-fd", str(theirs.fileno()), *nvml),
                                    env=self.session_env(""), pass_fds=[theirs.fileno()])
        # reaped as soon as it ends, so no zombie waits for the next session
        threading.Thread(target=proc.wait, name=f"cuwire-reap-{proc.pid}", daemon=True).start()
        return proc, ours

    def make_spare(self) -> None:
        """Start the next client's session process now: its Python start and imports (about half a second,
        more where no bytecode is cached) are then paid before that client comes, not after its hello."""
        made = self.spawn()
        with self.lock:
            if self.spare is None and not self.stopping:
                self.spare, made = made, None
        if made is not None:
            made[0].terminate()
            made[1].close()

    def take_spare(self) -> tuple[subprocess.Popen, socket.socket]:
        """The spare session process (or a new one, where it is gone), and the next one started."""
        with self.lock:
            spare, self.spare = self.spare, None
        if spare is not None and spare[0].poll() is not None:
            spare[1].close()
            spare = None
        threading.Thread(target=self.make_spare, name="cuwire-spare", daemon=True).start()
        return spare or self.spawn()

    def probe(self) -> list[str]:
        """Open the backend once in a child (the listener itself never does): fail early and clearly when
        there is no GPU; else the devices, for the log."""
        r = subprocess.run(self.session_command("--probe"), env=self.session_env("probe"), text=True,
                           capture_output=True, timeout=START_TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().removeprefix("cuwire server: ") or "the backend did not start")
        lines = r.stdout.splitlines()
        self.exposed = [line.split("\t")[1] for line in lines if "\t" in line]  # (a check's answer)
        if server_exposes(self.settings) is not None:  # some of the machine's GPUs:
            self.nvml_uuids = self.exposed  # NVML shows those only
        return lines

    def handle(self, sock: socket.socket, peer: str) -> None:
        """One new connection: its Hello, checked here; then the connection goes to a session process.
        Before the hello is read, the connection costs HELLO_MAX bytes at most and lives HELLO_TIMEOUT at
        most, however slowly its bytes come (a deadline for the whole hello, not for each byte)."""
        conn = Connection(sock, peer)
        deadline = threading.Timer(HELLO_TIMEOUT, shut, args=(sock,))
        deadline.start()
        try:
            sock.settimeout(HELLO_TIMEOUT)
            if metrics.is_http(sock):  # GET /metrics or /healthz, on the same port
                metrics.answer_http(sock, self.figures, self.open_sessions(), self.busy(), self.draining())
                return
            message, _ = conn.receive(max_payload=0, max_message=HELLO_MAX)
            deadline.cancel()
            hello = read_batch(conn, message, hello=True)
            if hello is None:
                self.figures.refuse("protocol")
                return
            if conn.pending():  # the client must wait for its welcome: bytes beyond the hello would be lost
                self.figures.refuse("protocol")
                conn.send(pb.Reply(error="a session sends nothing after its hello until it is welcomed",
                                   refusal=pb.PROTOCOL).SerializeToString())
                return
            refusal = check_hello(self.settings, hello.hello)
            if refusal is not None:
                self.figures.refuse("token" if refusal.refusal == pb.TOKEN else "version")
                conn.send(refusal.SerializeToString())
                return
            if hello.hello.check:  # only checked: no session (its GPUs, for a device list's client)
                conn.send(pb.Reply(devices=self.exposed).SerializeToString())
                return
            sock.settimeout(None)
            if hello.hello.join:
                self.join(sock, peer, hello.hello, message, conn)
                return
            full = self.full(peer)
            if full:
                self.figures.refuse("busy")
                log.warning("refused a session from %s: %s", peer, full)
                conn.send(pb.Reply(error=f"the server is busy: {full}; try again when one ends",
                                   refusal=pb.BUSY).SerializeToString())
                return
            self.start_session(sock, peer, hello.hello, message)
        except (TransportError, OSError, EOFError) as e:
            log.info("connection from %s closed before a session began (%s)", peer, e or type(e).__name__)
        finally:
            deadline.cancel()
            conn.close()  # the session process has its own copy of the connection

    def full(self, peer: str) -> str:
        """Why a new session from `peer` may not start ("" when it may): CUWIRE_MAX_SESSIONS, or
        CUWIRE_MAX_SESSIONS_PER_HOST for its address. Clients on this host's Unix socket count towards the
        first only: they are trusted as any local user of the GPU is (docs/security.md)."""
        most, per_host = self.settings.max_sessions, self.settings.max_sessions_per_host
        with self.lock:
            live = [host for proc, host in self.children.values() if proc.poll() is None]
        if most and len(live) >= most:
            return f"it serves {most} sessions at once (CUWIRE_MAX_SESSIONS)"
        if per_host and peer != LOCAL_PEER and live.count(host_of(peer)) >= per_host:
            return f"it serves {per_host} sessions at once to {host_of(peer)} (CUWIRE_MAX_SESSIONS_PER_HOST)"
        return ""

    def join(self, sock: socket.socket, peer: str, hello: pb.Hello, message: bytes, conn: Connection) -> None:
        """A stripe, or a server fetching a copy: to the process of the session it names, which checks and
        answers it."""
        with self.lock:  # (an offer's key serves once: peer_copy.py)
            channel = self.offers.pop(hello.join, None) if hello.peer_copy else self.joins.get(hello.join)
        try:
            if channel is None:
                raise OSError("no open session has that join key")
            send_handoff(channel, sock, peer, message)
        except OSError as e:
            log.warning("refused a connection joining a session from %s: %s", peer, e.strerror or e)
            why = "no offer has that key (fetched, expired or never made)" if hello.peer_copy else unknown_key(hello)
            conn.send(pb.Reply(error=f"the connection was refused: {why}", refusal=pb.PROTOCOL).SerializeToString())

    def start_session(self, sock: socket.socket, peer: str, hello: pb.Hello, message: bytes) -> None:
        with self.lock:
            self.children = {n: c for n, c in self.children.items() if c[0].poll() is None}  # the ended ones go
            self.count += 1
            name = str(self.count)
        key = os.urandom(16)  # what the session's more connections name (stripes, host functions)
        proc, ours = self.take_spare()
        with self.lock:
            self.children[name] = (proc, host_of(peer))
            self.figures.started += 1
        with self.lock:  # before the handoff: the session's welcome, which brings the key, may come back at once
            self.joins[key] = ours
            # watched from its start (watch): a process stopped before its first report is frozen too
            self.heard[name] = (time.monotonic(), proc)
        try:
            send_handoff(ours, sock, peer, message, key, name)
        except OSError:
            with self.lock:
                self.joins.pop(key, None)
            ours.close()
            raise
        # the session process reports its figures on the same channel until it ends
        threading.Thread(target=self.read_reports, args=(ours, name, proc, key), name=f"cuwire-reports-{name}",
                         daemon=True).start()
        log.info("session %s for pid %d on %s (%s): process %d", name, hello.pid,
                 printable(hello.host), peer, proc.pid)

    def read_reports(self, channel: socket.socket, name: str, proc: subprocess.Popen, key: bytes) -> None:
        """A session process's reports (metrics.py), until it ends."""
        with channel:
            while True:
                try:
                    data = channel.recv(HANDOFF_SIZE)
                except OSError:
                    break
                if not data:
                    break
                report = metrics.decode_report(data)
                if report is not None and "offer" in report:  # a copy's key (peer_copy.py): its fetcher comes here
                    self.offered(name, report["offer"], channel)
                elif report is not None:
                    self.figures.report(name, report)
                    with self.lock:
                        self.heard[name] = (time.monotonic(), proc)
        with self.lock:
            self.heard.pop(name, None)
            self.joins.pop(key, None)
            for offer in self.offered_by.pop(name, []):
                self.offers.pop(offer, None)
        self.figures.ended(name)
        say_how_it_ended(name, proc)

    def offered(self, name: str, key: str, channel: socket.socket) -> None:
        """A session's offer (peer_copy.py): a connection naming its key goes to that session's process. The
        last MOST_OFFERS a session made are kept (an older key has expired there, or was fetched)."""
        try:
            offer = bytes.fromhex(key)
        except (TypeError, ValueError):
            return
        with self.lock:
            kept = self.offered_by.setdefault(name, [])
            kept.append(offer)
            self.offers[offer] = channel
            while len(kept) > MOST_OFFERS:
                self.offers.pop(kept.pop(0), None)

    def watch(self, stop: threading.Event) -> None:
        """Kill a session process that stopped reporting (settings.frozen_after): frozen, its client would
        wait for good; killed, the client's connection ends and its program gets an error at once."""
        limit = self.settings.frozen_after
        if limit <= 0:
            return
        while not stop.wait(min(1.0, limit / 4)):
            now = time.monotonic()
            with self.lock:
                frozen = [(name, proc) for name, (at, proc) in self.heard.items()
                          if now - at > limit and proc.poll() is None]
                for name, _ in frozen:
                    del self.heard[name]
            for name, proc in frozen:
                log.warning("session %s (process %d) has not reported for %.0f s: frozen; killed, so that its "
                            "client gets an error instead of waiting (CUWIRE_FROZEN_AFTER)", name, proc.pid, limit)
                proc.kill()

    def open_sessions(self) -> int:
        with self.lock:
            return sum(1 for proc, _ in self.children.values() if proc.poll() is None)

    def draining(self) -> bool:
        return self.socket_server is not None and self.socket_server.draining.is_set()

    def busy(self) -> int:
        return self.socket_server.busy if self.socket_server is not None else 0

    def stop(self) -> None:
        """End every session process (each frees its session's memory on SIGTERM), and the spare."""
        with self.lock:
            self.stopping = True
            spare, self.spare = self.spare, None
            children = [proc for proc, _ in self.children.values() if proc.poll() is None]
        if spare is not None:
            spare[1].close()  # (its end of the channel closes: it ends without a session)
            children.append(spare[0])
        for c in children:
            c.terminate()
        for c in children:
            try:
                c.wait(15)
            except subprocess.TimeoutExpired:
                c.kill()


def say_how_it_ended(name: str, proc: subprocess.Popen) -> None:
    """A session process that a signal ended (a crash in the driver or the server's code: SIGSEGV, SIGABRT;
    the kernel's OOM killer: SIGKILL) says so in the log, by the signal's name: its client only sees its
    connection drop. What the process held on the GPU went with it (the driver frees a dead process's)."""
    try:
        code = proc.wait(REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        return  # (its channel closed, yet it runs on: the drain or the frozen-session watch ends it)
    if code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
        log.warning("session %s: its process %d ended by %s; its client's calls fail, and what it held on the "
                    "GPU is freed with it", name, proc.pid, how)
