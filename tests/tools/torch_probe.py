"""Smallest PyTorch uses of cuBLAS and cuFFT, for tracing what they ask of the driver (CUWIRE_TRACE=1)."""
import torch

a = torch.randn(64, 64, device="cuda")
try:
    print("matmul:", (a @ a).sum().item())
except Exception as e:
    print("matmul failed:", e)
try:
    print("fft:", torch.fft.fft(a[0]).real.sum().item())
except Exception as e:
    print("fft failed:", e)
