"""JAX's workload of bench/distance.sh, timed inside the program after a warm-up, in bench/distance_steps.py's
line format: a jit-compiled training step of a small MLP (forward, grad, SGD update: XLA runs it as CUDA
graphs), ending in `float(loss)`, which waits for the GPU. JAX has no count of the waits it makes, as
PyTorch's sync debug mode has: the step's one wait is its read of the loss (the parameters stay on the
device), so 1 synchronization a step is the floor's count.

    python3 bench/distance_jax.py [STEPS]         (natively, or under `cuwire run`)

Line: "JAX MLP training step: MS ms/step, 1.0 syncs/step[, TRIPS round trips/step, MB MB/step, W ms
waited/step]", and through cuwire, on stderr, what the timed steps waited for.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a GPU shared with others: take what is used

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from wire_counts import counts, per_step, waited_calls, waited_for  # noqa: E402

NAME = "JAX MLP training step"


def mlp_step():
    """A step's function and its state: an MLP of 3 layers of 512 on a batch of 256."""
    key = jax.random.key(0)
    sizes = [256, 512, 512, 10]
    keys = jax.random.split(key, len(sizes))
    params = [(jax.random.normal(k, (a, b)) / a ** 0.5, jnp.zeros(b))
              for k, a, b in zip(keys[:-1], sizes[:-1], sizes[1:], strict=True)]
    x = jax.random.normal(keys[-1], (256, sizes[0]))
    y = jnp.sin(x[:, :sizes[-1]])

    def loss(p):
        h = x
        for w, b in p[:-1]:
            h = jnp.tanh(h @ w + b)
        w, b = p[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    @jax.jit
    def step(p):
        value, grads = jax.value_and_grad(loss)(p)
        return value, jax.tree.map(lambda a, g: a - 1e-2 * g, p, grads)

    state = {"params": params}

    def run(n: int) -> float:
        value = 0.0
        for _ in range(n):
            loss_value, state["params"] = step(state["params"])
            value = float(loss_value)
        return value

    return run


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    run = mlp_step()
    run(5)
    before, calls = counts(), waited_calls()
    start = time.perf_counter()
    last = run(steps)
    elapsed = (time.perf_counter() - start) / steps
    line = f"{NAME}: {elapsed * 1e3:.3f} ms/step, 1.0 syncs/step" + per_step(NAME, before, steps)
    if before is not None:
        print(f"{NAME}: the timed steps waited for {waited_for(calls)}", file=sys.stderr, flush=True)
    print(line, flush=True)
    print(f"{NAME}: last loss {last:.4f}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
