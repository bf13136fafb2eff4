"""What NVIDIA's runtime asks of libcuda before any call reaches a server: entry points by name and
CUDA version (cuGetProcAddress) and the private export tables (cuGetExportTable). Both are answered by
the client library's C alone, so they are called here directly, in this process."""

from __future__ import annotations

import ctypes
import struct
import subprocess

import pytest
from conftest import ROOT

NOT_FOUND, NOT_SUPPORTED, INVALID_HANDLE = 500, 801, 400
SUCCESS_STATUS, SYMBOL_NOT_FOUND, VERSION_NOT_SUFFICIENT = 0, 1, 2
PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM


@pytest.fixture(scope="module")
def lib(client_lib):
    return ctypes.CDLL(str(client_lib))


def proc(lib, name: str, version: int, flags: int = 0) -> tuple[int, int, int]:
    fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
    err = lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(flags),
                                  ctypes.byref(status))
    return err, fn.value or 0, status.value


def addr(lib, symbol: str) -> int:
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


@pytest.mark.parametrize("name, version, flags, symbol", [
    ("cuMemAlloc", 13000, 0, "cuMemAlloc_v2"),  # the ABI current at the caller's version
    ("cuMemAlloc", 2000, 0, "cuMemAlloc"),
    ("cuCtxSynchronize", 12090, 0, "cuCtxSynchronize"),  # CUDA 13 changed its signature, not its name
    ("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"),
    ("cuCtxCreate", 12050, 0, "cuCtxCreate_v4"),
    ("cuMemcpyHtoD", 13000, PER_THREAD, "cuMemcpyHtoD_v2_ptds"),
    ("cuLaunchKernel", 13000, PER_THREAD, "cuLaunchKernel_ptsz"),
    ("cuDeviceGetAttribute", 13000, PER_THREAD, "cuDeviceGetAttribute"),  # no per-thread variant: the plain one
    ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
])
def test_proc_address_picks_the_abi_variant(lib, name, version, flags, symbol):
    err, fn, status = proc(lib, name, version, flags)
    assert (err, status) == (0, SUCCESS_STATUS)
    assert fn == addr(lib, symbol)


def test_proc_address_too_old_and_unknown(lib, capfd):
    # the per-thread variants appeared in CUDA 7.0: before that, none (as the driver answers)
    assert proc(lib, "cuMemcpyHtoD", 4000, PER_THREAD) == (NOT_FOUND, 0, VERSION_NOT_SUFFICIENT)
    assert proc(lib, "cuNoSuchFunction", 13000) == (NOT_FOUND, 0, SYMBOL_NOT_FOUND)
    assert "no driver entry point named cuNoSuchFunction" in capfd.readouterr().err
    assert proc(lib, "", 0) == (NOT_FOUND, 0, SYMBOL_NOT_FOUND)  # cuBLAS's probe: quiet
    assert capfd.readouterr().err == ""


def uuid(hexbytes: str) -> ctypes.Array:
    return (ctypes.c_ubyte * 16)(*bytes.fromhex(hexbytes))


CUDART_INTERFACE = "6bd5fb6c5bf4e74a8987d93912fd9df9"
CONTEXT_LOCAL_STORAGE = "c693336e1121df11a8c368f355d89593"
# slots per table: the real driver's (580), measured on the H100 with tests/tools/export_tables_probe.c
SIZED_TABLES = {CUDART_INTERFACE: 13, "42d85a8123f6cb478298f6e78a3aecdc": 3, "a094798c2e742e7493f20800200c0a66": 7,
                "0ca50b8c1004929a89a7d0df10e77286": 2, "195bcbf4d67d024aacc51d29cea631ae": 3,
                "d4082055bde6704b8d34ba123c66e1f2": 3, "263e88607cd2614392f6bbd5006dfa7e": 15,
                "21318c60971432488ca641ff7324c8f2": 93, "6e163fbeb958444d835ce182aff1991e": 99,
                "69a28e9f24498b47b030c5da330ea4e9": 34}


def table(lib, hexbytes: str) -> tuple[int, ctypes.POINTER]:
    out = ctypes.POINTER(ctypes.c_void_p)()
    err = lib.cuGetExportTable(ctypes.byref(out), uuid(hexbytes))
    return err, out


@pytest.mark.parametrize("hexbytes, slots", SIZED_TABLES.items())
def test_export_tables_carry_their_size_and_no_null_slot(lib, hexbytes, slots):
    err, t = table(lib, hexbytes)
    assert err == 0
    assert t[0] == slots * 8  # the first word is the table's size in bytes
    nulls = [i for i in range(1, slots) if not t[i]]
    assert nulls == ([2] if hexbytes == "d4082055bde6704b8d34ba123c66e1f2" else [])  # a caller never jumps to 0


def test_unimplemented_slot_is_loud(lib, capfd):
    _, t = table(lib, "0ca50b8c1004929a89a7d0df10e77286")  # CTX_CREATE_BYPASS
    assert ctypes.CFUNCTYPE(ctypes.c_int)(t[1])() == NOT_SUPPORTED
    assert "private driver table entry CTX_CREATE_BYPASS slot 1" in capfd.readouterr().err


def test_unknown_table_is_refused_by_uuid(lib, capfd):
    assert table(lib, "00112233445566778899aabbccddeeff")[0] == NOT_SUPPORTED
    assert "00112233445566778899aabbccddeeff" in capfd.readouterr().err
    assert table(lib, "f8cff95121468b4eb9e2fb469e7c0dd9")[0] == NOT_FOUND  # libcudart's probe: quiet
    assert capfd.readouterr().err == ""


def test_context_local_storage(lib):
    err, t = table(lib, CONTEXT_LOCAL_STORAGE)
    assert err == 0 and t[3] is None  # four entries, no size word, the last NULL
    put = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(t[0])
    delete = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(t[1])
    get = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p)(t[2])
    ctx, key, value = 0x1000, 0x2000, ctypes.c_void_p()
    assert get(ctypes.byref(value), ctx, key) == INVALID_HANDLE
    assert put(ctx, key, 0x1234, None) == 0
    assert get(ctypes.byref(value), ctx, key) == 0 and value.value == 0x1234
    assert get(ctypes.byref(value), ctx + 8, key) == INVALID_HANDLE  # per context
    assert delete(ctx, key) == 0
    assert get(ctypes.byref(value), ctx, key) == INVALID_HANDLE


@pytest.fixture(scope="module")
def tables_alone(tmp_path_factory):
    """client/export_tables.c on its own, so its hash can be called with chosen inputs."""
    folder = tmp_path_factory.mktemp("tables")
    driver = ["cuModuleLoadData", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxGetCurrent",
              "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetUuid_v2", "cuDeviceGetAttribute"]
    (folder / "harness.c").write_text("int cuwire_trace, cuwire_python_ok, cuwire_forked, cuwire_finished;\n"
                                      "void cuwire_say_once_per_name(void) {}\n"
                                      "int cuwire_start_python(void) { return 0; }\n"
                                      "int cuwire_python_gone(void) { return 0; }\n"
                                      "unsigned long cuwire_py_module_functions(void) { return 0; }\n"
                                      "unsigned long cuwire_py_export_table_size(void) { return 0; }\n"
                                      "int cuwire_session_open(void) { return 0; }\n"
                                      + "".join(f"int {name}(void) {{ return 999; }}\n" for name in driver))
    out = folder / "tables.so"
    package = ROOT / "cuwire"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f"-I{package / 'generated'}", f"-I{package / 'client'}",
                    f"-I{package / 'wire'}", "-o", str(out), str(package / "client" / "export_tables.c"),
                    str(folder / "harness.c")], check=True)
    return ctypes.CDLL(str(out))


def test_integrity_hash_matches_the_published_vector(tables_alone):
    """HMAC-MD2 over the runtime's own inputs; the vector is ZLUDA's (v3, anti_zluda_hash sample)."""
    lib = tables_alone
    header = struct.pack("<IIIIQQQQ", 12020, 11082, 0x4D08, 0x2B78, 0x7FF8C80717F0, 0x7FF8C825E4B0, 0x7FF8C7DD0AD0,
                         0x64A365EE)
    device = bytes.fromhex("6722CBCFC661F29274D6ED232A32131C") + struct.pack("<iii", 0, 4, 0)
    out = (ctypes.c_uint64 * 2)()
    lib.cuwire_integrity_hash(header, device, 1, out)
    assert (out[0], out[1]) == (0xA7C34628F214707A, 0xEAF1313342BFCD84)


TABLE_USER = r"""
#include <stdio.h>
#include <string.h>
#include "cuda_api.h"
int main(void) {
    CUuuid id; const void **table = NULL;
    memcpy(id.bytes, "cuwire-emulated!", 16);
    printf("cuInit %d\n", cuInit(0));
    int err = cuGetExportTable((const void **)&table, &id);
    printf("table %d size %lu\n", err, err ? 0ul : (unsigned long)(size_t)table[0]);
    if (!err)
        printf("slot 1 %d\n", ((int (*)(void))table[1])());
    memcpy(id.bytes, "no-such-table-00", 16);
    printf("unknown %d\n", cuGetExportTable((const void **)&table, &id));
    return 0;
}
"""


def test_a_table_only_the_server_knows_is_served_with_refusing_slots(client_lib, server, tmp_path):
    """A table cuwire does not describe but the server's driver has: the same size, every slot refusing by
    name (a library then takes its own error path); one the server lacks too is refused."""
    import os

    from conftest import compile_against_client

    exe = compile_against_client(TABLE_USER, tmp_path, client_lib, "table_user")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CUWIRE_SERVER": server.address})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["cuInit 0", "table 0 size 24", f"slot 1 {NOT_SUPPORTED}",
                                     f"unknown {NOT_SUPPORTED}"]
    assert "served with slots that each refuse" in r.stderr and "an unknown table slot 1" in r.stderr
    assert "6e6f2d737563682d7461626c652d3030" in r.stderr  # the refused one, named by UUID
