"""The GPUs a device plugin offers: the cuwire servers of a cluster and their GPUs, as kubelet devices.

The pool is configuration (a ConfigMap in deploy/kubernetes/), a JSON object:

    {"servers": [{"address": "gpu-node-1:50551", "gpus": 2, "tls_fingerprint": "sha256:..."}, ...]}

Each GPU of each server is one device of the resource (cuwire.dev/gpu), its ID naming both. A container
gets devices of one server only (a program reaches one server: CUWIRE_SERVER), as CUDA_VISIBLE_DEVICES
over that server's GPUs; the scheduler's choice among a node's devices is steered there by the preferred
allocation (the server with the most of them free). No placement is decided here beyond that: the kubelet
and the scheduler decide.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from cuwire.settings import host_port

RESOURCE = "cuwire.dev/gpu"
MAX_ID = 63  # the kubelet's limit on a device ID


class PoolError(ValueError):
    """The pool's configuration, or a request against it, cannot be served; the message says why."""


@dataclass(frozen=True)
class Gpu:
    server: str  # HOST:PORT
    index: int  # among the server's devices (what CUDA_VISIBLE_DEVICES counts)
    tls_fingerprint: str = ""

    @property
    def id(self) -> str:
        """A kubelet device ID: the server and the GPU, in the characters IDs allow."""
        return f"{re.sub(r'[^A-Za-z0-9.-]', '-', self.server)}-gpu{self.index}"[-MAX_ID:]


@dataclass(frozen=True)
class Pool:
    gpus: tuple[Gpu, ...]

    @classmethod
    def from_config(cls, text: str) -> Pool:
        """The pool a configuration describes; PoolError naming what is wrong in it."""
        try:
            config = json.loads(text)
            servers = config["servers"]
            gpus = []
            for entry in servers:
                address, count = str(entry["address"]), int(entry["gpus"])
                host_port(address)  # (raises ValueError for a malformed address)
                if count < 1:
                    raise ValueError(f"{address}: gpus must be 1 or more")
                gpus += [Gpu(address, i, str(entry.get("tls_fingerprint", ""))) for i in range(count)]
        except (ValueError, KeyError, TypeError) as e:
            raise PoolError(f"the pool's configuration: {e}") from None
        ids = [g.id for g in gpus]
        if len(set(ids)) != len(ids):
            raise PoolError("the pool's configuration names a server twice")
        return cls(tuple(gpus))

    def by_id(self, ids: list[str]) -> list[Gpu]:
        known = {g.id: g for g in self.gpus}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise PoolError(f"devices not in the pool: {', '.join(unknown)}")
        return [known[i] for i in ids]

    def servers(self) -> list[str]:
        return sorted({g.server for g in self.gpus})

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        """`size` of the available devices for one container, all of one server: the server of those it
        must include, else the one with the most available (ties: the first in the pool's order); as
        many as that server has when it has fewer (the kubelet then allocates what it chooses)."""
        gpus = self.by_id(available)
        must = self.by_id(must_include)
        if len({g.server for g in must}) > 1:
            raise PoolError("the devices a container must include are on more than one server")
        order = {s: i for i, s in enumerate(dict.fromkeys(g.server for g in self.gpus))}
        if must:
            server = must[0].server
        elif gpus:
            counts = {s: sum(1 for g in gpus if g.server == s) for s in order if any(g.server == s for g in gpus)}
            server = max(counts, key=lambda s: (counts[s], -order[s]))
        else:
            return []
        chosen = [g.id for g in must]
        chosen += [g.id for g in gpus if g.server == server and g.id not in chosen]
        return chosen[:max(size, len(must))]

    def container_env(self, ids: list[str], token: str = "", tls_fingerprint: str = "") -> dict[str, str]:
        """What a container given these devices is told: its server, which of the server's GPUs it sees
        (in the order of the server's own numbering), and the token and the server's TLS fingerprint."""
        gpus = self.by_id(ids)
        servers = {g.server for g in gpus}
        if len(servers) != 1:
            raise PoolError(f"a container's devices must be on one server, not {len(servers)}: "
                            f"{', '.join(sorted(servers)) or 'none'}")
        env = {"CUWIRE_SERVER": gpus[0].server,
               "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in sorted(gpus, key=lambda g: g.index))}
        if token:
            env["CUWIRE_TOKEN"] = token
        pin = gpus[0].tls_fingerprint or tls_fingerprint
        if pin:
            env["CUWIRE_TLS_FINGERPRINT"] = pin
        return env
