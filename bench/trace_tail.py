"""What a traced program (CUWIRE_TRACE=1) waited for after its last call of a given name: how many calls it
made from there, how many took over a millisecond (at a distance: a round trip each), and which.
Used by bench/jax_end.sh for a JAX program's end (XLA's teardown, after its last graph launch).

    python3 bench/trace_tail.py TRACE [LAST_CALL (default cuGraphLaunch)]
"""

from __future__ import annotations

import re
import sys
from collections import Counter

RETURN = re.compile(r"cuwire trace: ([\d.]+) (\S+) -> (\S+) in ([\d.]+) us")


def main() -> None:
    path, last_name = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cuGraphLaunch"
    returns = [m.groups() for m in map(RETURN.match, open(path, errors="replace")) if m]
    last = max((i for i, r in enumerate(returns) if r[1] == last_name), default=None)
    if last is None:
        sys.exit(f"no {last_name} in {path}")
    tail = returns[last + 1:]
    slow = Counter(name for _, name, _, us in tail if float(us) > 1000)
    failed = sum(result != "CUDA_SUCCESS" for _, _, result, _ in tail)
    span = (float(tail[-1][0]) - float(returns[last][0])) * 1e3 if tail else 0.0
    print(f"after the last {last_name}: {len(tail)} calls, {sum(slow.values())} over 1 ms, {failed} not "
          f"CUDA_SUCCESS, {span:.0f} ms to the last call")
    print("  over 1 ms: " + ", ".join(f"{name} {n}" for name, n in slow.most_common()))


if __name__ == "__main__":
    main()
