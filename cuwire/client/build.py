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

# C functions of the client's C that the Python side calls.
HELPERS_CDEF = """
const char *cuwire_library_path(void);
size_t cuwire_queue_take(char **data, uint64_t *count);
void cuwire_free(void *p);
void cuwire_hook_exit(void);
void cuwire_python_started(void);
extern const char *const cuwire_names[];
extern const char *const cuwire_modes[];
extern unsigned long long cuwire_counts[];
extern const int cuwire_n_functions;
void cuwire_set_launch_limits(uint32_t threads, const uint32_t *block, const uint32_t *grid);
void cuwire_cache_kernel(const void *key, uint64_t handle, uint32_t n, const uint32_t *offsets,
                         const uint32_t *sizes);
void cuwire_forget_kernels(void);
void cuwire_forget_pools(uint64_t context);
unsigned long long cuwire_answers_generation(void);
void cuwire_queue_refuse(void);
void cuwire_wire_set(int fd);
void cuwire_wire_spin(long microseconds);
void cuwire_wire_acquire(void);
void cuwire_wire_release(void);
void cuwire_wire_forget(void);
int cuwire_wire_stats(uint32_t *ids, uint64_t *counts, uint64_t *ns, int max, uint64_t *totals);
int cuwire_wire_send_queued(void);
void cuwire_note_sent(int waits);
extern unsigned long long cuwire_answered_done;
extern "Python+C" void cuwire_py_wire_broken(const char *why);
int cuwire_track_alloc(uint64_t base, uint64_t size);
void cuwire_untrack_alloc(uint64_t base);
uint64_t cuwire_allocation_of(uint64_t address, uint64_t *size);
void cuwire_forget_allocations(void);
void cuwire_guard_device_range(uint64_t base, uint64_t size);
int cuwire_launch_config_error(const uint32_t *grid, const uint32_t *block);
uint64_t cuwire_current_context(void);
int cuwire_fast_cuLaunchKernelEx(void *config, void *f, void **params, void **extra);
int cuwire_fast_cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, void *stream, void **params, void **extra);
long cuwire_pack_params(void *f, void **params, void **extra, uint64_t *handle, char *out, size_t cap);
uint64_t cuwire_keep_host_fn(void *fn, void *user, int *err);
int cuwire_host_fn_of(uint64_t id, void **fn, void **user);
extern unsigned long long cuwire_fast_launches;
extern unsigned long long cuwire_fast_hits[];
extern "Python+C" int cuwire_py_flush(void);
extern "Python+C" int cuwire_py_send_queued(void);
extern "Python+C" int cuwire_py_connect(void);
extern "Python+C" uint64_t cuwire_py_export_table_size(const void *uuid);
int cuwire_session_open(void);
extern "Python+C" uint64_t cuwire_py_module_functions(uint64_t context, uint64_t module, void *callback,
                                                      void *userdata);
void cuwire_set_devices(int count, int n_attrs, const int32_t *attrs, const char *const *device_names,
                        const uint8_t *device_uuids, const uint64_t *memory, const uint64_t *contexts,
                        const uint32_t *flags, int driver);
extern "Python+C" void cuwire_py_at_exit(void);
void cuwire_shared_host_set(uint64_t base, uint64_t size, uint64_t server_base, int fd);
void cuwire_write_output(const char *buf, size_t len);
void cuwire_callbacks_ring(void *r);
void cuwire_callbacks_socket(int fd);
extern "Python+C" int cuwire_py_callbacks(void);
void cuwire_callbacks_stop(void);
void cuwire_callbacks_forget(void);
extern "Python+C" int cuwire_py_host_alloc(uint64_t size, uint64_t *address);
extern "Python+C" int cuwire_py_host_free(uint64_t address);
extern "Python+C" int cuwire_py_host_register_at(uint64_t address, uint64_t size, uint64_t *offset);
extern "Python+C" int cuwire_py_host_unregister_at(uint64_t offset);
extern "Python+C" int cuwire_py_host_register_again(uint64_t address, uint64_t size, uint64_t offset);
extern "Python+C" int cuwire_py_managed_alloc(uint64_t size, unsigned int flags, uint64_t *address);
extern "Python+C" int cuwire_py_capture_info(uint64_t stream, void *graph, void *deps, void *edges, void *count);
int cuwire_managed_before_call(void);
extern "Python+C" int cuwire_py_make_handles(uint32_t kind, uint32_t flags, int32_t priority, uint32_t count,
                                             uint64_t *out, uint32_t *made);
extern "Python+C" int cuwire_py_function_attributes(uint64_t kernel, uint64_t function, int32_t device,
                                                    int32_t *statuses, int32_t *values, int count);
"""


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
    ffi.cdef(HELPERS_CDEF + ring.cdef() + (GENERATED / "client_cdefs.h").read_text())
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
