"""CUDA_VISIBLE_DEVICES as natively ("visible_devices"): for each value, a child process (the variable is
read when CUDA starts) prints how many devices it sees, their UUIDs in its order, and a sum computed on
its device 0. A run through cuwire must print what a native run prints."""

import os
import subprocess
import sys

CHILD = ("import torch\n"
         "n = torch.cuda.device_count()\n"
         "uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]\n"
         "print(n, uuids, float((torch.ones(1000, device='cuda') * 2).sum()) if n else None)\n")

for value in ("1", "1,0", "0", "0,7", ""):
    r = subprocess.run([sys.executable, "-c", CHILD], env={**os.environ, "CUDA_VISIBLE_DEVICES": value},
                       capture_output=True, text=True, timeout=300)
    print(repr(value), r.stdout.strip() if r.returncode == 0 else f"failed ({r.returncode})")
