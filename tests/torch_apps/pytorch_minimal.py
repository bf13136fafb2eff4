"""The PyTorch tutorial's polynomial fit by autograd ("pytorch_minimal"): y = a + b x + c x^2 + d x^3 fitted
to sin(x) by gradient descent, 2,000 iterations, the loss printed every 100. On the GPU, deterministic:
a run through cuwire must print the same losses as a native run."""

import math

import torch

torch.manual_seed(0)
dtype, device = torch.float, torch.device("cuda")
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)
a, b, c, d = (torch.randn((), device=device, dtype=dtype, requires_grad=True) for _ in range(4))
learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None
print(f"Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3")
