"""How fast one payload crosses loopback TCP over 1, 2, 4 and 8 connections at once (a sender and a
receiver thread per connection, Python sockets, as cuwire's stripes move it: cuwire/wire/stripes.py).

    python3 bench/tcp_streams.py

On the H100's host (16 cores): 3.3 GB/s over one connection, 6.0 over two, 10.6 over four, 15.4 over
eight. No GPU needed.
"""

from __future__ import annotations

import socket
import threading
import time

SIZE = 256 << 20
CHUNK = 8 << 20


def connected_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        client = socket.create_connection(listening.getsockname())
        server, _ = listening.accept()
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def rate(count: int, src: bytearray, dst: bytearray, rounds: int = 3) -> float:
    """The best of `rounds` transfers of SIZE bytes split over `count` connections, in GB/s."""
    pairs = [connected_pair() for _ in range(count)]
    part = SIZE // count

    def send(i: int) -> None:
        view = memoryview(src)[i * part:(i + 1) * part]
        for offset in range(0, part, CHUNK):
            pairs[i][0].sendall(view[offset:offset + CHUNK])

    def receive(i: int) -> None:
        view, got = memoryview(dst)[i * part:(i + 1) * part], 0
        while got < part:
            got += pairs[i][1].recv_into(view[got:], part - got)

    best = 0.0
    for _ in range(rounds):
        threads = [threading.Thread(target=f, args=(i,)) for i in range(count) for f in (send, receive)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = max(best, SIZE / (time.perf_counter() - started) / 1e9)
    for a, b in pairs:
        a.close()
        b.close()
    return best


def main() -> None:
    src, dst = bytearray(SIZE), bytearray(SIZE)
    src[::4096] = bytes(range(256)) * (SIZE // 4096 // 256)
    for count in (1, 2, 4, 8):
        print(f"{SIZE >> 20} MiB over {count} loopback TCP connection(s): {rate(count, src, dst):.2f} GB/s", flush=True)


if __name__ == "__main__":
    main()
