"""A PyTorch training of known memory need, for make bench-overflow (bench/overflow.sh): an MLP of
OVERFLOW_LAYERS layers of 8192 x 8192 (256 MiB each in fp32), trained with Adam (weights, gradients and
two moments: four times the weights), so that it needs more device memory than a session's budget given
below it. Prints each step's loss (the same seed, so runs compare), then the median step time."""

from __future__ import annotations

import os
import statistics
import time

import torch

LAYERS = int(os.environ.get("OVERFLOW_LAYERS", "4"))
WIDTH, BATCH, STEPS, WARMUP = 8192, 2048, 12, 3


def main() -> None:
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())
                                  for _ in range(LAYERS)]).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, WIDTH, device="cuda")
    y = torch.randn(BATCH, WIDTH, device="cuda")
    times = []
    for step in range(STEPS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()  # (synchronizes)
        times.append(time.perf_counter() - start)
        print(f"loss {step}: {value:.9g}")
    print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    print(f"step: {statistics.median(times[WARMUP:]) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
