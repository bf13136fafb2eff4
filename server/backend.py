"""The server's CUDA: the real libcudart and libcuda through cffi (ABI mode), or the emulated device.

Both are a pair (ffi, lib) where `lib.<cudaFunction>(...)` behaves like the C function; handlers never
know which one they call.
"""

from __future__ import annotations

import functools
from pathlib import Path

import cffi

GENERATED = Path(__file__).resolve().parent.parent / "generated"


@functools.cache
def cuda_ffi() -> cffi.FFI:
    """An FFI that knows every type and prototype codegen parsed (generated/cuda_api.h)."""
    text = (GENERATED / "cuda_api.h").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    ffi = cffi.FFI()
    ffi.cdef(body)
    return ffi


class CudaLibraries:
    """libcudart.so.13 and libcuda.so.1 behind one attribute namespace (cuda* from the runtime, cu* from
    the driver), so a handler writes `s.lib.cudaMalloc` or `s.lib.cuMemAlloc_v2` alike."""

    def __init__(self, ffi: cffi.FFI):
        try:
            self.runtime = ffi.dlopen("libcudart.so.13")
            self.driver = ffi.dlopen("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(
                f"cannot open the CUDA libraries ({e}). This machine needs an NVIDIA driver and the CUDA 13 "
                "runtime to serve a GPU; for tests without a GPU, run the server with --emulated "
                "(CUWIRE_BACKEND=emulated).") from e

    def __getattr__(self, name: str):
        lib = self.runtime if name.startswith("cuda") else self.driver
        fn = getattr(lib, name)
        setattr(self, name, fn)  # cache: later lookups skip __getattr__
        return fn


def open_backend(name: str):
    """(ffi, lib, label) for the backend named by the settings."""
    ffi = cuda_ffi()
    if name == "cuda":
        return ffi, CudaLibraries(ffi), "cuda"
    if name == "emulated":
        from cuwire.server import emulated_kernels  # noqa: F401  (registers the test apps' kernels)
        from cuwire.server.emulated import EmulatedLib

        return ffi, EmulatedLib(ffi), "emulated"
    raise ValueError(f"unknown backend {name!r} (expected cuda or emulated)")
