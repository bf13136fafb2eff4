"""Coverage-guided fuzzing (atheris) of what the server does with bytes from the wire: a frame's
message parsed as a Batch, its queued records and its call run by a session of the emulated device,
its payload read as the call uses it. Anything but a Reply back is a crash.

    python tests/fuzz/fuzz_session.py [-max_total_time=60] [tests/fuzz/corpus]
"""

from __future__ import annotations

import io
import logging
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.generated import server_handlers as generated
    from cuwire.server import custom
    from cuwire.server.bulk import IncomingPayload
    from cuwire.server.records import CALL_REPLY, RECORD_HEADER
    from cuwire.server.service import CuWireServer, read_batch
    from cuwire.server.session import Session
    from cuwire.settings import Settings
    from cuwire.wire.transport import MAGIC

import fields  # noqa: E402  (tests/fuzz/fields.py, beside this file)


class Bytes:
    """The payload side of a connection, from the fuzzer's bytes."""

    magic = MAGIC  # of the frame received (a records frame goes to Session.run_call instead)

    def __init__(self, data: bytes):
        self.stream = io.BytesIO(data)

    def read_into(self, view: memoryview) -> None:
        view[:] = self.stream.read(len(view)).ljust(len(view), b"\0")

    def read_payload(self, n: int) -> bytearray:
        return bytearray(self.stream.read(n).ljust(n, b"\0"))

    def send(self, message: bytes) -> None:
        pass


SETTINGS = Settings(backend="emulated", cache_dir=Path(tempfile.mkdtemp()), max_buffer=1 << 20,
                    session_memory=64 << 20)
SERVER = CuWireServer(SETTINGS)
SESSION = Session(SERVER, "fuzz", pb.Hello(), "fuzz")


CALLS = sorted(generated.HANDLERS) + sorted(custom.OPS)
RECORDS = sorted(generated.RECORDS) + sorted(custom.RECORD_OPS)


def value(fdp, field) -> object:
    """A value for one field: mostly ones the session knows (its allocations and handles), else anything."""
    v = fields.plain(fdp, field, 64)
    if v is not fields.NOT_PLAIN:
        return v
    known = [0, 1, 2, *SESSION.allocations, *(h for hs in SESSION.handles.values() for h in hs)]
    lo, hi = fields.int_range(field)
    choice = fdp.ConsumeIntInRange(0, 3)
    if choice == 0 and known:
        v = known[fdp.ConsumeIntInRange(0, len(known) - 1)] + fdp.ConsumeIntInRange(-8, 4096)
    elif choice == 1:
        v = fdp.ConsumeIntInRange(0, 1 << 22)
    else:
        v = fdp.ConsumeIntInRange(lo, hi)
    return min(max(v, lo), hi)


def arguments(fdp, cls) -> bytes:
    """A well-formed <name>_Args with fuzzed values (a call that parses reaches its handler)."""
    args = cls()
    for field in cls.DESCRIPTOR.fields:
        if fdp.ConsumeBool():
            continue
        v = value(fdp, field)
        if v is None:
            continue
        try:
            if field.is_repeated:
                getattr(args, field.name).extend([v] * fdp.ConsumeIntInRange(0, 4))
            else:
                setattr(args, field.name, v)
        except (TypeError, ValueError):
            pass
    return args.SerializeToString()


def records(fdp, most: int = 3) -> bytes:
    """A few queued records: known ids, mostly their right sizes."""
    out = b""
    for _ in range(fdp.ConsumeIntInRange(0, most)):
        fn = RECORDS[fdp.ConsumeIntInRange(0, len(RECORDS) - 1)]
        size = generated.RECORDS[fn][1].size if fn in generated.RECORDS else fdp.ConsumeIntInRange(0, 128)
        body = fdp.ConsumeBytes(size).ljust(size, b"\0")
        out += RECORD_HEADER.pack(fn, size) + body
    return out


def frame(fdp) -> bytes:
    """A Batch: a few queued records and one call or none."""
    batch = pb.Batch(no_reply=fdp.ConsumeIntInRange(0, 7) == 0)
    batch.records = records(fdp)
    if fdp.ConsumeBool():
        batch.fn = CALLS[fdp.ConsumeIntInRange(0, len(CALLS) - 1)]
        cls = (generated.HANDLERS.get(batch.fn) or custom.OPS[batch.fn])[1]
        batch.args = arguments(fdp, cls)
    return batch.SerializeToString()


def one_frame(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 3) == 0:  # a records frame (client/wire.c): records, the last one the call
        reply = SESSION.run_call(records(fdp, 4) if fdp.ConsumeIntInRange(0, 7) else fdp.ConsumeBytes(64))
        assert CALL_REPLY.size <= len(reply)
        return
    message = frame(fdp) if fdp.ConsumeIntInRange(0, 15) else fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512))
    payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 1 << 12))
    conn = Bytes(payload)
    batch = read_batch(conn, message, hello=False)
    if batch is None:
        return
    reply = SESSION.run(batch, IncomingPayload(conn, len(payload)))
    assert isinstance(reply, pb.Reply)
    for part in SESSION.payload_out:  # the reply's payload as it would be sent
        part.write_to(lambda b: None) if hasattr(part, "write_to") else bytes(part)
    SESSION.payload_out = []


if __name__ == "__main__":
    logging.getLogger("cuwire.server").setLevel(logging.CRITICAL)
    atheris.Setup(sys.argv, one_frame)
    atheris.Fuzz()
