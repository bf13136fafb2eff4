"""When a session compresses what it sends (CUWIRE_COMPRESS): off, on, or auto (the default).

zstd turns a slow link into a faster one for data that compresses (sparse tensors, integers, text) and
costs more than it saves on a fast one: level 3 compresses a few hundred MB/s per core, loopback TCP
carries several GB/s, and shared memory (a server on this host) more. So:

- off: never;
- on (or zstd): every message and payload of at least CUWIRE_COMPRESS_MIN bytes, both ways (the client
  asks the server to compress large results too);
- auto: never on a Unix socket; over TCP, the connection times each large payload that goes uncompressed
  (transport.Connection.rate: a received one from its first bytes on, so the server's work before it does
  not count), and the client compresses payloads (and large messages) while the best of the last
  AUTO_SAMPLES rates is below AUTO_SLOW bytes per second. While compressing, a payload that shrank by less
  than a tenth means the data does not compress: the next AUTO_BACKOFF large payloads go as they are,
  and the next one uncompressed is timed again.

Before a large payload is compressed, samples of it are, timed (`pays`): it is compressed only where
compressing it, sending what is left and decompressing it take less time than sending it as it is over a
link of the measured rate (the client tells the server its rate with each batch that asks for compressed
results). Anything else goes as it is, streamed and striped at the link's full speed.

The policy is plain Python, so tests drive it with made-up rates (tests/test_compression.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import zstandard

MODES = ("off", "on", "zstd", "auto")
AUTO_SLOW = 400e6  # bytes per second: below this, zstd (level 3, every core) wins on compressible data
AUTO_SAMPLES = 4  # the link counts as slow when the best of its last this many rates is
AUTO_BACKOFF = 16  # large payloads sent as they are after one that did not compress
POOR = 0.9  # compressed/raw above this: the data does not compress
WINDOW = 8 << 20  # the largest zstd window a peer's frame may ask: level 3 needs 2 MiB at most


@dataclass
class Policy:
    mode: str  # off, on, zstd, auto
    local: bool = False  # a Unix socket: never worth it
    minimum: int = 64 << 10  # CUWIRE_COMPRESS_MIN
    slow: bool = False  # auto: the link was measured slow
    backoff: int = 0  # auto: large payloads still to send as they are (the last did not compress)
    rates: list[float] = field(default_factory=list)  # auto: the link's last measured rates
    level: int = 3
    compressor: zstandard.ZstdCompressor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"CUWIRE_COMPRESS must be one of {', '.join(MODES)}, not {self.mode!r}")
        self.compressor = zstandard.ZstdCompressor(level=self.level, threads=-1)

    @property
    def always(self) -> bool:
        return self.mode in ("on", "zstd")

    def active(self) -> bool:
        """Whether large messages and payloads are compressed now (and large results asked for so)."""
        if self.mode == "off" or (self.mode == "auto" and self.local):
            return False
        return self.always or (self.slow and self.backoff == 0)

    def wants(self, size: int) -> bool:
        """Whether `size` bytes (a message or a payload) go compressed."""
        return size >= self.minimum and self.active()

    def compress(self, data: bytes) -> bytes:
        return self.compressor.compress(data)

    @property
    def link_rate(self) -> float:
        """The link's best measured rate, bytes per second (0: none measured yet)."""
        return max(self.rates, default=0.0)

    def pays(self, data) -> bool:
        """Whether a large payload that `wants` compressing goes compressed: always with mode on, else where
        that saves time on this link (`pays`)."""
        return self.always or pays(data, self.link_rate)

    def observe(self, raw: int, wire: int, compressed: bool, rate: float) -> None:
        """After an exchange that moved `raw` bytes of payload (both ways, uncompressed), `wire` of them on
        the wire; `compressed`: whether a part went compressed; `rate`: the link's bytes per second while a
        large payload moved uncompressed (transport.Connection.rate), 0 when none did."""
        if self.mode != "auto" or self.local or raw < self.minimum:
            return
        if compressed:
            if wire > POOR * raw:
                self.backoff = AUTO_BACKOFF
            return
        if self.backoff:
            self.backoff -= 1
            if self.backoff:
                return
        if rate > 0:
            # the best of the last few: one payload that waited on the peer's GPU does not make a link slow
            self.rates = (self.rates + [rate])[-AUTO_SAMPLES:]
            self.slow = max(self.rates) < AUTO_SLOW


SAMPLE = 128 << 10  # bytes of each of the three samples `pays` compresses
_sampler = zstandard.ZstdCompressor(level=3)  # the level payloads are compressed at, on one core
_sampler_lock = threading.Lock()  # a compressor serves one thread at a time (sessions in threads share it)


def pays(data, link_rate: float) -> bool:
    """Whether compressing `data` (anything with the buffer protocol) before a link of `link_rate` bytes per
    second (0: not measured, taken as AUTO_SLOW) saves time, judged from three samples (its start, middle
    and end) compressed and timed here: compressing, sending what is left and decompressing (about as
    fast) must take less than sending it as it is. Data that shrinks by less than a tenth never pays."""
    view = memoryview(data).cast("B")
    return samples_pay([view[start:start + n] for start, n in sample_spans(len(view))], link_rate)


def sample_spans(size: int) -> list[tuple[int, int]]:
    """Where `pays` samples `size` bytes: (start, length) of its start, middle and end, or all of it."""
    if size <= 3 * SAMPLE:
        return [(0, size)]
    return [(0, SAMPLE), ((size - SAMPLE) // 2, SAMPLE), (size - SAMPLE, SAMPLE)]


def samples_pay(samples: list, link_rate: float) -> bool:
    """`pays`, judged from samples already taken (sample_spans says where): a payload still on the GPU
    is sampled without gathering it first."""
    raw = sum(len(s) for s in samples)
    with _sampler_lock:
        start = time.perf_counter()
        ratio = sum(len(_sampler.compress(s)) for s in samples) / raw
        speed = raw / max(time.perf_counter() - start, 1e-9)
    return ratio < POOR and ratio + 2 * (link_rate or AUTO_SLOW) / speed < 1


def decompressor() -> zstandard.ZstdDecompressor:
    """A decompressor for the peer's frames. A frame that asks for a window over WINDOW is refused, so that
    decompressing one costs this side a small fixed amount of memory beside its output. (One a thread:
    a decompressor is not safe to share between threads.)"""
    return zstandard.ZstdDecompressor(max_window_size=WINDOW)


def decompress_into(decompressor: zstandard.ZstdDecompressor, data, buffers: list, limit: int) -> tuple[bytes, int]:
    """A zstd frame from the peer, decompressed straight into `buffers` (writable, filled in order) with what
    is left over returned, at most `limit` bytes in all: a large result goes into the program's memory
    without a copy in between. Returns (the rest, bytes put into buffers). Raises ValueError as decompress."""
    filled = 0
    try:
        size = zstandard.frame_content_size(data)
        if size > limit:
            raise ValueError(f"it would decompress to {size} bytes, over the limit of {limit}")
        most = size if size >= 0 else limit  # (a known size bounds what is read, and allocated, below)
        reader = decompressor.stream_reader(data)
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            while len(view):
                n = reader.readinto(view)
                if n == 0:
                    return b"", filled
                filled += n
                view = view[n:]
        rest = reader.read(max(most - filled, 0) + 1)
    except zstandard.ZstdError as e:
        raise ValueError(str(e)) from None
    if filled + len(rest) > limit:
        raise ValueError(f"it decompressed to more than the limit of {limit} bytes")
    return rest, filled


def decompress(decompressor: zstandard.ZstdDecompressor, data: bytes, limit: int) -> bytes:
    """A zstd frame from the peer, decompressed to at most `limit` bytes: a small frame must not make this
    side allocate gigabytes. Raises ValueError (with zstd's reason) for one over the limit or malformed."""
    return decompress_into(decompressor, data, [], limit)[0]


class Inflow:
    """A compressed payload decompressed as its buffers ask for it. Compressed bytes are pulled from
    `source` (an object with read(n): the payload still on the connection) as zstd needs them, a small
    window at a time: neither the compressed payload nor the decompressed one is ever held whole, and
    the bytes a call takes are the call's own sizes, checked before they are asked for."""

    def __init__(self, decompressor: zstandard.ZstdDecompressor, source) -> None:
        self.reader = decompressor.stream_reader(source, read_across_frames=False)
        self.given = 0

    def read_into(self, view) -> None:
        """Exactly len(view) more decompressed bytes into view. Raises ValueError for a frame that is
        malformed, asks for too large a window, or ends short."""
        view = memoryview(view).cast("B")
        got = 0
        try:
            while got < len(view):
                n = self.reader.readinto(view[got:])
                if n == 0:
                    raise ValueError(f"it ended after {self.given + got} bytes, {len(view) - got} short of "
                                     f"what the call's buffers take")
                got += n
        except zstandard.ZstdError as e:
            raise ValueError(str(e)) from None
        self.given += got


def bound(size: int) -> int:
    """The most bytes zstd makes of `size` bytes (ZSTD_COMPRESSBOUND): what a compressed payload may take."""
    return size + (size >> 8) + ((128 << 10) - size >> 11 if size < 128 << 10 else 0)
