"""What the cuwire client in this process has counted so far (through cuwire; nothing natively), for the
distance workloads (distance_steps.py, distance_jax.py) to print per step: round trips, the time waited for
answers, the bytes on the link, and which calls waited. Imports neither PyTorch nor JAX."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass


def _client():
    return sys.modules.get("cuwire.client.runtime")  # loaded when this runs through cuwire


def round_trips() -> int | None:
    client = _client()
    return client.with_wire_stats(client.client.stats).batches if client else None


@dataclass(frozen=True)
class Counts:
    """The client's running totals at one moment, read at once (one with_wire_stats).

    waited: the seconds the client waited for the server's answers, and copies for the program's host
    functions to run first (over TCP the server runs them through the link): a step's time beyond its
    floor is either waiting (the link, the server, the GPU's work that started late) or the program's own
    issuing of calls through the client. moved: the bytes sent and received, both ways: what a step's data
    costs on a link of limited rate, beside its round trips."""

    trips: int
    moved: int
    waited: float
    host_fn_waits: int
    host_fn_seconds: float


def counts() -> Counts | None:
    """The totals so far (None natively)."""
    client = _client()
    if not client:
        return None
    s = client.with_wire_stats(client.client.stats)
    return Counts(s.batches, s.bytes_sent + s.bytes_received, s.wait_seconds + s.host_fn_wait_seconds,
                  s.host_fn_waits, s.host_fn_wait_seconds)


def per_step(name: str, since: Counts | None, steps: int) -> str:
    """What the client counted over `steps` timed steps since `since` (a counts()), to end the workload's
    line: ", T round trips/step, M MB/step, W ms waited/step" (empty natively). The copies that waited for
    host functions go to stderr."""
    now = counts()
    if since is None or now is None:
        return ""
    print(f"{name}: copies that waited for host functions: {(now.host_fn_waits - since.host_fn_waits) / steps:.2f}"
          f"/step, {(now.host_fn_seconds - since.host_fn_seconds) / steps * 1e3:.3f} ms/step", file=sys.stderr,
          flush=True)
    return (f", {(now.trips - since.trips) / steps:.2f} round trips/step, "
            f"{(now.moved - since.moved) / steps / 1e6:.3f} MB/step, "
            f"{(now.waited - since.waited) / steps * 1e3:.3f} ms waited/step")


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
