"""The GPUs a device plugin offers: the cuwire servers of a cluster and their GPUs, as kubelet devices.

The pool is configuration (a ConfigMap in deploy/kubernetes/), a JSON object:

    {"servers": [{"address": "gpu-node-1:50551", "gpus": 2, "tls_fingerprint": "sha256:..."}, ...]}

Each GPU of each server is one device of the resource (cuwire.dev/gpu), its ID naming both. A container
given devices of one server gets that server (CUWIRE_SERVER) and CUDA_VISIBLE_DEVICES over its GPUs; one
given devices of several gets them as a device list (docs/several-servers.md): CUWIRE_SERVER names its
servers in the pool's order, CUDA_VISIBLE_DEVICES counts over all their GPUs (so a server's `gpus` must be
how many it exposes), and CUWIRE_TLS_FINGERPRINT pins each server with its own. The scheduler's choice
among a node's devices is steered by the preferred allocation: one server where it can (the one with the
most of them free), the next ones only for what it lacks. No placement is decided here beyond that: the
kubelet and the scheduler decide.
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
        """`size` of the available devices for one container: those it must include, then the free ones of
        their server (else of the server with the most available; ties: the first in the pool's order), then,
        where that server lacks some, of the next servers with the most available."""
        gpus = self.by_id(available)
        must = self.by_id(must_include)
        order = {s: i for i, s in enumerate(dict.fromkeys(g.server for g in self.gpus))}
        counts = {s: sum(1 for g in gpus if g.server == s) for s in order}
        first = [must[0].server] if must else []
        servers = first + sorted((s for s in order if s not in first and counts[s]),
                                 key=lambda s: (-counts[s], order[s]))
        chosen = [g.id for g in must]
        for server in servers:
            chosen += [g.id for g in gpus if g.server == server and g.id not in chosen]
        return chosen[:max(size, len(must))]

    def container_env(self, ids: list[str], token: str = "", tls_fingerprint: str = "") -> dict[str, str]:
        """What a container given these devices is told: its server, or the device list of its servers in the
        pool's order (docs/several-servers.md), which of their GPUs it sees (CUDA_VISIBLE_DEVICES, counted
        over the list's GPUs as the pool numbers each server's), the token, and each server's TLS pin."""
        gpus = self.by_id(ids)
        if not gpus:
            raise PoolError("a container's devices: none given")
        order = list(dict.fromkeys(g.server for g in self.gpus))
        servers = [s for s in order if any(g.server == s for g in gpus)]
        first, at = {}, 0  # each server's first GPU in the list's numbering
        for s in servers:
            first[s], at = at, at + sum(1 for g in self.gpus if g.server == s)
        env = {"CUWIRE_SERVER": ",".join(servers),
               "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in sorted(first[g.server] + g.index for g in gpus))}
        if token:
            env["CUWIRE_TOKEN"] = token
        pins = [next(g.tls_fingerprint for g in self.gpus if g.server == s) or tls_fingerprint for s in servers]
        if any(pins) and not all(pins):
            missing = ", ".join(s for s, pin in zip(servers, pins, strict=True) if not pin)
            raise PoolError(f"a container's devices are on servers pinned and not: {missing} has no TLS "
                            "fingerprint in the pool, and the plugin none for all")
        if any(pins):
            env["CUWIRE_TLS_FINGERPRINT"] = pins[0] if len(set(pins)) == 1 else ",".join(pins)
        return env
