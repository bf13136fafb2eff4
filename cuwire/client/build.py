"""Build the client library with cffi's embedding mode (`make client`, or `python -m cuwire.client.build`).

Output, in build/client/ (or --out):
  libcuwire.so       the library
  libcuda.so.1       the same library under the names programs and NVIDIA's runtime and libraries load
  libnvidia-ml.so.1

The C is generated/client_stubs.c (one exported function per CUDA function) plus the client's own C
(C_SOURCES); the Python that the stubs call is generated/client_calls.py and the hand-written halves
(client/embedded.py imports them all), imported by the embedded interpreter on the first call that needs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path

import cffi

from cuwire.wire import ring

PACKAGE = Path(__file__).resolve().parent.parent  # cuwire/, in a checkout or installed
GENERATED = PACKAGE / "generated"
CLIENT = PACKAGE / "client"
# the repository, when this is a checkout (make client builds into its build/client)
CHECKOUT = PACKAGE.parent if (PACKAGE.parent / "pyproject.toml").exists() else None
# an installed package's own library, built with the package (setup.py): no compiler needed to run
SHIPPED = CLIENT / "lib" / "libcuwire.so"
MODULE = "_cuwire"
# every library the generated stubs stand in for (codegen/libraries.py, through the manifest)
NAMES = tuple(json.loads((GENERATED / "api_manifest.json").read_text())["libraries"].values())
# what earlier builds put beside the library: cuwire no longer stands in for the CUDA runtime
STALE = ("libcudart.so.13", "driver")
C_SOURCES = ("start.c", "trace.c", "queue.c", "host_memory.c", "launches.c", "driver_local.c", "export_tables.c",
             "answers_cache.c", "device_memory.c", "wire.c", "callbacks.c", "managed.c", "managed_hints.c",
             "graph_nodes.c", "graph_copies.c", "shareable.c", "user_objects.c", "completion.c", "handle_pools.c",
             "nvml_answers.c")

# What crosses between the client's C and its Python: the declarations the client's headers mark (python.h),
# declared to cffi as written there, CUDA's handle types as the pointers they are.
_MARKED = re.compile(r"^(CW_FROM_PYTHON|CW_IN_PYTHON) ([^;]*;)", re.M)
_AS_POINTERS = re.compile(r"\b(?:const\s+)?CU\w+\s*\*|\bCU(?:function|stream|context|hostFn)\b")


def python_cdef() -> str:
    """cffi's declarations of every function and variable the headers of client/ mark for Python: marked
    CW_FROM_PYTHON, C the Python side calls; CW_IN_PYTHON, Python functions (extern "Python+C") the C calls."""
    out = []
    for header in sorted(CLIENT.glob("*.h")):
        text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
        for mark, declaration in _MARKED.findall(text):
            declaration = _AS_POINTERS.sub("void *", " ".join(declaration.split()))
            if re.search(r"\bCU\w+", declaration):
                raise ValueError(f"{header.name}: {declaration}: a CUDA type cffi is not told of")
            out.append(('extern "Python+C" ' if mark == "CW_IN_PYTHON" else "") + declaration)
    return "\n".join(out) + "\n"


def init_code() -> str:
    """Runs inside the program's process when the first call needs Python.

    The embedded interpreter does not know this environment's site-packages (a venv, say). A library
    shipped in an installed package (SHIPPED) finds them from where it is: the site-packages folder that
    holds its cuwire/ package. One built for a checkout or a cache has the building environment's written
    in. addsitedir also reads the .pth files an editable install relies on.
    """
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return f"""
import signal  # noqa: F401  (imported now: its import catches SIGINT, which the C start-up then gives back)
import site
import sys
from pathlib import Path

from _cuwire import ffi, lib  # noqa: E402

_here = Path(ffi.string(lib.cuwire_library_path()).decode(errors="replace") or ".").resolve()
_package = _here.parents[2] if len(_here.parents) > 3 else None  # site-packages/cuwire/client/lib/libcuwire.so
if _package is not None and _package.name == "cuwire" and (_package / "__init__.py").exists():
    _paths = [str(_package.parent)]
else:
    _paths = {paths!r}
for p in _paths:
    if p not in sys.path:
        site.addsitedir(p)
from cuwire.client import embedded  # noqa: E402


@ffi.def_extern()
def cuwire_embedded():
    return 1


embedded.start()
lib.cuwire_python_started()
"""


def build(out: Path, names: bool = True) -> Path:
    """Compile the library into out/libcuwire.so; with `names`, beside it the names programs load it by
    (symbolic links: a wheel holds none, so the package's SHIPPED library has them made where it runs)."""
    out.mkdir(parents=True, exist_ok=True)
    ffi = cffi.FFI()
    ffi.embedding_api("int cuwire_embedded(void);")
    ffi.cdef(python_cdef() + ring.cdef() + (GENERATED / "client_cdefs.h").read_text())
    source = ('#include <stdlib.h>\n#include <string.h>\n#include "client_stubs.c"\n#include "client_procs.c"\n'
              '#include "shm_ring.h"\n')
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    soname = sysconfig.get_config_var("INSTSONAME") or ldlib
    pylib = ldlib[3:].split(".so")[0] if ldlib.startswith("lib") and ".so" in ldlib else None
    libs = ["dl", "pthread"] + ([pylib] if pylib else [])
    ffi.set_source(
        MODULE, source,
        sources=[str(CLIENT / name) for name in C_SOURCES],
        include_dirs=[str(GENERATED), str(CLIENT), str(CLIENT.parent / "wire")],  # socket_wait.h, shm_ring.h
        libraries=libs,
        library_dirs=[libdir] if libdir else [],
        define_macros=[("CUWIRE_LIBPYTHON", f'"{soname}"')] if ".so" in soname else [],
        extra_compile_args=["-O2", "-fvisibility=hidden", "-Wno-unused-parameter", "-Wno-deprecated-declarations",
                            # a helper the cdef names without a prototype in runtime.h would return a
                            # truncated int: refused at build time
                            "-Werror=implicit-function-declaration"],
        extra_link_args=[f"-Wl,--version-script={GENERATED / 'exports.map'}", "-Wl,-soname,libcuwire.so",
                         *([f"-Wl,-rpath,{libdir}"] if libdir else [])],
    )
    ffi.embedding_init_code(init_code())
    tmp = out / "tmp"
    built = Path(ffi.compile(tmpdir=str(tmp), target="libcuwire.so", verbose=False))
    lib = out / "libcuwire.so"
    if built != lib:
        shutil.move(built, lib)
    shutil.rmtree(tmp, ignore_errors=True)  # the compiler's objects: not part of what is shipped or kept
    if not names:
        return lib
    for name in STALE:
        stale = out / name
        if stale.is_symlink() or stale.is_file():
            stale.unlink()
        elif stale.is_dir():
            shutil.rmtree(stale)
    for name in NAMES:
        link = out / name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink("libcuwire.so", link)
    return lib


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuwire.client.build", description=__doc__)
    ap.add_argument("--out", type=Path, default=(CHECKOUT or Path.cwd()) / "build" / "client")
    args = ap.parse_args(argv)
    lib = build(args.out)
    print(f"built {lib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
