"""The server's real CUDA: each function comes from the library the model assigns it to (the manifest),
not from a guess by name (a `cublas*` name must not go to libcuda)."""

from __future__ import annotations

import types

import pytest

from cuwire.server import backend


def test_every_function_knows_its_library():
    where = backend.library_of()
    assert "cudaMalloc" not in where  # NVIDIA's runtime runs on the client, above cuwire's libcuda
    assert where["cuMemAlloc_v2"] == "driver" and where["cuGetExportTable"] == "driver"
    assert where["cuMemcpyHtoD_v2_ptds"] == "driver"  # aliases too
    assert where["nvmlDeviceGetName"] == "nvml" and where["nvmlInit"] == "nvml"
    assert backend.manifest()["libraries"] == {"driver": "libcuda.so.1", "nvml": "libnvidia-ml.so.1"}


def test_calls_reach_the_library_of_the_function(monkeypatch):
    opened = {}

    def fake_open(ffi, name):
        lib = types.SimpleNamespace(nvmlInit_v2=f"{name}:nvmlInit_v2", cuMemAlloc_v2=f"{name}:cuMemAlloc_v2",
                                    cuGetExportTable=f"{name}:cuGetExportTable")
        opened[name] = lib
        return lib

    monkeypatch.setattr(backend, "_open", fake_open)
    libs = backend.CudaLibraries(None)
    assert set(opened) == {"libcuda.so.1"}  # NVML waits for its first call
    assert libs.cuMemAlloc_v2 == "libcuda.so.1:cuMemAlloc_v2"
    assert libs.nvmlInit_v2 == "libnvidia-ml.so.1:nvmlInit_v2"
    assert libs.cuGetExportTable == "libcuda.so.1:cuGetExportTable"
    for name in ("cublasCreate_v2", "cudaMalloc"):
        with pytest.raises(AttributeError, match="not a function of any library"):
            getattr(libs, name)


def test_a_server_without_nvml_still_serves_cuda(monkeypatch):
    """NVML is opened at its first call; a host without it fails those calls with NVML's own code."""
    from cuwire.server.errors import CudaFail

    def fake_open(ffi, name):
        if name == "libnvidia-ml.so.1":
            raise RuntimeError("cannot open libnvidia-ml.so.1 (not found)")
        return types.SimpleNamespace(cuMemAlloc_v2=f"{name}:cuMemAlloc_v2")

    monkeypatch.setattr(backend, "_open", fake_open)
    libs = backend.CudaLibraries(None)
    assert libs.cuMemAlloc_v2 == "libcuda.so.1:cuMemAlloc_v2"
    with pytest.raises(CudaFail) as e:
        libs.nvmlInit_v2  # noqa: B018
    assert e.value.code == 12  # NVML_ERROR_LIBRARY_NOT_FOUND
