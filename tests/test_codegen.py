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
    assert "cuda_runtime_api.h" not in by_header  # NVIDIA's own runtime runs on the client
    older = re.findall(r"^CUresult (cu\w+)\(", INTERNAL.read_text().split('# 1 "cuda.h"')[1], re.M)
    assert len(older) >= 5  # the older ABIs (cuGetProcAddress of CUDA 11.3...) and the profiler calls
    assert by_header["cuda.h"] == 449 + len(older)
    assert by_header["libcuda.so.1 export"] == 129  # GL/EGL/VDPAU interop, older ABIs: no parsed prototype
    assert not any(f.name == "cuserid" for f in api.functions)  # libc's, not CUDA's


def test_memcpy_signature(api):
    f = api.function("cuMemcpyDtoH_v2")
    assert f.header == "cuda.h" and f.api == "driver"
    assert f.returns.spelling == "CUresult" and f.returns.resolved == "enum"
    assert [(p.name, p.type.spelling) for p in f.params] == [
        ("dstHost", "void *"), ("srcDevice", "CUdeviceptr"), ("ByteCount", "size_t")]
    dst, src, count = f.params
    assert dst.type.pointee.resolved == "void" and not dst.type.const
    assert src.type.resolved == "unsigned long long"
    assert count.type.resolved == "unsigned long"
    assert (dst.role, dst.length, src.role, count.role) == ("buf_out", "ByteCount", "value", "value")
    assert api.function("cuMemcpyHtoD_v2").params[1].type.const
    assert "cuMemcpyDtoH_v2_ptds" in f.aliases


def test_driver_versioned_names(api):
    f = api.function("cuMemAlloc_v2")
    assert f.header == "cuda.h"
    assert "cuMemAlloc" not in f.aliases  # the plain name keeps the CUDA 2.0 ABI (32-bit sizes)
    assert "cuDeviceGetUuid" in api.function("cuDeviceGetUuid_v2").aliases  # the same ABI
    assert [(p.name, p.type.spelling, p.type.pointee.resolved) for p in f.params[:1]] == [
        ("dptr", "CUdeviceptr *", "unsigned long long")]
    assert "cuMemcpyHtoD_v2_ptds" in api.function("cuMemcpyHtoD_v2").aliases


def test_handles_and_structs(api):
    f = api.function("cuStreamCreate")
    assert f.params[0].type.pointee.spelling == "CUstream" and f.params[0].role == "out"
    assert f.params[0].handle_kind == "CUstream_st"
    uuid = api.function("cuDeviceGetUuid_v2").params[0]
    assert uuid.role == "struct_out" and uuid.type.pointee.resolved == "struct"
    copy = api.function("cuMemcpy2D_v2").params[0]
    assert copy.type.spelling == "const CUDA_MEMCPY2D *" and copy.type.pointee.resolved == "struct"


def test_enums(api):
    cu = next(e for e in api.enums if e.name == "CUresult")
    assert cu.members["CUDA_SUCCESS"] == 0
    assert cu.members["CUDA_ERROR_OUT_OF_MEMORY"] == 2
    assert cu.members["CUDA_ERROR_NOT_SUPPORTED"] == 801
    nvml = next(e for e in api.enums if e.name == "nvmlReturn_t")
    assert nvml.members["NVML_ERROR_NOT_SUPPORTED"] == 3


def fresh(api, name: str) -> Function:
    """A copy of one function with annotations undone, to feed the checks bad input."""
    import copy

    f = copy.deepcopy(api.function(name))
    f.status, f.mode = "unimplemented", ""
    return f


def test_annotation_names_unknown_function(api):
    with pytest.raises(annotations.AnnotationError, match="cuNoSuchThing"):
        annotations.apply(api, {"cuNoSuchThing": ("driver", {"mode": "sync"})})


def test_annotation_names_unknown_parameter(api):
    with pytest.raises(annotations.AnnotationError, match="unknown key 'bogus'"):
        annotations.apply_function(fresh(api, "cuMemAlloc_v2"), {"mode": "sync", "bogus": {"role": "out"}})


def test_annotation_unknown_role_and_key(api):
    with pytest.raises(annotations.AnnotationError, match="unknown role"):
        annotations.apply_function(fresh(api, "cuMemAlloc_v2"), {"mode": "sync", "dptr": {"role": "sideways"}})
    with pytest.raises(annotations.AnnotationError, match="unknown key 'size'"):
        annotations.apply_function(fresh(api, "cuMemAlloc_v2"), {"mode": "sync", "dptr": {"size": "1"}})


def test_unexplained_pointer_is_an_error(api):
    with pytest.raises(annotations.AnnotationError,
                       match=r"cuMemcpyDtoH_v2\.dstHost: pointer parameter .* needs an annotation"):
        annotations.apply_function(fresh(api, "cuMemcpyDtoH_v2"), {"mode": "sync"})


def test_length_must_use_parameters(api):
    with pytest.raises(annotations.AnnotationError, match="names 'bytes'"):
        annotations.apply_function(fresh(api, "cuMemcpyDtoH_v2"), {
            "mode": "sync", "dstHost": {"role": "buf_out", "length": "bytes"}})


def test_servers_and_device_index_go_with_nvml(api):
    """`servers` is for an NVML call that names no device, `sum` for one with one output; `device_index` for an
    NVML index."""
    with pytest.raises(annotations.AnnotationError, match="`servers` is one of"):
        annotations.apply_function(fresh(api, "nvmlDeviceGetName"), {"mode": "sync", "servers": "each",
                                                                       "name": {"role": "buf_out", "length": "length"}})
    with pytest.raises(annotations.AnnotationError, match="`servers` is one of"):
        annotations.apply_function(fresh(api, "cuInit"), {"mode": "sync", "servers": "each"})
    with pytest.raises(annotations.AnnotationError, match="`servers` is one of"):
        annotations.apply_function(fresh(api, "nvmlInit_v2"), {"mode": "sync", "servers": "most"})
    with pytest.raises(annotations.AnnotationError, match="`split` goes with"):  # (one server named at most)
        annotations.apply_function(fresh(api, "cuCtxSynchronize"), {"mode": "sync", "split": "cuwire_x"})
    assert api.function("cuMemcpyPeer").split == "cuwire_split_cuMemcpyPeer"
    with pytest.raises(annotations.AnnotationError, match="`device_index = true` goes with"):
        annotations.apply_function(fresh(api, "cuDeviceGet"), {"mode": "sync", "ordinal": {"device_index": True}})


def test_device_location_goes_with_a_struct_a_sync_call_reads(api):
    """`device_location = { at, every }` names where a CUmemLocation lies in a struct (or array) the call reads."""
    located = {(f.name, p.name): p.device_location for f in api.functions for p in f.params if p.device_location}
    assert located[("cuMemCreate", "prop")] == (8, 0) and located[("cuMemSetAccess", "desc")] == (0, 12)
    for wrong in ({"at": "8"}, {"at": 8, "by": 12}, 8):
        with pytest.raises(annotations.AnnotationError, match="`device_location = "):
            annotations.apply_function(fresh(api, "cuMemCreate"), {"mode": "sync", "prop": {
                "role": "struct_in", "device_location": wrong}})
    with pytest.raises(annotations.AnnotationError, match="`device_location = "):  # (an output: nothing to read)
        annotations.apply_function(fresh(api, "cuMemAlloc_v2"), {"mode": "sync", "dptr": {
            "role": "out", "device_location": {"at": 0}}})


def test_async_only_carries_values(api):
    with pytest.raises(annotations.AnnotationError, match="async call can carry only values"):
        annotations.apply_function(fresh(api, "cuMemAlloc_v2"), {"mode": "async"})


def test_manifest_covers_every_function(api):
    m = json.loads((ROOT / "cuwire" / "generated" / "api_manifest.json").read_text())
    names = {f["name"] for f in m["functions"]}
    assert names == {f.name for f in api.functions}
    assert all(f["status"] in ("remoted", "local", "unimplemented") for f in m["functions"])
    # what NVIDIA's runtime and the test apps need of the driver
    required = ["cuInit", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyAsync",
                "cuMemcpy2D_v2", "cuMemsetD8_v2", "cuMemsetD32Async", "cuModuleGetGlobal_v2", "cuStreamCreate",
                "cuEventRecord", "cuEventElapsedTime_v2", "cuLaunchKernel", "cuLaunchKernelEx",
                "cuLibraryLoadData", "cuFuncGetAttribute", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                "cuPointerGetAttribute", "cuDeviceGetAttribute", "cuGetProcAddress_v2", "cuGetExportTable"]
    status = {f["name"]: f["status"] for f in m["functions"]}
    assert all(status[n] in ("remoted", "local") for n in required), {n: status[n] for n in required}


def test_wire_ids_come_from_names(api):
    import zlib

    f = api.function("cuMemAlloc_v2")
    assert f.fn_id == zlib.crc32(b"cuMemAlloc_v2")


def test_stats_prints_counts(capsys):
    from cuwire.codegen.__main__ import main

    assert main(["--stats"]) == 0
    out = capsys.readouterr().out
    assert "cuda_runtime_api.h" not in out and "456 functions" in out
    assert "nvml.h" in out and "382 functions" in out


def test_readme_coverage_line_is_current():
    from cuwire.codegen import render

    m = json.loads((ROOT / "cuwire" / "generated" / "api_manifest.json").read_text())
    assert render.coverage_line(m) in (ROOT / "README.md").read_text(), "run make codegen"


def test_annotations_belong_to_their_library(api):
    with pytest.raises(annotations.AnnotationError, match="annotate it in libcuda.so.1.toml"):
        annotations.apply(api, {"cuMemAlloc_v2": ("nvml", {"mode": "sync"})})


def test_every_library_has_its_annotations():
    from cuwire.codegen.libraries import LIBRARIES

    table = annotations.load()
    assert {api for api, _ in table.values()} == {lib.api for lib in LIBRARIES}


def test_graph_node_offsets_match_the_headers():
    """client/graphs.py writes a memory allocation node's address and a conditional node's body graphs into
    the program's CUgraphNodeParams at fixed offsets: they must be cuda.h's."""
    import ast

    from cuwire.generated import cuda_constants
    from cuwire.server.backend import cuda_ffi

    ffi = cuda_ffi()
    source = ast.parse((ROOT / "cuwire" / "client" / "graphs.py").read_text())
    consts = {}
    for node in source.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = [t.id for t in node.targets[0].elts]
            if {"NODE_PARAMS_SIZE", "ALLOC_ACCESS_AT", "COND_SIZE_AT", "MEM_ALLOC"} & set(names):
                values = eval(ast.unparse(node.value), {"__builtins__": {}, "cu": cuda_constants})
                consts.update(zip(names, values, strict=True))
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("ACCESS_DESC_SIZE",
                                                                                    "ALLOC_LOCATION_AT"):
            consts[node.targets[0].id] = eval(ast.unparse(node.value), {"__builtins__": {}})
    union = ffi.offsetof("CUgraphNodeParams", "alloc")
    assert consts["NODE_PARAMS_SIZE"] == ffi.sizeof("CUgraphNodeParams")
    assert consts["NODE_PARAMS_AT"] == union == ffi.offsetof("CUgraphNodeParams", "conditional")
    assert consts["ALLOC_ACCESS_AT"] == union + ffi.offsetof("CUDA_MEM_ALLOC_NODE_PARAMS_v2", "accessDescs")
    assert consts["ALLOC_DPTR_AT"] == union + ffi.offsetof("CUDA_MEM_ALLOC_NODE_PARAMS_v2", "dptr")
    assert consts["COND_SIZE_AT"] == union + ffi.offsetof("CUDA_CONDITIONAL_NODE_PARAMS", "size")
    assert consts["COND_GRAPHS_AT"] == union + ffi.offsetof("CUDA_CONDITIONAL_NODE_PARAMS", "phGraph_out")
    assert consts["ACCESS_DESC_SIZE"] == ffi.sizeof("CUmemAccessDesc")
    assert consts["ALLOC_LOCATION_AT"] == union + ffi.offsetof("CUDA_MEM_ALLOC_NODE_PARAMS_v2", "poolProps") + \
        ffi.offsetof("CUmemPoolProps", "location")
    assert (consts["MEM_ALLOC"], consts["CONDITIONAL"]) == (ffi.integer_const("CU_GRAPH_NODE_TYPE_MEM_ALLOC"),
                                                            ffi.integer_const("CU_GRAPH_NODE_TYPE_CONDITIONAL"))


def test_cuda_constants_are_the_headers_enumerators():
    """generated/cuda_constants.py, where Python code takes CUDA's numbers, holds every enumerator of every
    enum cffi reads from the same headers (generated/cuda_api.h), with the same value."""
    from cuwire.generated import cuda_constants
    from cuwire.server.backend import cuda_ffi

    ffi = cuda_ffi()
    names = set(re.findall(r"^(\w+) = -?\d+$", Path(cuda_constants.__file__).read_text(), re.M))
    checked = 0
    for enum in re.findall(r"typedef enum \w*\s*\{[^}]*\}\s*(\w+);", (Path(cuda_constants.__file__).parent
                                                                         / "cuda_api.h").read_text()):
        for name, value in ffi.typeof(enum).relements.items():
            assert getattr(cuda_constants, name) == value, (enum, name)
            checked += 1
            names.discard(name)
    assert checked > 1000 and not names, f"constants no enum declares: {sorted(names)[:5]}"


def test_each_call_says_which_arguments_name_its_server(api):
    """Function.routes: where a program's devices lie on several servers, the arguments whose window names
    the server a call goes to (docs/several-servers.md), in the order the client asks them."""
    routes = {f.name: f.routes for f in api.functions}
    assert routes["cuLaunchKernel"] == [("handle", "hStream"), ("handle", "f")]  # a CUkernel may stand for f
    assert routes["cuStreamWaitEvent"] == [("handle", "hStream"), ("handle", "hEvent")]  # may join two servers
    assert routes["cuMemsetD8Async"] == [("handle", "hStream"), ("pointer", "dstDevice")]
    assert routes["cuMemcpyDtoD_v2"] == [("pointer", "dstDevice"), ("pointer", "srcDevice")]
    assert routes["cuDeviceGetAttribute"] == [("device", "dev")]
    assert routes["nvmlDeviceGetName"] == [("nvml", "device")]  # (the client's stand-in for its server's)
    assert routes["nvmlDeviceGetHandleByIndex_v2"] == [("device", "index")]  # (annotated device_index)
    servers = {f.name: f.servers for f in api.functions if f.servers}
    assert servers == {"nvmlInit_v2": "each", "nvmlInitWithFlags": "each", "nvmlShutdown": "each",
                       "nvmlDeviceGetCount_v2": "sum", "nvmlDeviceGetHandleByUUID": "found",
                       "nvmlDeviceGetHandleByPciBusId_v2": "found", "nvmlDeviceGetHandleBySerial": "found"}
    for name in ("cuCtxSynchronize", "cuMemAlloc_v2", "cuLibraryGetKernel", "cuKernelGetFunction"):
        assert routes[name] == [], name  # the current context's server (libraries and kernels: any server's)
    m = json.loads((ROOT / "cuwire" / "generated" / "api_manifest.json").read_text())
    given = {f["name"]: f["routes"] for f in m["functions"]}
    assert given["cuLaunchKernel"] == [["handle", "hStream"], ["handle", "f"]]  # the manifest carries them
    assert all((given[f.name] is None) == (f.status == "unimplemented") for f in api.functions)
