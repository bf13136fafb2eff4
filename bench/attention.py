"""PyTorch's scaled dot-product attention, timed per call on each of its backends (cuDNN, flash, efficient,
math), bf16, GPT-2-sized heads, after a warm-up; and, where transformers is installed, GPT-2's greedy
generation in bf16 (6 layers, random weights: no download), whose attention takes PyTorch's default
backend (cuDNN on Hopper). bench/run.sh runs it natively and through cuwire in the same run and prints the
ratios.

    python3 bench/attention.py [--calls N] [--only cudnn] [--no-gpt2]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def per_call(backend: SDPBackend, calls: int, causal: bool) -> float:
    """Seconds per call: batch 1, 12 heads of 64, 128 tokens, as GPT-2 small's generation asks."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 12, 128, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    with sdpa_kernel(backend):
        for _ in range(10):
            scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            out = scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"attention {backend.name.lower()} checksum {out.float().sum().item():.3f}")
    return elapsed / calls


def gpt2_generation(tokens: int = 48) -> float:
    """Seconds for GPT-2 (6 layers, bf16) to generate `tokens` greedily, after one generation to warm up."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6)).to("cuda", torch.bfloat16).eval()
    prompt = torch.tensor([[50256] * 8], device="cuda")
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=tokens, do_sample=False, pad_token_id=50256)
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=tokens, do_sample=False, pad_token_id=50256)
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"gpt2 generation tokens checksum {int(out.sum())}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--only", choices=sorted(BACKENDS), action="append")
    ap.add_argument("--no-gpt2", action="store_true", help="leave GPT-2's generation out")
    args = ap.parse_args()
    for name in args.only or BACKENDS:
        seconds = per_call(BACKENDS[name], args.calls, causal=True)
        print(f"attention {name}, a call: {seconds * 1e6:.1f} us")
    if not args.no_gpt2 and not args.only:
        try:
            import transformers  # noqa: F401
        except ImportError:
            return
        print(f"GPT-2 bf16 greedy generation, 48 tokens: {gpt2_generation() * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
