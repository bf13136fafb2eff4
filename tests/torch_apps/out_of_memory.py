"""PyTorch out of GPU memory ("out_of_memory"): an allocation larger than the GPU raises
torch.OutOfMemoryError, which a program catches to go on with a smaller one (as training loops that halve
their batch do); the caching allocator's report names the processes on the GPU through NVML
(nvmlDeviceGetComputeRunningProcesses). Then work goes on. A run through cuwire must print what a native
run prints."""

import torch

total = torch.cuda.get_device_properties(0).total_memory
kept = torch.ones(1 << 20, device="cuda")  # this process holds GPU memory: the report lists it
for attempt in (2 * total, total // 64):
    try:
        x = torch.empty(attempt, dtype=torch.uint8, device="cuda")
        print(f"{attempt / total:.4f} of the GPU: allocated")
    except torch.OutOfMemoryError as e:
        print(f"{attempt / total:.4f} of the GPU: {type(e).__name__}, the report says {'CUDA out of memory' in str(e)}")
x.fill_(3)
print("sum after the failure:", int(x[:1 << 20].sum()), float(kept.sum()))
