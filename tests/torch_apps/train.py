"""Training, as users run it: a small CNN and a small transformer, 20 optimizer steps each, in fp32 and
in bf16 (autocast), with deterministic algorithms and fixed seeds. Every step's loss is printed to full
precision, so tests/gpu_test.sh can diff a run through cuwire against a native run on the same GPU.

Run: python3 tests/torch_apps/train.py [cnn|transformer ...] [--steps N] [--dtype fp32|bf16]
(default: both models, 20 steps, both dtypes). Fewer steps and one dtype serve to count the round trips
of one step (cuwire run --stats, docs/speed.md). With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (virtual
memory management: reserve, create, map) it says at the end how many of the allocator's segments were so.
"""

import argparse
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda"


class SmallCNN(nn.Module):
    """Conv, batch norm, pooling, dropout and a linear head: cuDNN forward and backward, cuBLAS. (Adaptive
    pooling has no deterministic backward, so the pools are fixed-size.)"""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AvgPool2d(4))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class SmallTransformer(nn.Module):
    """A GPT-shaped language model: embeddings, causal self-attention, layer norm, GELU, tied head."""

    def __init__(self, vocab: int = 256, dim: int = 128, heads: int = 4, layers: int = 2, context: int = 64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(dim)
        self.mask = nn.Transformer.generate_square_subsequent_mask(context)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        x = self.blocks(x, mask=self.mask[:t, :t].to(idx.device), is_causal=True)
        return self.norm(x) @ self.tokens.weight.T


def cnn_batch(g: torch.Generator):
    x = torch.randn(32, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    return x.to(DEV), y.to(DEV)


def transformer_batch(g: torch.Generator):
    seq = torch.randint(0, 256, (16, 65), generator=g)
    return seq[:, :-1].to(DEV), seq[:, 1:].to(DEV)


def train(name: str, model_cls, batch, dtype: torch.dtype, steps: int) -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = model_cls().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        x, y = batch(g)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        print(f"{name} {str(dtype).removeprefix('torch.')} step {step}: loss {loss.item()!r}", flush=True)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"{name} {str(dtype).removeprefix('torch.')}: parameter checksum {checksum!r}", flush=True)


MODELS = {"cnn": (SmallCNN, cnn_batch), "transformer": (SmallTransformer, transformer_batch)}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", metavar="cnn|transformer")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", choices=list(DTYPES), action="append")
    args = ap.parse_args()
    for which in args.models or list(MODELS):
        if which not in MODELS:
            ap.error(f"unknown model {which!r}")
        model_cls, batch = MODELS[which]
        for dtype in args.dtype or list(DTYPES):
            train(which, model_cls, batch, DTYPES[dtype], args.steps)
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        segments = torch.cuda.memory.memory_snapshot()
        expandable = sum(1 for s in segments if s.get("is_expandable"))
        print(f"expandable segments: {expandable} of {len(segments)}", flush=True)
