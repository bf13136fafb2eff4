"""The generator: parsing the real headers, the annotations' checks, the manifest, the committed output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cuwire.codegen import annotations, build_api
from cuwire.codegen.model import Function

ROOT = Path(__file__).resolve().parent.parent


INTERNAL = ROOT / "cuwire" / "codegen" / "internal_api.h"


@pytest.fixture(scope="module")
def api():
    return build_api()


def test_counts(api):
    by_header: dict[str, int] = {}
    for f in api.functions:
        by_header[f.header] = by_header.get(f.header, 0) + 1
    assert by_header["cuda_runtime_api.h"] == 310
    older = re.findall(r"^CUresult (cu\w+)\(", INTERNAL.read_text().split('# 1 "cuda.h"')[1], re.M)
    assert len(older) >= 5  # the older ABIs (cuGetProcAddress of CUDA 11.3...) and the profiler calls
    assert by_header["cuda.h"] == 449 + len(older)
    assert by_header["libcudart.so.13 export"] == 29  # GL/EGL/VDPAU interop, profiler: no parsed prototype
    assert not any(f.name == "cuserid" for f in api.functions)  # libc's, not CUDA's


def test_cuda_memcpy_signature(api):
    f = api.function("cudaMemcpy")
    assert f.header == "cuda_runtime_api.h" and f.api == "runtime"
    assert f.returns.spelling == "cudaError_t" and f.returns.resolved == "enum"
    assert [(p.name, p.type.spelling) for p in f.params] == [
        ("dst", "void *"), ("src", "const void *"), ("count", "size_t"), ("kind", "enum cudaMemcpyKind")]
    dst, src, count, kind = f.params
    assert dst.type.pointee.resolved == "void" and not dst.type.const
    assert src.type.const
    assert count.type.resolved == "unsigned long"
    assert (dst.role, dst.length, src.role, kind.role) == ("mem_out", "count", "mem_in", "value")
    assert "cudaMemcpy_ptds" in f.aliases


def test_driver_versioned_names(api):
    f = api.function("cuMemAlloc_v2")
    assert f.header == "cuda.h"
    assert "cuMemAlloc" not in f.aliases  # the plain name keeps the CUDA 2.0 ABI (32-bit sizes)
    assert "cuDeviceGetUuid" in api.function("cuDeviceGetUuid_v2").aliases  # the same ABI
    assert [(p.name, p.type.spelling, p.type.pointee.resolved) for p in f.params[:1]] == [
        ("dptr", "CUdeviceptr *", "unsigned long long")]
    assert "cuMemcpyHtoD_v2_ptds" in api.function("cuMemcpyHtoD_v2").aliases


def test_handles_and_structs(api):
    f = api.function("cudaStreamCreateWithFlags")
    assert f.params[0].type.pointee.spelling == "cudaStream_t" and f.params[0].role == "out"
    prop = api.function("cudaGetDeviceProperties").params[0]
    assert prop.role == "struct_out" and prop.type.pointee.resolved == "struct"
    launch = api.function("cudaLaunchKernel")
    assert launch.params[1].type.spelling == "dim3" and launch.params[1].type.resolved == "struct"


def test_enums(api):
    err = next(e for e in api.enums if e.name == "cudaError")
    assert err.members["cudaSuccess"] == 0
    assert err.members["cudaErrorMemoryAllocation"] == 2
    assert err.members["cudaErrorNotSupported"] == 801
    cu = next(e for e in api.enums if e.name == "CUresult")
    assert cu.members["CUDA_ERROR_NOT_SUPPORTED"] == 801


def fresh(api, name: str) -> Function:
    """A copy of one function with annotations undone, to feed the checks bad input."""
    import copy

    f = copy.deepcopy(api.function(name))
    f.status, f.mode = "unimplemented", ""
    return f


def test_annotation_names_unknown_function(api):
    with pytest.raises(annotations.AnnotationError, match="cudaNoSuchThing"):
        annotations.apply(api, {"cudaNoSuchThing": {"mode": "sync"}})


def test_annotation_names_unknown_parameter(api):
    with pytest.raises(annotations.AnnotationError, match="unknown key 'bogus'"):
        annotations.apply_function(fresh(api, "cudaMalloc"), {"mode": "sync", "bogus": {"role": "out"}})


def test_annotation_unknown_role_and_key(api):
    with pytest.raises(annotations.AnnotationError, match="unknown role"):
        annotations.apply_function(fresh(api, "cudaMalloc"), {"mode": "sync", "devPtr": {"role": "sideways"}})
    with pytest.raises(annotations.AnnotationError, match="unknown key 'size'"):
        annotations.apply_function(fresh(api, "cudaMalloc"), {"mode": "sync", "devPtr": {"size": "1"}})


def test_unexplained_pointer_is_an_error(api):
    with pytest.raises(annotations.AnnotationError, match=r"cudaMemcpy\.dst: pointer parameter .* needs an annotation"):
        annotations.apply_function(fresh(api, "cudaMemcpy"), {"mode": "sync"})


def test_length_must_use_parameters(api):
    with pytest.raises(annotations.AnnotationError, match="names 'bytes'"):
        annotations.apply_function(fresh(api, "cudaMemcpy"), {
            "mode": "sync", "dst": {"role": "mem_out", "length": "bytes"},
            "src": {"role": "mem_in", "length": "count"}})


def test_async_only_carries_values(api):
    with pytest.raises(annotations.AnnotationError, match="async call can carry only values"):
        annotations.apply_function(fresh(api, "cudaMalloc"), {"mode": "async"})


def test_manifest_covers_every_function(api):
    m = json.loads((ROOT / "cuwire" / "generated" / "api_manifest.json").read_text())
    names = {f["name"] for f in m["functions"]}
    assert names == {f.name for f in api.functions}
    assert all(f["status"] in ("remoted", "local", "unimplemented") for f in m["functions"])
    required = ["cudaMalloc", "cudaFree", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2D", "cudaMemset",
                "cudaMemsetAsync", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaStreamCreate",
                "cudaEventRecord", "cudaEventElapsedTime", "cudaLaunchKernel", "cudaLaunchKernelExC",
                "__cudaLaunchKernel", "__cudaRegisterFatBinary", "cudaFuncGetAttributes",
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaPointerGetAttributes",
                "cudaGetDeviceProperties", "cudaGetLastError", "cudaGetDriverEntryPoint"]
    status = {f["name"]: f["status"] for f in m["functions"]}
    assert all(status[n] in ("remoted", "local") for n in required), {n: status[n] for n in required}


def test_wire_ids_come_from_names(api):
    import zlib

    f = api.function("cudaMalloc")
    assert f.fn_id == zlib.crc32(b"cudaMalloc")


def test_stats_prints_counts(capsys):
    from cuwire.codegen.__main__ import main

    assert main(["--stats"]) == 0
    out = capsys.readouterr().out
    assert "cuda_runtime_api.h" in out and "310 functions" in out and "455 functions" in out
    assert "nvml.h" in out and "375 functions" in out


def test_readme_coverage_line_is_current():
    from cuwire.codegen import render

    m = json.loads((ROOT / "cuwire" / "generated" / "api_manifest.json").read_text())
    assert render.coverage_line(m) in (ROOT / "README.md").read_text(), "run make codegen"


def test_annotations_belong_to_their_library(api):
    with pytest.raises(annotations.AnnotationError, match="annotate it in libcuda.so.1.toml"):
        annotations.apply(api, {"cuMemAlloc_v2": ("runtime", {"mode": "sync"})})


def test_every_library_has_its_annotations():
    from cuwire.codegen.libraries import LIBRARIES

    table = annotations.load()
    assert {api for api, _ in table.values()} == {lib.api for lib in LIBRARIES}
