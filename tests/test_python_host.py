"""The client library works inside a running Python process, not only in C/C++ programs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

EXPECTED = """cuInit -> 0
cuDeviceGetCount -> 0 devices >= 1: True
cuDeviceGet -> 0
cuDevicePrimaryCtxRetain -> 0
cuCtxSetCurrent -> 0
cuMemAlloc_v2 -> 0
cuMemcpyHtoD_v2 -> 0
cuMemcpyDtoH_v2 -> 0
round trip: OK
cuMemFree_v2 -> 0
cuDevicePrimaryCtxRelease_v2 -> 0
"""


# the same calls, the last four in an atexit handler the program registered before its first CUDA call
AT_EXIT = EXPECTED.replace("cuMemcpyDtoH_v2", "main ends\ncuMemcpyDtoH_v2", 1)


@pytest.mark.parametrize("at_exit", [False, True], ids=["main", "atexit"])
def test_inside_python(at_exit, client_lib, server):
    """Also: CUDA works in the program's atexit handlers, which run after cuwire's (registered later): the
    session lasts as long as the process."""
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_STATS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "python_host.py"),
                        *(["--at-exit"] if at_exit else []), str(client_lib)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (AT_EXIT if at_exit else EXPECTED), r.stderr
    assert "cuwire stats" in r.stderr or "API calls" in r.stderr  # printed at exit, before the handler


# A library of the program's own that, once CUDA runs, registers a C exit handler freeing what it made (as
# XLA's C++ static objects do): it runs after the interpreter finalized, before C's exit handler of cuwire's.
TEARDOWN_LIB = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"
static CUevent event;
static CUstream stream;
static void cleanup(void) {
    int q = cuEventRecord(event, stream), w = cuEventSynchronize(event), y = cuStreamSynchronize(stream);
    printf("after the interpreter: recorded %d, event synchronized %d, stream synchronized %d\n", q, w, y);
    int e = cuEventDestroy_v2(event), s = cuStreamDestroy_v2(stream);
    printf("after the interpreter: event destroyed %d, stream destroyed %d\n", e, s);
    fflush(stdout);
}
int setup(void) {
    CUdevice dev; CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuEventCreate(&event, 0) || cuStreamCreate(&stream, 1)) return 2;
    atexit(cleanup);
    return 0;
}
"""


def test_releases_after_the_interpreter_finalized(client_lib, server, tmp_path):
    """Natively the driver outlives the interpreter: a library's C teardown may still wait for its streams and
    free what it made (XLA's does, as JAX ends)."""
    (tmp_path / "teardown.c").write_text(TEARDOWN_LIB)
    lib = tmp_path / "libteardown.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "teardown.c"),
                    f"-I{ROOT / 'cuwire' / 'generated'}", f"-L{client_lib.parent}", "-lcuwire",
                    f"-Wl,-rpath,{client_lib.parent}"], check=True)
    code = f"import ctypes; print('setup', ctypes.CDLL({str(lib)!r}).setup(), flush=True)"
    env = {**os.environ, "CUWIRE_SERVER": server.address}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("setup 0\nafter the interpreter: recorded 0, event synchronized 0, stream synchronized 0\n"
                        "after the interpreter: event destroyed 0, stream destroyed 0\n"), r.stderr


# A Python host function (it needs the GIL) fills page-locked memory; the next call, holding the GIL (PyDLL, as a
# C extension's call does), copies that memory to the device: natively it returns at once, and the copy reads
# the memory when the stream reaches it, after the function. (The other calls let the GIL go: ctypes.CDLL.)
HOST_FUNCTION_FILLS = r"""
import ctypes
cu, held = ctypes.CDLL("libcuda.so.1"), ctypes.PyDLL("libcuda.so.1")
dev, ctx, stream = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
pinned, d = ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0
assert cu.cuMemAllocHost_v2(ctypes.byref(pinned), ctypes.c_size_t(4096)) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(4096)) == 0
ctypes.memset(pinned, 0, 4096)
ran = []

@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def fill(_):
    ctypes.memset(pinned, 7, 4096)
    ran.append(1)

assert cu.cuLaunchHostFunc(stream, fill, None) == 0
copied = held.cuMemcpyHtoDAsync_v2(d, pinned, ctypes.c_size_t(4096), stream)
out = (ctypes.c_ubyte * 4096)()
assert cu.cuMemcpyDtoHAsync_v2(out, d, ctypes.c_size_t(4096), stream) == 0
assert cu.cuStreamSynchronize(stream) == 0
print("copied", copied, "bytes", out[0], out[4095], "host function ran", len(ran), flush=True)
"""


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_copy_reads_page_locked_memory_after_the_host_function_before_it(transport, client_lib, server):
    """Over TCP the client reads page-locked memory when the copy is made: it waits for the host functions
    queued before the copy to have run, letting the GIL go meanwhile (a Python host function needs it). With
    a server on this host the memory is shared and the GPU reads it in stream order."""
    from cuwire import cli

    env = cli.program_env(client_lib, server.address, None, False, base={**os.environ, "CUWIRE_TRANSPORT": transport})
    r = subprocess.run([sys.executable, "-c", HOST_FUNCTION_FILLS], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "copied 0 bytes 7 7 host function ran 1\n", r.stderr
