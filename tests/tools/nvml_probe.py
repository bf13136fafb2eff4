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


class MemoryV2(ctypes.Structure):  # nvmlMemory_v2_t
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class PciInfo(ctypes.Structure):  # nvmlPciInfo_t
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


class FabricInfo(ctypes.Structure):  # nvmlGpuFabricInfo_v3_t
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
                ("healthSummary", ctypes.c_ubyte)]


class ConfCompute(ctypes.Structure):  # nvmlSystemConfComputeSettings_v1_t
    _fields_ = [("version", ctypes.c_uint), ("environment", ctypes.c_uint), ("ccFeature", ctypes.c_uint),
                ("devToolsMode", ctypes.c_uint), ("multiGpuMode", ctypes.c_uint)]


def version(struct: type, v: int) -> int:
    """NVML_STRUCT_VERSION: a versioned struct's size and version."""
    return ctypes.sizeof(struct) | v << 24


NVLINK_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT


NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def written(struct: ctypes.Structure) -> int:
    """How far into a struct filled with 0xAA a call wrote (the end of the last byte it changed)."""
    data = bytes(struct)
    return max((i + 1 for i, b in enumerate(data) if b != 0xAA), default=0)


def legacy(pci: PciInfo) -> str:
    return pci.busIdLegacy.decode(errors="replace")


def nvlinks(nvml, handle, name) -> None:
    """NCCL's topology walk (graph/xml.cc): per link, P2P capability, state, and the PCI bus at its other
    end, through both ABIs of the last (NCCL looks up the unversioned name, which fills NVML 8's smaller
    struct). Links that answer nothing are counted, not printed one by one."""
    silent, why = 0, set()
    for link in range(NVLINK_MAX_LINKS):
        p2p, state = ctypes.c_uint(), ctypes.c_int()
        cap = nvml.nvmlDeviceGetNvLinkCapability(handle, link, 0, ctypes.byref(p2p))
        up = nvml.nvmlDeviceGetNvLinkState(handle, link, ctypes.byref(state))
        remote, remote_v2 = PciInfo(), PciInfo()
        ctypes.memset(ctypes.byref(remote), 0xAA, ctypes.sizeof(remote))  # (to see how much of it v1 writes)
        pci = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link, ctypes.byref(remote))
        pci_v2 = nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(handle, link, ctypes.byref(remote_v2))
        if cap and up and pci and pci_v2:
            silent += 1
            why |= {name(cap), name(up), name(pci), name(pci_v2)}
            continue
        print(f"NVLink {link}: P2P {name(cap)} {p2p.value if cap == 0 else ''}, state {name(up)} "
              f"{state.value if up == 0 else ''}, remote PCI {name(pci)} "
              f"{legacy(remote) + f', {written(remote)} bytes written' if pci == 0 else ''}"
              f"/ v2 {name(pci_v2)} {remote_v2.busId.decode() if pci_v2 == 0 else ''}")
    print(f"NVLinks answering nothing: {silent} of {NVLINK_MAX_LINKS} ({', '.join(sorted(why))})")


def start_up_calls(nvml, handle, total: int, name) -> None:
    """What NCCL, JAX and gpustat ask at start (each line: the return code's text, then what it gave)."""
    mem = MemoryV2(version=version(MemoryV2, 2))
    status = nvml.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.byref(mem))
    print(f"memory v2: {name(status)}, total as v1's: {mem.total == total}, "
          f"reserved + used + free = total: {mem.reserved + mem.used + mem.free == mem.total}")
    fields = (FieldValue * 2)(FieldValue(fieldId=NVLINK_LINK_COUNT), FieldValue(fieldId=0xFFFF))
    status = nvml.nvmlDeviceGetFieldValues(handle, 2, fields)
    print(f"field values: {name(status)}; NVLink link count: {name(fields[0].nvmlReturn)}"
          f"{f' {fields[0].value & 0xFFFFFFFF}' if fields[0].nvmlReturn == 0 else ''}; "
          f"field 65535: {name(fields[1].nvmlReturn)}")
    fabric = FabricInfo(version=version(FabricInfo, 3))
    status = nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(fabric))
    print(f"fabric info: {name(status)}{f', state {fabric.state}' if status == 0 else ''}")
    p2p = ctypes.c_uint()
    status = nvml.nvmlDeviceGetNvLinkCapability(handle, 0, 0, ctypes.byref(p2p))
    print(f"NVLink 0 P2P capability: {name(status)}{f', {p2p.value}' if status == 0 else ''}")
    nvlinks(nvml, handle, name)
    cc = ConfCompute(version=version(ConfCompute, 1))
    status = nvml.nvmlSystemGetConfComputeSettings(ctypes.byref(cc))
    print(f"confidential computing: {name(status)}"
          f"{f', environment {cc.environment}, feature {cc.ccFeature}' if status == 0 else ''}")
    wrong = MemoryV2(version=version(MemoryV2, 1))
    print(f"memory v2 of a wrong version: {name(nvml.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.byref(wrong)))}")


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
        start_up_calls(nvml, handle, mem.total, lambda status: nvml.nvmlErrorString(status).decode())
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
