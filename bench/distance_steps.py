"""The workloads of bench/distance.py, each timed inside the program after a warm-up: per step its time,
the synchronizations the program makes (PyTorch's own count: torch.cuda's sync debug mode warns at each
operation that waits for the GPU) and, through cuwire, the round trips the client made (its own counters).

    python3 bench/distance_steps.py [STEPS]         (natively, or under `cuwire run`)
    python3 bench/distance_steps.py --first NAME    (under `cuwire run`: one workload's start-up)

Each line: "NAME: MS ms/step, SYNCS syncs/step[, TRIPS round trips/step, MB MB/step, W ms waited/step]"
(through cuwire: the round trips, the bytes the step moved both ways on the link, and the time the client
waited for the server's answers; the rest of the step is the program issuing its calls). With --first, a fresh process
makes the one workload and runs its first step: "NAME: first step after TRIPS round trips, N
synchronizations, S s from process start": what a process's start costs at a distance (issue 35's goal
is 60 round trips), beside the synchronizations the program made on the way (each needs a round trip:
the floor).
"""

from __future__ import annotations

import sys
import time

STARTED = time.perf_counter()  # before torch: a process's start includes importing it

import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
import torch_steps  # noqa: E402
from wire_counts import counts, per_step, round_trips, waited_for  # noqa: E402


def cubic_loop() -> Callable[[int], None]:
    """pytorch_minimal's iteration, with loss.item() every iteration (a step that synchronizes once)."""
    x = torch.linspace(-3.14, 3.14, 2000, device="cuda")
    y = torch.sin(x)
    params = [torch.randn((), device="cuda", requires_grad=True) for _ in range(4)]

    def run(n: int) -> None:
        for _ in range(n):
            a, b, c, d = params
            loss = (a + b * x + c * x ** 2 + d * x ** 3 - y).pow(2).sum()
            loss.item()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= 1e-6 * p.grad
                    p.grad = None

    return run


def gpt2_decoding() -> Callable[[int], None]:
    """Greedy decoding with GPT-2's architecture (random weights, no download): a step is one token."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6)).to("cuda").eval()
    state = {"ids": torch.tensor([[50256]], device="cuda"), "past": None}

    def run(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                out = model(state["ids"][:, -1:], past_key_values=state["past"], use_cache=True)
                state["past"] = out.past_key_values
                token = int(out.logits[0, -1].argmax())  # the host needs it: one synchronization
                state["ids"] = torch.cat([state["ids"], torch.tensor([[token]], device="cuda")], 1)
                if state["ids"].shape[1] >= 512:
                    state["ids"], state["past"] = state["ids"][:, :1], None

    return run


WORKLOADS = {
    "pytorch_minimal iteration": cubic_loop,
    "small CNN training step": lambda: torch_steps.training_loop("cnn"),
    "small transformer training step": lambda: torch_steps.training_loop("transformer"),
    "GPT-2 decoding, one token": gpt2_decoding,
}


def syncs(run: Callable[[int], None], n: int) -> float:
    """The program's synchronizations per step, as PyTorch counts them."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            run(n)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in seen) / n


def first_step(name: str) -> None:
    """One workload from process start to the end of its first step (CUDA's start, module loads and all),
    with the synchronizations the program makes on the way (PyTorch's count): the floor at a distance."""
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run = WORKLOADS[name]()
        run(1)
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - STARTED
    syncs = sum("synchronizing" in str(w.message) for w in seen) + 1  # and the synchronize above
    trips = round_trips()
    print(f"{name}: first step after {trips if trips is not None else '-'} round trips, {syncs} synchronizations, "
          f"{elapsed:.2f} s from process start", flush=True)
    if trips is not None:
        print(f"{name}: waited for {waited_for()}", file=sys.stderr, flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--first"]:
        first_step(" ".join(sys.argv[2:]))
        return
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for name, make in WORKLOADS.items():
        run = make()
        run(3)
        per_step_syncs = syncs(run, 5)
        torch.cuda.synchronize()
        before = counts()
        start = time.perf_counter()
        run(steps)
        elapsed = (time.perf_counter() - start) / steps
        print(f"{name}: {elapsed * 1e3:.3f} ms/step, {per_step_syncs:.1f} syncs/step"
              + per_step(name, before, steps), flush=True)


if __name__ == "__main__":
    main()
