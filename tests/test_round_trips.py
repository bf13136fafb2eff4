"""Round trips a program pays for (issue 35): counted with CUWIRE_STATS over TCP on the emulated device,
never timed. A wait whose work the client knows finished, with nothing sent since, costs none
(client/completion.c)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import QUEUED_ONLY, ROOT, SEVENTEEN_ENTRIES, compile_against_client, run_remote


def sent_to_server(stderr: str) -> dict[str, int]:
    """What the client sent to the server and waited for, by count (CUWIRE_STATS' top list of them)."""
    listed = re.search(r"top calls sent to the server, by count: (.*)", stderr)[1]
    return {name: int(n) for name, n in re.findall(r"([\w.]+) (\d+)", listed)}


def stats(apps: Path, client_lib: Path, server, steps: int) -> dict[str, int]:
    r = run_remote(apps / "step_loop", client_lib, server.address, str(steps),
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{steps} steps on a stream and {steps} on the null stream, 0 bytes read back wrong; waits after the " \
           "copy that were not done: 0" in r.stdout
    return {
        "round trips": int(re.search(r"round trips: (\d+)", r.stderr).group(1)),
        "answered": int(re.search(r"waits answered by the client.*: (\d+)", r.stderr).group(1)),
        **sent_to_server(r.stderr),
    }


@pytest.mark.parametrize("steps", [40])
def test_a_step_loop_costs_one_round_trip_a_step(steps, apps, client_lib, server):
    """Per step: queued memsets, a copy and an event record, then one byte read into pageable memory (the
    one round trip), then a stream synchronization, queries and a device synchronization that the read
    already answered."""
    few, many = stats(apps, client_lib, server, steps), stats(apps, client_lib, server, 3 * steps)
    steps_more = 2 * (3 * steps - steps)  # on a stream and on the null stream
    per_step = (many["round trips"] - few["round trips"]) / steps_more
    assert per_step <= 1.1, (few, many)
    # the stream phase's 4 waits and the null stream phase's 4, each step
    assert many["answered"] - few["answered"] == 4 * steps_more, (few, many)
    # and the synchronization that follows new work went to the server, as it must
    assert many.get("cuStreamSynchronize") == 1, many


def test_queued_calls_go_early_as_often_as_the_setting_says(apps, client_lib, server):
    """CUWIRE_SEND_EVERY_US (client/queue.c): by default a queued call that comes after the queue went goes
    out at once, so the step loop's first queued call each step goes early; with a long interval the queued
    calls wait for the step's read (no step queues the 16 that go at once), with the same output and round
    trips."""
    def early(every: str | None) -> tuple[int, int]:
        env = {"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_SEND_THREAD": "0",  # (the program's sends)
               **({"CUWIRE_SEND_EVERY_US": every} if every else {})}
        r = run_remote(apps / "step_loop", client_lib, server.address, "40", env=env)
        assert r.returncode == 0 and "0 bytes read back wrong" in r.stdout, r.stdout + r.stderr
        m = re.search(r"round trips: (\d+) .*\((\d+) batches of them sent early", r.stderr)
        return int(m[1]), int(m[2])

    early(None)  # (the first run leaves the program's list: the next two start alike)
    (trips, sends), (trips_long, sends_long) = early(None), early("10000000")
    assert sends >= 40 and sends_long == 0 and trips_long == trips, (trips, sends, trips_long, sends_long)


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_thread_of_the_clients_sends_the_queued_calls(transport, apps, client_lib, server, tmp_path):
    """CUWIRE_SEND_THREAD (client/sender.c): queued calls go early from the client's own thread, in order
    with the calls that wait. The step loop (a wait right after its queued calls, which may take them
    before the thread does) gives the same output, round trips and waits answered by the client; a program
    that only queues has its calls sent early, by the thread, the last one's value read back."""
    env = {"CUWIRE_TRANSPORT": transport, "CUWIRE_STATS": "1"}

    def step_loop(thread: str) -> dict[str, int]:
        r = run_remote(apps / "step_loop", client_lib, server.address, "40", env={**env, "CUWIRE_SEND_THREAD": thread})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "0 bytes read back wrong; waits after the copy that were not done: 0" in r.stdout, r.stdout
        return {"round trips": int(re.search(r"round trips: (\d+)", r.stderr)[1]),
                "answered": int(re.search(r"waits answered by the client.*: (\d+)", r.stderr)[1])}

    step_loop("0")  # (the first run leaves the program's list: the next two start alike)
    assert step_loop("0") == step_loop("1")
    program = compile_against_client(QUEUED_ONLY, tmp_path, client_lib, "queued_only")
    r = subprocess.run([str(program)], capture_output=True, text=True, timeout=60, env={
        **os.environ, **env, "CUWIRE_SERVER": server.address, "CUWIRE_SEND_THREAD": "1"})
    assert r.returncode == 0 and r.stdout == "last value 200 (of 200)\n", r.stdout + r.stderr
    early = re.search(r"\((\d+) batches of them sent early, without waiting; (\d+) of those by the client's "
                      r"sending thread\)", r.stderr)
    assert early and 0 < int(early[2]) <= int(early[1]), r.stderr


def input_copies(apps: Path, client_lib: Path, server, steps: int, *args: str) -> dict[str, int]:
    r = run_remote(apps / "input_copies", client_lib, server.address, str(steps), *args,
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"input_copies: {steps} steps{' (memory shared)' if args else ''}, 0 bytes read back wrong" in r.stdout
    return {"round trips": int(re.search(r"round trips: (\d+)", r.stderr).group(1)), **sent_to_server(r.stderr)}


def test_a_synchronization_after_copies_to_the_device_is_queued(apps, client_lib, server):
    """PyTorch's `batch.to("cuda")` from pageable memory is a copy, then a stream synchronization. The
    client has the copy's bytes, and a copy into the session's memory on a finished stream cannot fail: the
    synchronization is queued as a barrier (client/completion.c), so each step costs only its read back
    (one round trip), where it cost two. Another stream reading the copied bytes right after still reads
    the step's (the app checks each), and the buffer scribbled over after the synchronization does not
    reach the device. Once the memory is exported by IPC, another process could read it without waiting
    for the barrier: the synchronizations wait again, one round trip each."""
    few, many = input_copies(apps, client_lib, server, 10), input_copies(apps, client_lib, server, 40)
    assert (many["round trips"] - few["round trips"]) / 30 <= 1.1, (few, many)
    # only the first step's went to the server (nothing was known finished before it); the null stream's
    # after a synchronous copy was queued too
    assert many.get("cuStreamSynchronize") == 1, many
    shared = input_copies(apps, client_lib, server, 40, "--share")
    assert shared["cuStreamSynchronize"] == 40 + 1, shared
    assert shared["round trips"] - many["round trips"] >= 40, (many, shared)


def test_a_start_up_makes_streams_and_events_in_batches(apps, client_lib, server, tmp_path):
    """A framework's start-up (tests/test_apps/start_up.cu --creates): 64 streams of two priorities, 40 events
    of two kinds, the attributes of two kernels, a limit asked ten times. Streams and events come in batches
    of 4, 8, 16, ... per kind (client/handle_pools.c), the kernels' attributes come with their library's load
    (a load of few kernels brings every attribute of each: server/custom.py) and the limit is kept once
    answered (client/answers_cache.c): 14, 0 and 1 round trips where the calls one by one took 104, 32 and
    10 (and asking each kernel's attributes at once, 2); their destroys are queued, none waits (client/
    handle_pools.c gave them out: they cannot fail). Run again, the program's first batch of each kind
    comes as many as its last run made (its list, client/load_lists.py), made by the Preload that its
    first module load or batch sends: no MakeHandles."""
    env = {"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_LOAD_LISTS": str(tmp_path)}
    r = run_remote(apps / "start_up", client_lib, server.address, "--creates", env=env)
    assert r.returncode == 0 and "64 streams, 40 events, the attributes of 2 kernels; all destroyed" in r.stdout, \
        r.stderr
    sent = sent_to_server(r.stderr)
    # per kind 4 + 8 + 16 + 32 (of which 4 used): low and high priority streams, timing-less events; 4 + 8 events
    assert sent.get("cuwire.MakeHandles") == 14, sent
    assert "cuwire.FunctionAttributes" not in sent, sent
    for one_by_one in ("cuStreamCreateWithPriority", "cuEventCreate", "cuFuncGetAttribute", "cuKernelGetAttribute",
                       "cuStreamDestroy_v2", "cuEventDestroy_v2"):  # (destroys of handles given out: queued)
        assert one_by_one not in sent, sent
    assert sent.get("cuCtxGetLimit") == 1, sent  # asked 10 times: kept once answered (client/answers_cache.c)
    assert int(re.search(r"round trips: (\d+)", r.stderr)[1]) <= 25, r.stderr
    again = run_remote(apps / "start_up", client_lib, server.address, "--creates", env=env)
    assert again.returncode == 0 and again.stdout == r.stdout, again.stderr
    listed = re.search(r"top calls sent to the server, by count: (.*)", again.stderr)[1]
    assert "cuwire.MakeHandles" not in listed and "cuwire.Preload 1" in listed, listed


def test_cluster_widths_asked_in_turn_cost_one_round_trip(apps, client_lib, server):
    """tests/test_apps/clusters.cu asks a kernel's active clusters for widths 1 to 4 and again backwards, as
    cuBLASLt and cuDNN do: the first asks the server for every width at once (client/driver.py), the rest
    are answered by the client. Four requests in all: the app's first question (16 blocks in clusters of 2:
    a sweep of its own, 8 clusters a grid), the sweep of grids one cluster wide, the same question after an
    attribute set (which forgets the answers kept), and the largest cluster size. (No list of a last run:
    an earlier test's run of the app would have them answered ahead, test_load_lists.)"""
    r = run_remote(apps / "clusters", client_lib, server.address,
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_LOAD_LISTS": ""})
    assert r.returncode == 0 and "asked twice: some of each: yes, the same both times: yes" in r.stdout, r.stderr
    listed = re.search(r"top calls sent to the server, by count: (.*)", r.stderr)[1]
    assert re.search(r"cuwire.MaxActiveClusters (\d+)", listed)[1] == "4", listed


@pytest.mark.parametrize("named", ["1", "0"])
def test_kernel_attributes_asked_again_cost_nothing(apps, client_lib, server, named):
    """tests/test_apps/many_kernels.cu --attributes: the attributes of 300 kernels, read once, then three
    times. The runtime looks each kernel up by name, then its function (cuwire.GetKernel), and each lookup's
    answer brings every attribute of what it found (server/custom.py get_kernel; a kernel the client named:
    the image's, kernel_facts.py); the client keeps them (client/answers_cache.c, a table that grows: CuPy's
    linear algebra asks those of hundreds of kernels, and a table of fixed size, once full, cost two round
    trips a question): no read asks anything more."""
    def sent(passes: int) -> dict[str, int]:
        r = run_remote(apps / "many_kernels", client_lib, server.address, "--attributes", str(passes),
                       env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1", "CUWIRE_NAMED_LOADS": named,
                            "CUWIRE_LOAD_LISTS": ""})
        assert r.returncode == 0, r.stderr
        assert f"the attributes of 300 kernels read {passes} times: the same each time: yes" in r.stdout, r.stdout
        return sent_to_server(r.stderr)

    once, thrice = sent(1), sent(3)
    # named (CUWIRE_NAMED_LOADS), the lookups wait for nothing, their attributes read from the image
    lookups = 0 if named == "1" else 2 * 300
    assert once.get("cuwire.GetKernel", 0) == thrice.get("cuwire.GetKernel", 0) == lookups, (once, thrice)
    for asked in ("cuwire.FunctionAttributes", "cuFuncGetAttribute", "cuKernelGetAttribute"):
        assert asked not in once and asked not in thrice, (once, thrice)


DESTROYS = r"""
#include <stdio.h>
#include "cuda_api.h"
int main(void) {
    CUdevice dev; CUcontext ctx; CUevent e; CUstream s;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    int made = cuEventCreate(&e, 0) | cuStreamCreate(&s, 1);
    int first = cuEventDestroy_v2(e), again = cuEventDestroy_v2(e);
    int stream = cuStreamDestroy_v2(s), stream_again = cuStreamDestroy_v2(s);
    printf("made %d; event destroyed %d, again %d; stream destroyed %d, again %d; synchronized %d\n", made, first,
           again, stream, stream_again, cuCtxSynchronize());
    return 0;
}
"""


def test_a_destroy_is_queued_only_while_the_client_knows_its_handle_alive(client_lib, server, tmp_path):
    """A stream or event the client gave out (client/handle_pools.c) is destroyed without a round trip; a
    second destroy of it is not known alive, waits, and gets the server's CUDA_ERROR_INVALID_HANDLE (the
    first one, queued before it, took the handle out of the session's: server/records.c)."""
    exe = compile_against_client(DESTROYS, tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "made 0; event destroyed 0, again 400; stream destroyed 0, again 400; synchronized 0\n", \
        r.stderr
    sent = sent_to_server(r.stderr)
    assert sent.get("cuEventDestroy_v2") == 1 and sent.get("cuStreamDestroy_v2") == 1, sent


def test_kernel_node_sets_in_an_executable_graph_are_queued(apps, client_lib, server):
    """tests/test_apps/graph_updates.cu: 8 kernel nodes, their parameters set in the executable graph before
    each of 20 runs (as XLA updates its command buffers), then with another block, then after an update of
    the executable graph from its graph, then after one from a clone of it. The client knows each node's
    kernel, block and shared memory (client/kernel_nodes.c): the 160 sets of new parameters and grids, and
    the 8 after the update, are queued; the 8 adds, the 8 sets of another block and the 8 after the update
    from the clone (whose nodes the client does not know) reach the server (cuwire.KernelNode)."""
    r = run_remote(apps / "graph_updates", client_lib, server.address,
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0 and r.stdout == (apps.parent / "expected" / "graph_updates.out").read_text(), r.stderr
    listed = re.search(r"top calls sent to the server, by count: (.*)", r.stderr)[1]
    assert re.search(r"cuwire.KernelNode (\d+)", listed)[1] == "24", listed
    queued = int(re.search(r"API calls: \d+ = \d+ sent to the server and waited for \+ (\d+) queued", r.stderr)[1])
    assert queued >= 8 * 20 + 8, r.stderr


TWO_KERNELS = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret;\n}\n"
    ".visible .entry _Z10writeValuePii(.param .u64 p, .param .u32 v)\n{\n    ret;\n}\n";
static int asked(CUfunction f) {
    int blocks = -1, clusters = -1;
    CUlaunchAttribute cluster = {CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    cluster.value.clusterDim.x = 2, cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
    CUlaunchConfig config = {8, 1, 1, 128, 1, 1, 0, NULL, &cluster, 1};
    if (cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 0) ||
        cuOccupancyMaxActiveClusters(&clusters, f, &config))
        return -1;
    return blocks * 1000 + clusters;
}
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule m; CUfunction a, b;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuModuleLoadData(&m, PTX) || cuModuleGetFunction(&a, m, "_Z6addOnePj") ||
        cuModuleGetFunction(&b, m, "_Z10writeValuePii"))
        return 2;
    int before = asked(a) + asked(b);
    int set = cuFuncSetAttribute(a, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024);
    int after_set = asked(b) + asked(a);
    int cache = cuFuncSetCacheConfig(b, CU_FUNC_CACHE_PREFER_SHARED);
    int after_cache = asked(a) + asked(b);
    int context = cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1);
    int after_context = asked(a) + asked(b);
    int same = before == after_set && after_set == after_cache && after_cache == after_context && before > 0;
    printf("set %d, cache %d, context %d; the same answers: %s\n", set, cache, context, same ? "yes" : "no");
    return 0;
}
"""


def test_a_set_forgets_the_answers_of_that_kernel_alone(client_lib, server, tmp_path):
    """Occupancy answers are kept (client/answers_cache.c). A set of one kernel's attribute, or of its cache
    preference, forgets that kernel's answers and leaves another kernel's (the client knows which kernel
    each handle is: its image and name); the context's cache preference forgets every answer. Asked eight
    times, the server answers six: the two first, the set kernel's after each set, and both after the
    context's; and so for the answers of cuOccupancyMaxActiveClusters (client/launches.py)."""
    exe = compile_against_client(TWO_KERNELS, tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "set 0, cache 0, context 0; the same answers: yes\n", r.stderr
    sent = sent_to_server(r.stderr)
    assert sent.get("cuOccupancyMaxActiveBlocksPerMultiprocessor") == 6, sent
    assert sent.get("cuwire.MaxActiveClusters") == 6, sent


def test_a_tensor_map_encoded_again_is_answered_by_the_client(apps, client_lib, server):
    """tests/test_apps/tensor_map.cu encodes a map, and later the same map again (XLA encodes a kernel's
    maps before each launch): the second encode is answered by the client with the server driver's bytes
    (client/tensor_maps.c), and the kernel reads through it as through the first. Three encodes reach the
    server: the first, and the two the driver refuses (a box too large, a misaligned address: refusals
    are not kept); a rank of 0 is refused by the client, as before."""
    r = run_remote(apps / "tensor_map", client_lib, server.address, env={"CUWIRE_TRANSPORT": "tcp",
                                                                         "CUWIRE_STATS": "1"})
    assert r.returncode == 0 and "a tile through the map encoded again: OK" in r.stdout, r.stdout + r.stderr
    sent = sent_to_server(r.stderr)
    assert sent.get("cuTensorMapEncodeTiled") == 3, sent


LOADS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret; // loads\n}\n";
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUmodule first, m; CUfunction f, g;
    int loads = atoi(argv[1]), same = 1;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuModuleLoadData(&first, PTX) || cuModuleGetFunction(&f, first, "_Z6addOnePj")) return 2;
    for (int i = 1; i < loads; i++) {
        if (cuModuleUnload(m = first) || cuModuleLoadData(&m, PTX) || cuModuleGetFunction(&g, m, "_Z6addOnePj"))
            return 3;
        same &= g == f;
    }
    printf("loaded %d times: the same function each time: %s\n", loads, same ? "yes" : "no");
    return 0;
}
"""


def test_an_image_loaded_again_is_answered_by_the_client(client_lib, server, tmp_path):
    """The server keeps one library per image and module unloads are the client's: a load of an image the
    session loaded already gets the same answer, so the client gives it (a PyTorch CNN's start loads 3 of
    its 35 images twice). Five loads (each after an unload) ask the server what one load asks."""
    exe = compile_against_client(LOADS, tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1",
           "CUWIRE_LOAD_LISTS": ""}

    def loads(n: int) -> int:
        r = subprocess.run([str(exe), str(n)], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0 and r.stdout == f"loaded {n} times: the same function each time: yes\n", \
            r.stdout + r.stderr
        return int(re.search(r"cuwire.LoadModule (\d+)", r.stderr)[1])

    loads(1)  # (the server's cache then has the image: each run below asks one LoadModule for it)
    assert loads(5) == loads(1) == 1


DISTINCT_LOADS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUmodule m; CUfunction f;
    int first = atoi(argv[1]), loads = atoi(argv[2]);
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    for (int i = first; i < first + loads; i++) {
        char ptx[256];  /* a distinct image each: its comment names the test (argv[3]) and the image */
        snprintf(ptx, sizeof ptx, ".version 9.0\n.target sm_75\n.address_size 64\n// %s %d\n"
                 ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret;\n}\n", argv[3], i);
        if (cuModuleLoadData(&m, ptx) || cuModuleGetFunction(&f, m, "_Z6addOnePj")) return 2;
    }
    printf("loaded %d images\n", loads);
    return 0;
}
"""


def test_a_run_whose_images_the_server_lacks_uploads_each_with_its_first_request(client_lib, server, tmp_path):
    """A program's first run on a server: its first load finds the server's cache without the image and
    uploads it (two round trips), each later one goes with its bytes (one round trip each). Its next run
    finds every image in the cache, and the first requests carry no bytes again (one round trip each). A
    run that turns from images the server lacks to ones it has sends one image for nothing, then no more."""
    exe = compile_against_client(DISTINCT_LOADS, tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1",
           "CUWIRE_LOAD_LISTS": ""}
    tag = os.urandom(8).hex()  # images no earlier run gave the server

    def run(first: int, loads: int) -> tuple[int, str]:
        r = subprocess.run([str(exe), str(first), str(loads), tag], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0 and r.stdout == f"loaded {loads} images\n", r.stdout + r.stderr
        return int(re.search(r"cuwire.LoadModule (\d+)", r.stderr)[1]), r.stderr

    asked, err = run(0, 6)
    assert asked == 7 and "modules uploaded: 6; found in the server's cache: 0" in err, err
    assert "uploaded with the load's first request: 5 (and 0 sent so that the server had)" in err, err
    asked, err = run(0, 6)
    assert asked == 6 and "modules uploaded: 0; found in the server's cache: 6" in err, err
    assert "uploaded with the load's first request" not in err, err
    run(103, 1)
    asked, err = run(100, 5)  # 100 lacked, 101 and 102 with their bytes, 103 too, which it had; 104 lacked
    assert asked == 2 + 1 + 1 + 1 + 2 and "modules uploaded: 4; found in the server's cache: 1" in err, err
    assert "uploaded with the load's first request: 2 (and 1 sent so that the server had)" in err, err


SET_UNKNOWN = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n" ENTRIES;
int main(void) {
    CUdevice dev; CUcontext ctx; CUlibrary lib; CUkernel k;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuLibraryLoadData(&lib, PTX, NULL, NULL, 0, NULL, NULL, 0) || cuLibraryGetKernel(&k, lib, "_Z6addOnePj"))
        return 2;
    int set = cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 2048, k, dev);
    int value = -1, regs = -1, threads = -1;
    int read = cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev) |
               cuKernelGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k, dev) |
               cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, dev);
    printf("set %d; read %d: %d bytes, registers known: %s, threads %d\n", set, read, value, regs >= 0 ? "yes" : "no",
           threads);
    return cuCtxSynchronize();
}
"""


def test_a_shared_memory_set_of_a_kernel_not_described_brings_its_attributes(client_lib, server, tmp_path):
    """A library of 17 kernels is described by its load without their attributes (server/custom.py: at most
    16 come with them). A set of one's largest dynamic shared memory cannot be checked by the client then:
    the round trip it would make brings every attribute of the kernel instead (cuwire.FunctionAttributes),
    the set is checked against them and queued, and the reads after it are answered by the client."""
    exe = compile_against_client(SET_UNKNOWN.replace("ENTRIES", SEVENTEEN_ENTRIES), tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "set 0; read 0: 2048 bytes, registers known: yes, threads 1024\n", r.stdout + r.stderr
    sent = sent_to_server(r.stderr)
    assert sent.get("cuwire.FunctionAttributes") == 1, sent
    assert not {"cuKernelSetAttribute", "cuKernelGetAttribute"} & set(sent), sent


CACHE_PREFERENCES = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret; // preferences\n}\n";
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule m; CUfunction f;
    int blocks = -1, failed = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuModuleLoadData(&m, PTX) || cuModuleGetFunction(&f, m, "_Z6addOnePj")) return 2;
    for (int i = 0; i < 20; i++)  /* as JAX sets one before each launch: two preferences in turn */
        failed |= cuFuncSetCacheConfig(f, i % 4 < 2 ? CU_FUNC_CACHE_PREFER_SHARED : CU_FUNC_CACHE_PREFER_L1);
    int refused = cuFuncSetCacheConfig(f, (CUfunc_cache)7);
    if (cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 0)) return 3;
    printf("sets failed: %d, a preference CUDA does not name: %d, then %d blocks of 128 threads\n", failed,
           refused, blocks);
    return 0;
}
"""


def test_cache_preferences_are_queued_and_a_repeat_answered(client_lib, server, tmp_path):
    """JAX sets a function's cache preference before each of its launches (93 sets in its test programs'
    run, each a round trip): one of a function the client knows, and that CUDA names, cannot fail, so it is
    queued, and a set of the preference the function has is answered by the client. One CUDA does not
    name goes to the server, which refuses it; occupancy, which the preference may change, is asked after."""
    exe = compile_against_client(CACHE_PREFERENCES, tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.fullmatch(r"sets failed: 0, a preference CUDA does not name: 1, then [1-9]\d* blocks of 128 threads\n",
                        r.stdout), r.stdout + r.stderr
    sent = sent_to_server(r.stderr)
    assert sent.get("cuFuncSetCacheConfig") == 1, sent  # (the refused one)
    assert sent.get("cuOccupancyMaxActiveBlocksPerMultiprocessor") == 1, sent
    queued = int(re.search(r"API calls: \d+ = \d+ sent to the server and waited for \+ (\d+) queued", r.stderr)[1])
    assert queued >= 10, r.stderr  # (each change of preference: 10 of the 20 sets)


KERNEL_FUNCTIONS = r"""
#include <stdio.h>
#include "cuda_api.h"
static const char PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret; // kernel functions\n}\n";
static int bump(CUfunction f, CUdeviceptr p) {  /* *p += 1, through the function */
    void *params[] = {&p};
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, params, 0) || cuCtxSynchronize();
}
int main(void) {
    CUdevice dev; CUcontext primary, other; CUlibrary lib; CUkernel k; CUfunction f[4]; CUdeviceptr p, q;
    unsigned v = 0, w = 0; const char *name = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&primary, dev)) return 1;
    if (cuCtxSetCurrent(primary)) return 1;
    if (cuLibraryLoadData(&lib, PTX, 0, 0, 0, 0, 0, 0) || cuLibraryGetKernel(&k, lib, "_Z6addOnePj")) return 2;
    if (cuMemAlloc_v2(&p, 4) || cuMemsetD32_v2(p, 0, 1)) return 3;
    for (int i = 0; i < 3; i++)  /* (the first by the client's Python, the others by its C) */
        if (cuKernelGetFunction(&f[i], k) || bump(f[i], p)) return 4;
    if (cuFuncGetName(&name, f[2]) || cuMemcpyDtoH_v2(&v, p, 4)) return 5;
    if (cuCtxCreate_v2(&other, 0, dev) || cuMemAlloc_v2(&q, 4) || cuMemsetD32_v2(q, 0, 1)) return 6;
    if (cuKernelGetFunction(&f[3], k) || bump(f[3], q) || cuMemcpyDtoH_v2(&w, q, 4)) return 7;
    printf("the same function: %s; %s added %u times; in another context: %u\n",
           f[0] == f[1] && f[1] == f[2] ? "yes" : "no", name, v, w);
    return 0;
}
"""


def test_a_kernels_function_asked_again_is_answered_by_the_client(client_lib, server, tmp_path):
    """cuKernelGetFunction (cuBLAS and cuDNN ask it before launches: three a CNN training step) is answered
    by the client's Python the first time in a context, and by its C after (client/answers_cache.c): the
    same handle, which launches and keeps its name; another context gets its own context's function."""
    exe = compile_against_client(KERNEL_FUNCTIONS, tmp_path, client_lib)
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": "tcp"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "the same function: yes; _Z6addOnePj added 3 times; in another context: 1\n", r.stderr


# XLA's teardown as JAX ends: C++ destructors that run once Python has finalized, before the process's exit
# handler (registered after cuInit, so run before cuwire's), synchronize streams, then the context, then
# synchronize, query and destroy each stream and its event
LATE_TEARDOWN = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"
#define N 3
static CUstream s[N];
static CUevent e[N];
static unsigned long long answered(void)  /* the client's count of waits it answered (--stats) */
{
    unsigned long long *n = dlsym(RTLD_DEFAULT, "cuwire_answered_done");
    return n ? *n : 0;
}
static void teardown(void)
{
    int bad = 0;
    bad |= cuStreamSynchronize(s[0]) | cuCtxSynchronize();
    unsigned long long before = answered();
    for (int i = 0; i < N; i++)
        bad |= cuStreamSynchronize(s[i]) | cuStreamQuery(s[i]) | cuStreamDestroy_v2(s[i]) | cuEventDestroy_v2(e[i]);
    bad |= cuCtxSynchronize();
    fprintf(stderr, "late teardown: %s; waits answered by the client: %llu\n", bad ? "FAILED" : "all succeeded",
            answered() - before);
}
int arm(void **streams, void **events)
{
    for (int i = 0; i < N; i++) s[i] = streams[i], e[i] = events[i];
    return atexit(teardown);
}
"""

LATE_PROGRAM = """
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)  # (the helper calls it)
late = ctypes.CDLL(sys.argv[1])
S, E = (ctypes.c_void_p * 3)(), (ctypes.c_void_p * 3)()
dev, ctx, p = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 20) == 0
for i in range(3):
    assert cu.cuStreamCreateWithPriority(ctypes.c_void_p(ctypes.addressof(S) + 8 * i), 1, -(i % 2)) == 0
    assert cu.cuEventCreate(ctypes.c_void_p(ctypes.addressof(E) + 8 * i), 2) == 0
    assert cu.cuMemsetD8Async(p, i, 1 << 20, ctypes.c_void_p(S[i])) == 0
    assert cu.cuEventRecord(ctypes.c_void_p(E[i]), ctypes.c_void_p(S[i])) == 0
assert late.arm(S, E) == 0
print("armed", flush=True)
"""


def test_a_teardown_after_python_finalized_is_answered_as_before(client_lib, server, tmp_path):
    """From Python's atexit to the process's exit handler calls go on in C (client/wire.c keeps the
    socket): the context synchronization finished every stream the client made ahead (each knows its
    context: client/handle_pools.c), so each later synchronization and query, and the last context
    synchronization, are answered by the client, and the destroys of streams and events it gave out are
    queued without ending what it knows (7 answered; before, at most what came before the first destroy)."""
    (tmp_path / "late.c").write_text(LATE_TEARDOWN)
    helper = tmp_path / "liblate.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(helper), str(tmp_path / "late.c"),
                    f"-I{ROOT / 'cuwire' / 'generated'}", "-ldl"], check=True)
    (tmp_path / "late.py").write_text(LATE_PROGRAM)
    r = run_remote(Path(sys.executable), client_lib, server.address, str(tmp_path / "late.py"), str(helper),
                   env={"CUWIRE_TRANSPORT": "tcp"})
    assert r.returncode == 0 and r.stdout == "armed\n", r.stdout + r.stderr
    assert "late teardown: all succeeded; waits answered by the client: 7" in r.stderr, r.stderr
