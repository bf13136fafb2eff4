"""NVML as a session sees it on a server given some of its machine's GPUs (server/nvml_view.py): only
those, in CUDA's order, found by UUID; a fake NVML of three GPUs stands for the machine, and the emulated
device's NVML answers through the view as it does without one."""

from __future__ import annotations

import sys
from pathlib import Path

import cffi
from conftest import ROOT, ServerProcess, run_remote

from cuwire.generated import cuda_constants as cu
from cuwire.server.nvml_view import NvmlView, uuid_text

UUIDS = ["GPU-00000000-0000-0000-0000-00000000000a", "GPU-00000000-0000-0000-0000-00000000000b",
         "GPU-00000000-0000-0000-0000-00000000000c"]


class ThreeGpus:
    """A machine's NVML: three devices, handles 1, 2 and 3."""

    def __init__(self, ffi):
        self.ffi = ffi

    def nvmlDeviceGetHandleByUUID(self, uuid, out):
        text = uuid.decode() if isinstance(uuid, bytes) else self.ffi.string(uuid).decode()
        if text not in UUIDS:
            return cu.NVML_ERROR_NOT_FOUND
        out[0] = self.ffi.cast("nvmlDevice_t", UUIDS.index(text) + 1)
        return 0

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, out):
        out[0] = self.ffi.cast("nvmlDevice_t", int(self.ffi.string(bus_id)))
        return 0

    def nvmlDeviceGetName(self, device, name, length):
        return 0


def test_the_view_shows_the_exposed_gpus_only():
    ffi = cffi.FFI()
    ffi.cdef("typedef struct nvmlDevice_st *nvmlDevice_t;")
    view = NvmlView(ThreeGpus(ffi), ffi, [UUIDS[2], UUIDS[0]])  # CUDA's order: the machine's GPU c, then a
    count, device, index = ffi.new("unsigned int *"), ffi.new("nvmlDevice_t *"), ffi.new("unsigned int *")
    assert view.nvmlDeviceGetCount_v2(count) == 0 and count[0] == 2
    assert view.nvmlDeviceGetHandleByIndex_v2(0, device) == 0 and int(ffi.cast("uintptr_t", device[0])) == 3
    assert view.nvmlDeviceGetIndex(device[0], index) == 0 and index[0] == 0
    assert view.nvmlDeviceGetHandleByIndex_v2(2, device) == cu.NVML_ERROR_INVALID_ARGUMENT
    assert view.nvmlDeviceGetHandleByUUID(UUIDS[1].encode(), device) == cu.NVML_ERROR_NOT_FOUND  # not exposed
    assert view.nvmlDeviceGetHandleByUUID(UUIDS[0].encode(), device) == 0
    assert view.nvmlDeviceGetIndex(device[0], index) == 0 and index[0] == 1
    assert view.nvmlDeviceGetHandleByPciBusId_v2(ffi.new("char[]", b"2"), device) == cu.NVML_ERROR_NOT_FOUND
    assert view.nvmlDeviceGetIndex(ffi.cast("nvmlDevice_t", 2), index) == cu.NVML_ERROR_INVALID_ARGUMENT
    assert view.nvmlDeviceGetName(device[0], ffi.NULL, 0) == 0  # the rest: the library's own


def test_uuids_as_nvml_writes_them():
    assert uuid_text(b"cuwire-emulated\0") == "GPU-63757769-7265-2d65-6d75-6c6174656400"


def test_a_server_given_some_gpus_answers_nvml_through_the_view(tmp_path, client_lib):
    """A server started with --devices tells its sessions the GPUs it exposes; NVML answers through the
    view as it does without one (the emulated machine has one GPU, which it exposes)."""
    server = ServerProcess(tmp_path, "--devices", "0")
    try:
        probe = ROOT / "tests" / "tools" / "nvml_probe.py"
        r = run_remote(Path(sys.executable), client_lib, server.address, str(probe))
        assert r.returncode == 0, r.stderr
        assert "1 device(s)" in r.stdout and "found again by UUID: True" in r.stdout
        assert "device 8: Invalid Argument" in r.stdout
    finally:
        server.stop()
