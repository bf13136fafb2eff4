"""A link that tests cut: a forwarder between a client and a cuwire server that drops its connections
(a reset, as a router or load balancer that forgets them does) where the test says, so that the session's
connection must resume (cuwire/wire/stream.py).

It listens on a TCP port (and, for a server on this host, on that port's Unix socket, passing the
descriptors a server sends with its welcome), and forwards each connection to the server's. A cut is a
number of bytes of one direction, counted over every connection through the link; once that many went,
every connection open through the link is reset. Later connections (the resume) are forwarded the same
way (or to `then_port`: another server, where a test sets it) until the next cut of the list.
"""

from __future__ import annotations

import socket
import struct
import threading

from cuwire.wire.transport import local_name

TO_SERVER, TO_CLIENT = "to server", "to client"


class CutLink:
    def __init__(self, server_port: int, cuts: list[tuple[str, int]] = (), unix: bool = False):
        """`cuts`: (direction, bytes) in the order they come."""
        self.server_port, self.unix = server_port, unix
        self.cuts = sorted(cuts, key=lambda c: c[1])
        self.sent = {TO_SERVER: 0, TO_CLIENT: 0}
        self.done: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.connections = 0
        self.refuse_after_cut = False  # the link stays down after its first cut: new connections are closed
        self.then_port = server_port  # where connections made after the first cut go (another server)
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.listening = [self.tcp]
        if unix:
            self.local = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.local.bind(local_name(self.port))
            self.local.listen(16)
            self.listening.append(self.local)
        for sock in self.listening:
            threading.Thread(target=self.accept, args=(sock,), daemon=True).start()

    def accept(self, listening: socket.socket) -> None:
        while True:
            try:
                client, _ = listening.accept()
            except OSError:
                return
            if self.refuse_after_cut and self.done:
                client.close()
                continue
            port = self.then_port if self.done else self.server_port
            if listening.family == socket.AF_UNIX:
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.connect(local_name(port))
            else:
                server = socket.create_connection(("127.0.0.1", port))
            with self.lock:
                self.open += [client, server]
                self.connections += 1
            threading.Thread(target=self.pump, args=(client, server, TO_SERVER), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, TO_CLIENT), daemon=True).start()

    def pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while True:
                with self.lock:
                    due = [c for c in self.cuts if c[0] == direction]
                    room = due[0][1] - self.sent[direction] if due else 1 << 20
                want = max(1, min(room, 1 << 16))
                if src.family == socket.AF_UNIX:
                    data, fds, _, _ = socket.recv_fds(src, want, 4)
                else:
                    data, fds = src.recv(want), []
                if not data:
                    break
                if fds:
                    socket.send_fds(dst, [data], fds)
                else:
                    dst.sendall(data)
                with self.lock:
                    self.sent[direction] += len(data)
                    cut = bool(due) and self.sent[direction] >= due[0][1] and due[0] in self.cuts
                    if cut:
                        self.cuts.remove(due[0])
                        self.done.append(due[0])
                if cut:
                    self.reset_all()
                    return
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def reset_all(self) -> None:
        """Every connection through the link ends at once, with a reset (SO_LINGER 0)."""
        with self.lock:
            socks, self.open = self.open, []
        for sock in socks:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        for sock in self.listening:
            sock.close()
        self.reset_all()


def main() -> int:
    """python tests/cut_link.py --server HOST:PORT --cut-after 3,6 -- PROGRAM ARGS...: run a program whose
    session goes through a link that is cut (every connection reset) at those seconds after its start
    (make gpu-test: a PyTorch training cut twice must print what an uncut one prints). Its exit code."""
    import argparse
    import os
    import subprocess
    import sys
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--cut-after", default="3,6", help="seconds after the program's start, comma-separated")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    link = CutLink(int(args.server.rpartition(":")[2]))
    env = {**os.environ, "CUWIRE_SERVER": link.address, "CUWIRE_TRANSPORT": "tcp"}
    started = time.monotonic()
    proc = subprocess.Popen(program, env=env)
    cuts = 0
    for at in sorted(float(t) for t in args.cut_after.split(",") if t):
        while proc.poll() is None and time.monotonic() - started < at:
            time.sleep(0.01)
        if proc.poll() is not None:
            break
        link.reset_all()
        cuts += 1
    rc = proc.wait()
    print(f"cut_link: {cuts} cuts, the program ended with {rc} after {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    link.close()
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
