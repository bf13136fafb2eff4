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


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SessionStream:
    """A session's connection, resumable: made once the welcome went (CuWireServer.welcome); or one of its
    stripes (`main`: the session's own), made as it joins (stripe_joined)."""

    def __init__(self, settings: Settings, name: str, conn: Connection, from_relay: bool,
                 stopping: threading.Event, main: SessionStream | None = None):
        self.settings, self.grace, self.name, self.conn = settings, settings.resume, name, conn
        self.stopping, self.main = stopping, main
        self.from_relay = from_relay  # TLS, ended by this server's relay: a resume must come so too
        self.pid = 0 if from_relay else peer_pid(conn.sock)  # a client on this host: resumed only while alive
        self.stream = Stream(records_ffi, records_lib, settings.resume_window, resume=self.resume)
        if main is not None:  # a stripe: only Python moves its bytes, a part at a time (stripes.py)
            self.stream.io_lock = threading.Lock()
        conn.stream = self.stream
        self.ending = False  # the program said it is ending (Batch.ending): a drop ends the session
        self.offers: queue.Queue[tuple[Connection, pb.Hello]] = queue.Queue()
        self.lock = threading.Lock()
        self.resuming = False
        self.stripes: dict[int, SessionStream] = {}  # the session's stripes', by number

    def stripe_joined(self, number: int, conn: Connection) -> None:
        """A stripe joined the session: it resumes as the session's connection does."""
        self.stripes[number] = SessionStream(self.settings, f"{self.name} (stripe {number})", conn,
                                             self.from_relay, self.stopping, main=self)

    def offer_to(self, hello: pb.Hello, conn: Connection) -> str:
        """A resume hello, to the session's connection or to the stripe it names; why not ("" when offered)."""
        if not hello.stripes:
            return self.offer(conn, hello)
        stripe = self.stripes.get(hello.stripe)
        return stripe.offer(conn, hello) if stripe else f"the session has no stripe {hello.stripe} now"

    def offer(self, conn: Connection, hello: pb.Hello) -> str:
        """A client's resume hello, on a new connection (its key checked): given to the thread that waits
        on this connection, which answers it. The old connection is shut, so that a thread still waiting on
        it (the drop not seen yet: a half-open connection) takes the offer at once. A stripe that no thread
        moves a payload on (the client lost bytes of a part this side finished sending) takes it here.
        Why not ("" when offered)."""
        if self.grace <= 0:
            return "this server does not resume sessions (CUWIRE_RESUME=0)"
        if conn.sock.family != self.conn.sock.family or (relayed_tls(conn) != self.from_relay):
            return "a session resumes over the transport it began on (TLS when it was)"
        with self.lock:
            self.offers.put((conn, hello))
            if not self.resuming:
                shut(self.conn.sock)
        idle = self.stream.io_lock
        if idle is not None and idle.acquire(blocking=False):  # (released by the thread that takes it)
            threading.Thread(target=self._take_idle, name=f"cuwire-resume-{self.name}", daemon=True).start()
        return ""

    def _take_idle(self) -> None:
        """The offer, taken for a stripe no thread moves a payload on (its io_lock held, released here): in a
        thread of its own, as sending what the client lacks may wait until the client reads it, and the
        session's other connections may have to resume meanwhile."""
        try:
            try:
                new, hello = self.offers.get_nowait()
            except queue.Empty:
                return  # (a thread that moves a payload took it)
            self._take(self.conn, new, hello)
        finally:
            self.stream.io_lock.release()

    def resume(self, conn: Connection) -> bool:
        """The connection broke: wait for the client's resume; True once its new connection is in place
        and what it lacked was sent again."""
        if self.grace <= 0 or self.ending or (self.main and self.main.ending) or self.stopping.is_set():
            return False
        if self.pid and not alive(self.pid):
            log.info("session %s: its client (pid %d) is gone", self.name, self.pid)
            return False
        with self.lock:
            self.resuming = True
        if self.main is not None:
            # a stripe broke: the client may wait on the session's connection meanwhile (its part sent in
            # full as far as it knows), so that one is shut too, which brings the client back on each
            shut(self.main.conn.sock)
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
