"""PyTorch's CUDA graphs, as its documentation uses them, one line per result, so that a run through cuwire
can be compared with a native run on the same GPU (tests/gpu_test.sh diffs the two outputs).

- torch.cuda.graph: capture a Linear + relu, whose output PyTorch allocates inside the capture (from the
  graph's private pool: cudaMalloc with the thread's capture mode relaxed), replay it with new inputs;
- whole-network capture: forward, backward and optimizer step captured once, replayed as training steps;
- torch.cuda.make_graphed_callables on a module, trained;
- torch.compile(mode="reduce-overhead") training steps (CUDA graphs made by Inductor);
- a capture that fails natively (a synchronization inside it) fails the same way (last: natively, PyTorch's
  random number state is unusable after it).

Run: python3 tests/torch_apps/cuda_graphs.py
"""

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda"


def show(name: str, t: torch.Tensor) -> None:
    t = t.detach().double().cpu()
    print(f"{name}: sum={t.sum().item():.6g} absmax={t.abs().max().item():.6g}", flush=True)


def step(name, fn) -> None:
    """One part; a failure is printed as a line (and the rest still run)."""
    try:
        fn()
    except Exception as e:  # the line says what broke, to diff against native
        print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


def capture_and_replay():
    layer = torch.nn.Linear(256, 512).to(DEV)
    static_in = torch.randn(64, 256, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as the documentation does (cuBLAS's set-up)
        for _ in range(3):
            torch.relu(layer(static_in))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # the output is allocated in the capture, from the graph's own pool
        static_out = torch.relu(layer(static_in))
    for i in range(3):
        static_in.copy_(torch.randn(64, 256, device=DEV))
        g.replay()
        show(f"graph replay {i}", static_out)
        show(f"eager same input {i}", torch.relu(layer(static_in)))


def whole_network():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(DEV)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.randn(32, 64, device=DEV)
    static_y = torch.randint(0, 10, (32,), device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up, as the documentation does
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    data = [(torch.randn(32, 64, device=DEV), torch.randint(0, 10, (32,), device=DEV)) for _ in range(5)]
    for i, (x, y) in enumerate(data):
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        print(f"whole-network step {i}: loss={static_loss.item():.6g}", flush=True)
    show("whole-network weights", model[0].weight)


def graphed_callables():
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(DEV)
    opt = torch.optim.SGD(module.parameters(), lr=0.05)
    sample = torch.randn(16, 32, device=DEV, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(module, (sample,))
    for i in range(4):
        x = torch.randn(16, 32, device=DEV)
        loss = graphed(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"graphed callable step {i}: loss={loss.item():.6g}", flush=True)


def compiled_reduce_overhead():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    compiled = torch.compile(model, mode="reduce-overhead")
    for i in range(6):
        x = torch.randn(32, 64, device=DEV)
        loss = compiled(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"reduce-overhead step {i}: loss={loss.item():.4g}", flush=True)


def failing_capture():
    g = torch.cuda.CUDAGraph()
    x = torch.ones(8, device=DEV)
    try:
        with torch.cuda.graph(g):
            y = x * 2
            torch.cuda.synchronize()  # not allowed while capturing
            y = y + 1
        print("failing capture: no error", flush=True)
    except Exception as e:
        print(f"failing capture: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
    step("after the failed capture", lambda: show("after the failed capture", torch.ones(8, device=DEV) * 3))


step("capture and replay", capture_and_replay)
step("whole network", whole_network)
step("graphed callables", graphed_callables)
step("reduce-overhead", compiled_reduce_overhead)
step("failing capture", failing_capture)
