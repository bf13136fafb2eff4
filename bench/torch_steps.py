"""PyTorch's steady state, timed inside the program: an iteration of the tutorial's cubic fit
(tests/torch_apps/pytorch_minimal.py, `loss.item()` every 100 as there) and a training step of the
small CNN and transformer of tests/torch_apps/train.py (fp32, each step ending in `loss.item()`),
after a warm-up, so that start-up and module loading are left out. bench/run.sh runs it natively and
through cuwire in the same run and prints the ratios.

    python3 bench/torch_steps.py
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "torch_apps"))
import train  # noqa: E402  (its models and batches; deterministic settings on import)

# train.py's deterministic mode (for its bit-for-bit comparison) also fills every new tensor's memory with a
# kernel, which no training run does by default: a kernel before each batch's copy to the device, which a
# program timed for speed does not have (the algorithms stay deterministic)
torch.utils.deterministic.fill_uninitialized_memory = False


def cubic_fit(iterations: int) -> float:
    """Seconds per iteration of pytorch_minimal's loop."""
    x = torch.linspace(-math.pi, math.pi, 2000, device="cuda")
    y = torch.sin(x)
    a, b, c, d = (torch.randn((), device="cuda", requires_grad=True) for _ in range(4))

    def run(n: int) -> None:
        for t in range(n):
            loss = (a + b * x + c * x ** 2 + d * x ** 3 - y).pow(2).sum()
            if t % 100 == 99:
                loss.item()
            loss.backward()
            with torch.no_grad():
                for p in (a, b, c, d):
                    p -= 1e-6 * p.grad
                    p.grad = None
        torch.cuda.synchronize()

    run(200)
    start = time.perf_counter()
    run(iterations)
    return (time.perf_counter() - start) / iterations


def training_loop(name: str):
    """run(n): n fp32 training steps of one of train.py's models, each ending in `loss.item()`."""
    model_cls, batch = train.MODELS[name]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = model_cls().to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run(n: int) -> None:
        for _ in range(n):
            x, y = batch(g)
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()

    return run


def training(name: str, steps: int) -> float:
    """Seconds per fp32 training step of one of train.py's models."""
    run = training_loop(name)
    run(3)
    start = time.perf_counter()
    run(steps)
    return (time.perf_counter() - start) / steps


if __name__ == "__main__":
    print(f"pytorch_minimal iteration: {cubic_fit(2000) * 1e3:.3f} ms/iter")
    # (100 steps each: 20 varied by a fifth from one run to the next on a shared host)
    print(f"small CNN training step (fp32): {training('cnn', 100) * 1e3:.3f} ms/step")
    print(f"small transformer training step (fp32): {training('transformer', 100) * 1e3:.3f} ms/step")
