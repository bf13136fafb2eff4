"""JAX with XLA's default flags (command buffers, that is CUDA graphs, on), one line per result, so that a run
through cuwire can be compared with a native run on the same GPU (tests/gpu_test.sh diffs the two outputs):
jit, grad, a 60-step MLP training, a convolution (cuDNN), FFT, linear algebra (cuSOLVER), lax.scan,
lax.while_loop and vmap. Values are printed rounded to 3 digits: XLA's autotuning times kernels and may pick
others between runs.

Run: python3 tests/jax_apps/jax_programs.py
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a GPU shared with others: take what is used

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


def show(name: str, x) -> None:
    x = jnp.asarray(x, dtype=jnp.float32)
    print(f"{name}: sum={float(jnp.sum(x)):.3g} absmax={float(jnp.max(jnp.abs(x))):.3g}", flush=True)


def part(name, fn) -> None:
    """One part; a failure is printed as a line (and the rest still run)."""
    try:
        fn()
    except Exception as e:  # the line says what broke, to diff against native
        print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


def devices():
    print(f"devices: {len(jax.devices())} {jax.devices()[0].platform}", flush=True)


def jit_and_grad():
    x = jax.random.normal(jax.random.key(0), (256, 256))
    f = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(axis=0))
    show("jit", f(x))
    g = jax.jit(jax.grad(lambda a: jnp.sum(jnp.sin(a) ** 2)))
    show("grad", g(x))


def mlp_training():
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    params = {"w1": jax.random.normal(k1, (64, 128)) * 0.1, "b1": jnp.zeros(128),
              "w2": jax.random.normal(k2, (128, 1)) * 0.1, "b2": jnp.zeros(1)}
    x = jax.random.normal(k3, (512, 64))
    y = jnp.sin(x.sum(axis=1, keepdims=True))

    def loss(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    @jax.jit
    def step(p, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, g: a - 0.05 * g, p, grads), value

    for i in range(60):
        params, value = step(params, x, y)
        if i % 20 == 0 or i == 59:
            print(f"mlp step {i}: loss={float(value):.3g}", flush=True)


def convolution():
    x = jax.random.normal(jax.random.key(2), (8, 3, 32, 32))
    w = jax.random.normal(jax.random.key(3), (16, 3, 3, 3))
    # full float32 (no TF32): the sum is a cancellation of 131,072 outputs, and TF32's error in it depends on
    # which algorithm autotuning picked (-208 natively, -209 through cuwire in one H200 run)
    conv = jax.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", precision=lax.Precision.HIGHEST))
    show("conv", conv(x, w))
    show("conv grad", jax.jit(jax.grad(lambda w: conv(x, w).sum()))(w))


def fft():
    x = jax.random.normal(jax.random.key(4), (1024,))
    show("fft abs", jnp.abs(jnp.fft.fft(x)))
    show("rfft2 abs", jnp.abs(jnp.fft.rfft2(x.reshape(32, 32))))


def linalg():
    a = jax.random.normal(jax.random.key(5), (256, 256))
    spd = a @ a.T + 256 * jnp.eye(256)
    b = jax.random.normal(jax.random.key(6), (256,))
    show("cholesky", jnp.linalg.cholesky(spd))
    show("solve", jnp.linalg.solve(spd, b))
    show("qr r", jnp.abs(jnp.diag(jnp.linalg.qr(a)[1])))
    show("svd values", jnp.linalg.svd(a, compute_uv=False))
    show("eigh values", jnp.linalg.eigh(spd)[0])


def scan_and_while():
    def body(carry, x):
        carry = jnp.tanh(carry * 0.9 + x)
        return carry, carry.sum()

    xs = jax.random.normal(jax.random.key(7), (100, 64))
    carry, ys = jax.jit(lambda xs: lax.scan(body, jnp.zeros(64), xs))(xs)
    show("scan carry", carry)
    show("scan outputs", ys)

    def cond(s):
        return s[0] < 1000.0

    def grow(s):
        return s[0] * 1.5 + 1.0, s[1] + 1

    value, steps = jax.jit(lambda v: lax.while_loop(cond, grow, (v, 0)))(1.0)
    print(f"while_loop: value={float(value):.3g} steps={int(steps)}", flush=True)


def vmap():
    x = jax.random.normal(jax.random.key(8), (32, 16, 16))
    show("vmap matmul", jax.jit(jax.vmap(lambda m: m @ m.T))(x))


for name, fn in [("devices", devices), ("jit and grad", jit_and_grad), ("mlp training", mlp_training),
                 ("convolution", convolution), ("fft", fft), ("linalg", linalg), ("scan and while", scan_and_while),
                 ("vmap", vmap)]:
    part(name, fn)
