"""NVML on the emulated device (tests only): what pynvml and PyTorch ask of NVML about one GPU, answered
from the same properties and memory the CUDA calls see, with NVML's own return codes."""

from __future__ import annotations

import os
from typing import Any

from cuwire_emulated import registry

SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND, INSUFFICIENT_SIZE = 0, 1, 2, 3, 6, 7
ARGUMENT_VERSION_MISMATCH = 25
DRIVER_VERSION = "cuwire-emulated"
NVML_VERSION = "13.580.00"
UUID_TEXT = "GPU-63757769-7265-2d65-6d75-6c6174656400"  # the CUDA UUID bytes ("cuwire-emulated\0")
PCI_BUS_ID = "00000000:00:00.0"
MESSAGES = {SUCCESS: "Success", UNINITIALIZED: "Uninitialized", INVALID_ARGUMENT: "Invalid Argument",
            NOT_SUPPORTED: "Not Supported", NOT_FOUND: "Not Found", INSUFFICIENT_SIZE: "Insufficient Size",
            ARGUMENT_VERSION_MISMATCH: "Argument version mismatch"}


class EmulatedNvml:
    """Mixed into EmulatedLib, whose helpers (_put, _is_null, _addr, _new_handle, _memory) it uses."""

    _nvml_init = 0
    _nvml_device = 0
    _nvml_messages: dict[int, Any]

    def _nvml_ready(self, device: Any = None) -> int:
        if not self._nvml_init:
            return UNINITIALIZED
        if device is not None and self._addr(device) != self._nvml_device:
            return INVALID_ARGUMENT
        return SUCCESS

    def _nvml_put(self, device: Any, *outputs: tuple[Any, Any]) -> int:
        status = self._nvml_ready(device)
        return status or (SUCCESS if self._put(*outputs) else INVALID_ARGUMENT)

    def _nvml_string(self, device: Any, buffer: Any, length: int, text: str) -> int:
        status = self._nvml_ready(device)
        if status:
            return status
        if self._is_null(buffer):
            return INVALID_ARGUMENT
        if length < len(text) + 1:
            return INSUFFICIENT_SIZE
        data = text.encode() + b"\0"
        self.ffi.memmove(self.ffi.cast("char *", buffer), data, len(data))
        return SUCCESS

    def nvmlInit_v2(self) -> int:
        if not self._nvml_device:
            self._nvml_device = self._new_handle()
        self._nvml_init += 1
        return SUCCESS

    def nvmlInitWithFlags(self, flags: int) -> int:
        return self.nvmlInit_v2()

    def nvmlShutdown(self) -> int:
        if not self._nvml_init:
            return UNINITIALIZED
        self._nvml_init -= 1
        return SUCCESS

    def nvmlErrorString(self, result: int) -> Any:
        if not hasattr(self, "_nvml_messages"):
            self._nvml_messages = {}
        if result not in self._nvml_messages:
            self._nvml_messages[result] = self.ffi.new("char[]", MESSAGES.get(result, "Unknown Error").encode())
        return self._nvml_messages[result]

    def nvmlSystemGetDriverVersion(self, version: Any, length: int) -> int:
        return self._nvml_string(None, version, length, DRIVER_VERSION)

    def nvmlSystemGetNVMLVersion(self, version: Any, length: int) -> int:
        return self._nvml_string(None, version, length, NVML_VERSION)

    def nvmlSystemGetCudaDriverVersion(self, cudaDriverVersion: Any) -> int:
        return self._nvml_put(None, (cudaDriverVersion, registry.DRIVER_VERSION))

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlDeviceGetCount_v2(self, deviceCount: Any) -> int:
        return self._nvml_put(None, (deviceCount, 1))

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, device: Any) -> int:
        if index != 0:
            return self._nvml_ready() or INVALID_ARGUMENT
        return self._nvml_put(None, (device, self._nvml_device))

    def nvmlDeviceGetHandleByUUID(self, uuid: Any, device: Any) -> int:
        if self._string(uuid) != UUID_TEXT:
            return self._nvml_ready() or NOT_FOUND
        return self._nvml_put(None, (device, self._nvml_device))

    def nvmlDeviceGetIndex(self, device: Any, index: Any) -> int:
        return self._nvml_put(device, (index, 0))

    def nvmlDeviceGetName(self, device: Any, name: Any, length: int) -> int:
        return self._nvml_string(device, name, length, str(registry.PROPERTIES["name"]))

    def nvmlDeviceGetUUID(self, device: Any, uuid: Any, length: int) -> int:
        return self._nvml_string(device, uuid, length, UUID_TEXT)

    def nvmlDeviceGetMemoryInfo(self, device: Any, memory: Any) -> int:
        status = self._nvml_ready(device)
        if status or self._is_null(memory):
            return status or INVALID_ARGUMENT
        total, used = self._memory.total, self._memory.used
        memory.total, memory.used, memory.free = total, used, total - used
        return SUCCESS

    def _processes(self, device: Any, infoCount: Any, infos: Any, processes: list[tuple[int, int]]) -> int:
        """NVML's process lists: INSUFFICIENT_SIZE with the count needed when the caller's array is short."""
        status = self._nvml_ready(device)
        if status or self._is_null(infoCount):
            return status or INVALID_ARGUMENT
        if infoCount[0] < len(processes):
            infoCount[0] = len(processes)
            return INSUFFICIENT_SIZE
        for i, (pid, used) in enumerate(processes):
            infos[i].pid, infos[i].usedGpuMemory = pid, used
            infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF  # (no MIG)
        infoCount[0] = len(processes)
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, device: Any, infoCount: Any, infos: Any) -> int:
        """This process, which holds the emulated device, with the device memory in use."""
        return self._processes(device, infoCount, infos, [(os.getpid(), self._memory.used)])

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, device: Any, infoCount: Any, infos: Any) -> int:
        return self._processes(device, infoCount, infos, [])

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, device: Any, infoCount: Any, infos: Any) -> int:
        return self._processes(device, infoCount, infos, [])

    def _versioned(self, struct: Any, ctype: str, version: int) -> int:
        """A versioned struct's check, as NVML makes it: its version field names its size and version."""
        if self._is_null(struct):
            return INVALID_ARGUMENT
        return SUCCESS if struct.version == (self.ffi.sizeof(ctype) | version << 24) else ARGUMENT_VERSION_MISMATCH

    def nvmlDeviceGetMemoryInfo_v2(self, device: Any, memory: Any) -> int:
        status = self._nvml_ready(device) or self._versioned(memory, "nvmlMemory_v2_t", 2)
        if status:
            return status
        total, used = self._memory.total, self._memory.used
        memory.total, memory.reserved, memory.used, memory.free = total, 0, used, total - used
        return SUCCESS

    def nvmlDeviceGetFieldValues(self, device: Any, valuesCount: int, values: Any) -> int:
        """Each field says it is not supported (the emulated device has no counters), as NVML says per field."""
        status = self._nvml_ready(device)
        if status or valuesCount < 0 or (valuesCount and self._is_null(values)):
            return status or INVALID_ARGUMENT
        for i in range(valuesCount):
            values[i].nvmlReturn = NOT_SUPPORTED
        return SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        return self._nvml_ready(device) or NOT_SUPPORTED  # no NVLink fabric (as a GPU without NVSwitch says)

    def nvmlDeviceGetNvLinkCapability(self, device: Any, link: int, capability: int, capResult: Any) -> int:
        return self._nvml_ready(device) or NOT_SUPPORTED  # no NVLink

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, device: Any, link: int, pci: Any) -> int:
        return self._nvml_ready(device) or NOT_SUPPORTED  # no NVLink

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int, pci: Any) -> int:
        return self._nvml_ready(device) or NOT_SUPPORTED  # no NVLink

    def nvmlSystemGetConfComputeSettings(self, settings: Any) -> int:
        status = self._nvml_ready() or self._versioned(settings, "nvmlSystemConfComputeSettings_v1_t", 1)
        if status:
            return status
        settings.environment = settings.ccFeature = settings.devToolsMode = settings.multiGpuMode = 0  # all off
        return SUCCESS

    def nvmlDeviceGetCudaComputeCapability(self, device: Any, major: Any, minor: Any) -> int:
        return self._nvml_put(device, (major, registry.PROPERTIES["major"]), (minor, registry.PROPERTIES["minor"]))

    def nvmlDeviceGetUtilizationRates(self, device: Any, utilization: Any) -> int:
        status = self._nvml_ready(device)
        if status or self._is_null(utilization):
            return status or INVALID_ARGUMENT
        utilization.gpu = utilization.memory = 0
        return SUCCESS

    def nvmlDeviceGetPciInfo_v3(self, device: Any, pci: Any) -> int:
        status = self._nvml_ready(device)
        if status or self._is_null(pci):
            return status or INVALID_ARGUMENT
        bus_id = PCI_BUS_ID.encode()
        pci.busIdLegacy = bus_id
        pci.busId = bus_id
        pci.domain = pci.bus = pci.device = pci.pciDeviceId = pci.pciSubSystemId = 0
        return SUCCESS
