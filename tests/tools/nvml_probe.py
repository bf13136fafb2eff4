"""What a program learns about its GPUs from NVML (libnvidia-ml.so.1), one line per fact, so a run through
cuwire can be diffed against a native run (tests/gpu_test.sh) or checked against the emulated device.
Only facts that do not change between runs are printed (no used memory, temperature or clocks).

  python3 tests/tools/nvml_probe.py            # through ctypes, as any C program would call NVML
  python3 tests/tools/nvml_probe.py --pynvml   # through pynvml (nvidia-ml-py), as PyTorch and tools do
"""

from __future__ import annotations

import ctypes
import sys


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def with_ctypes() -> None:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlErrorString.restype = ctypes.c_char_p

    def check(status: int) -> None:
        if status != 0:
            raise RuntimeError(f"NVML error {status}: {nvml.nvmlErrorString(status).decode()}")

    check(nvml.nvmlInit_v2())
    text = ctypes.create_string_buffer(96)
    check(nvml.nvmlSystemGetDriverVersion(text, 96))
    cuda = ctypes.c_int()
    check(nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)))
    count = ctypes.c_uint()
    check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)))
    print(f"driver {text.value.decode()}, CUDA {cuda.value}, {count.value} device(s)")
    for i in range(count.value):
        handle = ctypes.c_void_p()
        check(nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)))
        check(nvml.nvmlDeviceGetName(handle, text, 96))
        name = text.value.decode()
        check(nvml.nvmlDeviceGetUUID(handle, text, 96))
        uuid = text.value.decode()
        mem, major, minor = Memory(), ctypes.c_int(), ctypes.c_int()
        check(nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)))
        check(nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)))
        again = ctypes.c_void_p()
        check(nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(again)))
        print(f"GPU {i}: {name} ({uuid}), {mem.total} bytes, compute capability {major.value}.{minor.value}, "
              f"found again by UUID: {again.value == handle.value}")
        small = ctypes.create_string_buffer(4)
        print(f"GPU {i}: name into 4 bytes: {nvml.nvmlErrorString(nvml.nvmlDeviceGetName(handle, small, 4)).decode()}")
    bad = ctypes.c_void_p()
    status = nvml.nvmlDeviceGetHandleByIndex_v2(count.value + 7, ctypes.byref(bad))
    print(f"device {count.value + 7}: {nvml.nvmlErrorString(status).decode()}")
    check(nvml.nvmlShutdown())


def with_pynvml() -> None:
    import pynvml

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    print(f"pynvml: driver {pynvml.nvmlSystemGetDriverVersion()}, {count} device(s)")
    for i in range(count):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        print(f"pynvml: GPU {i}: {pynvml.nvmlDeviceGetName(h)}, {pynvml.nvmlDeviceGetMemoryInfo(h).total} bytes, "
              f"PCI {pynvml.nvmlDeviceGetPciInfo(h).busId}")
    pynvml.nvmlShutdown()


if __name__ == "__main__":
    with_pynvml() if "--pynvml" in sys.argv else with_ctypes()
