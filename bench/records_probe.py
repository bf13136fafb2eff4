"""The server's side of queued calls alone: a batch of queued cuEventRecord records run by a session in
this process, timed per record and profiled (no client, no network).

    python3 bench/records_probe.py [--emulated] [--profile]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.server.records import RECORD_HEADER
from cuwire.server.service import CuWireServer
from cuwire.server.session import Session
from cuwire.settings import Settings

backend = "emulated" if "--emulated" in sys.argv else "cuda"
s = Session(CuWireServer(Settings(backend=backend, cache_dir=Path(tempfile.mkdtemp()))), "probe", pb.Hello(), "probe")
event = s.ffi.new("CUevent *")
assert s.lib.cuEventCreate(event, 0) == 0
handle = int(s.ffi.cast("uintptr_t", event[0]))
s.owns_handle("CUevent_st", handle)
fn = next(i for i, (name, _) in generated.RECORDS.items() if name == "cuEventRecord")
layout = generated.RECORDS[fn][1]
n = 20000
batch = pb.Batch(records=(RECORD_HEADER.pack(fn, layout.size) + layout.pack(handle, 0)) * n)
for _ in range(2):
    start = time.perf_counter()
    reply = s.run(batch)
    assert s.lib.cuCtxSynchronize() == 0 and not reply.queued_error
    print(f"queued cuEventRecord, run by the server: {(time.perf_counter() - start) / n * 1e6:.2f} us per record")
start = time.perf_counter()
for _ in range(n):
    s.lib.cuEventRecord(event[0], s.ffi.NULL)
s.lib.cuCtxSynchronize()
print(f"cuEventRecord called from Python directly: {(time.perf_counter() - start) / n * 1e6:.2f} us per call")
if "--profile" in sys.argv:
    cProfile.run("s.run(batch)", "/tmp/records.prof")
    pstats.Stats("/tmp/records.prof").sort_stats("tottime").print_stats(8)
