"""Where the CUDA headers come from: pinned wheels, unpacked into a cache.

`make codegen` must give the same output on any machine, so the headers are
never taken from whichever toolkit happens to be installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

CUDA_VERSION = "13.0"
# Together these hold cuda.h and cudaTypedefs.h (the driver API and its entry-point typedefs) and nvml.h.
PINNED_WHEELS = ("nvidia-cuda-runtime==13.0.96", "nvidia-nvml-dev==13.0.87")
PARSED_HEADERS = ("cuda.h", "nvml.h")


def cache_dir() -> Path:
    root = os.environ.get("CUWIRE_HEADER_CACHE") or Path.home() / ".cache" / "cuwire" / "headers"
    return Path(root) / CUDA_VERSION


def include_dir() -> Path:
    """Return the include folder of the pinned headers, downloading them once."""
    root = cache_dir()
    inc = root / "nvidia" / "cu13" / "include"
    stamp = root / ".complete"
    if stamp.exists() and stamp.read_text() == "\n".join(PINNED_WHEELS):
        return inc
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "-d", str(wheels),
           *PINNED_WHEELS]
    subprocess.run(cmd, check=True)
    for whl in sorted(wheels.glob("*.whl")):
        if any(whl.name.startswith(w.split("==")[0].replace("-", "_") + "-" + w.split("==")[1])
               for w in PINNED_WHEELS):
            with zipfile.ZipFile(whl) as z:
                z.extractall(root)
    for h in PARSED_HEADERS:
        if not (inc / h).exists():
            raise SystemExit(f"codegen: {h} not found in {inc} after unpacking {PINNED_WHEELS}")
    stamp.write_text("\n".join(PINNED_WHEELS))
    return inc
