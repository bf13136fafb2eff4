"""The emulated device as the server sees it: each call's arguments checked against the function's C
prototype the way cffi checks them when it calls the real library, so a handler that passes a pointer
where the driver takes an integer (a CUdeviceptr, a size) fails in CI as it would on a GPU."""

from __future__ import annotations

from collections.abc import Callable

import cffi

from cuwire.server.backend import prototypes


class CheckedLib:
    """Wraps an emulated library: `lib.name(...)` refuses arguments the C prototype would refuse."""

    def __init__(self, ffi: cffi.FFI, lib) -> None:
        self._ffi, self._lib = ffi, lib

    def __getattr__(self, name: str) -> Callable[..., int]:
        fn = getattr(self._lib, name)
        params = prototypes().get(name)
        if params is None or not callable(fn):
            return fn
        try:
            ftype = self._ffi.typeof(f"int(*)({params})")
        except (cffi.FFIError, cffi.CDefError):
            return fn  # a prototype cffi cannot spell back: left unchecked
        integer = [t.kind in ("primitive", "enum") and t.cname not in ("float", "double") for t in ftype.args]
        ffi = self._ffi

        def checked(*args):
            for i, (arg, want_int) in enumerate(zip(args, integer, strict=False)):
                if want_int and isinstance(arg, ffi.CData) and ffi.typeof(arg).kind not in ("primitive", "enum"):
                    raise TypeError(f"{name}: argument {i + 1} is a C integer, not {ffi.typeof(arg).cname} "
                                    "(the real library's cffi call would refuse it)")
            return fn(*args)

        setattr(self, name, checked)
        return checked
