"""The server's CUDA: the real libcuda and NVML through cffi (ABI mode), or a backend opened by name.

Both are a pair (ffi, lib) where `lib.<function>(...)` behaves like the C function; handlers never
know which one they call.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from importlib.metadata import entry_points
from pathlib import Path

import cffi

from cuwire.server.errors import CudaFail

GENERATED = Path(__file__).resolve().parent.parent / "generated"
log = logging.getLogger("cuwire.server")
# Libraries a server may lack (a container without NVML still serves CUDA): opened at their first call;
# if missing, that call fails with the library's own code (NVML_ERROR_LIBRARY_NOT_FOUND).
OPTIONAL = {"nvml": 12}
_PROTOTYPE = re.compile(r"^\w[\w ]*?\b(\w+)\((.*)\);$", re.M)


def cuda_ffi() -> cffi.FFI:
    """An FFI that knows every type and prototype codegen parsed (generated/cuda_api.h), precompiled by
    codegen into generated/server_ffi.py: a type named for the first time costs microseconds, not a
    parse of the whole header."""
    from cuwire.generated.server_ffi import ffi

    return ffi


@functools.cache
def manifest() -> dict:
    return json.loads((GENERATED / "api_manifest.json").read_text())


@functools.cache
def prototypes() -> dict[str, str]:
    """Function name -> its parameter list as C, from the declarations codegen parsed (generated/cuda_api.h)."""
    return {name: params for name, params in _PROTOTYPE.findall((GENERATED / "cuda_api.h").read_text())}


@functools.cache
def library_of() -> dict[str, str]:
    """Every function's library (codegen/libraries.py), from the manifest codegen wrote."""
    return {name: f["api"] for f in manifest()["functions"] for name in (f["name"], *f["aliases"])}


class CudaLibraries:
    """The real libraries (libcuda.so.1, libnvidia-ml.so.1) behind one attribute namespace, each function
    taken from the library the model says it belongs to, so a handler writes `s.lib.cuMemAlloc_v2` or
    `s.lib.nvmlDeviceGetName` alike."""

    def __init__(self, ffi: cffi.FFI):
        self.ffi = ffi
        self.libs = {api: _open(ffi, soname) for api, soname in manifest()["libraries"].items()
                     if api not in OPTIONAL}

    def __getattr__(self, name: str):
        api = library_of().get(name)
        if api is None:
            raise AttributeError(f"{name} is not a function of any library cuwire knows")
        if api not in self.libs:  # an optional library, opened at its first call
            try:
                self.libs[api] = _open(self.ffi, manifest()["libraries"][api])
            except RuntimeError as e:
                log.warning("%s", e)
                raise CudaFail(OPTIONAL[api], f"{name}: {e}") from None
        fn = getattr(self.libs[api], name)
        setattr(self, name, fn)  # cache: later lookups skip __getattr__
        return fn


def _open(ffi: cffi.FFI, name: str):
    try:
        return ffi.dlopen(name)
    except OSError as e:
        raise RuntimeError(
            f"cannot open {name} ({e}). This machine needs an NVIDIA driver (CUDA 13 or newer) to serve a GPU; "
            "for tests without a GPU, run the server with --emulated (CUWIRE_BACKEND=emulated).") from None


def open_backend(name: str):
    """(ffi, lib, label) for the backend named by the settings: `cuda`, the real libraries, or one that an
    installed package declares under the `cuwire.backends` entry points (the emulated device, for tests:
    emulator/), called with the FFI and returning the lib. The server never imports such a package itself."""
    ffi = cuda_ffi()
    if name == "cuda":
        return ffi, CudaLibraries(ffi), "cuda"
    declared = list(entry_points(group="cuwire.backends", name=name))
    opener, why = None, ""
    if declared:
        try:
            opener = declared[0].load()
        except ImportError as e:  # declared by a package that cannot be imported (removed, or a path left out)
            why = f" (declared, but: {e})"
    if opener is None:
        if name == "emulated":
            raise RuntimeError("the emulated device (tests only) is not installed here: the wheel and the server "
                               f"image leave it out; run the server from a checkout (make venv installs emulator/)"
                               f"{why}")
        raise ValueError(f"unknown backend {name!r} (expected cuda or emulated){why}")
    return ffi, opener(ffi), name
