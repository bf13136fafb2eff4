"""A session's connection as a byte stream that survives a drop (the C is cuwire/wire/stream.h).

Each side counts what it sent and received on the session's connection since the welcome, and keeps the
last bytes it sent (up to CUWIRE_RESUME_WINDOW). When the connection drops, the client connects again and
says, in a resume hello, how many bytes it received; the server answers with how many it received; each
then sends again what the other lacks, and both go on where they were, mid-frame if need be: the program
sees a delay. The server's session waits CUWIRE_RESUME seconds for the client to come back, its GPU
state intact, then ends as before. The client proves the session is its own with the key its welcome
gave (Welcome.join_key), over TLS when the session is.

A session that resumes has no stripes (more TCP connections for large payloads, stripes.py): a drop in the
middle of a striped payload could leave each side waiting on another connection than the one it lost, so its
payloads go on its one connection (CUWIRE_RESUME=0 gives the stripes back). The host-function connection is
resumed by its own numbering (client/callbacks.c, struct cw_host_post), and host functions posted through
the shared memory wait for the resume (shm_ring.h). Not resumed: a payload in flight through the shared
memory (a client on the server's host, whose Unix socket does not drop) when its socket hangs up.

Both the C and the Python of a side send on the connection, so the counts and the kept bytes live in C
(one `cw_stream` per session), and the Python side notes its own bytes there too (Connection.stream).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HEADER = Path(__file__).resolve().parent / "stream.h"


class Stream:
    """One side's counts and kept bytes, in its C module's `cw_stream` (`ffi`, `lib`: the client library's,
    or the server's records module). `resume(connection)` is the side's way back after a drop: it
    replaces the connection's socket and sends again what the peer lacks; True when it did."""

    def __init__(self, ffi: Any, lib: Any, window: int, resume=None):
        self.ffi, self.lib = ffi, lib
        self.c = lib.cw_stream_new(window)
        if self.c == ffi.NULL:
            raise MemoryError("no memory for the session's stream")
        self.resume = resume
        self.resumes = 0  # how many times the connection came back (--stats, the server's log)

    def sent(self, data) -> None:
        """Bytes about to go on the connection."""
        self.lib.cw_stream_sent(self.c, self.ffi.from_buffer(data), len(data))

    def received(self, n: int) -> None:
        self.lib.cw_stream_received(self.c, n)

    @property
    def sent_total(self) -> int:
        return self.lib.cw_stream_sent_total(self.c)

    @property
    def received_total(self) -> int:
        return self.lib.cw_stream_received_total(self.c)

    def since(self, start: int) -> list[memoryview] | None:
        """What was sent from stream offset `start` on (what the peer lacks), or None when more was in
        flight than the window keeps (or the peer claims more than was sent)."""
        ptrs, lens = self.ffi.new("const char *[2]"), self.ffi.new("uint64_t[2]")
        if self.lib.cw_stream_since(self.c, start, ptrs, lens, ptrs + 1, lens + 1) != 0:
            return None
        return [memoryview(self.ffi.buffer(ptrs[i], lens[i])) for i in range(2) if lens[i]]

    def close(self) -> None:
        if self.c != self.ffi.NULL:
            self.lib.cw_stream_free(self.c)
            self.c = self.ffi.NULL
