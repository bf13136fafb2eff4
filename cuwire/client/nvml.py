"""Hand-written client halves of NVML's functions annotated `mode = "custom"` (libnvidia-ml.so.1.toml).

Each is called by its generated C stub with the same boundary arguments as a generated one
(see generated/client_cdefs.h).
"""

from __future__ import annotations

import struct

from _cuwire import ffi

from cuwire.client import runtime as rt
from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated.wire_ids import OP_IDS

RUNNING_PROCESSES = OP_IDS["RunningProcesses"]

_fallbacks: dict[int, object] = {}  # code -> C string, kept alive: callers hold the pointers


def _fallback(error: int):
    """nvmlErrorString when the server cannot be asked: never NULL (callers print it unchecked)."""
    if error not in _fallbacks:
        text = f"NVML error {error} (cuwire: the server could not be asked for its message)"
        _fallbacks[error] = ffi.new("char[]", text.encode())
    return int(ffi.cast("uintptr_t", _fallbacks[error]))


@ffi.def_extern(name="cuwire_py_nvmlErrorString", onerror=lambda exc_type, exc, tb: 0)
def nvmlErrorString(result):
    """The server's NVML's message for the code, cached; the C stub returns it as const char *."""
    try:
        text = rt.client.error_string(result, nvml=True)
    except rt.Fail:
        return _fallback(result)
    return int(ffi.cast("uintptr_t", text)) or _fallback(result)


# ---------------------------------------------------------------- running processes

NOT_AVAILABLE = 0xFFFFFFFF  # a v2 entry's GPU and compute instance ids outside MIG


def _running_processes(kind: int, device: int, infoCount, infos, size: int) -> int:
    """NVML's process list of a device as the session sees it (server/custom.py running_processes): each
    entry written in the caller's layout, nvmlProcessInfo_v1_t (16 bytes: pid, memory) or _v2_t (24: and
    the MIG instance ids); a short array gets NVML_ERROR_INSUFFICIENT_SIZE and the count it needs."""
    if infoCount == ffi.NULL or size not in (16, 24):
        return cu.NVML_ERROR_INVALID_ARGUMENT
    route = rt.route("RunningProcesses", nvml=(device,))  # (a device list: the device's server, its handle)
    res = rt.client.call(RUNNING_PROCESSES, pb.RunningProcesses_Args(device=rt.nvml_theirs(device), kind=kind),
                         pb.RunningProcesses_Result, route)
    if res.status:
        return res.status
    count = ffi.cast("unsigned int *", infoCount)
    if count[0] < len(res.pids) or (res.pids and infos == ffi.NULL):
        count[0] = len(res.pids)
        return cu.NVML_ERROR_INSUFFICIENT_SIZE
    count[0] = len(res.pids)
    for i, (pid, used) in enumerate(zip(res.pids, res.used_memory, strict=True)):
        entry = struct.pack("<I4xQ", pid, used)
        if size == 24:
            entry += struct.pack("<II", NOT_AVAILABLE, NOT_AVAILABLE)
        ffi.memmove(ffi.cast("char *", infos) + i * size, entry, size)
    return 0


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetComputeRunningProcesses", onerror=rt.on_nvml_error)
def nvmlDeviceGetComputeRunningProcesses(device, infoCount, infos, infos_size):
    return _running_processes(0, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetComputeRunningProcesses_v2", onerror=rt.on_nvml_error)
def nvmlDeviceGetComputeRunningProcesses_v2(device, infoCount, infos, infos_size):
    return _running_processes(0, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetComputeRunningProcesses_v3", onerror=rt.on_nvml_error)
def nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos, infos_size):
    return _running_processes(0, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetGraphicsRunningProcesses", onerror=rt.on_nvml_error)
def nvmlDeviceGetGraphicsRunningProcesses(device, infoCount, infos, infos_size):
    return _running_processes(1, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetGraphicsRunningProcesses_v2", onerror=rt.on_nvml_error)
def nvmlDeviceGetGraphicsRunningProcesses_v2(device, infoCount, infos, infos_size):
    return _running_processes(1, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetGraphicsRunningProcesses_v3", onerror=rt.on_nvml_error)
def nvmlDeviceGetGraphicsRunningProcesses_v3(device, infoCount, infos, infos_size):
    return _running_processes(1, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetMPSComputeRunningProcesses", onerror=rt.on_nvml_error)
def nvmlDeviceGetMPSComputeRunningProcesses(device, infoCount, infos, infos_size):
    return _running_processes(2, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetMPSComputeRunningProcesses_v2", onerror=rt.on_nvml_error)
def nvmlDeviceGetMPSComputeRunningProcesses_v2(device, infoCount, infos, infos_size):
    return _running_processes(2, device, infoCount, infos, infos_size)


@ffi.def_extern(name="cuwire_py_nvmlDeviceGetMPSComputeRunningProcesses_v3", onerror=rt.on_nvml_error)
def nvmlDeviceGetMPSComputeRunningProcesses_v3(device, infoCount, infos, infos_size):
    return _running_processes(2, device, infoCount, infos, infos_size)
