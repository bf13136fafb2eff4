"""The modules a program loaded in its last run, loaded ahead at its next run's first load in one round trip
(cuwire/client/load_lists.py, cuwire.Preload in server/custom.py): counted with CUWIRE_STATS on the emulated
device, and the lists' reading of what it cannot trust."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import compile_against_client, run_remote

from cuwire.client import load_lists

EXPECTED = ("fill<7> wrote 7, fill<299> wrote 299; fill<42>'s attributes read: yes\n"
            "occupancy: 16 blocks of 128 threads, 32 of 64 threads with 16 bytes each; 49152 bytes each for 2 of 128\n")
OCCUPANCY = ("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuOccupancyAvailableDynamicSMemPerBlock")


def sent(stderr: str) -> dict[str, int]:
    listed = re.search(r"top calls sent to the server, by count: (.*)", stderr)[1]
    return {name: int(n) for name, n in re.findall(r"([\w.]+) (\d+)", listed)}


def runs_with_a_list(source: str, name: str, client_lib: Path, tmp_path: Path,
                     more: list[dict[str, str]]) -> list[subprocess.CompletedProcess]:
    """A C program built against the client, run once per entry of `more` (what it adds to the environment),
    each run with one list folder (the first run, then its next ones), over TCP with --stats, against a
    server of its own (its sessions' module caches and Preloads this test's alone)."""
    from conftest import ServerProcess

    program = compile_against_client(source, tmp_path, client_lib, name)
    s = ServerProcess(tmp_path)
    try:
        env = {**os.environ, "CUWIRE_SERVER": s.address, "CUWIRE_LOAD_LISTS": str(tmp_path / "loads"),
               "CUWIRE_STATS": "1", "CUWIRE_TRANSPORT": "tcp"}
        return [subprocess.run([str(program)], capture_output=True, text=True, env={**env, **m}, timeout=60)
                for m in more]
    finally:
        s.stop()


@pytest.mark.parametrize("named", ["0", "1"])
def test_a_second_run_loads_its_modules_and_lookups_in_one_round_trip(apps: Path, client_lib, tmp_path, named):
    """tests/test_apps/many_kernels.cu: one module of 300 kernels (more than a load describes), three looked
    up by name and the function of one asked (cudaFuncGetAttributes), and three occupancy questions of
    two of them. The first run loads it, makes each lookup and asks each question (a round trip each; with
    CUWIRE_NAMED_LOADS, the default, the load and the four lookups wait for nothing); the second
    sends its list at the first load and waits for nothing more for the module, its four lookups or its
    questions, with the same output. A third run's list has them all still. (A server of its own: the
    suite's may keep a list of this program from another test, which a first run would get.)"""
    from conftest import ServerProcess

    server = ServerProcess(tmp_path)
    try:
        many_kernels_runs(apps, client_lib, server, tmp_path, named)
    finally:
        server.stop()


def many_kernels_runs(apps: Path, client_lib, server, tmp_path: Path, named: str) -> None:
    env = {"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_LOAD_LISTS": str(tmp_path / "loads"),
           "CUWIRE_NAMED_LOADS": named}
    first = run_remote(apps / "many_kernels", client_lib, server.address, env=env)
    second = run_remote(apps / "many_kernels", client_lib, server.address, env=env)
    for r in (first, second):
        assert r.returncode == 0 and r.stdout == EXPECTED, r.stdout + r.stderr
    before, after = sent(first.stderr), sent(second.stderr)
    assert "cuwire.Preload" not in before, before
    if named == "1":  # the load, three lookups by name and a kernel's function: sent, not waited for
        assert ("under handles the client named: 1 modules (1 uploaded, 0 by digest alone), 4 kernels looked up"
                in first.stderr), first.stderr
        assert "cuwire.LoadModule" not in before and "cuwire.GetKernel" not in before, before
    else:
        assert before["cuwire.LoadModule"] >= 1 and before["cuwire.GetKernel"] == 4, before
    assert after.get("cuwire.Preload") == 1 and "cuwire.LoadModule" not in after, after
    assert "cuwire.GetKernel" not in after, after
    if named == "1":  # ...and the questions of named kernels are the client's (cuwire/occupancy.py)
        assert "3 occupancy questions answered here" in first.stderr, first.stderr
        assert not any(n in before for n in OCCUPANCY), before
    else:
        assert [before.get(n) for n in OCCUPANCY] == [2, 1], before
    assert not any(n in after for n in OCCUPANCY), after
    assert "(1 of them loaded ahead at the first load, from the last run's list)" in second.stderr
    trips = [int(re.search(r"round trips: (\d+)", r.stderr)[1]) for r in (first, second)]
    # one load, four lookups and three questions for one preload; named, the first run waited for none of
    # them, and the preload is a round trip more (a program of one library's kernels: PyTorch's next run
    # saves dozens, docs/speed.md)
    assert trips[1] <= (trips[0] + 1 if named == "1" else trips[0] - 7), trips
    third = run_remote(apps / "many_kernels", client_lib, server.address, env=env)
    assert third.stdout == EXPECTED and not any(n in sent(third.stderr) for n in OCCUPANCY), third.stderr


def test_a_fresh_client_machine_gets_the_list_the_server_kept(apps: Path, client_lib, tmp_path):
    """A program's first run on a machine with no list of its own (a CI runner, a pod: another list folder)
    gets the one the server kept from its last run elsewhere (server/program_lists.py), and loads its module,
    lookups and questions ahead in one round trip, with the same output. The server keeps it per token and
    command line: another token's client, or the program run with another argument, gets none."""
    from conftest import ServerProcess

    s = ServerProcess(tmp_path, "--token", "alpha")
    try:
        def run(folder: str, token: str = "alpha", *args: str) -> subprocess.CompletedProcess:
            r = run_remote(apps / "many_kernels", client_lib, s.address, *args, env={
                "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_TOKEN": token,
                "CUWIRE_LOAD_LISTS": str(tmp_path / folder)})
            assert r.returncode == 0 and r.stdout == EXPECTED, r.stdout + r.stderr
            return r

        first = run("first-machine")
        assert "cuwire.Preload" not in sent(first.stderr) and "cuwire.KeepList" in sent(first.stderr)
        (kept,) = (s.cache / "lists").iterdir()
        fresh = run("fresh-machine")
        calls = sent(fresh.stderr)
        assert calls.get("cuwire.Preload") == 1 and "cuwire.LoadModule" not in calls, calls
        assert "cuwire.GetKernel" not in calls and not any(n in calls for n in OCCUPANCY), calls
        assert "cuwire.KeepList" not in calls, calls  # (its list is the one the server has: not sent again)
        assert "loaded ahead at the first load, from the last run's list, which the server kept" in fresh.stderr
        trips = [int(re.search(r"round trips: (\d+)", r.stderr)[1]) for r in (first, fresh)]
        # at most one round trip more, the preload's: the first run's load, its four lookups and its three
        # questions waited for nothing either (CUWIRE_NAMED_LOADS, cuwire/occupancy.py)
        assert trips[1] <= trips[0] + 1, trips
        assert list((s.cache / "lists").iterdir()) == [kept]
    finally:
        s.stop()
    # another token (a server of its own: the token is the server's), and another command line
    s = ServerProcess(tmp_path, "--token", "beta")
    try:
        for r in (run("beta-machine", "beta"), run("other-args", "beta", "an-argument")):
            assert "cuwire.Preload" not in sent(r.stderr), r.stderr
    finally:
        s.stop()


def test_a_list_the_server_keeps_is_bounded_and_only_a_hint(tmp_path):
    """The server's store (server/program_lists.py): a list past its bound is not kept, the folder holds at
    most its limit, the least recently used first out; and a kept list the client cannot decompress (or
    parse) is an empty last run, never an error."""
    from cuwire.server.program_lists import MOST, ProgramLists, key

    lists = ProgramLists(tmp_path / "lists", limit=3000)
    assert lists.get("none") == b""
    assert "at most" in lists.keep("big", b"x" * (MOST + 1)) and lists.get("big") == b""
    for i in range(4):
        assert lists.keep(f"k{i}", bytes([i]) * 1000) == ""
        os.utime(lists.path(f"k{i}"), (i, i))  # (their last use, in order)
    assert lists.keep("k4", b"4" * 1000) == ""
    assert sorted(p.name for p in (tmp_path / "lists").iterdir()) == ["k2.list", "k3.list", "k4.list"]
    assert lists.get("k3") == b"\3" * 1000
    assert key("alpha", b"p", "sm_90") not in (key("beta", b"p", "sm_90"), key("alpha", b"q", "sm_90"),
                                               key("alpha", b"p", "sm_80"))
    run = load_lists.Run(str(tmp_path / "loads"), b"prog", "sm_90", given=b"L nothex 0\n\xff junk")
    assert run.last == load_lists.LastRun() and run.from_server


def test_the_machines_own_list_goes_before_the_servers(tmp_path):
    a, b = b"\1" * 32, b"\2" * 32
    folder = str(tmp_path / "loads")
    load_lists.Recorder(load_lists.list_path(folder, b"prog", "sm_90")).loaded(a, False)
    given = f"L {b.hex()} 0\n".encode()
    assert [m.digest for m in load_lists.Run(folder, b"prog", "sm_90", given).last.modules] == [a]
    fresh = load_lists.Run(str(tmp_path / "fresh"), b"prog", "sm_90", given)
    assert [m.digest for m in fresh.last.modules] == [b] and fresh.from_server


def test_a_list_naming_what_the_server_lacks_costs_only_its_round_trip(apps: Path, client_lib, server, tmp_path):
    """A list of a module the server never had, and lines that are not a list's: the program's loads go as
    without one (the Preload finds nothing), with the same output, and the run writes its own list."""
    folder = tmp_path / "loads"
    r = run_remote(apps / "many_kernels", client_lib, server.address,
                   env={"CUWIRE_LOAD_LISTS": str(folder), "CUWIRE_STATS": "1"})
    (path,) = folder.iterdir()
    path.write_bytes(b"L " + b"ab" * 32 + b" 0\nK " + b"ab" * 32 + b" 0 _Z4fillILi7EEvPi\nL zz 0\n\xff\xfe junk\n")
    r = run_remote(apps / "many_kernels", client_lib, server.address,
                   env={"CUWIRE_LOAD_LISTS": str(folder), "CUWIRE_STATS": "1"})
    assert r.returncode == 0 and r.stdout == EXPECTED, r.stdout + r.stderr
    calls = sent(r.stderr)
    assert calls.get("cuwire.Preload") == 1, calls  # (it finds nothing: the module loads, under a name)
    assert "under handles the client named: 1 modules" in r.stderr, r.stderr
    assert "loaded ahead" not in r.stderr
    assert [m.digest.hex()[:4] for m in load_lists.read(str(path)).modules] != ["abab"]  # this run's own list


def test_no_list_when_the_setting_is_empty(apps: Path, client_lib, server):
    r = run_remote(apps / "many_kernels", client_lib, server.address,
                   env={"CUWIRE_LOAD_LISTS": "", "CUWIRE_STATS": "1"})
    assert r.returncode == 0 and r.stdout == EXPECTED, r.stdout + r.stderr
    assert "cuwire.Preload" not in sent(r.stderr)


def test_a_list_reads_back_what_was_recorded_and_skips_the_rest(tmp_path):
    path = str(tmp_path / "sub" / "list")
    a, b = b"\1" * 32, b"\2" * 32
    rec = load_lists.Recorder(path)
    rec.loaded(a, False)
    rec.looked_up(a, False, "kernelA")
    rec.looked_up(a, False, "kernelA")  # once
    rec.loaded(b, True)
    rec.looked_up(b, True, "functionB")
    rec.looked_up(b, False, "kernel of b's library")
    rec.looked_up(b"\3" * 32, False, "of a module never loaded")
    rec.looked_up(a, False, "a\nsplit name")  # not kept: a line each
    rec.kernel_function(a, "kernelA")
    rec.kernel_function(b"\3" * 32, "of a module never loaded")
    q = load_lists.Question(load_lists.LIBRARY_KERNEL, "kernelA", 2, 64, 16, 1)
    rec.asked(a, q)
    rec.asked(a, q)  # once
    q_set = load_lists.Question(load_lists.LIBRARY_KERNEL, "kernelA", 1, 64, 16, 0, ((8, 100000), (14, 1)))
    rec.asked(a, q_set)  # the same question under sets: a second line
    rec.asked(b, load_lists.Question(load_lists.MODULE_FUNCTION, "functionB", 3, 2, 128, 0))
    rec.asked(b"\3" * 32, q)  # of a module never loaded
    with open(path, "ab") as f:  # an unknown question, an unknown way of finding, a negative argument, no name,
        # no sets, an attribute no one sets, a value not a number
        f.write(b"".join(b"Q " + a.hex().encode() + tail for tail in (
            b" 0 9 1 2 3 - k\n", b" 7 1 1 2 3 - k\n", b" 0 1 -1 2 3 - k\n", b" 0 1 1 2 3 - \n", b" 0 1 1 2\n",
            b" 0 1 1 2 3 k\n", b" 0 1 1 2 3 7=1 k\n", b" 0 1 1 2 3 8=x k\n")))
    with open(path, "ab") as f:
        f.write(b"L " + b"\4" * 4 + b" 0\nL nothex 0\nX " + a.hex().encode() + b" 0\nL " + a.hex().encode() + b" 2\n")
    rec.made_handles(0, 1, -1, 4)
    rec.made_handles(0, 1, -1, 12)  # the last of a kind counts
    with open(path, "ab") as f:
        f.write(b"H 0 1\nH 7 0 0 4\nH 1 0 0 x\n")
    last = load_lists.read(path)
    assert last.handles == {(0, 1, -1): 12}
    modules = last.modules
    assert [(m.digest, m.as_module, m.kernels, m.functions, m.kernel_functions) for m in modules] == [
        (a, False, ["kernelA"], [], ["kernelA"]), (b, True, ["kernel of b's library"], ["functionB"], [])]
    assert [m.questions for m in modules] == [
        [q, q_set], [load_lists.Question(load_lists.MODULE_FUNCTION, "functionB", 3, 2, 128, 0)]]
    assert load_lists.read(str(tmp_path / "none")) == load_lists.LastRun()
    assert load_lists.list_path("/x", b"prog\0arg", "sm_90") != load_lists.list_path("/x", b"prog\0arg", "sm_80")


def test_a_list_keeps_at_most_its_bounds(tmp_path):
    path = str(tmp_path / "list")
    rec = load_lists.Recorder(path)
    for i in range(load_lists.MAX_MODULES + 5):
        rec.loaded(i.to_bytes(32, "big"), False)
    for i in range(load_lists.MAX_NAMES - 5):
        rec.looked_up((0).to_bytes(32, "big"), False, f"k{i}")
    for i in range(10):  # the three kinds of names count together (the server takes as many)
        rec.kernel_function((0).to_bytes(32, "big"), f"f{i}")
    modules = load_lists.read(path).modules
    assert len(modules) == load_lists.MAX_MODULES and modules[0].names() == load_lists.MAX_NAMES
    assert len(modules[0].kernel_functions) == 5



QUEUED_ERROR_THEN_LOAD = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z4axpyIfEvT_PKS0_PS0_i(\n.param .f32 a, .param .u64 x, .param .u64 y, .param .u32 n)\n"
    "{\n    ret; // queued_then_load\n}\n";
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule m; CUfunction f;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    printf("copy %d\n", cuMemcpyDtoDAsync_v2(0x10000, 0x20000, 64, 0));  /* queued: no memory there */
    printf("first load %d\n", cuModuleLoadData(&m, PTX));  /* ...and its error comes with the next answer */
    int loaded = cuModuleLoadData(&m, PTX);
    int found = loaded ? -1 : cuModuleGetFunction(&f, m, "_Z4axpyIfEvT_PKS0_PS0_i");
    printf("load again %d, function %d\n", loaded, found);
    return 0;
}
"""


def test_an_earlier_queued_error_comes_with_the_first_load(client_lib, tmp_path):
    """A queued call fails on the server; the program's first module load reports it, as CUDA's next call
    would: when the server lacks the module (the first run: the answer that asks for the image brings the
    error), and when a list from the earlier run goes first (the Preload's answer brings it)."""
    import os
    import subprocess

    from conftest import ServerProcess

    program = compile_against_client(QUEUED_ERROR_THEN_LOAD, tmp_path, client_lib, "queued_then_load")
    s = ServerProcess(tmp_path)  # (its cache empty: the first run uploads the module)
    try:
        env = {**os.environ, "CUWIRE_SERVER": s.address, "CUWIRE_LOAD_LISTS": str(tmp_path / "loads"),
               "CUWIRE_STATS": "1"}
        runs = [subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60) for _ in range(2)]
    finally:
        s.stop()
    for r in runs:
        assert r.returncode == 0 and r.stdout == "copy 0\nfirst load 1\nload again 0, function 0\n", r.stdout + r.stderr
    assert "modules uploaded: 1" in runs[0].stderr and "cuwire.Preload" in sent(runs[1].stderr), runs[1].stderr


def test_streams_and_events_made_ahead_are_given_once_in_their_context():
    """The Preload makes as many streams and events of each kind as the last run made (at most one batch's
    worth); the client gives them out once, at the program's first batch of that kind in the context the
    Preload ran in, and in any other context asks the server as before."""
    from cuwire.generated import cuwire_pb2 as pb

    run = load_lists.Run("", b"prog", "sm_90")
    run.last.handles = {(0, 1, -1): 100, (1, 2, 0): 3}
    args = run.preload_args()
    assert [(h.kind, h.flags, h.priority, h.count) for h in args.handles] == [
        (0, 1, -1, load_lists.MAKE_AT_ONCE), (1, 2, 0, 3)]
    run.preload_context = 7
    run.preload_answered(args, pb.Preload_Result(made=[pb.MakeHandles_Result(handles=[11, 12]),
                                                       pb.MakeHandles_Result(status=2)]))
    assert run.take_made(0, 1, -1, context=8) == []
    assert run.take_made(0, 1, -1, context=7) == [11, 12]
    assert run.take_made(0, 1, -1, context=7) == [] and run.take_made(1, 2, 0, context=7) == []


ANSWERS_AHEAD = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"
static const char A[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret; // ahead a\n}\n";
static const char B[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z10writeValuePii(.param .u64 p, .param .u32 v)\n{\n    ret; // ahead b\n}\n";
int main(void) {  /* (the same command line each run: a list is the command line's) */
    CUdevice dev; CUcontext ctx; CUmodule a, b; CUfunction f;
    int blocks = -1;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuModuleLoadData(&a, A)) return 2;
    if (getenv("SET_CACHE_CONFIG") && cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED)) return 3;
    if (cuModuleLoadData(&b, B) || cuModuleGetFunction(&f, b, "_Z10writeValuePii")) return 4;
    if (cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0)) return 5;
    printf("blocks of 256 threads: %d\n", blocks);
    return 0;
}
"""


def test_answers_given_ahead_are_dropped_once_the_cache_configuration_moves(client_lib, tmp_path):
    """The Preload answers a module's occupancy questions when the program's first module is loaded; the
    client keeps them when the program loads that module. A context cache configuration set in between may
    change them: then they are dropped, and the program's question goes to the server, with the same
    answer as in a run without the set."""
    runs = runs_with_a_list(ANSWERS_AHEAD, "answers_ahead", client_lib, tmp_path, [{}, {}, {"SET_CACHE_CONFIG": "1"}])
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
    (first, asked_first), (again, asked_again), (moved, asked_moved) = ((r.stdout, sent(r.stderr)) for r in runs)
    question = "cuOccupancyMaxActiveBlocksPerMultiprocessor"
    assert first == again == moved and first.startswith("blocks of 256 threads: "), (first, again, moved)
    assert asked_first.get(question) == 1 and asked_again.get("cuwire.Preload") == 1, (asked_first, asked_again)
    assert question not in asked_again, asked_again
    assert asked_moved.get(question) == 1 and asked_moved.get("cuwire.Preload") == 1, asked_moved


ATTRIBUTES_READ = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n" ENTRIES;
int main(void) {
    CUdevice dev; CUcontext ctx; CUlibrary lib; CUkernel k;
    int regs = -1, threads = -1;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuLibraryLoadData(&lib, PTX, NULL, NULL, 0, NULL, NULL, 0) || cuLibraryGetKernel(&k, lib, "_Z6addOnePj") ||
        cuKernelGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k, dev) ||
        cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, dev))
        return 2;
    printf("registers known: %s, threads %d\n", regs >= 0 ? "yes" : "no", threads);
    return 0;
}
"""


def test_attributes_read_of_a_kernel_its_load_did_not_describe_come_ahead(client_lib, tmp_path):
    """A library of 17 kernels is described by its load without their attributes: the program's first read
    of one kernel's asks them all (cuwire.FunctionAttributes). Its next runs' Preload brings them with the
    library (the list keeps them as a question), and no read waits; the third run's list still has them."""
    from conftest import SEVENTEEN_ENTRIES

    runs = runs_with_a_list(ATTRIBUTES_READ.replace("ENTRIES", SEVENTEEN_ENTRIES), "attributes_read", client_lib,
                            tmp_path, [{}] * 3)
    for r in runs:
        assert r.returncode == 0 and r.stdout == "registers known: yes, threads 1024\n", r.stdout + r.stderr
    asked = [sent(r.stderr) for r in runs]
    assert asked[0].get("cuwire.FunctionAttributes") == 1, asked[0]
    for later in asked[1:]:
        assert later.get("cuwire.Preload") == 1 and "cuwire.FunctionAttributes" not in later, later


SETS_AHEAD = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char M[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret; // sets m\n}\n";
static const char L[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z8addToOddPii(.param .u64 p, .param .u32 v)\n{\n    ret; // sets l\n}\n";
int main(void) {  /* as cuBLAS and cuDNN detect the hardware: set a kernel's shared memory, then ask */
    CUdevice dev; CUcontext ctx; CUmodule m; CUfunction f; CUlibrary lib; CUkernel k;
    int optin = 0, before = -1, after = -1, flags = -1;
    size_t room_before = 0, room_after = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)) return 1;
    if (cuModuleLoadData(&m, M) || cuModuleGetFunction(&f, m, "_Z6addOnePj")) return 2;
    if (cuOccupancyAvailableDynamicSMemPerBlock(&room_before, f, 1, 1) ||
        cuOccupancyMaxActiveBlocksPerMultiprocessor(&before, f, 1, optin)) return 3;
    if (cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin)) return 4;
    if (cuOccupancyAvailableDynamicSMemPerBlock(&room_after, f, 1, 1) ||
        cuOccupancyMaxActiveBlocksPerMultiprocessor(&after, f, 1, optin)) return 5;
    if (cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)) return 6;
    int clusters[4] = {0};
    for (int w = 1; w <= 4; w++) {  /* each cluster width in turn, the grid a multiple of it */
        CUlaunchAttribute cluster = {CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
        cluster.value.clusterDim.x = w, cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
        CUlaunchConfig config = {2 * w, 1, 1, 128, 1, 1, 0, NULL, &cluster, 1};
        if (cuOccupancyMaxActiveClusters(&clusters[w - 1], f, &config)) return 9;
    }
    if (cuLibraryLoadData(&lib, L, NULL, NULL, 0, NULL, NULL, 0) || cuLibraryGetKernel(&k, lib, "_Z8addToOddPii") ||
        cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin, k, dev) ||
        cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&flags, (CUfunction)k, 1, optin, 0) ||
        cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, k, dev)) return 7;
    if (cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1) != CUDA_ERROR_INVALID_VALUE)
        return 8;  /* (a set the driver refuses is refused at once, every run) */
    printf("all the shared memory: %d blocks before the set, %d after; room %zu before, %zu after; "
           "the library's kernel: %d; clusters %d %d %d %d\n", before, after, room_before, room_after, flags,
           clusters[0], clusters[1], clusters[2], clusters[3]);
    return 0;
}
"""
SET_QUESTIONS = ("cuOccupancyAvailableDynamicSMemPerBlock", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                 "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuwire.MaxActiveClusters")


def test_questions_asked_after_sets_are_answered_ahead_under_those_sets(client_lib, tmp_path):
    """A kernel's occupancy depends on the attributes set of it: the same question has one answer before a
    set of its shared memory and another after. The list keeps each question with the sets made by then,
    and each set the server took; the next run's Preload answers them with those sets made (then undone),
    so the program's questions, before and after its sets, and its sets of an attribute the client cannot
    check, are answered by the client, with the same output; so are its cluster questions, one width after
    another (one sweep of widths in the first run). A set the driver refuses still goes to the server, and
    is refused."""
    runs = runs_with_a_list(SETS_AHEAD, "sets_ahead", client_lib, tmp_path, [{}] * 3)
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
    outputs = {r.stdout for r in runs}
    assert len(outputs) == 1, outputs
    before, after = (int(n) for n in re.search(r"(\d+) blocks before the set, (\d+) after", runs[0].stdout).groups())
    assert before == 0 and after >= 1, runs[0].stdout  # (the answers differ under the sets)
    asked = [sent(r.stderr) for r in runs]
    assert [asked[0].get(n) for n in SET_QUESTIONS] == [2, 2, 1, 1], asked[0]
    # (each set of the cluster attribute, and the refused set of too much shared memory)
    assert asked[0].get("cuFuncSetAttribute") == 2 and asked[0].get("cuKernelSetAttribute") == 1, asked[0]
    for later in asked[1:]:
        assert later.get("cuwire.Preload") == 1 and not any(n in later for n in SET_QUESTIONS), later
        assert later.get("cuFuncSetAttribute") == 1 and "cuKernelSetAttribute" not in later, later  # (the refused)
