"""NVML through cuwire: a program that opens libnvidia-ml.so.1 (as PyTorch, pynvml and monitoring tools
do) gets cuwire's, whose calls reach the server's NVML; here the emulated device's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import ROOT, run_remote

PROBE = ROOT / "tests" / "tools" / "nvml_probe.py"


def test_nvml_answers_from_the_server(client_lib: Path, server):
    r = run_remote(Path(sys.executable), client_lib, server.address, str(PROBE))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "driver cuwire-emulated, CUDA 13000, 1 device(s)",
        "GPU 0: cuwire emulated device (GPU-63757769-7265-2d65-6d75-6c6174656400), 8589934592 bytes, "
        "compute capability 9.0, found again by UUID: True",
        "GPU 0: name into 4 bytes: Insufficient Size",
        "memory v2: Success, total as v1's: True, reserved + used + free = total: True",
        "field values: Success; NVLink link count: Not Supported; field 65535: Not Supported",
        "fabric info: Not Supported",
        "NVLink 0 P2P capability: Not Supported",
        "confidential computing: Success, environment 0, feature 0",
        "memory v2 of a wrong version: Argument version mismatch",
        "device 8: Invalid Argument",
    ]
    assert "unimplemented" not in r.stderr


def test_nvml_function_not_served_is_loud(tmp_path, client_lib: Path, server):
    script = tmp_path / "fan.py"
    script.write_text("import ctypes\n"
                      "nvml = ctypes.CDLL('libnvidia-ml.so.1')\n"
                      "print(nvml.nvmlInit_v2(), nvml.nvmlDeviceGetNumFans(None, None))\n")
    r = run_remote(Path(sys.executable), client_lib, server.address, str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "3"]  # NVML_ERROR_NOT_SUPPORTED
    assert "cuwire: unimplemented CUDA function nvmlDeviceGetNumFans (nvml.h)" in r.stderr


def test_nvml_start_up_reaches_the_server_once(tmp_path, client_lib: Path, server):
    """PyTorch calls nvmlInit and nvmlDeviceGetCount five times each as it starts: the client counts NVML's
    initializations (only the first init and the last shutdown reach the server) and keeps the device
    count while NVML is open (client/nvml_answers.c). Past the last shutdown, NVML answers as it would."""
    script = tmp_path / "start.py"
    script.write_text(
        "import ctypes\n"
        "nvml = ctypes.CDLL('libnvidia-ml.so.1')\n"
        "n = ctypes.c_uint(0)\n"
        "inits = [nvml.nvmlInit_v2() for _ in range(5)]\n"
        "counts = [(nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)), n.value) for _ in range(5)]\n"
        "shutdowns = [nvml.nvmlShutdown() for _ in range(6)]\n"
        "closed = nvml.nvmlDeviceGetCount_v2(ctypes.byref(n))\n"
        "again = (nvml.nvmlInit_v2(), nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)), n.value, nvml.nvmlShutdown())\n"
        "print(inits, counts, shutdowns, closed, again)\n")
    r = run_remote(Path(sys.executable), client_lib, server.address, str(script), env={"CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stderr
    # the sixth shutdown and the count after it: NVML_ERROR_UNINITIALIZED (1), as without cuwire
    assert r.stdout.strip() == ("[0, 0, 0, 0, 0] [(0, 1), (0, 1), (0, 1), (0, 1), (0, 1)] [0, 0, 0, 0, 0, 1] 1 "
                                "(0, 0, 1, 0)")
    listed = re.search(r"top calls sent to the server, by count: (.*)", r.stderr)[1]
    sent = dict(re.findall(r"(nvml\w+) (\d+)", listed))
    # init: the first and the one after the last shutdown; shutdown: the fifth (the last open), the sixth and
    # the last; count: the first while open, the one while closed, the first after opening again
    assert sent == {"nvmlInit_v2": "2", "nvmlShutdown": "3", "nvmlDeviceGetCount_v2": "3"}, r.stderr
