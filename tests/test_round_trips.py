"""Round trips a program pays for (issue 35): counted with CUWIRE_STATS over TCP on the emulated device,
never timed. A wait whose work the client knows finished, with nothing sent since, costs none
(client/completion.c)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_remote


def stats(apps: Path, client_lib: Path, server, steps: int) -> dict[str, int]:
    r = run_remote(apps / "step_loop", client_lib, server.address, str(steps),
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{steps} steps on a stream and {steps} on the null stream, 0 bytes read back wrong; waits after the " \
           "copy that were not done: 0" in r.stdout
    sent = re.search(r"top calls sent to the server, by count: (.*)", r.stderr).group(1)
    return {
        "round trips": int(re.search(r"round trips: (\d+)", r.stderr).group(1)),
        "answered": int(re.search(r"waits answered by the client.*: (\d+)", r.stderr).group(1)),
        **{name: int(n) for name, n in re.findall(r"([\w.]+) (\d+)", sent)},
    }


@pytest.mark.parametrize("steps", [40])
def test_a_step_loop_costs_one_round_trip_a_step(steps, apps, client_lib, server):
    """Per step: queued memsets, a copy and an event record, then one byte read into pageable memory (the
    one round trip), then a stream synchronization, queries and a device synchronization that the read
    already answered."""
    few, many = stats(apps, client_lib, server, steps), stats(apps, client_lib, server, 3 * steps)
    steps_more = 2 * (3 * steps - steps)  # on a stream and on the null stream
    per_step = (many["round trips"] - few["round trips"]) / steps_more
    assert per_step <= 1.1, (few, many)
    # the stream phase's 4 waits and the null stream phase's 4, each step
    assert many["answered"] - few["answered"] == 4 * steps_more, (few, many)
    # and the synchronization that follows new work went to the server, as it must
    assert many.get("cuStreamSynchronize") == 1, many
