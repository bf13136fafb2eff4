"""Handles the client names (issue 35, docs/speed.md "The client names the handles"): a library load and a
kernel lookup that carry the handle the client gave the program (LoadModule_Args.name, GetKernel_Args.name_as)
may go without waiting for an answer, and the session takes each name for the driver's handle from then on:
in its Python handlers (Session.handle), in its record loop (records.c cw_real, launches keyed by the name)
and in the hand-written paths. Driven here on a session of the emulated device, in this process."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from test_records import launch, record  # (queued calls as the client's C packs them)

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.generated.wire_ids import OP_IDS
from cuwire.server.module_cache import ModuleCache
from cuwire.server.service import CuWireServer
from cuwire.server.session import Session
from cuwire.settings import Settings
from cuwire.wire import layouts

NAME_TAG = layouts.constant("CW_NAME_TAG")
LIBRARY, KERNEL = NAME_TAG | 1, NAME_TAG | 2
PTX = b".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret;\n}\n"
DIGEST = hashlib.sha256(PTX).digest()
IDS = {name: i for i, (name, _, _) in generated.HANDLERS.items()}


@pytest.fixture
def session(tmp_path) -> Any:
    server = CuWireServer(Settings(backend="emulated", cache_dir=tmp_path))
    s = Session(server, "test", pb.Hello(), "named")
    yield s
    s.close()


def call(s: Session, function: str, records: bytes = b"", no_reply: bool = False, **fields) -> tuple[pb.Reply, Any]:
    """One batch: `records` queued, then the call `function` (a CUDA function's name, or cuwire's own)."""
    short = function
    args = getattr(pb, f"{short}_Args")(**fields).SerializeToString()
    reply = s.run(pb.Batch(fn=IDS.get(short) or OP_IDS[short], args=args, records=records, no_reply=no_reply))
    result = getattr(pb, f"{short}_Result").FromString(reply.result) if reply.result else None
    return reply, result


def load_and_look_up(s: Session) -> None:
    """The library and its kernel, each named and unanswered (as the client sends them, without waiting)."""
    reply, _ = call(s, "LoadModule", no_reply=True, digest=DIGEST, image=PTX, name=LIBRARY)
    assert not reply.error and not reply.queued_error, reply
    reply, _ = call(s, "GetKernel", no_reply=True, module=LIBRARY, name="_Z6addOnePj", name_as=KERNEL,
                    expect_offsets=[0], expect_sizes=[8])
    assert not reply.error and not reply.queued_error, reply


def test_a_named_kernel_launches_and_answers_as_the_drivers(session):
    """A launch keyed by the kernel's name runs it; attribute questions, a queued attribute set and the
    kernel's function take the name for the driver's kernel; the library's name serves a lookup too."""
    load_and_look_up(session)
    _, res = call(session, "cuMemAlloc_v2", bytesize=4)
    pointer = res.dptr
    _, res = call(session, "cuMemcpyHtoD_v2", dstDevice=pointer, srcHost=struct.pack("<I", 41), ByteCount=4)
    set_shared = record("cuKernelSetAttribute", cu.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, KERNEL, 0)
    reply, res = call(session, "cuMemcpyDtoH_v2", records=launch(KERNEL, struct.pack("<Q", pointer)) + set_shared,
                      srcDevice=pointer, ByteCount=4)
    assert not reply.error and not reply.queued_error and res.status == 0, reply
    assert struct.unpack("<I", res.dstHost)[0] == 42  # (_Z6addOnePj: *p += 1)
    _, res = call(session, "FunctionAttributes", kernel=KERNEL, device=0)
    assert res.status == 0 and res.statuses[cu.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] == 0
    assert res.values[cu.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] == 1024  # (the queued set took)
    _, res = call(session, "GetKernel", kernel=KERNEL)
    assert res.status == 0 and res.kernel
    _, res = call(session, "GetKernel", module=LIBRARY, name="_Z6addOnePj")
    assert res.status == 0 and res.kernel == session.real(KERNEL)


def test_a_name_no_load_gave_is_refused_as_an_unknown_handle(session):
    load_and_look_up(session)
    stranger = NAME_TAG | 99
    reply, _ = call(session, "cuCtxSynchronize", records=record("cuKernelSetAttribute", 8, 0, stranger, 0))
    assert reply.queued_error == cu.CUDA_ERROR_INVALID_HANDLE, reply
    _, res = call(session, "FunctionAttributes", kernel=stranger, device=0)
    assert res.status == cu.CUDA_ERROR_INVALID_HANDLE
    reply, _ = call(session, "GetKernel", module=NAME_TAG | 98, name="_Z6addOnePj")
    assert "was not loaded by this session" in reply.error  # (as a library handle no load gave)


def test_an_unanswered_lookup_whose_layout_is_not_the_drivers_fails_at_the_next_answer(session):
    """The client packs a named kernel's launches by the layout it read; one the driver does not share is
    refused, and the error comes with the next answer, as a queued call's does."""
    call(session, "LoadModule", no_reply=True, digest=DIGEST, image=PTX, name=LIBRARY)
    reply, _ = call(session, "GetKernel", no_reply=True, module=LIBRARY, name="_Z6addOnePj", name_as=KERNEL,
                    expect_offsets=[0], expect_sizes=[4])
    assert not reply.error
    reply, _ = call(session, "cuCtxSynchronize")
    assert reply.queued_error == cu.CUDA_ERROR_INVALID_IMAGE and "GetKernel" in reply.queued_error_fn, reply
    assert KERNEL not in session.names


def test_an_unanswered_load_of_an_image_the_cache_lacks_fails_at_the_next_answer(session):
    reply, _ = call(session, "LoadModule", no_reply=True, digest=hashlib.sha256(b"another").digest(), name=LIBRARY)
    assert not reply.error
    reply, _ = call(session, "cuCtxSynchronize")
    assert reply.queued_error == cu.CUDA_ERROR_FILE_NOT_FOUND and "LoadModule" in reply.queued_error_fn, reply


def test_names_are_bounded(tmp_path):
    """A client that names the same kernel over and over is held to CUWIRE_MAX_HANDLES names, as to handles."""
    server = CuWireServer(Settings(backend="emulated", cache_dir=tmp_path, max_handles=3))
    s = Session(server, "test", pb.Hello(), "bounded")
    try:
        load_and_look_up(s)  # (two names)
        statuses = []
        for n in range(3, 5):
            reply, res = call(s, "GetKernel", module=LIBRARY, name="_Z6addOnePj", name_as=NAME_TAG | n,
                              expect_offsets=[0], expect_sizes=[8])
            statuses.append(res.status)
        assert statuses == [0, cu.CUDA_ERROR_OUT_OF_MEMORY] and len(s.names) == 3
    finally:
        s.close()


def test_what_a_batch_without_an_answer_may_carry(session):
    """Only a load or lookup that names its handle; a name stands for one handle only."""
    reply, _ = call(session, "cuCtxSynchronize", no_reply=True)
    assert "carries queued calls only" in reply.error
    reply, _ = call(session, "LoadModule", no_reply=True, digest=DIGEST, image=PTX)
    assert "carries queued calls only" in reply.error
    reply, _ = call(session, "cuCtxSynchronize")  # (a refusal nobody waited for comes with the next answer)
    assert "queued calls refused" in reply.queued_error_fn
    load_and_look_up(session)
    reply, _ = call(session, "GetKernel", module=LIBRARY, name="_Z6addOnePj", name_as=LIBRARY,
                    expect_offsets=[0], expect_sizes=[8])
    assert "stands for another handle" in reply.error
    reply, _ = call(session, "GetKernel", module=LIBRARY, name="_Z6addOnePj", name_as=5, expect_offsets=[0],
                    expect_sizes=[8])
    assert "CW_NAME_TAG" in reply.error


# ---------------------------------------------------------------- the client's side (CUWIRE_NAMED_LOADS)

KERNEL_SOURCE = "__global__ void addOne(unsigned *p) { *p += 1; }\n"  # (_Z6addOnePj, which the emulator runs)
NAMED_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"
int main(int argc, char **argv) {
    static char image[8 << 20];
    FILE *f = fopen(argv[1], "rb");
    size_t n = fread(image, 1, sizeof image, f);
    fclose(f);
    CUdevice dev; CUcontext ctx; CUlibrary lib; CUkernel k, missing; CUdeviceptr p; unsigned v = 41;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (n == 0 || cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0)) return 2;
    if (cuLibraryGetKernel(&k, lib, "_Z6addOnePj")) return 3;
    int status = cuLibraryGetKernel(&missing, lib, "noSuchKernel");
    if (cuMemAlloc_v2(&p, 4) || cuMemcpyHtoD_v2(p, &v, 4)) return 4;
    void *params[] = {&p};
    if (cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)) return 5;
    if (cuMemcpyDtoH_v2(&v, p, 4)) return 6;
    CUfunction fn; CUlibrary owner; unsigned again = 0;
    int got = cuKernelGetFunction(&fn, k), of = cuKernelGetLibrary(&owner, k);
    int regs = -1, with = cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    if (got || cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) || cuMemcpyDtoH_v2(&again, p, 4)) return 7;
    printf("value %u, a missing kernel: %d, its function: %d, launched: %u, uses registers: %s, its library the "
           "one loaded: %s\n", v, status, got, again, with == 0 && regs > 0 ? "yes" : "no",
           of == 0 && owner == lib ? "yes" : "no");
    return 0;
}
"""


def named_program(folder: Path, client_lib, arch: str, source: str = KERNEL_SOURCE) -> tuple[Path, Path]:
    """NAMED_PROGRAM built against the client, and `source`'s cubin for `arch` (its argument)."""
    from conftest import compile_against_client

    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    (folder / "k.cu").write_text(source)
    subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", str(folder / "k.cubin"), str(folder / "k.cu")],
                   check=True, timeout=300)
    return compile_against_client(NAMED_PROGRAM, folder, client_lib), folder / "k.cubin"


def test_a_program_loads_and_launches_under_names(client_lib, server, tmp_path):
    """CUWIRE_NAMED_LOADS=1: a library of machine code, its kernel and the kernel's function are named by the
    client and sent without waiting (no cuwire.LoadModule waited for, nor a lookup); the kernel launches, and
    through its function, whose attributes the client answers; a name the image lacks is
    CUDA_ERROR_NOT_FOUND at once, and what the server gives back about the kernel names it as the
    program knows it. Without the setting, the same program waits for both, with the same output."""
    exe, cubin = named_program(tmp_path, client_lib, "sm_90")
    outputs = {}
    for named in ("1", "0"):
        env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1",
               "CUWIRE_LOAD_LISTS": "", "CUWIRE_NAMED_LOADS": named}
        r = subprocess.run([str(exe), str(cubin)], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        outputs[named] = r.stdout
        waited = re.search(r"top calls sent to the server, by count: (.*)", r.stderr)[1]
        if named == "1":
            # (the kernel, and its function: cuKernelGetFunction's, named too, its attributes the image's)
            assert ("loaded without waiting, under handles the client named: 1 modules (1 uploaded, 0 by digest "
                    "alone), 2 kernels") in r.stderr
            assert "cuwire.LoadModule" not in waited and "GetKernel" not in waited, waited
            assert "FunctionAttributes" not in waited and "cuFuncGetAttribute" not in waited, waited
        else:
            assert "cuwire.LoadModule" in waited, waited
    assert outputs["1"] == outputs["0"] == ("value 42, a missing kernel: 500, its function: 0, launched: 43, "
                                            "uses registers: yes, its library the one loaded: yes\n"), outputs


def test_machine_code_for_another_gpu_is_loaded_as_asked(client_lib, server, tmp_path):
    """A cubin for another GPU than the session's (sm_80 on the emulated sm_90) is not named: the driver
    refuses such code at the load, and only a load that waits can say so there."""
    exe, cubin = named_program(tmp_path, client_lib, "sm_80")
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_STATS": "1", "CUWIRE_LOAD_LISTS": "",
           "CUWIRE_NAMED_LOADS": "1"}
    r = subprocess.run([str(exe), str(cubin)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout.startswith("value 42,"), r.stdout + r.stderr
    assert "under handles the client named" not in r.stderr and "cuwire.LoadModule" in r.stderr, r.stderr


# ---------------------------------------------------------------- large images, by digest alone

LARGE = 1 << 20  # (CW_IMAGE_WITH_LOAD_MOST: a larger image goes with no named load)
assert layouts.constant("CW_IMAGE_WITH_LOAD_MOST") == LARGE


def test_a_pinned_image_loads_by_its_digest_after_an_eviction(tmp_path):
    """The welcome lists the module cache's large images and pins them for the session (hard links no
    eviction removes): a named load by digest alone, which nobody waits for, finds its image even after
    the cache evicted it; the pins go with the session, and those of a dead process at the next start."""
    server = CuWireServer(Settings(backend="emulated", cache_dir=tmp_path))
    cache = server.modules
    big = PTX + b"// " + b"x" * LARGE + b"\n"
    small = PTX + b"// small\n"
    for image in (big, small):
        cache.store(hashlib.sha256(image).digest(), image)
    digest = hashlib.sha256(big).digest()
    assert cache.large_images(LARGE, 256) == [digest]  # (the small one goes with its load)
    s = Session(server, "test", pb.Hello(), "pins")
    s.pinned, pinned = cache.pin(cache.large_images(LARGE, 256), s.name)
    assert pinned == [digest]
    cache.path(digest).unlink()  # (another session's upload made room)
    reply, _ = call(s, "LoadModule", no_reply=True, digest=digest, name=LIBRARY)
    assert not reply.error and not reply.queued_error, reply
    reply, _ = call(s, "cuCtxSynchronize")
    assert not reply.queued_error and LIBRARY in s.names, reply
    folder = s.pinned
    s.close()
    assert not folder.exists()
    dead = cache.pins / "999999999-gone"
    dead.mkdir(parents=True)
    ours = cache.pins / f"{os.getpid()}-alive"
    ours.mkdir()
    ModuleCache(tmp_path)
    assert not dead.exists() and ours.exists()


def test_an_unpinned_large_image_is_not_found_by_digest(session):
    """A load by digest alone of an image neither cached nor pinned fails by name with the next answer (a
    client names only what the welcome listed)."""
    reply, _ = call(session, "LoadModule", no_reply=True, digest=hashlib.sha256(b"large").digest(), name=LIBRARY)
    assert not reply.error
    reply, _ = call(session, "cuCtxSynchronize")
    assert reply.queued_error == cu.CUDA_ERROR_FILE_NOT_FOUND, reply


def test_how_a_named_load_sends_its_image():
    """client/named_loads.py: a small image with its bytes; a large one by digest where the welcome listed it,
    with its bytes where the whole list lacked it (the cache lacks it), as asked where the list was full (the
    cache may have it: its bytes could go for nothing) or the image is larger than a message takes."""
    from cuwire.client import named_loads as n

    d, other = b"d" * 32, b"o" * 32
    assert n.how_sent(LARGE, d, frozenset())[0] == n.BYTES
    assert n.how_sent(LARGE + 1, d, frozenset({d}))[0] == n.DIGEST
    assert n.how_sent(LARGE + 1, d, frozenset({other}))[0] == n.BYTES
    full = frozenset(i.to_bytes(32, "little") for i in range(n.LISTED_MOST))
    how, why = n.how_sent(LARGE + 1, d, full)
    assert how is None and "the list was full" in why
    assert n.how_sent(LARGE + 1, next(iter(full)), full)[0] == n.DIGEST
    how, why = n.how_sent(n.BYTES_MOST + 1, d, frozenset())
    assert how is None and "more than a named load's message takes" in why


def test_a_large_library_the_cache_has_is_named_by_its_digest(client_lib, tmp_path):
    """A program's library of more than 1 MiB: its first run on a server whose cache lacks it (the welcome's
    whole list of large images does not name it) sends it named, with its bytes, without waiting; the next
    run's welcome lists it, and the load goes named by its digest alone; the same output, and the session's
    pins are gone once it ends."""
    from conftest import ServerProcess

    exe, cubin = named_program(tmp_path, client_lib, "sm_90",
                               KERNEL_SOURCE + "__device__ unsigned char big[3 << 20] = {1, 2, 3};\n")
    assert cubin.stat().st_size > LARGE
    server = ServerProcess(tmp_path)
    try:
        env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1",
               "CUWIRE_LOAD_LISTS": "", "CUWIRE_NAMED_LOADS": "1", "CUWIRE_TRACE": "1"}
        runs = [subprocess.run([str(exe), str(cubin)], capture_output=True, text=True, timeout=120, env=env)
                for _ in range(2)]
        for r in runs:
            assert r.returncode == 0 and r.stdout.startswith("value 42,"), r.stdout + r.stderr
        waited = [re.search(r"top calls sent to the server, by count: (.*)", r.stderr)[1] for r in runs]
        assert "named: 1 modules (1 uploaded, 0 by digest alone)" in runs[0].stderr, runs[0].stderr
        assert "named: 1 modules (0 uploaded, 1 by digest alone)" in runs[1].stderr, runs[1].stderr
        for w in waited:
            assert "cuwire.LoadModule" not in w and "GetKernel" not in w, w
        assert "asked (not named)" not in runs[0].stderr + runs[1].stderr
        assert runs[0].stdout == runs[1].stdout
        pins = server.cache / "pins"
        for _ in range(100):  # (the session ends as its client goes)
            if not any(pins.iterdir()):
                break
            time.sleep(0.05)
        assert not any(pins.iterdir()), list(pins.iterdir())
    finally:
        server.stop()
