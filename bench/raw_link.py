"""What a link carries with nothing of cuwire's on it: one TCP stream of plain bytes each way, Python
sockets, the same size as the copies bench/slow_link.sh times. On a link that the machine itself cannot
fill (tc tbf on a veth pair costs CPU time, and the 2-core CPU machine runs both ends), this is the
ceiling cuwire's copies are measured against, beside the link's nominal rate.

    python3 bench/raw_link.py serve HOST:PORT MiB     # in one namespace
    python3 bench/raw_link.py send HOST:PORT MiB      # in the other: prints "raw TCP, ...: N MB/s" each way
"""

from __future__ import annotations

import socket
import statistics
import sys
import time

ROUNDS = 4  # the first warms the link up (TCP's window, the qdisc) and is not counted


def receive(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise EOFError("the other end closed")
        got += n


def serve(host: str, port: int, size: int) -> None:
    with socket.create_server((host, port)) as listening:
        sock, _ = listening.accept()
    buf = bytearray(size)
    with sock:
        for _ in range(ROUNDS):
            receive(sock, memoryview(buf))
            sock.sendall(b"k")
            sock.recv(1)
            sock.sendall(buf)


def send(host: str, port: int, size: int) -> None:
    for _ in range(100):  # (the server may still be starting)
        try:
            sock = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    data, back = bytes(size), bytearray(size)
    out, ins = [], []
    with sock:
        for _ in range(ROUNDS):
            t = time.perf_counter()
            sock.sendall(data)
            sock.recv(1)
            out.append(size / (time.perf_counter() - t) / 1e6)
            t = time.perf_counter()
            sock.sendall(b"g")
            receive(sock, memoryview(back))
            ins.append(size / (time.perf_counter() - t) / 1e6)
    print(f"raw TCP, one stream, {size >> 20} MiB: out {statistics.median(out[1:]):.1f} MB/s, "
          f"back {statistics.median(ins[1:]):.1f} MB/s (median of {ROUNDS - 1})")


if __name__ == "__main__":
    role, where, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
    host, port = where.rsplit(":", 1)
    (serve if role == "serve" else send)(host, int(port), mib << 20)
