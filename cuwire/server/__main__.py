"""`python -m cuwire.server` (also `cuwire server`): serve this machine's GPUs to cuwire clients."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cuwire.settings import Settings


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--listen", help="HOST:PORT to listen on (CUWIRE_LISTEN, default 127.0.0.1:50551)")
    ap.add_argument("--devices", help="GPUs to expose, e.g. 0,1 (CUWIRE_DEVICES, default all)")
    ap.add_argument("--cache-dir", type=Path, help="module cache folder (CUWIRE_CACHE_DIR)")
    ap.add_argument("--token", help="token clients must present (CUWIRE_TOKEN)")
    ap.add_argument("--tls-cert", help="PEM certificate for TLS (CUWIRE_TLS_CERT); clients then connect with "
                                       "CUWIRE_TLS_CA or CUWIRE_TLS_FINGERPRINT")
    ap.add_argument("--tls-key", help="PEM key of --tls-cert (CUWIRE_TLS_KEY)")
    ap.add_argument("--tls", choices=["auto"], help="TLS with a self-signed certificate made once and kept in "
                                                    "the module cache folder; its fingerprint is logged (CUWIRE_TLS)")
    ap.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                    help="how much the log says (CUWIRE_LOG_LEVEL, default info)")
    ap.add_argument("--log-format", choices=["text", "json"],
                    help="text lines, or one JSON object a line for a log collector (CUWIRE_LOG_FORMAT)")
    ap.add_argument("--isolation", choices=["process", "thread"],
                    help="each session in a process of its own (default) or a thread (CUWIRE_ISOLATION)")
    ap.add_argument("--drain-seconds", type=float,
                    help="on SIGTERM, how long open sessions may run on before they are ended; new ones are "
                         "refused meanwhile (CUWIRE_DRAIN_SECONDS, default 10)")
    ap.add_argument("--emulated", action="store_true",
                    help="serve the EMULATED device instead of a GPU (tests only; CUWIRE_BACKEND=emulated)")
    # how the listener starts its children (not for users)
    ap.add_argument("--one-session", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--handoff-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nvml-uuids", help=argparse.SUPPRESS)  # the GPUs the server exposes (nvml_view.py)


def settings_from(args: argparse.Namespace) -> Settings:
    """The variables' settings with the flags given put over them (each parsed and checked alike)."""
    flags = {name: getattr(args, name) for name in ("listen", "devices", "cache_dir", "token", "log_level",
                                                    "log_format", "isolation", "tls", "tls_cert", "tls_key",
                                                    "drain_seconds")
             if getattr(args, name, None) is not None}
    if args.emulated:
        flags["backend"] = "emulated"
    return Settings(**flags)


class JsonLines(logging.Formatter):
    """CUWIRE_LOG_FORMAT=json: one object a line, with the session it comes from (a session process's
    name, given by the listener; empty in the listener)."""

    def __init__(self, session: str) -> None:
        super().__init__()
        self.session = session

    def format(self, record: logging.LogRecord) -> str:
        import json

        return json.dumps({"time": round(record.created, 6), "level": record.levelname.lower(), "pid": record.process,
                           "session": self.session, "message": record.getMessage()})


def configure_logging(settings: Settings) -> None:
    """The server's log (a session process's again once it knows its session's name: JSON lines carry it)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines(settings.session_name) if settings.log_format == "json"
                         else logging.Formatter("cuwire server: %(message)s"))
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler], force=True)


def wait_for_signal(extra: threading.Event | None = None) -> threading.Event:
    """An event set by SIGTERM or SIGINT (or by whoever else holds it)."""
    stop = extra or threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def drain(stop: threading.Event, server, open_sessions: Callable[[], int], seconds: float,
          log: logging.Logger) -> None:
    """After SIGTERM: refuse new sessions (and answer /healthz 503, so a load balancer sends clients
    elsewhere); give the open ones `seconds` to end by themselves. A second signal cuts it short."""
    server.draining.set()
    count = open_sessions()
    if count == 0 or seconds <= 0:
        return
    log.info("draining: %d open session(s) may run %g s more; new sessions are refused (CUWIRE_DRAIN_SECONDS; "
             "a second SIGTERM or SIGINT ends them now)", count, seconds)
    stop.clear()
    deadline = time.monotonic() + seconds
    while open_sessions() and time.monotonic() < deadline:
        if stop.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            log.info("a second signal: ending the open sessions now")
            break
    left = open_sessions()
    if left:
        log.warning("drain over: ending %d session(s) still open", left)
    else:
        log.info("drain over: every session ended by itself")


def run(settings: Settings, ready=None, one_session: bool = False, probe: bool = False,
        handoff_fd: int | None = None, nvml_uuids: list[str] | None = None) -> int:
    if settings.errors:  # one line each, naming the variable and what it takes
        print("\n".join(f"cuwire server: {e}" for e in settings.errors), file=sys.stderr)
        return 2
    configure_logging(settings)
    log = logging.getLogger("cuwire.server")
    if probe:
        return run_probe(settings, log)
    if one_session:
        return run_one_session(settings, handoff_fd, log, nvml_uuids)
    made = None
    if not settings.ipc_dir:  # (its session processes find it in their settings)
        made = settings.ipc_dir = tempfile.mkdtemp(prefix="cuwire-ipc-")
    try:
        if settings.isolation == "process":
            return run_listener(settings, ready, log)
        return run_threads(settings, ready, log)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)


def run_threads(settings: Settings, ready, log: logging.Logger) -> int:
    """--isolation thread: sessions are threads of this process (loopback only)."""
    from cuwire.server.service import serve
    from cuwire.wire.transport import is_loopback

    if not is_loopback(settings.listen.rpartition(":")[0].strip("[]")):
        log.error("--isolation thread serves only a loopback address (not %s): its sessions share one process and "
                  "one CUDA context, and the device pointers inside kernel arguments cannot be checked, so one "
                  "client could reach another's memory; use --isolation process (the default) on a network",
                  settings.listen)
        return 1

    try:
        server, state, port = serve(settings)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    stop = wait_for_signal()
    host = settings.listen.rpartition(":")[0]
    devices = ", ".join(f"{d.name} (sm_{d.major}{d.minor})" for d in state.devices)
    log.info("listening on %s:%d, backend %s, devices: %s; sessions are threads of this process", host, port,
             state.backend, devices)
    if state.backend == "emulated":
        log.warning("EMULATED device: for tests only, results do not come from a GPU")
    if ready is not None:
        ready(port)
    stop.wait()
    drain(stop, server, lambda: len(state.sessions), settings.drain_seconds, log)
    log.info("shutting down: ending sessions")
    state.stopping.set()
    server.stop(grace=2)
    return 0


def run_one_session(settings: Settings, handoff_fd: int | None, log: logging.Logger,
                    nvml_uuids: list[str] | None = None) -> int:
    """A listener's child: take the connection the listener hands over, serve its session, end."""
    import socket

    from cuwire import address_space
    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.server._records import lib as records_lib
    from cuwire.server.listener import receive_handoff
    from cuwire.server.records import capture_output
    from cuwire.server.service import CuWireServer, host_memory_size, serve_connection
    from cuwire.wire import ring
    from cuwire.wire.transport import Connection

    if handoff_fd is None:
        log.error("--one-session needs --handoff-fd (the listener starts these processes)")
        return 1
    channel = socket.socket(fileno=handoff_fd)  # kept: the session's figures go back on it (metrics.py)
    # started ahead of its client (listener.make_spare): the imports above are done before it comes
    try:
        sock, peer, hello, join_key, name = receive_handoff(channel)
    except (OSError, ValueError, RuntimeError) as e:  # the listener ended, or never sent a client
        log.debug("session process ended without a session: %s", e)
        return 0
    if name:  # this session's name came with its client
        settings = dataclasses.replace(settings, session_name=name)
        os.environ["CUWIRE_SESSION_NAME"] = name
        configure_logging(settings)
    conn = Connection(sock, peer)
    capture_output()  # device printf output goes back to the program (records.c)
    # before CUDA starts and takes much of this process's address space: keep the range the client reserved
    # for its page-locked memory free here too, so both processes (and the GPU) see it at one address
    held = 0
    try:
        asked = pb.Batch.FromString(hello).hello
    except Exception:  # (a malformed hello is refused by the session, with its reason)
        asked = pb.Hello()
    if asked.ring_size and asked.host_address:
        held = ring.hold_host_range(records_lib, asked.host_address, host_memory_size(settings, asked))
    # ...and the address space the client's own memory takes (or will): device memory placed there would
    # be taken for the program's host memory by its value (address_space.py)
    kept = address_space.hold(records_lib, [(s.start, s.end) for s in asked.keep_free])
    log.debug("session: %d GiB of the client's address space kept free of device memory",
              sum(hi - lo for lo, hi in kept) >> 30)
    windows = address_space.windows(asked.server_number)
    if asked.server_number:  # a server of the program's device list: all its mappings in its windows
        if not windows or not address_space.keep_in(records_lib, windows):
            why = (f"the program's device list names this server as number {asked.server_number}, which has no "
                   f"window of address space (at most {address_space.MOST_SERVERS} servers, from 1)" if not windows
                   else f"this session could not keep its mappings in its windows of address space "
                        f"{[f'{lo:#x}-{hi:#x}' for lo, hi in windows]} (server number {asked.server_number})")
            log.warning("session refused: %s", why)
            return refuse(conn, why, pb.PROTOCOL)
        log.debug("session: server number %d of a device list, its mappings in %s", asked.server_number,
                  ", ".join(f"[{lo:#x}, {hi:#x})" for lo, hi in windows))
    if asked.HasField("visible_devices"):  # the program's CUDA_VISIBLE_DEVICES, applied by this process's driver
        from cuwire.server.visible_devices import server_exposes, session_devices

        chosen = session_devices(server_exposes(settings), asked.visible_devices, nvml_uuids)
        if not chosen:
            why = (f"the program's CUDA_VISIBLE_DEVICES={asked.visible_devices!r} names none of the server's "
                   "devices (an index counts among those the server exposes)")
            log.warning("session refused: %s", why)
            return refuse(conn, why, pb.NO_DEVICE)
        settings = dataclasses.replace(settings, devices=chosen)
    try:
        opened = lambda: CuWireServer(settings, nvml_uuids or None)  # noqa: E731
        state = on_a_thread_of_its_own(opened) if windows else opened()
        state.held_host, state.held_spans, state.windows = held, kept, windows
    except RuntimeError as e:
        log.error("%s", e)
        if asked.HasField("visible_devices"):  # (the devices it names are not there: CUDA_ERROR_NO_DEVICE)
            return refuse(conn, f"the program's CUDA_VISIBLE_DEVICES={asked.visible_devices!r}: {e}", pb.NO_DEVICE)
        return refuse(conn, f"the server could not open its GPU: {e}", pb.INTERNAL)
    # an offer's key to the listener, so that the server fetching it is handed to this process (peer_copy.py)
    state.announce_offer = lambda key: send_report(channel, {"offer": key.hex()})
    stop = wait_for_signal()
    session = threading.Thread(target=lambda: (serve_connection(state, conn, first=hello, join_key=join_key),
                                               stop.set()),
                               name="cuwire-session", daemon=True)
    session.start()
    threading.Thread(target=take_stripes, args=(state, channel), name="cuwire-stripes", daemon=True).start()
    threading.Thread(target=report_figures, args=(state, channel, stop, metrics_interval(settings)),
                     name="cuwire-report", daemon=True).start()
    stop.wait()
    state.stopping.set()  # (a connection ended now is not waited for)
    if session.is_alive():  # SIGTERM: end the connection; the session frees what it holds, then ends
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        session.join(10)
    for figures in list(state.final.values()):  # the last word: what the session did in all
        send_report(channel, figures)
    channel.close()
    return 0


def refuse(conn, why: str, refusal: int) -> int:
    """The client told why its session is not served, the connection closed: the process's exit status."""
    from cuwire.generated import cuwire_pb2 as pb

    conn.send(pb.Reply(error=why, refusal=refusal).SerializeToString())
    conn.close()
    return 1


def on_a_thread_of_its_own(make):
    """`make()` run on a new thread: its result, or its exception raised here. In a session of a device list,
    what the driver allocates as it opens (the primary contexts) then comes from that thread's malloc arena,
    made after the holds, in the session's windows like the handles that follow, not from the main heap,
    which lies where every process's does (address_space.py)."""
    out: dict = {}

    def run() -> None:
        try:
            out["made"] = make()
        except BaseException as e:  # (raised again in the caller's thread)
            out["error"] = e

    opener = threading.Thread(target=run, name="cuwire-open")
    opener.start()
    opener.join()
    if "error" in out:
        raise out["error"]
    return out["made"]


def take_stripes(state, channel) -> None:
    """The session's stripes, which the listener hands over on the channel as they come (stripes.py)."""
    from cuwire.server.listener import receive_handoff
    from cuwire.server.service import serve_stripe
    from cuwire.wire.transport import Connection

    while True:
        try:
            sock, peer, hello, _, _ = receive_handoff(channel)
        except (OSError, RuntimeError, ValueError):
            return  # the channel closed: the session ended
        serve_stripe(state, Connection(sock, peer), hello)


def metrics_interval(settings: Settings) -> float:
    """How often a session process reports: every metrics.REPORT_SECONDS, and often enough that the
    listener never takes a live one for frozen (settings.frozen_after)."""
    from cuwire.server import metrics

    if settings.frozen_after <= 0:
        return metrics.REPORT_SECONDS
    return min(metrics.REPORT_SECONDS, settings.frozen_after / 4)


def report_figures(state, channel, stop: threading.Event, interval: float) -> None:
    """The open session's figures to the listener (its GET /metrics, and its watch for frozen sessions),
    from a thread of their own: a session busy in a long CUDA call still reports."""
    while not stop.wait(interval):
        for session in list(state.sessions.values()):
            send_report(channel, session.figures())


def send_report(channel, figures: dict) -> None:
    from cuwire.server import metrics

    try:
        channel.send(metrics.encode_report(figures))
    except OSError:
        pass  # the listener is gone: nobody to tell


def run_probe(settings: Settings, log: logging.Logger) -> int:
    from cuwire.server.service import CuWireServer

    try:
        state = CuWireServer(settings)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    from cuwire.server.nvml_view import uuid_text

    for d in state.devices:  # (the listener logs the name, and tells its sessions the UUIDs: nvml_view.py)
        print(f"{d.name} (sm_{d.major}{d.minor})\t{uuid_text(d.uuid)}")
    return 0


def run_listener(settings: Settings, ready, log: logging.Logger) -> int:
    from cuwire.server.listener import Listener
    from cuwire.server.service import SocketServer
    from cuwire.wire.tls import server_tls

    listener = Listener(settings)
    try:
        devices = listener.probe()
    except (RuntimeError, OSError) as e:
        log.error("%s", e)
        return 1
    try:
        tls, said = server_tls(settings)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    try:
        server = SocketServer(settings.listen, listener.handle, max_sessions=64, tls=tls).start()
    except (OSError, ValueError) as e:
        log.error("cannot listen on %s (%s)", settings.listen, e)
        return 1
    log.info("%s", said)
    listener.socket_server = server
    threading.Thread(target=listener.make_spare, name="cuwire-spare", daemon=True).start()  # the first client's
    stop, closing = wait_for_signal(), threading.Event()
    threading.Thread(target=listener.watch, args=(closing,), name="cuwire-watch", daemon=True).start()
    host = settings.listen.rpartition(":")[0]
    log.info("listening on %s:%d, backend %s, devices: %s; each session in a process of its own", host,
             server.port, settings.backend, ", ".join(d.split("\t")[0] for d in devices))
    if settings.backend == "emulated":
        log.warning("EMULATED device: for tests only, results do not come from a GPU")
    if ready is not None:
        ready(server.port)
    stop.wait()
    drain(stop, server, listener.open_sessions, settings.drain_seconds, log)
    log.info("shutting down: ending sessions")
    closing.set()
    server.stop(grace=1)
    listener.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuwire server", description=__doc__)
    add_arguments(ap)
    args = ap.parse_args(argv)
    return run(settings_from(args), one_session=args.one_session, probe=args.probe, handoff_fd=args.handoff_fd,
               nvml_uuids=[u for u in (args.nvml_uuids or "").split(",") if u])


if __name__ == "__main__":
    sys.exit(main())
