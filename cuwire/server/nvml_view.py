"""NVML as a session sees it: the GPUs the server exposes, and no others, as a container's NVML shows them.

A server given some of its machine's GPUs (`--devices`, or its own CUDA_VISIBLE_DEVICES) shows those to
its clients' CUDA; NVML ignores CUDA_VISIBLE_DEVICES and would list every GPU of the machine. Programs
that count devices through NVML (PyTorch does, then parses the program's own CUDA_VISIBLE_DEVICES over
NVML's list) would then disagree with CUDA. So NVML's enumeration (count, handle by index, index of a
handle) is limited to the exposed GPUs, matched by UUID, in CUDA's order; a handle asked for by UUID, PCI
bus id or serial of another GPU is not found. Where the server exposes every GPU, NVML is left alone.
"""

from __future__ import annotations

from typing import Any

from cuwire.generated import cuda_constants as cu


def uuid_text(uuid: bytes) -> str:
    """A CUDA UUID's 16 bytes as NVML writes them: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = uuid.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class NvmlView:
    """The backend's library, with NVML's device enumeration limited to `uuids`; everything else is the
    library's own (looked up once, then kept as this object's attribute: no cost on later calls)."""

    def __init__(self, lib: Any, ffi: Any, uuids: list[str]):
        self._lib, self._ffi, self._uuids = lib, ffi, uuids

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, name)
        setattr(self, name, value)
        return value

    def _handles(self) -> tuple[int, list[Any]]:
        """NVML's handles of the exposed GPUs, in order (asked each time: NVML may have been shut down and
        initialized again since); NVML's error, if it has one."""
        handles = []
        for uuid in self._uuids:
            out = self._ffi.new("nvmlDevice_t *")
            status = self._lib.nvmlDeviceGetHandleByUUID(uuid.encode(), out)
            if status:
                return status, []
            handles.append(out[0])
        return 0, handles

    def _index(self, device: Any) -> int:
        status, handles = self._handles()
        addresses = [int(self._ffi.cast("uintptr_t", h)) for h in handles]
        address = int(self._ffi.cast("uintptr_t", device))
        return addresses.index(address) if not status and address in addresses else -1

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        status, handles = self._handles()
        if not status:
            count[0] = len(handles)
        return status

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, device: Any) -> int:
        status, handles = self._handles()
        if status:
            return status
        if index >= len(handles):
            return cu.NVML_ERROR_INVALID_ARGUMENT
        device[0] = handles[index]
        return 0

    def nvmlDeviceGetIndex(self, device: Any, index: Any) -> int:
        found = self._index(device)
        if found < 0:
            return cu.NVML_ERROR_INVALID_ARGUMENT
        index[0] = found
        return 0

    def _exposed(self, status: int, device: Any) -> int:
        return status if status or self._index(device[0]) >= 0 else cu.NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetHandleByUUID(self, uuid: Any, device: Any) -> int:
        return self._exposed(self._lib.nvmlDeviceGetHandleByUUID(uuid, device), device)

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: Any, device: Any) -> int:
        return self._exposed(self._lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id, device), device)

    def nvmlDeviceGetHandleBySerial(self, serial: Any, device: Any) -> int:
        return self._exposed(self._lib.nvmlDeviceGetHandleBySerial(serial, device), device)
