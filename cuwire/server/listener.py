"""The listener: with isolation=process, each session gets a process of its own.

A gRPC server cannot hand an accepted connection to another process, so the listener checks the
client's Hello (token, versions), starts a session process (`python -m cuwire.server --one-session`,
listening on a free port of the same address with a one-time token), and answers with where to
continue. The client connects there and says hello again. The listener never touches CUDA: one
client's crash, leak or bad pointer stays in its own process and CUDA context.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import subprocess
import sys
import threading
import time

import cuwire
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import cuwire_pb2_grpc as pb_grpc
from cuwire.generated import server_handlers as generated
from cuwire.server.service import check_hello
from cuwire.settings import Settings

log = logging.getLogger("cuwire.server")
PORT_LINE = "CUWIRE-SESSION-PORT "
START_TIMEOUT = 60.0


class Listener:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.host = settings.listen.rpartition(":")[0]
        self.children: list[subprocess.Popen] = []
        self.lock = threading.Lock()
        self.count = 0

    def session_command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "cuwire.server", "--listen", f"{self.host}:0", *extra]

    def session_env(self, token: str, name: str) -> dict[str, str]:
        env = {**os.environ, **self.settings.to_env()}
        env.update(CUWIRE_TOKEN=token, CUWIRE_ISOLATION="thread", CUWIRE_SESSION_NAME=name)
        return env

    def probe(self) -> list[str]:
        """Open the backend once in a child (the listener itself never does): fail early and clearly when
        there is no GPU; else the devices, for the log."""
        r = subprocess.run(self.session_command("--probe"), env=self.session_env("", "probe"), text=True,
                           capture_output=True, timeout=START_TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().removeprefix("cuwire server: ") or "the backend did not start")
        return r.stdout.splitlines()

    def welcome(self, hello: pb.Hello, peer: str) -> pb.Reply:
        refusal = check_hello(self.settings, hello)
        if refusal is not None:
            return refusal
        with self.lock:
            self.children = [c for c in self.children if c.poll() is None]
            self.count += 1
            name = str(self.count)
        token = secrets.token_hex(16)
        proc = subprocess.Popen(self.session_command("--one-session"), env=self.session_env(token, name),
                                stdout=subprocess.PIPE, text=True)
        with self.lock:
            self.children.append(proc)
        port = self.wait_port(proc)
        if port is None:
            proc.kill()
            return pb.Reply(error="the server could not start a session process (see the server's log)",
                            refusal=pb.INTERNAL)
        log.info("session %s for pid %d on %s (%s): process %d, port %d", name, hello.pid, hello.host, peer,
                 proc.pid, port)
        return pb.Reply(welcome=pb.Welcome(
            server_version=cuwire.__version__, cuda_version=generated.CUDA_VERSION, api_digest=generated.API_DIGEST,
            backend=self.settings.backend, session=name, redirect_port=port, session_token=token))

    @staticmethod
    def wait_port(proc: subprocess.Popen) -> int | None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    return None  # it exited
                if line.startswith(PORT_LINE):
                    return int(line[len(PORT_LINE):])
            elif proc.poll() is not None:
                return None
        return None

    def stop(self) -> None:
        """End every session process (each frees its session's memory on SIGTERM)."""
        with self.lock:
            children = [c for c in self.children if c.poll() is None]
        for c in children:
            c.terminate()
        for c in children:
            try:
                c.wait(15)
            except subprocess.TimeoutExpired:
                c.kill()


class ListenerServicer(pb_grpc.CuWireServicer):
    def __init__(self, listener: Listener):
        self.listener = listener

    def Session(self, request_iterator, context):
        for batch in request_iterator:
            if not batch.HasField("hello"):
                yield pb.Reply(error="a session starts with a hello", refusal=pb.PROTOCOL)
            else:
                yield self.listener.welcome(batch.hello, context.peer())
            return
