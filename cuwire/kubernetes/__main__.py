"""`python -m cuwire.kubernetes`: the device plugin (cuwire/kubernetes/plugin.py), as its DaemonSet runs it."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from cuwire.kubernetes.pool import RESOURCE, Pool, PoolError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuwire.kubernetes", description=__doc__)
    ap.add_argument("--pool", type=Path, default=Path("/etc/cuwire/pool.json"),
                    help="the pool's configuration: the servers and their GPUs (JSON; see cuwire/kubernetes/pool.py)")
    ap.add_argument("--kubelet-dir", type=Path, default=Path("/var/lib/kubelet/device-plugins"),
                    help="the kubelet's device-plugins folder (its socket, and the plugin's)")
    ap.add_argument("--resource", default=RESOURCE, help=f"the resource name pods ask for (default {RESOURCE})")
    ap.add_argument("--health-interval", type=float, default=10.0, help="seconds between health checks")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="cuwire device plugin: %(message)s", stream=sys.stderr)
    try:
        pool = Pool.from_config(args.pool.read_text())
    except (OSError, PoolError) as e:
        print(f"cuwire device plugin: {e}", file=sys.stderr)
        return 2
    from cuwire.kubernetes.plugin import DevicePlugin, Served  # (grpcio: the `kubernetes` extra)

    # the token and a default TLS fingerprint come from the environment (a Secret), as the clients' do
    plugin = DevicePlugin(pool, os.environ.get("CUWIRE_TOKEN", ""), os.environ.get("CUWIRE_TLS_FINGERPRINT", ""))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    plugin.check_health()
    Served(plugin, args.kubelet_dir, resource=args.resource).run(stop, args.health_interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
