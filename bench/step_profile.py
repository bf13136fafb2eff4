"""Where the time of a PyTorch training step goes in the program's process, cuwire's client Python
included (it runs in this interpreter): cProfile over steps of one of train.py's models, after a
warm-up; through cuwire, also what each step asked of the server (the client's own counters):

    cuwire run -- python3 bench/step_profile.py cnn [STEPS]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections import Counter

import torch_steps

name = sys.argv[1] if len(sys.argv) > 1 else "cnn"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
run = torch_steps.training_loop(name)
run(3)
client = sys.modules.get("cuwire.client.runtime")  # loaded when this runs through cuwire
stats = client.with_wire_stats(client.client.stats) if client else None
before = (Counter(stats.calls), stats.queued, stats.batches, stats.wait_seconds) if stats else None
start = time.perf_counter()
profile = cProfile.Profile()
profile.runcall(run, steps)
per_step = (time.perf_counter() - start) / steps
print(f"{name}: {per_step * 1e3:.2f} ms per step under cProfile")
if stats:
    stats = client.with_wire_stats(client.client.stats)
    calls, queued, batches, waited = before
    sent = Counter(stats.calls)
    sent.subtract(calls)
    names = client.client.names_by_id()
    top = ", ".join(f"{names.get(i, i)} {n / steps:.1f}" for i, n in sent.most_common(8) if n)
    print(f"per step through cuwire: {(stats.batches - batches) / steps:.1f} round trips, "
          f"{(stats.queued - queued) / steps:.1f} calls queued, {(stats.wait_seconds - waited) / steps * 1e3:.2f} ms "
          f"waiting for the server; calls that waited: {top}")
pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(20)
