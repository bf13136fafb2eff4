"""The CUDA libraries cuwire stands in for, as data: one entry per library, read by the parser (which
header's functions belong to which library), the model (what its functions return), the templates (how
the client's stubs report errors, which symbols carry which version) and the server (which real library
serves a call). A new library (cuBLAS, NVML) is one more entry here, plus its headers and annotations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Library:
    api: str  # the model's name for it (Function.api)
    soname: str  # the file programs load; cuwire's client answers to it, the server opens the real one
    headers: tuple[str, ...]  # the headers (relative to the include folder) whose functions it exports
    exports: str  # the list of every name the real library exports (codegen/exports/)
    annotations: str  # what its headers do not say (codegen/annotations/)
    error_type: str  # what its functions return
    not_supported: int = 801  # what a function cuwire does not serve returns (CUDA_ERROR_NOT_SUPPORTED)
    # what a call returns when it cannot reach the server: a C expression (CUWIRE_NOT_READY says why in
    # CUDA's numbers), and the client's Python that maps its failures to this library's codes
    not_ready: str = "CUWIRE_NOT_READY"
    on_error: str = "on_error"


LIBRARIES = (
    Library("driver", "libcuda.so.1", ("cuda.h",), "libcuda.so.1.exports", "libcuda.so.1.toml", "CUresult"),
    Library("nvml", "libnvidia-ml.so.1", ("nvml.h",), "libnvidia-ml.so.1.exports", "libnvidia-ml.so.1.toml",
            "nvmlReturn_t", not_supported=3, not_ready="999", on_error="on_nvml_error"),
            # NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN
)
BY_API = {lib.api: lib for lib in LIBRARIES}
FUNCTION_HEADERS = {header: lib.api for lib in LIBRARIES for header in lib.headers}
