"""One process, two GPUs, as PyTorch users drive them, one line per result, so that a run through cuwire can be
compared with a native run on the same machine (tests/gpu_test.sh diffs the two outputs; it runs this where
the server has two GPUs):

- the devices and their peer access as PyTorch sees them;
- copies between the GPUs (a tensor moved cuda:0 -> cuda:1 and back: cudaMemcpyPeer, device-to-device
  copies across contexts) and from page-locked host memory to each;
- kernels on each device, their results gathered on one;
- NCCL inside one process (torch.cuda.nccl: ncclCommInitAll and an all-reduce over both GPUs);
- nn.DataParallel training steps (scatter, replicate, parallel apply, gather; NCCL broadcasts).

Run: python3 tests/multi_gpu_apps/torch_multi_gpu.py   (needs two GPUs)
"""

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def show(name: str, t: torch.Tensor) -> None:
    t = t.detach().double().cpu()
    print(f"{name}: sum={t.sum().item():.6g} absmax={t.abs().max().item():.6g}", flush=True)


def devices() -> None:
    n = torch.cuda.device_count()
    print(f"devices: {n}")
    for i in range(n):
        print(f"device {i}: {torch.cuda.get_device_name(i)}, capability {torch.cuda.get_device_capability(i)}")
    peer = torch.cuda.can_device_access_peer
    print(f"peer access 0->1: {peer(0, 1)}, 1->0: {peer(1, 0)}")


def copies() -> None:
    a = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0") * 0.5
    b = a.to("cuda:1")
    show("cuda:0 -> cuda:1", b)
    c = (b * 2).to("cuda:0")
    show("cuda:1 -> cuda:0, doubled", c)
    print(f"round trip equal: {torch.equal(c, a * 2)}")
    pinned = torch.arange(4096, dtype=torch.float64).pin_memory()
    for i in range(2):
        on = pinned.to(f"cuda:{i}", non_blocking=True)
        torch.cuda.synchronize(i)
        show(f"pinned -> cuda:{i}", on)
    big = torch.randn(64 << 20 >> 2, device="cuda:1")  # 64 MiB, peer to peer
    show("64 MiB cuda:1 -> cuda:0", big.to("cuda:0"))


def kernels() -> None:
    parts = []
    for i in range(2):
        x = torch.linspace(-1, 1, 4096, device=f"cuda:{i}") + i
        parts.append((x @ x.unsqueeze(1)).to("cuda:0"))
    show("matmuls on each device, gathered", torch.cat(parts))


def nccl() -> None:
    import torch.cuda.nccl as nccl

    print(f"nccl available: {nccl.is_available([torch.zeros(1, device='cuda:0'), torch.zeros(1, device='cuda:1')])}")
    tensors = [torch.full((1 << 16,), float(i + 1), device=f"cuda:{i}") for i in range(2)]
    nccl.all_reduce(tensors)
    for i, t in enumerate(tensors):
        show(f"nccl all_reduce on cuda:{i}", t)
    outputs = [torch.empty(4, device=f"cuda:{i}") for i in range(2)]
    nccl.broadcast([torch.arange(4.0, device="cuda:0"), outputs[1]], root=0)
    show("nccl broadcast to cuda:1", outputs[1])


def data_parallel() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to("cuda:0")
    parallel = nn.DataParallel(model, device_ids=[0, 1])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(2)
    for step in range(5):
        x = torch.randn(32, 64, generator=g).to("cuda:0")
        y = torch.randint(0, 10, (32,), generator=g).to("cuda:0")
        loss = nn.functional.cross_entropy(parallel(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"DataParallel step {step}: loss={loss.item():.6f}", flush=True)


if __name__ == "__main__":
    if torch.cuda.device_count() < 2:
        raise SystemExit("torch_multi_gpu.py needs two GPUs")
    devices()
    copies()
    kernels()
    nccl()
    data_parallel()
