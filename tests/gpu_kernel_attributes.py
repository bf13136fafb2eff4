"""On a GPU machine, natively (no cuwire): does cuwire/kernel_facts.py's model of the function attributes
give the driver's answers? Every kernel of the machine code the GPU would load from PyTorch's CUDA
libraries, the NVIDIA libraries beside them and the test apps is loaded with the real driver, its 16
attributes asked, and each compared with the model; per attribute, how many kernels agree, and the first
disagreements with the facts read. An attribute that agrees for every kernel may join kernel_facts.CHECKED.
Then cuwire/occupancy.py's answers against the driver's for each kernel, on its attributes as the driver gives
them (and the barriers the cubin names), over block sizes, dynamic shared memory and, of every eighth kernel,
a larger dynamic shared memory and a carveout set: a question that agrees everywhere may join
occupancy.CHECKED.

    python3 tests/gpu_kernel_attributes.py [--seconds 240] [--out DIR] [LIBRARY_OR_BINARY...]

Exit 0 when it ran (the agreement is what it reports, not a pass or fail); the summary goes to stdout and
the details, as JSON, to DIR/kernel_attributes.json ($OUT by default).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cuwire import fatbin, kernel_facts, occupancy  # noqa: E402

NAMES = ["MAX_THREADS_PER_BLOCK", "SHARED_SIZE_BYTES", "CONST_SIZE_BYTES", "LOCAL_SIZE_BYTES", "NUM_REGS",
         "PTX_VERSION", "BINARY_VERSION", "CACHE_MODE_CA", "MAX_DYNAMIC_SHARED_SIZE_BYTES",
         "PREFERRED_SHARED_MEMORY_CARVEOUT", "CLUSTER_SIZE_MUST_BE_SET", "REQUIRED_CLUSTER_WIDTH",
         "REQUIRED_CLUSTER_HEIGHT", "REQUIRED_CLUSTER_DEPTH", "NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
         "CLUSTER_SCHEDULING_POLICY_PREFERENCE"]
EM_CUDA = 190
# CUdevice_attribute numbers (cuda.h)
MAX_THREADS_PER_BLOCK, MAX_SHARED_PER_BLOCK, MAX_REGISTERS_PER_MULTIPROCESSOR = 1, 8, 82
MAJOR, MINOR = 75, 76


def default_images() -> list[str]:
    """The test apps, PyTorch's CUDA libraries and the NVIDIA libraries installed beside it (in that order:
    the time limit cuts the last)."""
    apps = Path(__file__).resolve().parent / "test_apps" / "build"
    found = sorted(str(p) for p in apps.iterdir() if p.is_file() and os.access(p, os.X_OK)) if apps.is_dir() else []
    try:
        import torch
        base = Path(torch.__file__).parent
        found += glob.glob(str(base / "lib" / "lib*cuda*.so*")) + glob.glob(str(base / "lib" / "libtorch*.so*"))
        nvidia = base.parent / "nvidia"
        found += [p for p in glob.glob(str(nvidia / "**" / "lib*.so*"), recursive=True)
                  if any(n in p for n in ("cublas", "cudnn_engines", "cusparse", "cufft", "curand", "nccl"))]
    except ImportError:
        pass
    return list(dict.fromkeys(found))


def probes(major: int, minor: int) -> list[str]:
    """Cubins built here (where nvcc is) for what the libraries may lack: tests/test_kernel_facts.py's
    kernels, one compiled from an older PTX version than the code's, and kernels whose stack their callees
    decide (another unit's function, linked by nvlink; recursion, which leaves it unknown)."""
    if not shutil.which("nvcc"):
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_kernel_facts import CALLS, DEEPER, OLDER, SOURCE
    folder, sm = Path(tempfile.mkdtemp()), f"sm_{major}{minor}"
    (folder / "k.cu").write_text(SOURCE)
    (folder / "calls.cu").write_text(CALLS)
    (folder / "deeper.cu").write_text(DEEPER)
    (folder / "older.cu").write_text(OLDER)
    steps = [["nvcc", "-cubin", f"-arch={sm}", "-o", f"{folder}/k.cubin", f"{folder}/k.cu"],
             ["nvcc", "-cubin", f"-gencode=arch=compute_80,code={sm}", "-o", f"{folder}/older.cubin",
              f"{folder}/older.cu"]]
    steps += [["nvcc", "-cubin", "-rdc=true", f"-arch={sm}", "-o", f"{folder}/{n}.o", f"{folder}/{n}.cu"]
              for n in ("calls", "deeper")]
    steps += [["nvlink", f"-arch={sm}", f"{folder}/calls.o", f"{folder}/deeper.o", "-o", f"{folder}/linked.cubin"]]
    for step in steps:
        r = subprocess.run(step, capture_output=True, text=True, timeout=300)
        if r.returncode:
            print(f"probe not built: {' '.join(step)}: {r.stderr.strip()[-300:]}")
            return []
    return [str(folder / n) for n in ("k.cubin", "older.cubin", "linked.cubin")]


def cubins_of(path: str, major: int, minor: int):
    """The machine code (cubins) a device of major.minor would load from each fatbin of a host ELF file
    (or the file itself, a cubin)."""
    data = Path(path).read_bytes()
    if data[:4] == b"\x7fELF" and struct.unpack_from("<H", data, 0x12)[0] == EM_CUDA:
        yield data, data
        return
    try:
        section = fatbin.elf_sections(data).get(".nv_fatbin", b"")
    except ValueError:
        return
    for blob in fatbin.split(section):
        try:
            entry = fatbin.select(fatbin.parse(blob), major, minor)
        except ValueError:
            continue
        if entry is not None and entry.kind == "elf":
            yield fatbin.single_entry_fatbin(entry), fatbin.decompress(entry)


def param_layout(cuda, fn) -> list[tuple[int, int]]:
    """The driver's (offset, size) of each parameter (cuFuncGetParamInfo, as the server asks it)."""
    out, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
    while cuda.cuFuncGetParamInfo(fn, len(out), ctypes.byref(offset), ctypes.byref(size)) == 0:
        out.append((offset.value, size.value))
    return out


OCCUPANCY_NAMES = ["OCCUPANCY", "OCCUPANCY_FLAGS", "AVAILABLE_SHARED"]
BLOCKS = (32, 96, 128, 256, 640, 1024)
DYNAMIC = (0, 1000, 40000)
MAX_DYNAMIC, CARVEOUT = 8, 9  # CU_FUNC_ATTRIBUTE_*


def occupancy_check(cuda, fn, k: kernel_facts.KernelFacts, device: occupancy.Device, with_sets: bool,
                    agree: Counter, disagree: Counter, unmodelled: Counter, examples: dict) -> None:
    """occupancy.py's answers against the driver's for one kernel (Counters by OCCUPANCY_NAMES)."""
    def attribute(a: int) -> int:
        v = ctypes.c_int()
        return v.value if cuda.cuFuncGetAttribute(ctypes.byref(v), a, fn) == 0 else -(1 << 40)

    def compare(name: str, model, status: int, driver: int, case) -> None:
        if model is None:
            unmodelled[name] += 1
        elif status == 0 and model == driver:
            agree[name] += 1
        else:
            disagree[name] += 1
            if len(examples.setdefault(name, [])) < 8:
                examples[name].append({"kernel": k.name[:100], "case": case, "driver": driver, "status": status,
                                       "model": model, "function": fn_facts.__dict__})

    settings = [None]
    if with_sets:
        settings += [(MAX_DYNAMIC, device.shared_per_block_optin - attribute(1)), (CARVEOUT, 50), (CARVEOUT, 0)]
    for setting in settings:
        if setting is not None and cuda.cuFuncSetAttribute(fn, setting[0], setting[1]) != 0:
            continue
        fn_facts = occupancy.Function(attribute(4), attribute(1), attribute(0), attribute(MAX_DYNAMIC),
                                      attribute(CARVEOUT), k.barriers)
        for block in BLOCKS:
            for dynamic in DYNAMIC:
                blocks = ctypes.c_int()
                status = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), fn, block,
                                                                          ctypes.c_size_t(dynamic))
                model = occupancy.active_blocks(device, fn_facts, block, dynamic)
                compare("OCCUPANCY", model, status, blocks.value, (setting, block, dynamic))
                status = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                    ctypes.byref(blocks), fn, block, ctypes.c_size_t(dynamic), 1)
                compare("OCCUPANCY_FLAGS", model, status, blocks.value, (setting, block, dynamic, 1))
        for block in (64, 128, 256, 512):
            for n in (1, 2, 3, 4, 8):
                room = ctypes.c_size_t()
                status = cuda.cuOccupancyAvailableDynamicSMemPerBlock(ctypes.byref(room), fn, n, block)
                compare("AVAILABLE_SHARED", occupancy.available_dynamic_shared(device, fn_facts, n, block), status,
                        room.value, (setting, n, block))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("images", nargs="*")
    ap.add_argument("--seconds", type=float, default=240)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(status: int, what: str) -> None:
        if status:
            raise RuntimeError(f"{what}: CUDA error {status}")

    check(cuda.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    check(cuda.cuCtxSetCurrent(ctx), "set current")

    def device_attribute(n: int) -> int:
        v = ctypes.c_int()
        check(cuda.cuDeviceGetAttribute(ctypes.byref(v), n, dev), f"device attribute {n}")
        return v.value

    major, minor = device_attribute(MAJOR), device_attribute(MINOR)
    def any_attribute(n: int) -> int:
        v = ctypes.c_int()
        return v.value if cuda.cuDeviceGetAttribute(ctypes.byref(v), n, dev) == 0 else 0

    occ_device = occupancy.Device.from_attributes([any_attribute(n) for n in range(140)])
    print(f"occupancy model's device: {occ_device}")
    device = kernel_facts.Device(device_attribute(MAX_THREADS_PER_BLOCK),
                                 device_attribute(MAX_REGISTERS_PER_MULTIPROCESSOR),
                                 device_attribute(MAX_SHARED_PER_BLOCK))
    agree, disagree, unmodelled = Counter(), Counter(), Counter()
    examples: dict[str, list] = {n: [] for n in NAMES}
    ptx_versions: Counter = Counter()
    kernels = modules = 0
    started = time.monotonic()
    for path in args.images or probes(major, minor) + default_images():
        for image, cubin in cubins_of(path, major, minor):
            if time.monotonic() - started > args.seconds:
                break
            facts = kernel_facts.read(cubin)
            module = ctypes.c_void_p()
            if cuda.cuModuleLoadData(ctypes.byref(module), image) != 0:
                continue
            modules += 1
            count = ctypes.c_uint()
            if cuda.cuModuleGetFunctionCount(ctypes.byref(count), module) == 0:
                same = count.value == len(facts.kernels)
                (agree if same else disagree)["KERNELS (how many)"] += 1
                if not same and len(examples.setdefault("KERNELS (how many)", [])) < 6:
                    examples["KERNELS (how many)"].append({"library": Path(path).name, "driver": count.value,
                                                           "model": len(facts.kernels)})
            for k in facts.kernels.values():
                fn = ctypes.c_void_p()
                if cuda.cuModuleGetFunction(ctypes.byref(fn), module, k.name.encode()) != 0:
                    continue
                kernels += 1
                driver_layout = param_layout(cuda, fn)
                if k.params == driver_layout:
                    agree["LAYOUT"] += 1
                else:
                    disagree["LAYOUT"] += 1
                    if len(examples.setdefault("LAYOUT", [])) < 6:
                        examples["LAYOUT"].append({"library": Path(path).name, "kernel": k.name[:120],
                                                   "driver": driver_layout, "model": k.params})
                model = kernel_facts.model(facts, k, device)
                for a, name in enumerate(NAMES):
                    v = ctypes.c_int()
                    if cuda.cuFuncGetAttribute(ctypes.byref(v), a, fn) != 0:
                        continue
                    if a == 5:
                        ptx_versions[(v.value, hex(facts.flags))] += 1
                    if a not in model:
                        unmodelled[name] += 1
                        continue
                    if model[a] == v.value:
                        agree[name] += 1
                    else:
                        disagree[name] += 1
                        if len(examples[name]) < 6:
                            examples[name].append({"library": Path(path).name, "kernel": k.name[:120],
                                                   "driver": v.value, "model": model[a],
                                                   "facts": {**k.__dict__, "params": len(k.params)},
                                                   "constant": facts.constant, "flags": hex(facts.flags)})
                occupancy_check(cuda, fn, k, occ_device, kernels % 8 == 0, agree, disagree, unmodelled, examples)
            cuda.cuModuleUnload(module)
    print(f"kernel attributes: {kernels} kernels of {modules} modules on sm_{major}{minor}, "
          f"{time.monotonic() - started:.0f} s")
    for name in [*NAMES, "LAYOUT", "KERNELS (how many)", *OCCUPANCY_NAMES]:
        left = f", {unmodelled[name]} not modelled" if unmodelled[name] else ""
        print(f"  {name}: {agree[name]} agree, {disagree[name]} disagree{left}")
    print(f"  PTX_VERSION by e_flags: {dict(ptx_versions.most_common(8))}")
    out = Path(args.out) / "kernel_attributes.json"
    out.write_text(json.dumps({"agree": agree, "disagree": disagree, "not_modelled": unmodelled, "examples": examples,
                               "ptx_versions": {str(k): n for k, n in ptx_versions.items()}}, indent=1))
    print(f"details: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
