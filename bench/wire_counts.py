"""What the cuwire client in this process has counted so far (through cuwire; nothing natively), for the
distance workloads (distance_steps.py, distance_jax.py) to print per step: round trips, the time waited for
answers, the bytes on the link, and which calls waited. Imports neither PyTorch nor JAX."""

from __future__ import annotations

import sys
from collections import Counter


def _client():
    return sys.modules.get("cuwire.client.runtime")  # loaded when this runs through cuwire


def round_trips() -> int | None:
    client = _client()
    return client.with_wire_stats(client.client.stats).batches if client else None


def waited_seconds() -> float:
    """The seconds the client waited for the server's answers so far (0 natively): a step's time beyond its
    floor is either waiting (the link, the server, the GPU's work that started late) or the program's
    own issuing of calls through the client. Waits of copies for the program's host functions to run first
    (over TCP: the server runs them through the link) count too."""
    client = _client()
    if not client:
        return 0.0
    stats = client.with_wire_stats(client.client.stats)
    return stats.wait_seconds + stats.host_fn_wait_seconds


def host_fn_waits() -> tuple[int, float]:
    """Copies that waited for the program's host functions so far, and the seconds (0 natively)."""
    client = _client()
    if not client:
        return 0, 0.0
    stats = client.with_wire_stats(client.client.stats)
    return stats.host_fn_waits, stats.host_fn_wait_seconds


def wire_bytes() -> int:
    """The bytes the client sent and received so far, both ways (0 natively): what a step's data costs on
    a link of limited rate, beside its round trips."""
    client = _client()
    if not client:
        return 0
    stats = client.with_wire_stats(client.client.stats)
    return stats.bytes_sent + stats.bytes_received


def waited_calls() -> Counter:
    """The round trips so far by call (empty natively)."""
    client = _client()
    return Counter(client.with_wire_stats(client.client.stats).calls) if client else Counter()


def waited_for(since: Counter | None = None) -> str:
    """What the client waited for so far (or since `since`, a waited_calls()), by count (empty natively): the
    calls and cuwire's own requests that each cost a round trip."""
    client = _client()
    if not client:
        return ""
    names = client.client.names_by_id()
    sent = waited_calls() - (since or Counter())
    return ", ".join(f"{names.get(i, i)} {n}" for i, n in sent.most_common(12))
