"""CuPy's linear algebra (cuSOLVER, cuBLAS) at the sizes real programs use, one line per result, so that a run
through cuwire can be compared with a native run on the same GPU (tests/gpu_test.sh diffs the two outputs).
CuPy's own test suite uses small matrices; cuSOLVER takes other paths (and asks the driver other things)
for larger ones. Values are printed rounded.

Run: python3 tests/cupy_apps/linalg.py
"""

import cupy as cp


def show(name: str, x) -> None:
    x = cp.asarray(x, dtype=cp.float64)
    print(f"{name}: sum={float(x.sum()):.6g} absmax={float(cp.abs(x).max()):.6g}", flush=True)


def part(name, fn) -> None:
    try:
        fn()
    except Exception as e:  # the line says what broke, to diff against native
        print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


def sizes(n: int, dtype) -> None:
    rng = cp.random.default_rng(n)
    a = rng.standard_normal((n, n), dtype=cp.float64).astype(dtype)
    spd = a @ a.T + n * cp.eye(n, dtype=dtype)
    b = rng.standard_normal((n,), dtype=cp.float64).astype(dtype)
    tag = f"{n} {cp.dtype(dtype).name}"
    part(f"svd {tag}", lambda: show(f"svd values {tag}", cp.linalg.svd(a, compute_uv=False)))
    part(f"eigh {tag}", lambda: show(f"eigh values {tag}", cp.linalg.eigh(spd)[0]))
    part(f"qr {tag}", lambda: show(f"qr |diag r| {tag}", cp.abs(cp.diag(cp.linalg.qr(a)[1]))))
    part(f"solve {tag}", lambda: show(f"solve {tag}", cp.linalg.solve(spd, b)))
    part(f"cholesky {tag}", lambda: show(f"cholesky {tag}", cp.linalg.cholesky(spd)))
    part(f"inv {tag}", lambda: show(f"inv {tag}", cp.linalg.inv(spd)))


for n in (256, 1024, 4096):
    for dtype in (cp.float32, cp.float64):
        sizes(n, dtype)
