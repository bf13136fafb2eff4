"""Coverage-guided fuzzing (atheris) of what the listener does with a connection before its session starts:
the bytes a client sends first, read as an HTTP request (/metrics, /healthz) or as a frame holding the
Hello, checked against the server's token and versions. The connection is a socket pair with the fuzzer's
bytes on the far end; the handoff to a session process is replaced by a note (no process starts). Anything
but a refusal, an answer or a handoff is a crash.

    python tests/fuzz/fuzz_preauth.py [-max_total_time=60] [tests/fuzz/preauth-corpus]
    python tests/fuzz/fuzz_preauth.py --seeds tests/fuzz/preauth-corpus   (write the seed inputs)
"""

from __future__ import annotations

import logging
import socket
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.server import listener
    from cuwire.settings import Settings
    from cuwire.wire.transport import HEADER, MAGIC

TOKEN = "fuzz-token-0123456789"
SETTINGS = Settings(backend="emulated", cache_dir=Path(tempfile.mkdtemp()), token=TOKEN)


class Listener(listener.Listener):
    """The listener up to the handoff: a hello that passes its checks is noted, not given a process."""

    def start_session(self, sock, peer, hello, message) -> None:
        self.handed_on += 1

    def join(self, sock, peer, hello, message, conn) -> None:
        self.handed_on += 1


LISTENER = Listener(SETTINGS)
LISTENER.handed_on = 0


def frame(message: bytes, payload: int = 0, magic: int = MAGIC) -> bytes:
    return HEADER.pack(magic, len(message), payload) + message


def hello(**fields) -> bytes:
    return frame(pb.Batch(hello=pb.Hello(**fields)).SerializeToString())


def seeds() -> dict[str, bytes]:
    return {
        "metrics": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "healthz": b"HEAD /healthz HTTP/1.0\r\n\r\n",
        "http-other": b"POST /x?y=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        "hello": hello(client_version="0.1.0", cuda_version="13.0", api_digest="x", token="wrong", pid=1, host="h"),
        "hello-check": hello(token=TOKEN, check=True),
        "hello-join": hello(token=TOKEN, join=b"k" * 32, stripe=1, stripes=4),
        "hello-trailing": hello(token="t") + b"more",
        "huge-header": HEADER.pack(MAGIC, 1 << 30, 1 << 40),
        "junk": b"\x00\x01\x02\x03" * 8,
    }


def TestOneInput(data: bytes) -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(data)
        theirs.shutdown(socket.SHUT_WR)
        ours.settimeout(5)
        LISTENER.handle(ours, "203.0.113.7:4242")  # closes `ours` itself
        theirs.settimeout(5)
        while theirs.recv(65536):  # what the listener answered
            pass
    finally:
        theirs.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--seeds"]:
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for name, data in seeds().items():
            (out / name).write_bytes(data)
        sys.exit(0)
    logging.disable(logging.CRITICAL)
    atheris.Setup([*sys.argv, "-max_len=65536"], TestOneInput)
    atheris.Fuzz()
