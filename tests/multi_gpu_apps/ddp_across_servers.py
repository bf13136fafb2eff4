"""PyTorch DDP, two processes, one GPU each, gradients all-reduced by Gloo ("ddp_across_servers").

  python3 ddp_across_servers.py                       natively: rank r on cuda:r of this machine
  python3 ddp_across_servers.py --servers A,B         through cuwire: rank r on its own server (CUWIRE_SERVER),
                                                      on that server's first GPU (servers of one GPU each:
                                                      `cuwire server --devices 0` and `--devices 1`)
  python3 ddp_across_servers.py --servers A,B --each-chooses
                                                      the same on servers that expose every GPU: rank r
                                                      keeps to GPU r (CUDA_VISIBLE_DEVICES=r)

(The first run of this script, on servers of one GPU each, found that their NVML listed every GPU of the
machine, which made PyTorch, counting through NVML, disagree with CUDA; server/nvml_view.py now limits NVML
to the exposed GPUs.)

Gloo carries the gradients between the processes over TCP (on the host: DDP copies them from the GPU and
back), so the two GPUs need no path between them: they may be on two machines. Prints each step's loss (the
same seed: a run across two servers must print what one machine prints) and the median step time."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS, WARMUP = 12, 2


def train(rank: int, world: int, servers: list[str], each_chooses: bool, port: int, out) -> None:
    if servers:  # (read by cuwire's client at this process's first CUDA call, and by PyTorch)
        os.environ["CUWIRE_SERVER"] = servers[rank]
        if each_chooses:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    device = torch.device("cuda", 0 if servers else rank)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own data, as a sampler would give
    times = []
    for step in range(STEPS):
        x = torch.randn(256, 512, generator=g).to(device)
        y = torch.randint(0, 10, (256,), generator=g).to(device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()  # (the all-reduce)
        opt.step()
        value = loss.item()
        times.append(time.perf_counter() - start)
        out.put((rank, step, value))
    weights = sum(float(p.detach().double().sum()) for p in model.parameters())
    out.put((rank, "end", (weights, statistics.median(times[WARMUP:]))))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="", help="HOST:PORT of each rank's cuwire server, comma-separated")
    ap.add_argument("--each-chooses", action="store_true",
                    help="the servers expose every GPU: rank r keeps to GPU r with CUDA_VISIBLE_DEVICES")
    args = ap.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    world = 2
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=train, args=(r, world, servers, args.each_chooses, port, out)) for r in range(world)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in range(world * (STEPS + 1))]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"a rank failed ({p.exitcode})"
    losses = {(r, s): v for r, s, v in results if s != "end"}
    for step in range(STEPS):
        print(f"step {step}: " + " ".join(f"{losses[r, step]:.7f}" for r in range(world)))
    ends = {r: v for r, s, v in results if s == "end"}
    print(f"weights after training, equal on both ranks: {ends[0][0] == ends[1][0]} ({ends[0][0]:.6f})")
    # (to stderr: a run through cuwire prints the same stdout as a native one, timings aside)
    print(f"step time (median, rank 0): {ends[0][1] * 1e3:.2f} ms", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
