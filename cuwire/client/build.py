"""Build the client library (`make client`, or `python -m cuwire.client.build`).

Output, in build/client/ (or --out):
  libcuwire.so         the library: the C half, which links no Python
  libcuwire_python.so  its Python half, cffi's embedding module: loaded by the C half at the first call that
                       needs Python, after the process's Python (the program's own, or libpython loaded then)
  libcuda.so.1         the library under the names programs and NVIDIA's runtime and libraries load
  libnvidia-ml.so.1

The C half is generated/client_stubs.c (one exported function per CUDA function) plus the client's own C
(C_SOURCES); the Python that the stubs call is generated/client_calls.py and the hand-written halves
(client/embedded.py imports them all), imported by the embedded interpreter when it starts.

Why two halves: a library that links libpython cannot be a manylinux wheel (auditwheel refuses it: a
wheel's Python may have no shared library), and a program that is itself Python must not get a second
interpreter. So the C half names no Python symbol; its calls into Python go through trampolines
(python_calls.c, written here from cffi's own rendering of the Python functions) bound when the Python
half is loaded (client/start.c).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import cffi

from cuwire.wire import ring, stream

PACKAGE = Path(__file__).resolve().parent.parent  # cuwire/, in a checkout or installed
GENERATED = PACKAGE / "generated"
CLIENT = PACKAGE / "client"
# the repository, when this is a checkout (make client builds into its build/client)
CHECKOUT = PACKAGE.parent if (PACKAGE.parent / "pyproject.toml").exists() else None
# an installed package's own library, built with the package (setup.py): no compiler needed to run
SHIPPED = CLIENT / "lib" / "libcuwire.so"
MODULE = "_cuwire"
PYTHON_HALF = "libcuwire_python.so"  # beside libcuwire.so
# every library the generated stubs stand in for (codegen/libraries.py, through the manifest)
NAMES = tuple(json.loads((GENERATED / "api_manifest.json").read_text())["libraries"].values())
# what earlier builds put beside the library: cuwire no longer stands in for the CUDA runtime
STALE = ("libcudart.so.13", "driver")
C_SOURCES = ("start.c", "session.c", "capture.c", "trace.c", "queue.c", "calls.c", "host_memory.c", "launches.c",
             "driver_local.c", "export_tables.c", "answers_cache.c", "device_memory.c", "wire.c", "callbacks.c",
             "host_fn_order.c", "managed.c", "managed_hints.c", "graph_nodes.c", "graph_copies.c", "shareable.c",
             "user_objects.c", "completion.c", "handle_pools.c", "nvml_answers.c", "kernel_nodes.c", "table.c",
             "tensor_maps.c", "sender.c", "routes.c", "peers.c")

# What crosses between the client's C and its Python: the declarations the client's headers mark (python.h),
# declared to cffi as written there, CUDA's handle types as the pointers they are.
_MARKED = re.compile(r"^(CW_FROM_PYTHON|CW_IN_PYTHON) ([^;]*;)", re.M)
_AS_POINTERS = re.compile(r"\b(?:const\s+)?CU\w+\s*\*|\bCU(?:function|stream|context|hostFn)\b")
_IN_PYTHON = 'extern "Python+C" '


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
            out.append((_IN_PYTHON if mark == "CW_IN_PYTHON" else "") + declaration)
    return "\n".join(out) + "\n"


def from_python() -> list[str]:
    """The C declarations (functions and variables) the Python half reaches in the C half: the marked ones
    and the shared-memory ring's and the stream's (ring.py and stream.py call them)."""
    lines = python_cdef().splitlines() + ring.cdef().splitlines() + ring.cdef(stream.HEADER).splitlines()
    return [line for line in lines if line.strip() and not line.startswith(_IN_PYTHON) and "typedef" not in line]


def exported_names() -> list[str]:
    """What the C half exports beside CUDA's names: every name the Python half reaches (from_python)."""
    names = set()
    for line in from_python():
        found = re.search(r"(\w+)\s*(?:\(|\[\s*\]\s*;|;)", line)
        if found is None:
            raise ValueError(f"no name in the declaration {line!r}")
        if "(" not in line and "," in line:  # (only the last name would be exported: the others fail at load)
            raise ValueError(f"one name a declaration: {line!r}")
        names.add(found.group(1))
    return sorted(names)


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


def python_module(c_file: Path) -> list[tuple[str, str, str]]:
    """Write the Python half's C (cffi's embedding module) into c_file; return each Python function the C
    half calls, as cffi renders it there: (result type, name, parameters)."""
    ffi = cffi.FFI()
    ffi.embedding_api("int cuwire_embedded(void);")
    ffi.cdef(python_cdef() + ring.cdef() + ring.cdef(stream.HEADER) + (GENERATED / "client_cdefs.h").read_text())
    ffi.set_source(MODULE, "#include <stdint.h>\n#include \"shm_ring.h\"\n#include \"stream.h\"\n"
                   "/* the C half's, reached through its exported names (client/start.c makes them global) */\n"
                   + "\n".join(from_python()) + "\n")
    ffi.embedding_init_code(init_code())
    with contextlib.redirect_stdout(io.StringIO()):  # ("generating ...")
        ffi.emit_c_code(str(c_file))
    rendered = re.findall(r"^(?:CFFI_DLLEXPORT )?([^\n(]*?)\b(cuwire_py_\w+)\(([^)]*)\)\n\{", c_file.read_text(), re.M)
    if not rendered:
        raise RuntimeError(f"{c_file}: cffi's rendering of the Python functions was not recognised")
    return [(result.strip(), name, params) for result, name, params in rendered]


def python_calls(functions: list[tuple[str, str, str]]) -> str:
    """The C half's trampolines: each Python function by its name, calling the Python half's once bound
    (client/start.c binds them all when it loads it; a call before then starts it first)."""
    out = ["/* Built by cuwire/client/build.py from cffi's rendering of the Python half's functions. Do not edit.",
           " * Each calls the Python half's function of the same name, bound when client/start.c loads it. */",
           "#include <stdint.h>", "#include <stddef.h>",
           "int cuwire_python_bind(void); /* start.c: 0 when the Python half cannot be had */",
           "#define CW_BOUND(p) (__builtin_expect((p) != NULL, 1) || cuwire_python_bind())", ""]
    entries = []
    for result, name, params in functions:
        args = ", ".join(re.findall(r"\b(a\d+)$", p.strip())[0] for p in params.split(",") if p.strip() != "void")
        call = f"cw_{name}({args})"
        out.append(f"static {result} (*cw_{name})({params});")
        body = (f"if (CW_BOUND(cw_{name})) {call};" if result == "void"
                else f"return CW_BOUND(cw_{name}) ? {call} : 0;")
        out.append(f"{result} {name}({params}) {{ {body} }}")
        entries.append(f'    {{"{name}", (void **)&cw_{name}}},')
    out += ["", "const struct cuwire_python_entry { const char *name; void **fn; } cuwire_python_entries[] = {",
            *entries, "    {NULL, NULL},", "};", ""]
    return "\n".join(out)


def compiler() -> list[str]:
    """The C compiler this Python was built with (CC overrides), as Python's own extensions are built."""
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def compile_library(sources: list[Path], target: Path, flags: list[str], link: list[str], tmp: Path) -> None:
    """Compile each source to an object (in parallel), then link them into the shared library `target`."""
    cc = compiler()

    def one(src: Path) -> Path:
        obj = tmp / f"{src.stem}.o"
        r = subprocess.run([*cc, *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"compiling {src.name} failed:\n{r.stderr.strip()}")
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(one, sources))
    r = subprocess.run([*cc, "-shared", "-o", str(target), *map(str, objects), *link], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"linking {target.name} failed:\n{r.stderr.strip()}")


# both halves: nothing exported unless named (the Python half's by its version script), optimized
_FLAGS = ["-fvisibility=hidden", "-fPIC", "-O2", "-Wno-unused-parameter", "-Wno-deprecated-declarations",
          # a helper the cdef names without a prototype would return a truncated int: refused at build time
          "-Werror=implicit-function-declaration"]


def build(out: Path, names: bool = True) -> Path:
    """Compile both halves into out/; with `names`, beside them the names programs load the library by
    (symbolic links: a wheel holds none, so the package's SHIPPED library has them made where it runs)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        functions = python_module(tmp / f"{MODULE}.c")
        (tmp / "python_calls.c").write_text(python_calls(functions))
        (tmp / "stubs.c").write_text('#include <stdlib.h>\n#include <string.h>\n#include "client_stubs.c"\n'
                                     '#include "client_procs.c"\n')
        exports = (GENERATED / "exports.map").read_text() + (
            "cuwire_private {\n  global:\n" + "".join(f"    {n};\n" for n in exported_names()) + "};\n")
        (tmp / "exports.map").write_text(exports)
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        soname = sysconfig.get_config_var("INSTSONAME") or ""
        built = Path(sysconfig.get_config_var("LIBDIR") or "/") / soname if ".so" in soname else Path("")
        if ".so" not in soname:  # a Python linked statically (manylinux's): the soname a shared one has
            soname = f"libpython{version}{sys.abiflags}.so.1.0"
        python = [f'-DCUWIRE_PYTHON_VERSION="{version}"', f'-DCUWIRE_PYTHON_HALF="{PYTHON_HALF}"',
                  f'-DCUWIRE_LIBPYTHON_SONAME="{soname}"',
                  f'-DCUWIRE_LIBPYTHON_BUILT="{built}"']
        includes = [f"-I{d}" for d in (GENERATED, CLIENT, CLIENT.parent / "wire")]
        lib = out / "libcuwire.so"
        compile_library([tmp / "stubs.c", tmp / "python_calls.c", *(CLIENT / n for n in C_SOURCES)], tmp / lib.name,
                        [*_FLAGS, "-fno-semantic-interposition", *includes, *python],
                        [f"-Wl,--version-script={tmp / 'exports.map'}", "-Wl,-soname,libcuwire.so", "-ldl",
                         "-lpthread"], tmp)
        (tmp / "python.map").write_text("{\n  global:\n    cuwire_embedded;\n    cuwire_py_*;\n  local:\n    *;\n};\n")
        py_includes = sorted({sysconfig.get_paths()["include"], sysconfig.get_paths()["platinclude"]})
        # no -lpython: the process's Python (the program's, or the libpython start.c loads) provides it
        compile_library([tmp / f"{MODULE}.c"], tmp / PYTHON_HALF,  # (the map names its exports)
                        [*_FLAGS[1:], *includes, *(f"-I{d}" for d in py_includes)],
                        [f"-Wl,--version-script={tmp / 'python.map'}"], tmp)
        for built in (lib.name, PYTHON_HALF):  # replaced whole: a program running the old one keeps it
            (tmp / built).replace(out / built)
    finally:
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
    ap = argparse.ArgumentParser(prog="python -m cuwire.client.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=(CHECKOUT or Path.cwd()) / "build" / "client")
    args = ap.parse_args(argv)
    lib = build(args.out)
    print(f"built {lib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
