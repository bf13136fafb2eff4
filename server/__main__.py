"""`python -m cuwire.server` (also `cuwire server`): serve this machine's GPUs to cuwire clients."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from cuwire.server.service import serve
from cuwire.settings import Settings


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--listen", help="HOST:PORT to listen on (CUWIRE_LISTEN, default 127.0.0.1:50551)")
    ap.add_argument("--devices", help="GPUs to expose, e.g. 0,1 (CUWIRE_DEVICES, default all)")
    ap.add_argument("--cache-dir", type=Path, help="module cache folder (CUWIRE_CACHE_DIR)")
    ap.add_argument("--token", help="token clients must present (CUWIRE_TOKEN)")
    ap.add_argument("--log-level", help="debug, info, warning, error (CUWIRE_LOG_LEVEL)")
    ap.add_argument("--emulated", action="store_true",
                    help="serve the EMULATED device instead of a GPU (tests only; CUWIRE_BACKEND=emulated)")


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings()
    for name in ("listen", "devices", "cache_dir", "token", "log_level"):
        if getattr(args, name, None) is not None:
            setattr(s, name, getattr(args, name))
    if args.emulated:
        s.backend = "emulated"
    return s


def run(settings: Settings, ready=None) -> int:
    logging.basicConfig(level=settings.log_level.upper(), format="cuwire server: %(message)s")
    log = logging.getLogger("cuwire.server")
    try:
        server, state, port = serve(settings)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    host = settings.listen.rpartition(":")[0]
    devices = ", ".join(f"{d.name} (sm_{d.major}{d.minor})" for d in state.devices)
    log.info("listening on %s:%d, backend %s, devices: %s", host, port, state.backend, devices)
    if state.backend == "emulated":
        log.warning("EMULATED device: for tests only, results do not come from a GPU")
    if ready is not None:
        ready(port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down: ending sessions")
    server.stop(grace=2).wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuwire server", description=__doc__)
    add_arguments(ap)
    return run(settings_from(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
