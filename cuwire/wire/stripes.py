"""Large payloads over several connections of one session at once (TCP only).

One TCP stream tops out at about 3.5 GB/s on loopback, well under what a GPU copies; four streams carry
about 10 GB/s, eight 15 (bench/tcp_streams.py, on the H100's host), and across a network several
streams also ride out one stream's losses. So a session over TCP may open extra connections, its
stripes, when it first moves a payload of MIN bytes or more: each one is a new connection to the
server's one port whose hello names the session's join key (Welcome.join_key, a secret the session's
own connection brought); the listener hands it to the session's process (server/listener.py).

A striped frame is the usual frame on the session's connection, magic MAGIC_STRIPED, whose payload
travels on the stripes instead: split() cuts it into contiguous parts, part i goes on stripe i after a
part header (u32 magic "CUWS", u32 the frame's number in its direction, u64 offset, u64 length), so a
stripe that fell out of step is found, not read as data. Each side moves its parts in threads of its
own, one per stripe (sockets release Python's lock). The server streams a striped copy to or from the
GPU a part per thread (server/bulk.py); anything else reads a striped payload in order (Reader).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

MAGIC_STRIPED = 0x34575543  # "CUW4": a frame whose payload is on the stripes
PART = struct.Struct("<IIQQ")
PART_MAGIC = 0x53575543  # "CUWS"
MIN = 8 << 20  # payloads this large are striped
ALIGN = 1 << 20  # parts start on this boundary (the last may be short)

Buffer = Any


class StripeError(Exception):
    """A stripe broke or fell out of step: the session cannot continue (transport.TransportError wraps it)."""


def split(size: int, count: int) -> list[tuple[int, int]]:
    """The parts of a `size`-byte payload over `count` stripes: (offset, length), at most `count` of them."""
    per = -(-size // max(count, 1))
    per = max(ALIGN, -(-per // ALIGN) * ALIGN)
    return [(offset, min(per, size - offset)) for offset in range(0, size, per)]


def slices(views: Sequence[memoryview], start: int, stop: int) -> list[memoryview]:
    """The pieces of `views`, laid end to end, that bytes [start, stop) fall in."""
    out, base = [], 0
    for view in views:
        end = base + len(view)
        if end > start and base < stop:
            out.append(view[max(start - base, 0):min(stop, end) - base])
        base = end
        if base >= stop:
            break
    return out


def in_parallel(work: Callable[[int], None], count: int, stripes: Sequence) -> None:
    """work(0..count-1), each in a thread of its own (0 in this one). If one fails, every stripe is shut
    down so that the others end at once instead of waiting on a peer that stopped; the first failure is
    raised."""
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 (raised again below, in the caller's thread)
            failures.append(e)
            for conn in stripes:
                shut(conn.sock)

    threads = [threading.Thread(target=run, args=(i,), name=f"cuwire-stripe-{i}", daemon=True)
               for i in range(1, count)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    if failures:
        e = failures[0]
        if isinstance(e, StripeError):
            raise e
        if isinstance(e, Exception):  # a connection that closed or broke (transport.TransportError, OSError)
            raise StripeError(f"a stripe of the session broke ({e or type(e).__name__})") from e
        raise e


def shut(sock: socket.socket) -> None:
    """End a connection at once, both ways: whatever waits on it (a read, a send) returns. (Stripes, the
    listener's hello deadline and the TLS handshake's use it.)"""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def send_header(conn, number: int, offset: int, length: int) -> None:
    conn.send_raw(PART.pack(PART_MAGIC, number & 0xFFFFFFFF, offset, length))


def read_header(conn, number: int, offset: int, length: int) -> None:
    """The part header that must come next on `conn`, checked."""
    head = bytearray(PART.size)
    try:
        conn.fill(memoryview(head))
    except EOFError:
        raise StripeError("a stripe closed before its part") from None
    magic, got_number, got_offset, got_length = PART.unpack(head)
    if (magic, got_number, got_offset, got_length) != (PART_MAGIC, number & 0xFFFFFFFF, offset, length):
        raise StripeError(f"a stripe is out of step: part ({got_number}, {got_offset}, {got_length}) where "
                          f"({number}, {offset}, {length}) was due")


def send(stripes: Sequence, number: int, size: int, payload: Sequence[Buffer]) -> None:
    """Send a striped frame's payload (its parts, as Connection.send takes them) on the stripes. A part
    that makes its bytes as it goes (server/bulk.py DeviceToHost) gives a range of them through
    write_span(send, start, stop, worker)."""
    spans = split(size, len(stripes))
    parts = []
    base = 0
    for part in payload:
        parts.append((base, part))
        base += len(part)

    def work(i: int) -> None:
        conn, (offset, length) = stripes[i], spans[i]
        send_header(conn, number, offset, length)
        for start, part in parts:
            lo, hi = max(offset, start), min(offset + length, start + len(part))
            if lo >= hi:
                continue
            if hasattr(part, "write_span"):
                part.write_span(conn.send_raw, lo - start, hi - start, i)
            else:
                conn.send_raw(memoryview(part).cast("B")[lo - start:hi - start])

    in_parallel(work, len(spans), stripes)


def receive(stripes: Sequence, number: int, size: int, views: Sequence[memoryview]) -> None:
    """Receive a striped frame's payload into `views` (laid end to end, size bytes in all), a stripe per
    thread."""
    spans = split(size, len(stripes))

    def work(i: int) -> None:
        conn, (offset, length) = stripes[i], spans[i]
        read_header(conn, number, offset, length)
        for view in slices(views, offset, offset + length):
            conn.fill(view)

    in_parallel(work, len(spans), stripes)


class Reader:
    """A striped payload read in order, by whoever reads payloads a piece at a time (the server's
    handlers): a part at a time, each from its stripe."""

    def __init__(self, stripes: Sequence, number: int, size: int):
        self.stripes, self.number = stripes, number
        self.spans = split(size, len(stripes))
        self.part, self.left = -1, 0  # the part being read, and its bytes not read yet
        self.started = False  # whether any of it was read (a striped copy takes it whole: server/bulk.py)

    def read_into(self, view: memoryview) -> None:
        self.started = True
        while len(view):
            if not self.left:
                self.part += 1
                if self.part >= len(self.spans):
                    raise StripeError("read past the end of a striped payload")
                offset, self.left = self.spans[self.part]
                read_header(self.stripes[self.part], self.number, offset, self.left)
            n = min(len(view), self.left)
            self.stripes[self.part].fill(view[:n])
            view, self.left = view[n:], self.left - n

    def parts(self) -> list[tuple[Any, int, int]]:
        """For one reader that takes the whole payload, a part per thread: (stripe, offset, length); each
        reader calls read_header(stripe, number, offset, length) first."""
        if self.started:
            raise StripeError("a striped payload taken whole after part of it was read")
        self.started = True
        self.part = len(self.spans)
        return [(self.stripes[i], offset, length) for i, (offset, length) in enumerate(self.spans)]
