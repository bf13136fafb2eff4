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
        "NVLinks answering nothing: 18 of 18 (Not Supported)",
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


PROCESSES = r'''
import ctypes, os
cuda, nvml = ctypes.CDLL("libcuda.so.1"), ctypes.CDLL("libnvidia-ml.so.1")
ctx, mem = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0 and cuda.cuMemAlloc_v2(ctypes.byref(mem), 1 << 20) == 0
class V1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong)]
class V2(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
assert nvml.nvmlInit_v2() == 0
device, count = ctypes.c_void_p(), ctypes.c_uint(0)
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
print("no room:", nvml.nvmlDeviceGetComputeRunningProcesses(device, ctypes.byref(count), None), count.value)
for name, entry in [("", V1), ("_v2", V2), ("_v3", V2)]:
    count.value, infos = 4, (entry * 4)()
    status = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses" + name)(device, ctypes.byref(count), infos)
    own = [infos[i] for i in range(count.value) if infos[i].pid == os.getpid()]
    print(name or "_v1", status, count.value, len(own) == 1 and own[0].used >= 1 << 20,
          entry is V1 or (own[0].gi, own[0].ci) == (0xFFFFFFFF, 0xFFFFFFFF))
count.value = 4
print("graphics:", nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(device, ctypes.byref(count), (V2 * 4)()), count.value)
print("no count:", nvml.nvmlDeviceGetComputeRunningProcesses_v3(device, None, None))
'''


def test_nvml_lists_the_programs_own_process(tmp_path, client_lib: Path, server):
    """nvmlDeviceGetComputeRunningProcesses in each ABI (PyTorch's out-of-memory report asks the first): the
    session's process, under the program's own pid, with the GPU memory it holds; an array too short gets
    NVML_ERROR_INSUFFICIENT_SIZE and the count it needs; no graphics processes."""
    script = tmp_path / "processes.py"
    script.write_text(PROCESSES)
    r = run_remote(Path(sys.executable), client_lib, server.address, str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["no room: 7 1", "_v1 0 1 True True", "_v2 0 1 True True", "_v3 0 1 True True",
                                     "graphics: 0 0", "no count: 2"]
    assert "unimplemented" not in r.stderr
