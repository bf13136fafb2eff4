"""The emulated device as a cuwire server backend: what `cuwire server --emulated` opens, by name, through
the `cuwire.backends` entry point this package declares (emulator/pyproject.toml). The server never imports
this package; a server without it (the image, a wheel install) says the backend is not installed.

Kernels are host implementations registered by name (registry.kernel). The bundled test apps' kernels live
beside the apps (tests/test_apps/kernels.py); CUWIRE_EMULATED_KERNELS names other files of them
(os.pathsep between), for tests of your own. CUWIRE_EMULATED_ARCH ("8.0") makes the device another GPU model
(its compute capability), as a device list of two models is tested."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import cffi

from cuwire_emulated import registry
from cuwire_emulated.checked import CheckedLib
from cuwire_emulated.device import EmulatedLib

# A checkout's test apps: emulator/cuwire_emulated/backend.py -> tests/test_apps/kernels.py
BUNDLED = Path(__file__).resolve().parents[2] / "tests" / "test_apps" / "kernels.py"
_loaded: set[Path] = set()


def kernel_files() -> list[Path]:
    """The files of kernels to register: CUWIRE_EMULATED_KERNELS's, else the checkout's test apps'."""
    named = os.environ.get("CUWIRE_EMULATED_KERNELS")
    if named:
        return [Path(p) for p in named.split(os.pathsep) if p]
    return [BUNDLED] if BUNDLED.is_file() else []


def load_kernels() -> None:
    """Import each kernel file once: its @registry.kernel definitions register themselves."""
    for path in kernel_files():
        path = path.resolve()
        if path in _loaded:
            continue
        spec = importlib.util.spec_from_file_location(f"cuwire_emulated_kernels_{len(_loaded)}", path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"CUWIRE_EMULATED_KERNELS: {path} is not a Python file")
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        _loaded.add(path)


# Of the compute capabilities CUWIRE_EMULATED_ARCH may name, those whose multiprocessors hold fewer threads and
# blocks than the default's (9.0: 2048 and 32), as NVIDIA's tables give them: their occupancy differs
SMALLER_MULTIPROCESSORS = {(8, 6): {"maxThreadsPerMultiProcessor": 1536, "maxBlocksPerMultiProcessor": 16},
                           (8, 9): {"maxThreadsPerMultiProcessor": 1536, "maxBlocksPerMultiProcessor": 24}}


def set_arch() -> None:
    """CUWIRE_EMULATED_ARCH, "major.minor": the device's compute capability (default 9.0), and what its
    multiprocessors hold (SMALLER_MULTIPROCESSORS)."""
    arch = os.environ.get("CUWIRE_EMULATED_ARCH")
    if not arch:
        return
    try:
        major, minor = (int(x) for x in arch.split("."))
    except ValueError:
        raise RuntimeError(f"CUWIRE_EMULATED_ARCH: {arch!r} is not major.minor, as 8.0") from None
    registry.PROPERTIES.update(major=major, minor=minor, **SMALLER_MULTIPROCESSORS.get((major, minor), {}))


def open_backend(ffi: cffi.FFI) -> CheckedLib:
    """The `emulated` backend: the device behind the same argument checks cffi makes of the real library."""
    set_arch()
    load_kernels()
    return CheckedLib(ffi, EmulatedLib(ffi))
