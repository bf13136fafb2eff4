"""A small model trained on each GPU in turn, nothing crossing between them: a program on a device list of
several servers (docs/several-servers.md) whose model lives on each server's GPU in turn. Each
device's loss is printed, so that a run through `cuwire run --server a,b` can be compared with a native run
on a machine with as many GPUs (tests/gpu_device_list.sh does).

Run: python3 tests/multi_gpu_apps/torch_each_gpu.py
"""

import torch

print("devices", torch.cuda.device_count(), [torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count())])
for d in range(torch.cuda.device_count()):
    device = f"cuda:{d}"
    g = torch.Generator().manual_seed(d)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(256, 64, generator=g).to(device)
    y = torch.randint(0, 10, (256,), generator=g).to(device)
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    print(device, f"loss {loss.item():.6f}, memory in use {torch.cuda.memory_allocated(d)} bytes")
