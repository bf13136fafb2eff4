"""The server's end of a session whose connection dropped: it waits for the client to come back (the
design: cuwire/wire/stream.py).

The session's thread, wherever its receive or send broke (Python's Connection, or records.c), calls
`SessionStream.resume`, which waits up to CUWIRE_RESUME seconds for the client's resume hello. That comes
like a stripe's: to the listener, which hands it to the session's process by its join key (in a server of
threads, to CuWireServer.join), then to `offer`. The new connection takes the old one's descriptor, so the
C loop and Python go on with the same number. Meanwhile the GPU runs what was queued; nothing is freed.

No resume is waited for when the program said it is ending (Batch.ending), when the server stops, or when
the client on this host is gone (a Unix socket's peer process that no longer exists).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server._records import ffi as records_ffi
from cuwire.server._records import lib as records_lib
from cuwire.settings import Settings
from cuwire.wire.stream import Stream
from cuwire.wire.stripes import shut
from cuwire.wire.tls import peer_pid, relayed
from cuwire.wire.transport import Connection, resend

log = logging.getLogger("cuwire.server")


def unknown_key(hello: pb.Hello) -> str:
    """Why a connection naming a join key no open session has is refused (the listener's and a server of
    threads' words): for a resume, what the client tells its program."""
    if hello.resume:
        return ("no open session has that key: it ended (its wait for a resume, CUWIRE_RESUME, ran out), or the "
                "server restarted")
    return "no open session has that join key"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SessionStream:
    """A session's connection, resumable: made once the welcome went (CuWireServer.welcome)."""

    def __init__(self, settings: Settings, name: str, conn: Connection, from_relay: bool,
                 stopping: threading.Event):
        self.grace, self.name, self.conn, self.stopping = settings.resume, name, conn, stopping
        self.from_relay = from_relay  # TLS, ended by this server's relay: a resume must come so too
        self.pid = 0 if from_relay else peer_pid(conn.sock)  # a client on this host: resumed only while alive
        self.stream = Stream(records_ffi, records_lib, settings.resume_window, resume=self.resume)
        conn.stream = self.stream
        self.ending = False  # the program said it is ending (Batch.ending): a drop ends the session
        self.offers: queue.Queue[tuple[Connection, pb.Hello]] = queue.Queue()
        self.lock = threading.Lock()
        self.resuming = False

    def offer(self, conn: Connection, hello: pb.Hello) -> str:
        """A client's resume hello, on a new connection (its key checked): given to the session's thread,
        which answers it. The old connection is shut, so that a thread still waiting on it (the drop not
        seen yet: a half-open connection) takes the offer at once. Why not ("" when offered)."""
        if self.grace <= 0:
            return "this server does not resume sessions (CUWIRE_RESUME=0)"
        if conn.sock.family != self.conn.sock.family or (relayed_tls(conn) != self.from_relay):
            return "a session resumes over the transport it began on (TLS when it was)"
        with self.lock:
            self.offers.put((conn, hello))
            if not self.resuming:
                shut(self.conn.sock)
        return ""

    def resume(self, conn: Connection) -> bool:
        """The connection broke: wait for the client's resume; True once its new connection is in place
        and what it lacked was sent again."""
        if self.grace <= 0 or self.ending or self.stopping.is_set():
            return False
        if self.pid and not alive(self.pid):
            log.info("session %s: its client (pid %d) is gone", self.name, self.pid)
            return False
        with self.lock:
            self.resuming = True
        try:
            return self._wait(conn)
        finally:
            with self.lock:
                self.resuming = False

    def _wait(self, conn: Connection) -> bool:
        log.info("session %s: the connection dropped; waiting up to %.0f s for its client to resume (CUWIRE_RESUME)",
                 self.name, self.grace)
        deadline = time.monotonic() + self.grace
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping.is_set():
                log.info("session %s: its client did not resume within %.0f s", self.name, self.grace)
                return False
            try:
                new, hello = self.offers.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.pid and not alive(self.pid):
                    return False
                continue
            taken = self._take(conn, new, hello)
            if taken is not None:
                return taken

    def _take(self, conn: Connection, new: Connection, hello: pb.Hello) -> bool | None:
        """Answer a resume hello and put its connection in the old one's place (under its descriptor), then
        send what the client lacks. True when done; False when it cannot resume (more was lost than the
        window keeps); None when the new connection broke too (another resume may come)."""
        missing = self.stream.since(hello.received)
        if missing is None:
            why = (f"the client received {hello.received} bytes of the session, and this server keeps only the "
                   "last CUWIRE_RESUME_WINDOW bytes it sent: more were in flight when the connection dropped")
            log.warning("session %s: cannot resume: %s", self.name, why)
            self._refuse(new, why)
            return False
        try:
            new.send(pb.Reply(welcome=pb.Welcome(session=self.name,
                                                 received=self.stream.received_total)).SerializeToString())
            new.sock.settimeout(None)
            os.dup2(new.sock.fileno(), conn.sock.fileno(), inheritable=False)
            new.sock.close()
            resend(conn.sock, missing)
        except OSError as e:
            log.info("session %s: a resume broke off (%s); waiting on", self.name, e)
            return None
        self.stream.resumes += 1
        log.info("session %s: resumed (%d bytes sent again)", self.name, sum(len(p) for p in missing))
        return True

    @staticmethod
    def _refuse(conn: Connection, why: str) -> None:
        try:
            conn.send(pb.Reply(error=f"the session cannot resume: {why}", refusal=pb.PROTOCOL).SerializeToString())
        except OSError:
            pass
        conn.close()


def relayed_tls(conn: Connection) -> bool:
    """Whether a connection is the plain end of this server's TLS relay (tls.relayed)."""
    return conn.sock.family == socket.AF_UNIX and relayed(conn.sock)
