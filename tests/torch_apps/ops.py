"""PyTorch operations that reach cuBLAS, cuBLASLt, cuDNN and cuFFT, one line each, so that a run through
cuwire can be compared with a native run on the same GPU (tests/gpu_test.sh diffs the two outputs).

Each line prints a value computed on the GPU, to full precision: with deterministic algorithms and the
same GPU and libraries, a remote run must print the same bits. Run: python3 tests/torch_apps/ops.py
"""

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
DEV = "cuda"


def show(name: str, t: torch.Tensor) -> None:
    t = t.detach().double().cpu()
    print(f"{name}: sum={t.sum().item()!r} absmax={t.abs().max().item()!r} first={t.flatten()[0].item()!r}",
          flush=True)


def step(name, fn) -> None:
    """One operation; a failure is printed as a line (and the rest still run)."""
    try:
        fn()
    except Exception as e:  # the line says what broke, to diff against native
        print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


def matmul(dtype, tf32: bool):
    def run():
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(256, 384, device=DEV, dtype=dtype)
        b = torch.randn(384, 128, device=DEV, dtype=dtype)
        show(f"matmul {dtype} tf32={tf32}", a @ b)
    return run


def conv():
    x = torch.randn(4, 3, 32, 32, device=DEV, requires_grad=True)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(DEV)
    y = conv(x)
    show("conv2d forward", y)
    y.square().sum().backward()
    show("conv2d backward (input)", x.grad)
    show("conv2d backward (weight)", conv.weight.grad)


def fft():
    x = torch.randn(1024, device=DEV)
    show("fft real", torch.fft.fft(x).real)
    show("rfft2 abs", torch.fft.rfft2(torch.randn(64, 64, device=DEV)).abs())


def others():
    print("device name:", torch.cuda.get_device_name(0), flush=True)
    free, total = torch.cuda.mem_get_info()
    print(f"mem_get_info: total={total} free<=total: {free <= total}", flush=True)
    x = torch.randn(1000, device=DEV)
    show("randn", x)
    show("softmax", torch.softmax(x, 0))
    show("sort", torch.sort(x).values)
    show("topk", torch.topk(x, 10).values)


step("misc", others)
step("matmul fp32", matmul(torch.float32, False))
step("matmul tf32", matmul(torch.float32, True))
step("matmul bf16", matmul(torch.bfloat16, False))
step("conv2d", conv)
step("fft", fft)
torch.cuda.synchronize()
print("ops: done", flush=True)
