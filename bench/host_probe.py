"""What the GPU host itself allows, as a ceiling for cuwire's bulk copies: Python's loopback TCP
throughput, the cost of page-locking memory, and the driver's copies from pageable and pinned memory.

    python3 bench/host_probe.py        (on a GPU machine; no cuwire involved)
"""

from __future__ import annotations

import ctypes
import socket
import threading
import time

N = 256 << 20


def loopback(data: bytearray, reps: int = 3) -> None:
    server = socket.create_server(("127.0.0.1", 0))

    def receive() -> None:
        conn, _ = server.accept()
        view = memoryview(bytearray(N))
        for _ in range(reps):
            got = 0
            while got < N:
                got += conn.recv_into(view[got:], N - got)
            conn.sendall(b"x")

    threading.Thread(target=receive, daemon=True).start()
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(reps):
        t = time.perf_counter()
        client.sendall(data)
        client.recv(1)
        print(f"loopback TCP, 256 MiB from Python: {N / (time.perf_counter() - t) / 1e9:.2f} GB/s")


def driver(data: bytearray) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    pinned = ctypes.c_void_p()
    for size in (8 << 20, N):
        t = time.perf_counter()
        cuda.cuMemHostAlloc(ctypes.byref(pinned), ctypes.c_size_t(size), 1)
        print(f"cuMemHostAlloc {size >> 20} MiB: {(time.perf_counter() - t) * 1e3:.1f} ms")
    device = ctypes.c_uint64()
    cuda.cuMemAlloc_v2(ctypes.byref(device), ctypes.c_size_t(N))
    pageable = (ctypes.c_char * N).from_buffer(data)
    for _ in range(2):
        for name, host in (("pageable", pageable), ("pinned", pinned)):
            t = time.perf_counter()
            cuda.cuMemcpyHtoD_v2(device, host, ctypes.c_size_t(N))
            h2d = N / (time.perf_counter() - t) / 1e9
            t = time.perf_counter()
            cuda.cuMemcpyDtoH_v2(host, device, ctypes.c_size_t(N))
            print(f"{name}: HtoD {h2d:.2f} GB/s, DtoH {N / (time.perf_counter() - t) / 1e9:.2f} GB/s")


if __name__ == "__main__":
    data = bytearray(N)
    loopback(data)
    t = time.perf_counter()
    bytearray(N)
    print(f"bytearray(256 MiB): {(time.perf_counter() - t) * 1e3:.1f} ms")
    driver(data)
