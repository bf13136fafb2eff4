"""Hand-written client halves of NVML's functions annotated `mode = "custom"` (libnvidia-ml.so.1.toml).

Each is called by its generated C stub with the same boundary arguments as a generated one
(see generated/client_cdefs.h).
"""

from __future__ import annotations

from _cuwire import ffi

from cuwire.client import runtime as rt

_fallbacks: dict[int, object] = {}  # code -> C string, kept alive: callers hold the pointers


def _fallback(error: int):
    """nvmlErrorString when the server cannot be asked: never NULL (callers print it unchecked)."""
    if error not in _fallbacks:
        text = f"NVML error {error} (cuwire: the server could not be asked for its message)"
        _fallbacks[error] = ffi.new("char[]", text.encode())
    return int(ffi.cast("uintptr_t", _fallbacks[error]))


@ffi.def_extern(name="cuwire_py_nvmlErrorString", onerror=lambda exc_type, exc, tb: 0)
def nvmlErrorString(result):
    """The server's NVML's message for the code, cached; the C stub returns it as const char *."""
    try:
        text = rt.client.error_string(result, nvml=True)
    except rt.Fail:
        return _fallback(result)
    return int(ffi.cast("uintptr_t", text)) or _fallback(result)
