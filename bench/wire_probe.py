"""cuwire's wire alone, without the client library: small calls and 256 MiB copies against a server,
from plain Python, so the transport and the server can be timed apart from the program's side.

    python3 bench/wire_probe.py HOST:PORT
"""

from __future__ import annotations

import os
import sys
import time

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.wire.transport import open_session

N = 256 << 20
IDS = {name: i for i, (name, _, _) in generated.HANDLERS.items()}


def call(t, name, payload=(), into=(), **fields):
    args = getattr(pb, f"{name}_Args")(**fields).SerializeToString()
    reply, back, direct = t.exchange_with_payload(pb.Batch(fn=IDS[name], args=args), payload, into)
    assert not reply.error, reply.error
    return getattr(pb, f"{name}_Result").FromString(reply.result), back, direct


def main(address: str) -> None:
    hello = pb.Hello(client_version="probe", cuda_version=generated.CUDA_VERSION, api_digest=generated.API_DIGEST,
                     token=os.environ.get("CUWIRE_TOKEN", ""), pid=os.getpid(), host="probe")
    t, reply = open_session(address, hello)
    assert not reply.error, reply.error
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        call(t, "cuCtxSynchronize")
    print(f"small call (cuCtxSynchronize): {(time.perf_counter() - start) / n * 1e6:.1f} us")
    res, _, _ = call(t, "cuMemAlloc_v2", bytesize=N)
    device = res.dptr
    data = bytearray(os.urandom(1 << 20) * (N >> 20))
    back = bytearray(N)
    for _ in range(3):
        start = time.perf_counter()
        call(t, "cuMemcpyHtoD_v2", [data], dstDevice=device, ByteCount=N)
        h2d = N / (time.perf_counter() - start) / 1e9
        start = time.perf_counter()
        _, rest, direct = call(t, "cuMemcpyDtoH_v2", into=[back], srcDevice=device, ByteCount=N)
        d2h = N / (time.perf_counter() - start) / 1e9
        print(f"256 MiB: H2D {h2d:.2f} GB/s, D2H {d2h:.2f} GB/s (into the buffer: {direct == N and back == data})")
    t.close()


if __name__ == "__main__":
    main(sys.argv[1])
