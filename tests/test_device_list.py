"""One program, several servers as one device list (issue 39, docs/several-servers.md "Sessions and
routing"): `CUWIRE_SERVER=a,b` gives the program every device of `a`, then every device of `b`; each call
goes to the server of what it names (client/routes.c). Here two emulated servers, one program using a
device of each through the driver API: memory, copies, memsets, streams and events on both, each
device's results its own, each server serving one session and the other's handles never reaching it."""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import ServerProcess

# The program: on each device of its list, a context, memory filled with the device's own pattern (a memset
# on a stream of its own, a copy to the device, a device-to-device copy), an event recorded after them and
# waited for, then the memory read back; it prints each device's sum and where its memory lies.
PROGRAM = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
N = 4096

def check(status, what):
    if status != 0:
        sys.exit(f"{what}: CUDA error {status}")

check(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
print("devices", count.value)
contexts, memory = [], []
for dev in range(count.value):
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), f"cuDevicePrimaryCtxRetain({dev})")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    a, b = ctypes.c_uint64(), ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(a), N * 4), "cuMemAlloc a")
    check(cuda.cuMemAlloc_v2(ctypes.byref(b), N * 4), "cuMemAlloc b")
    contexts.append(ctx)
    memory.append((a.value, b.value))
for dev, (ctx, (a, b)) in enumerate(zip(contexts, memory)):  # (each device's work queued before any waits)
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    stream, event = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
    check(cuda.cuEventCreate(ctypes.byref(event), 0), "cuEventCreate")
    check(cuda.cuMemsetD32Async(ctypes.c_uint64(a), 100 * (dev + 1), N, stream), "cuMemsetD32Async")
    half = (ctypes.c_uint32 * (N // 2))(*[dev + 1] * (N // 2))
    check(cuda.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(a), half, N * 2, stream), "cuMemcpyHtoDAsync")
    check(cuda.cuMemcpyDtoDAsync_v2(ctypes.c_uint64(b), ctypes.c_uint64(a), N * 4, stream), "cuMemcpyDtoDAsync")
    check(cuda.cuEventRecord(event, stream), "cuEventRecord")
    memory[dev] = (a, b, stream, event)
for dev, (ctx, (a, b, stream, event)) in enumerate(zip(contexts, memory)):
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    check(cuda.cuEventSynchronize(event), "cuEventSynchronize")
    out = (ctypes.c_uint32 * N)()
    check(cuda.cuMemcpyDtoH_v2(out, ctypes.c_uint64(b), N * 4), "cuMemcpyDtoH")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    print("device", dev, "sum", sum(out), "memory at", hex(b))
if count.value > 1:  # across the two servers: no peer path, and what needs one is refused by name
    can, value = ctypes.c_int(7), ctypes.c_int(7)
    print("peer", cuda.cuDeviceCanAccessPeer(ctypes.byref(can), 0, 1), can.value,
          cuda.cuDeviceGetP2PAttribute(ctypes.byref(value), 2, 0, 1), value.value)  # (2: ACCESS_SUPPORTED)
    check(cuda.cuCtxSetCurrent(contexts[0]), "cuCtxSetCurrent")
    print("refused", cuda.cuCtxEnablePeerAccess(contexts[1], 0))
    # a stream of one waiting for the other's event: the client waits for the event, then the stream's later
    # work is queued (the event done by then)
    print("wait", cuda.cuStreamWaitEvent(memory[0][2], memory[1][3], 0), cuda.cuEventQuery(memory[1][3]))
    ran = []  # host functions on each server's stream, each run by the client in its stream's order
    note = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda user: ran.append(user))
    print("host functions", cuda.cuLaunchHostFunc(memory[0][2], note, 1), cuda.cuLaunchHostFunc(memory[1][2], note, 2),
          cuda.cuLaunchHostFunc(memory[1][2], note, 3), cuda.cuStreamSynchronize(memory[0][2]),
          cuda.cuStreamSynchronize(memory[1][2]), sorted(ran), ran.index(2) < ran.index(3))
    check(cuda.cuCtxSetCurrent(contexts[1]), "cuCtxSetCurrent")  # device 1's NULL stream, device 0's memory:
    print("null stream", cuda.cuMemsetD32Async(ctypes.c_uint64(memory[0][1]), 5, 4, None),  # refused
          cuda.cuMemsetD32_v2(ctypes.c_uint64(memory[0][1]), 5, 4))  # (synchronous: its memory's server)
"""


def run(servers: str, *command: str, stats: bool = False, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    """The command through `cuwire run --server SERVERS`, as a user runs it (`cuwire run` finds the client
    library this checkout built: the client_lib fixture's), with `env` added to this process's."""
    env = {**os.environ, **(env or {})}
    env.pop("CUWIRE_SERVER", None)
    return subprocess.run([sys.executable, "-m", "cuwire.cli", "run", *(["--stats"] if stats else []), "--server",
                           servers, "--", *command], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def two_servers(tmp_path) -> Iterator[list[ServerProcess]]:
    """Two emulated servers, each with a module cache of its own, stopped after the test."""
    servers: list[ServerProcess] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(ServerProcess(tmp_path / name))
        yield servers
    finally:
        for s in servers:
            s.stop()


def test_two_servers_are_one_device_list(tmp_path, client_lib, two_servers):
    from cuwire import address_space

    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    servers = two_servers
    alone = run(servers[0].address, sys.executable, str(script))  # (one server: one device)
    assert alone.returncode == 0, alone.stderr
    both = run(f"{servers[0].address},{servers[1].address}", sys.executable, str(script))
    assert both.returncode == 0, both.stderr
    logs = [s.text() for s in servers]
    n = 4096
    sums = [(n // 2) * (d + 1) + (n // 2) * 100 * (d + 1) for d in range(2)]  # the copy's half, the memset's
    lines = both.stdout.splitlines()
    assert lines[0] == "devices 2", both.stdout
    for dev in range(2):
        word = lines[1 + dev].split()
        assert word[:4] == ["device", str(dev), "sum", str(sums[dev])], both.stdout
        lo, hi = address_space.windows(dev + 1)[1]  # each device's memory in its server's window
        assert lo <= int(word[-1], 16) < hi, (dev, word)
    # cuDeviceCanAccessPeer and cuDeviceGetP2PAttribute answer 0, as for GPUs without a peer path;
    # cuCtxEnablePeerAccess gives CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (217); a memset of one's memory on the
    # other's NULL stream is refused by name (NOT_SUPPORTED, 801); a synchronous memset goes to its memory's
    # server
    # host functions on each server's streams run, each server's over a connection of its own
    assert lines[3:8] == ["peer 0 0 0 0", "refused 217", "wait 0 0", "host functions 0 0 0 0 0 [1, 2, 3] True",
                          "null stream 801 0"], both.stdout
    assert alone.stdout.splitlines()[:2] == ["devices 1", f"device 0 sum {sums[0]} memory at " +
                                              alone.stdout.split()[-1]], alone.stdout
    # the second run opened one session on each server; the first server also served the one-server run
    assert [log.count(" opened for pid ") for log in logs] == [2, 1], logs
    assert not any("not created by this session" in log or "outside the session" in log for log in logs), logs


# Work on both devices, then (once the test stopped the second server) on each again: device 1's calls fail
# with CUDA_ERROR_DEVICE_UNAVAILABLE (46), device 0's go on.
AFTER_A_LOSS = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
contexts, memory = [], []
for dev in range(2):
    ctx, mem = ctypes.c_void_p(), ctypes.c_uint64()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(mem), 64) == 0 and cuda.cuMemsetD32_v2(mem, dev + 1, 16) == 0
    contexts.append(ctx)
    memory.append(mem)
print("ready", flush=True)
sys.stdin.readline()  # (the second server is gone now)

def on(dev):
    out = (ctypes.c_uint32 * 16)()
    assert cuda.cuCtxSetCurrent(contexts[dev]) == 0
    return cuda.cuMemsetD32_v2(memory[dev], 7 * (dev + 1), 16), cuda.cuMemcpyDtoH_v2(out, memory[dev], 64), out[0]

print("after", *on(0), *on(1), *on(0), flush=True)
"""


def test_a_list_server_connection_cut_resumes(tmp_path, client_lib, two_servers):
    """The connection to the second server of the list is cut mid-run (a reset, as a router that forgets
    it does): its session resumes, as a one-server session does (tests/test_resume.py), and the program's
    results are those of an uncut run."""
    from cut_link import TO_CLIENT, TO_SERVER, CutLink

    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    servers = two_servers
    link = CutLink(servers[1].port, [(TO_SERVER, 3000), (TO_CLIENT, 2500)])
    try:
        cut = run(f"{servers[0].address},{link.address}", sys.executable, str(script), stats=True)
        uncut = run(f"{servers[0].address},{servers[1].address}", sys.executable, str(script))
    finally:
        link.close()
    sums = [[line.split(" memory at")[0] for line in r.stdout.splitlines()[:3]] for r in (cut, uncut)]
    assert cut.returncode == 0 and sums[0] == sums[1] and sums[0][0] == "devices 2", cut.stdout + cut.stderr
    assert link.done, link.cuts
    assert re.search(r"connection dropped and resumed: [1-9]", cut.stderr), cut.stderr


def test_a_server_lost_fails_only_its_devices_calls(tmp_path, client_lib, two_servers):
    """One server of the list gone mid-run: the calls of its device fail with DEVICE_UNAVAILABLE and the
    program is told once, naming the server and its device; the other server's device goes on."""
    from cuwire import cli

    script = tmp_path / "program.py"
    script.write_text(AFTER_A_LOSS)
    servers = two_servers
    env = cli.program_env(client_lib, f"{servers[0].address},{servers[1].address}", None, False,
                          base=dict(os.environ))
    program = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert program.stdout.readline() == "ready\n", program.stderr.read()
        servers[1].stop()  # (its session ends with it: drained, then closed)
        out, err = program.communicate("go\n", timeout=60)
    finally:
        program.kill()
    assert program.returncode == 0, err
    assert out.splitlines()[-1] == "after 0 0 7 46 46 0 0 0 7", out + err
    assert err.count(f"lost the cuwire server {servers[1].address} (the program's device 1 of its list)") == 1, err


# A CUDA program of the runtime API: the same kernel (the emulated device's vectorAdd, tests/test_apps/
# kernels.py) launched on each device of its list. NVIDIA's runtime loads the program's fatbin once and
# launches one CUkernel on every device: the client loads the library on each server (client/routes.c,
# aliases) and each launch goes to its device's server with that server's kernel.
KERNELS = r"""
#include <cstdio>
#include <cuda_runtime.h>

__global__ void vectorAdd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

#define CHECK(x) \
    do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("devices %d\n", count);
    const int n = 1024;
    static float a[n], b[n], c[n];
    for (int dev = 0; dev < count; dev++) {
        CHECK(cudaSetDevice(dev));
        for (int i = 0; i < n; i++) a[i] = (float)i, b[i] = (float)(100 * (dev + 1));
        float *da, *db, *dc;
        CHECK(cudaMalloc(&da, n * 4));
        CHECK(cudaMalloc(&db, n * 4));
        CHECK(cudaMalloc(&dc, n * 4));
        CHECK(cudaMemcpy(da, a, n * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(db, b, n * 4, cudaMemcpyHostToDevice));
        vectorAdd<<<n / 256, 256>>>(da, db, dc, n);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(c, dc, n * 4, cudaMemcpyDeviceToHost));
        double sum = 0;
        for (int i = 0; i < n; i++) sum += c[i];
        cudaFuncAttributes attr;  // (the kernel's attributes and occupancy on this device: its server's)
        int blocks = 0;
        CHECK(cudaFuncGetAttributes(&attr, vectorAdd));
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vectorAdd, 256, 0));
        // the same sum by a graph's kernel node on this device (its graph, and the kernel, its server's)
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaGraphNode_t node;
        int count_n = n;
        void *args[] = {&da, &db, &dc, &count_n};
        cudaKernelNodeParams p = {};
        p.func = (void *)vectorAdd, p.gridDim = dim3(n / 256), p.blockDim = dim3(256), p.kernelParams = args;
        CHECK(cudaMemset(dc, 0, n * 4));
        CHECK(cudaGraphCreate(&graph, 0));
        CHECK(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &p));
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CHECK(cudaGraphLaunch(exec, 0));
        CHECK(cudaMemcpy(c, dc, n * 4, cudaMemcpyDeviceToHost));
        double again = 0;
        for (int i = 0; i < n; i++) again += c[i];
        printf("device %d sum %.0f, %d threads a block at most, %d blocks of 256 a multiprocessor, code for %d, "
               "graph %s\n", dev, sum, attr.maxThreadsPerBlock, blocks, attr.binaryVersion,
               again == sum ? "OK" : "DIFF");
    }
    return 0;
}
"""


def test_a_kernel_runs_on_each_server_of_the_list(tmp_path, client_lib, two_servers):
    """The runtime's one CUkernel launched on a device of each server: each server ran it, on its own
    memory, and the sums are each device's, by a launch and by a graph's kernel node; a one-server run gives
    the first device's sum."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    (tmp_path / "kernels.cu").write_text(KERNELS)
    subprocess.run(["nvcc", "-cudart", "shared", "-arch=sm_90", "-O2", "-o", str(tmp_path / "kernels"),
                    str(tmp_path / "kernels.cu")], check=True)
    servers = two_servers
    runs = [run(given, str(tmp_path / "kernels"))
            for given in (servers[0].address, f"{servers[0].address},{servers[1].address}")]
    logs = [s.text() for s in servers]
    n = 1024
    sums = [n * (n - 1) // 2 + n * 100 * (d + 1) for d in range(2)]
    each = ", 1024 threads a block at most, 8 blocks of 256 a multiprocessor, code for 90, graph OK"  # (emulated)
    assert runs[0].returncode == 0 and runs[0].stdout.splitlines() == ["devices 1", f"device 0 sum {sums[0]}{each}"], \
        runs[0].stdout + runs[0].stderr
    assert runs[1].returncode == 0 and runs[1].stdout.splitlines() == [
        "devices 2", f"device 0 sum {sums[0]}{each}", f"device 1 sum {sums[1]}{each}"], runs[1].stdout + runs[1].stderr
    assert logs[1].count(" opened for pid ") == 1, logs[1]  # (b served the list's run alone...)
    assert all(log.count(" uploaded (") == 1 for log in logs), logs  # (...and each server got the image once)


def test_a_list_of_two_gpu_models(tmp_path, client_lib):
    """Servers of two GPU models (an emulated 9.0 and 8.6): a program built for both gets each server's own
    code (of a fatbin, the entry that server's GPU chooses: the 8.6 device refuses the 9.0 code), and a
    kernel's answers are each server's: the client keeps them per server in such a list, since the runtime
    asks one CUkernel's occupancy on every device (8 blocks of 256 threads a multiprocessor on 9.0, 6 on
    8.6, whose multiprocessors hold 1536 threads)."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    (tmp_path / "kernels.cu").write_text(KERNELS)
    subprocess.run(["nvcc", "-cudart", "shared", "-gencode", "arch=compute_86,code=sm_86", "-gencode",
                    "arch=compute_90,code=sm_90", "-O2", "-o", str(tmp_path / "kernels"),
                    str(tmp_path / "kernels.cu")], check=True)
    servers = []
    try:
        for name, arch in (("a", "9.0"), ("b", "8.6")):
            (tmp_path / name).mkdir()
            servers.append(ServerProcess(tmp_path / name, env={"CUWIRE_EMULATED_ARCH": arch}))
        r = run(f"{servers[0].address},{servers[1].address}", str(tmp_path / "kernels"))
    finally:
        for server in servers:
            server.stop()
    n = 1024
    sums = [n * (n - 1) // 2 + n * 100 * (d + 1) for d in range(2)]
    line = "device {} sum {}, 1024 threads a block at most, {} blocks of 256 a multiprocessor, code for {}, graph OK"
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "devices 2", line.format(0, sums[0], 8, 90), line.format(1, sums[1], 6, 86)], r.stdout + r.stderr


# NVML over the list (what PyTorch counts devices with): every server's devices, each handle answered by its
# own server, an index made the list's, a handle by UUID the server's that has it, init and shutdown on each.
NVML_PROGRAM = r"""
import ctypes
nvml = ctypes.CDLL("libnvidia-ml.so.1")
count, index = ctypes.c_uint(), ctypes.c_uint()
print("init", nvml.nvmlInit_v2(), "count", nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), count.value)
handles = []
for i in range(count.value):
    h, name = ctypes.c_void_p(), ctypes.create_string_buffer(96)
    status = nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    handles.append(h.value)
    print("device", i, status, nvml.nvmlDeviceGetIndex(h, ctypes.byref(index)), index.value,
          nvml.nvmlDeviceGetName(h, name, 96), name.value.decode())
h = ctypes.c_void_p()
uuid = b"GPU-63757769-7265-2d65-6d75-6c6174656400"  # (the emulated device's: both servers have it)
print("by uuid", nvml.nvmlDeviceGetHandleByUUID(uuid, ctypes.byref(h)), handles.index(h.value),
      nvml.nvmlDeviceGetHandleByUUID(b"GPU-none", ctypes.byref(h)))
if count.value > 1:  # (NVML_P2P_CAPS_INDEX_READ 0: between two servers, NVML_P2P_STATUS_NOT_SUPPORTED 5)
    p2p = ctypes.c_int(-1)
    print("p2p", nvml.nvmlDeviceGetP2PStatus(ctypes.c_void_p(handles[0]), ctypes.c_void_p(handles[1]), 0,
                                             ctypes.byref(p2p)), p2p.value)
print("distinct", len(set(handles)) == len(handles), "shutdown", nvml.nvmlShutdown(),
      "closed", nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)))
"""


def test_nvml_lists_every_server_of_the_list(tmp_path, client_lib, two_servers):
    script = tmp_path / "nvml_program.py"
    script.write_text(NVML_PROGRAM)
    alone = run(two_servers[0].address, sys.executable, str(script))
    both = run(",".join(s.address for s in two_servers), sys.executable, str(script))
    assert alone.returncode == 0 and both.returncode == 0, (alone.stderr, both.stderr)
    name = "cuwire emulated device"
    assert both.stdout.splitlines() == [
        "init 0 count 0 2", f"device 0 0 0 0 0 {name}", f"device 1 0 0 1 0 {name}",
        "by uuid 0 0 6",  # (the first server's; NVML_ERROR_NOT_FOUND from every server)
        "p2p 0 5", "distinct True shutdown 0 closed 1"], both.stdout  # (NVML_ERROR_UNINITIALIZED once shut down)
    assert alone.stdout.splitlines()[:3] == ["init 0 count 0 1", f"device 0 0 0 0 0 {name}", "by uuid 0 0 6"], \
        alone.stdout


# Copies between the two servers' memory (server/peer_copy.py): device to device both ways, by cuMemcpyDtoD,
# cuMemcpyPeer, cuMemcpyDtoDAsync and the unified cuMemcpy(Async), one larger than a piece (64 MiB), each read
# back on its device.
COPIES = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
BIG = (64 << 20) + 4096  # two pieces

def check(status, what):
    if status != 0:
        sys.exit(f"{what}: CUDA error {status}")

check(cuda.cuInit(0), "cuInit")
contexts, memory = [], []
for dev in range(2):
    ctx, a = ctypes.c_void_p(), ctypes.c_uint64()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    check(cuda.cuCtxSetCurrent(ctx), "set")
    check(cuda.cuMemAlloc_v2(ctypes.byref(a), BIG), "alloc")
    contexts.append(ctx)
    memory.append(a.value)
pattern = bytes(i * 7 % 251 for i in range(BIG))
check(cuda.cuCtxSetCurrent(contexts[0]), "set")
check(cuda.cuMemcpyHtoD_v2(ctypes.c_uint64(memory[0]), pattern, BIG), "HtoD")

def read(dev, address, n):
    out = ctypes.create_string_buffer(n)
    check(cuda.cuCtxSetCurrent(contexts[dev]), "set")
    check(cuda.cuMemcpyDtoH_v2(out, ctypes.c_uint64(address), n), "DtoH")
    return out.raw

print("dtod", cuda.cuMemcpyDtoD_v2(ctypes.c_uint64(memory[1]), ctypes.c_uint64(memory[0]), BIG),
      read(1, memory[1], BIG) == pattern)
check(cuda.cuCtxSetCurrent(contexts[0]), "set")  # (back, shifted: device 1 to device 0, 4096 bytes in)
print("peer", cuda.cuMemcpyPeer(ctypes.c_uint64(memory[0] + 4096), contexts[0], ctypes.c_uint64(memory[1]),
                                contexts[1], 1 << 20), read(0, memory[0] + 4096, 1 << 20) == pattern[:1 << 20])
stream = ctypes.c_void_p()
check(cuda.cuCtxSetCurrent(contexts[1]), "set")
check(cuda.cuStreamCreate(ctypes.byref(stream), 0), "stream")
print("async", cuda.cuMemcpyDtoDAsync_v2(ctypes.c_uint64(memory[1] + 8), ctypes.c_uint64(memory[0] + 4096), 100,
                                         stream), cuda.cuStreamSynchronize(stream),
      read(1, memory[1] + 8, 100) == pattern[:100])
print("unified", cuda.cuMemcpy(ctypes.c_uint64(memory[0] + 64), ctypes.c_uint64(memory[1] + 8), 50),
      cuda.cuMemcpyAsync(ctypes.c_uint64(memory[1] + 512), ctypes.c_uint64(memory[0] + 2000), 1000, stream),
      read(0, memory[0] + 64, 50) == pattern[:50], read(1, memory[1] + 512, 1000) == pattern[2000:3000])
"""


def test_copies_between_servers_go_server_to_server(tmp_path, client_lib, two_servers):
    """Each copy equal to its source, the client's own bytes sent far fewer than the bytes copied."""
    script = tmp_path / "copies.py"
    script.write_text(COPIES)
    r = run(",".join(s.address for s in two_servers), sys.executable, str(script), stats=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["dtod 0 True", "peer 0 True", "async 0 0 True",
                                     "unified 0 0 True True"], r.stdout + r.stderr
    assert "copied between servers of the device list, server to server: 65.0 MiB" in r.stderr, r.stderr
    sent = int(re.search(r"bytes sent: .*? \((\d+) B\) in messages", r.stderr).group(1))
    assert sent < (64 << 20) + (2 << 20), r.stderr  # (the pattern's upload once; none of the copies' bytes)


# Virtual memory on each device of the list, as XLA's allocator makes it: the allocation's properties and the
# access descriptors name the device in a CUmemLocation (the joined list's ordinal), which its server knows as
# its own device 0.
VMM = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")

def check(status, what):
    if status != 0:
        sys.exit(f"{what}: CUDA error {status}")

class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]  # CU_MEM_LOCATION_TYPE_DEVICE: 1

class Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", ctypes.c_ubyte * 8)]

class Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]

class PoolProps(ctypes.Structure):  # CUmemPoolProps
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("location", Location),
                ("win32SecurityAttributes", ctypes.c_void_p), ("maxSize", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]

class AllocNode(ctypes.Structure):  # CUDA_MEM_ALLOC_NODE_PARAMS
    _fields_ = [("poolProps", PoolProps), ("accessDescs", ctypes.POINTER(Access)),
                ("accessDescCount", ctypes.c_size_t), ("bytesize", ctypes.c_size_t), ("dptr", ctypes.c_uint64)]

check(cuda.cuInit(0), "cuInit")
for dev in range(2):
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    check(cuda.cuCtxSetCurrent(ctx), "set")
    prop = Prop(type=1, location=Location(1, dev))  # CU_MEM_ALLOCATION_TYPE_PINNED, on device `dev`
    size = ctypes.c_size_t()
    check(cuda.cuMemGetAllocationGranularity(ctypes.byref(size), ctypes.byref(prop), 0), "granularity")
    handle, ptr = ctypes.c_uint64(), ctypes.c_uint64()
    check(cuda.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(prop), ctypes.c_uint64(0)), "cuMemCreate")
    check(cuda.cuMemAddressReserve(ctypes.byref(ptr), size, ctypes.c_size_t(0), ctypes.c_uint64(0),
                                   ctypes.c_uint64(0)), "reserve")
    check(cuda.cuMemMap(ptr, size, ctypes.c_size_t(0), handle, ctypes.c_uint64(0)), "cuMemMap")
    access = Access(Location(1, dev), 3)  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    check(cuda.cuMemSetAccess(ptr, size, ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
    flags = ctypes.c_ulonglong()
    check(cuda.cuMemGetAccess(ctypes.byref(flags), ctypes.byref(Location(1, dev)), ptr), "cuMemGetAccess")
    check(cuda.cuMemsetD32_v2(ptr, 7 + dev, 16), "memset")
    out = (ctypes.c_uint32 * 16)()
    check(cuda.cuMemcpyDtoH_v2(out, ptr, 64), "DtoH")
    print("vmm", dev, flags.value, out[0], out[15])
    # a graph's memory allocation node on the device, its pool's and its access's location naming it
    graph, node, run = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
    params = AllocNode(PoolProps(allocType=1, location=Location(1, dev)), ctypes.pointer(access), 1, 1 << 20)
    check(cuda.cuGraphAddMemAllocNode(ctypes.byref(node), graph, None, ctypes.c_size_t(0), ctypes.byref(params)),
          "cuGraphAddMemAllocNode")
    check(cuda.cuGraphInstantiateWithFlags(ctypes.byref(run), graph, ctypes.c_uint64(1)), "instantiate")
    check(cuda.cuGraphLaunch(run, None), "launch")
    check(cuda.cuCtxSynchronize(), "sync")
    print("graph", dev, params.dptr != 0)
"""


def test_virtual_memory_on_each_device(tmp_path, client_lib, two_servers):
    """cuMemCreate's properties and cuMemSetAccess's descriptors name the joined list's device: each goes to
    that device's server with its own ordinal (runtime.located; annotation device_location), as XLA's
    allocator needs on the second device; so do a graph's memory allocation node's (client/graphs.py)."""
    script = tmp_path / "vmm.py"
    script.write_text(VMM)
    r = run(",".join(s.address for s in two_servers), sys.executable, str(script))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["vmm 0 3 7 7", "graph 0 True", "vmm 1 3 8 8", "graph 1 True"], \
        r.stdout + r.stderr


# The start of a program through ctypes with one library kernel's PTX (_Z6addOnePj: *p += 1), the driver started
ADD_ONE_PROGRAM = r"""
import ctypes, struct, sys
cuda = ctypes.CDLL("libcuda.so.1")
PTX = b".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry _Z6addOnePj(.param .u64 p)\n{\n    ret;\n}\n"

def check(status, what):
    if status != 0:
        sys.exit(f"{what}: CUDA error {status}")

check(cuda.cuInit(0), "cuInit")
"""
# A library's kernel (a CUkernel: every server's once the client loaded the library on each) in a graph's
# kernel node on each device, named by the node's `kern` as the driver API allows: the node carries the kernel
# its graph's server loaded.
GRAPH_KERNELS = ADD_ONE_PROGRAM + r"""
library, kernel = ctypes.c_void_p(), ctypes.c_void_p()
for dev in range(2):
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    check(cuda.cuCtxSetCurrent(ctx), "set")
    if dev == 0:
        check(cuda.cuLibraryLoadData(ctypes.byref(library), PTX, None, None, 0, None, None, 0), "load")
        check(cuda.cuLibraryGetKernel(ctypes.byref(kernel), library, b"_Z6addOnePj"), "get kernel")
    counter = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(counter), 4), "alloc")
    check(cuda.cuMemsetD32_v2(counter, 40 + dev, 1), "memset")
    arg = ctypes.c_uint64(counter.value)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    # CUDA_KERNEL_NODE_PARAMS_v2: func, grid, block, shared memory, kernelParams, extra, kern, ctx
    params = struct.pack("<Q7I4xQQQQ", 0, 1, 1, 1, 1, 1, 1, 0, ctypes.addressof(args), 0, kernel.value or 0,
                         ctx.value or 0)
    graph, node, run = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
    check(cuda.cuGraphAddKernelNode_v2(ctypes.byref(node), graph, None, ctypes.c_size_t(0), params), "add node")
    check(cuda.cuGraphInstantiateWithFlags(ctypes.byref(run), graph, ctypes.c_uint64(0)), "instantiate")
    check(cuda.cuGraphLaunch(run, None), "launch")
    out = ctypes.c_uint32()
    check(cuda.cuMemcpyDtoH_v2(ctypes.byref(out), counter, 4), "DtoH")
    print("graph kernel", dev, out.value)
"""


ENUMERATED = ADD_ONE_PROGRAM + r"""
contexts = []
for dev in range(2):
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    contexts.append(ctx)
library, count = ctypes.c_void_p(), ctypes.c_uint()
check(cuda.cuCtxSetCurrent(contexts[1]), "set")  # (loaded on device 1's server first: the handle is its)
check(cuda.cuLibraryLoadData(ctypes.byref(library), PTX, None, None, 0, None, None, 0), "load")
for dev in (0, 1):
    check(cuda.cuCtxSetCurrent(contexts[dev]), "set")
    check(cuda.cuLibraryGetKernelCount(ctypes.byref(count), library), "count")
    kernels = (ctypes.c_void_p * count.value)()
    check(cuda.cuLibraryEnumerateKernels(kernels, count.value, library), "enumerate")
    counter = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(counter), 4), "alloc")
    check(cuda.cuMemsetD32_v2(counter, 40 + dev, 1), "memset")
    arg = ctypes.c_uint64(counter.value)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    check(cuda.cuLaunchKernel(ctypes.c_void_p(kernels[0]), 1, 1, 1, 1, 1, 1, 0, None, args, None), "launch")
    out = ctypes.c_uint32()
    check(cuda.cuMemcpyDtoH_v2(ctypes.byref(out), counter, 4), "DtoH")
    print("enumerated kernel", dev, count.value, out.value)
"""


def test_a_librarys_enumerated_kernels_launch_on_each_device(tmp_path, client_lib, two_servers):
    """cuLibraryEnumerateKernels of a device list's library goes to the server whose handle the program holds
    (before: the current context's, which refused another server's handle), and each kernel it gives launches
    on every device (its aliases: those its load said, else each looked up by name on the other servers)."""
    script = tmp_path / "enumerated.py"
    script.write_text(ENUMERATED)
    r = run(",".join(s.address for s in two_servers), sys.executable, str(script))
    assert r.returncode == 0 and r.stdout.splitlines() == ["enumerated kernel 0 1 41", "enumerated kernel 1 1 42"], \
        r.stdout + r.stderr


def test_a_library_kernel_in_a_graph_on_each_device(tmp_path, client_lib, two_servers):
    """A graph's kernel node naming a CUkernel goes to its graph's server with the kernel that server loaded
    (client/graphs.py); before, the first server's handle went to the second server, which refused it."""
    script = tmp_path / "graph_kernels.py"
    script.write_text(GRAPH_KERNELS)
    r = run(",".join(s.address for s in two_servers), sys.executable, str(script))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["graph kernel 0 41", "graph kernel 1 42"], r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="a certificate needs the openssl command")
def test_copies_between_servers_over_tls(tmp_path, client_lib):
    """Sessions over TLS: the server to server copy too, pinned to the certificate the client checked."""
    from cuwire.wire import tls

    cert, key = tls.self_signed(tmp_path / "tls")  # (one certificate for both: one pin for the client)
    pin = tls.fingerprint(ssl.PEM_cert_to_DER_cert(cert.read_text()))
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(ServerProcess(tmp_path / name, "--tls-cert", str(cert), "--tls-key", str(key)))
        script = tmp_path / "copies.py"
        script.write_text(COPIES)
        env = {**os.environ, "CUWIRE_TLS_FINGERPRINT": pin}
        env.pop("CUWIRE_SERVER", None)
        r = subprocess.run([sys.executable, "-m", "cuwire.cli", "run", "--stats", "--server",
                            ",".join(s.address for s in servers), "--", sys.executable, str(script)],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["dtod 0 True", "peer 0 True", "async 0 0 True", "unified 0 0 True True"]
        assert "TCP with TLS to" in r.stderr, r.stderr
        said = servers[0].text() + servers[1].text()
        assert "(a copy between servers, over TCP with TLS)" in said and "over TCP)" not in said, said
    finally:
        for s in servers:
            s.stop()


ONE_COPY_EACH_WAY = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
contexts, memory = [], []
for dev in range(2):
    ctx, a = ctypes.c_void_p(), ctypes.c_uint64()
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    cuda.cuMemAlloc_v2(ctypes.byref(a), 4096)
    contexts.append(ctx)
    memory.append(a.value)
print("0 to 1", cuda.cuMemcpyDtoD_v2(ctypes.c_uint64(memory[1]), ctypes.c_uint64(memory[0]), 4096))
print("1 to 0", cuda.cuMemcpyDtoD_v2(ctypes.c_uint64(memory[0]), ctypes.c_uint64(memory[1]), 4096))
"""


def test_a_server_fetches_copies_only_from_where_its_setting_says(tmp_path, client_lib):
    """CUWIRE_PEER_FETCH: a client names the address a server fetches a copy from, so a server may be told
    where it may connect. Server b may fetch from a (named), a from nowhere: a copy to b's device works, one
    to a's is refused with CUDA_ERROR_NOT_PERMITTED before a connects anywhere, the log naming the setting."""
    servers = []
    try:
        (tmp_path / "a").mkdir()
        servers.append(ServerProcess(tmp_path / "a", env={"CUWIRE_PEER_FETCH": "none"}))
        (tmp_path / "b").mkdir()
        servers.append(ServerProcess(tmp_path / "b", env={"CUWIRE_PEER_FETCH": f"LOCALHOST:1,{servers[0].address}"}))
        script = tmp_path / "copies.py"
        script.write_text(ONE_COPY_EACH_WAY)
        r = run(",".join(s.address for s in servers), sys.executable, str(script))
        logs = [s.text() for s in servers]
    finally:
        for s in servers:
            s.stop()
    assert r.returncode == 0 and r.stdout.splitlines() == ["0 to 1 0", "1 to 0 800"], r.stdout + r.stderr
    assert "refused: CUWIRE_PEER_FETCH is 'none'" in logs[0] and "a copy between servers" not in logs[1], logs


def test_the_peer_fetch_setting_is_read_strictly():
    from cuwire.settings import peer_fetch, peer_fetch_allows

    assert peer_fetch(" ANY ") == "any" and peer_fetch("none") == "none"
    for bad in ("", "gpu-a", "gpu-a:port", "any,gpu-a:1"):
        with pytest.raises(ValueError):
            peer_fetch(bad)
    assert peer_fetch_allows("any", "x:1") and not peer_fetch_allows("none", "x:1")
    assert peer_fetch_allows("gpu-a:50551, GPU-B:50551", "gpu-b:50551")
    assert not peer_fetch_allows("gpu-a:50551", "gpu-a:50552") and not peer_fetch_allows("gpu-a:50551", "gpu-ab:50551")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="--tls auto needs the openssl command")
def test_each_server_of_a_list_pinned_to_its_own_certificate(tmp_path, client_lib):
    """Servers started with `--tls auto` have certificates of their own: CUWIRE_TLS_FINGERPRINT pins each
    server of the list with its own, in the list's order (the copy between them pinned to the one the
    client checked); one pin for both is refused at the server whose certificate it is not, and a count
    that fits neither way is refused by name."""
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(ServerProcess(tmp_path / name, "--tls", "auto",
                                         env={"CUWIRE_TLS_DIR": str(tmp_path / name)}))
        pins = [re.search(r"CUWIRE_TLS_FINGERPRINT=(\S+)", s.text()).group(1) for s in servers]
        assert pins[0] != pins[1]
        script = tmp_path / "copies.py"
        script.write_text(ONE_COPY_EACH_WAY)
        env = {k: v for k, v in os.environ.items() if k != "CUWIRE_SERVER"}

        def with_pins(given: str, *cmd: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "cuwire.cli", *cmd], capture_output=True, text=True,
                                  env={**env, "CUWIRE_TLS_FINGERPRINT": given}, timeout=120)

        listed = ",".join(s.address for s in servers)
        r = with_pins(",".join(pins), "run", "--stats", "--server", listed, "--", sys.executable, str(script))
        assert r.returncode == 0 and r.stdout.splitlines() == ["0 to 1 0", "1 to 0 0"], r.stdout + r.stderr
        assert "TCP with TLS to" in r.stderr, r.stderr
        info = with_pins(",".join(pins), "info", "--server", listed)
        assert info.returncode == 0 and "one device list of 2 GPUs across 2 servers" in info.stdout, info.stderr
        one = with_pins(pins[0], "run", "--server", listed, "--", sys.executable, str(script))
        assert one.returncode != 0 and f"not the pinned {pins[0]}" in one.stderr, one.stdout + one.stderr
        three = with_pins(",".join(pins + pins[:1]), "run", "--server", listed, "--", sys.executable, str(script))
        assert three.returncode != 0 and "names 3 fingerprints for 2 servers" in three.stderr, three.stderr
    finally:
        for s in servers:
            s.stop()


COUNT = r"""
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
n = ctypes.c_int()
print("init", cuda.cuInit(0), "count", cuda.cuDeviceGetCount(ctypes.byref(n)), n.value)
"""


def test_cuda_visible_devices_picks_among_the_lists_gpus(tmp_path, client_lib, two_servers):
    """The program's CUDA_VISIBLE_DEVICES picks among the list's GPUs as among one machine's (before, each
    server applied it to its own: 0 gave a GPU of each, 1 none): an index counts a's GPUs, then b's; only
    the servers chosen get a session; one that names no GPU of the list leaves the program none."""
    script = tmp_path / "count.py"
    script.write_text(COUNT)
    listed = ",".join(s.address for s in two_servers)
    for value, count, sessions in (("0", 1, [1, 0]), ("1", 1, [1, 1]), ("1,0", 2, [2, 2]), ("2", 0, [2, 2])):
        r = run(listed, sys.executable, str(script), env={"CUDA_VISIBLE_DEVICES": value})
        want = f"init 0 count 0 {count}" if count else "init 100 count 100 0"
        assert r.returncode == 0 and r.stdout.strip() == want, (value, r.stdout + r.stderr)
        assert [s.text().count(" opened for pid ") for s in two_servers] == sessions, value
    assert "CUDA_VISIBLE_DEVICES='2' names no GPU of the device list" in r.stderr, r.stderr


def test_cuda_visible_devices_over_servers_given_their_gpus_by_number(tmp_path, client_lib):
    """Servers started with `--devices 0` (as one per GPU of a machine is): the client names the GPUs it
    chose by UUID, which each server matches to the device it exposes by number (before, refused: 'names
    none of the server's devices', found on two H200s)."""
    script = tmp_path / "count.py"
    script.write_text(COUNT)
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(ServerProcess(tmp_path / name, "--devices", "0"))
        listed = ",".join(s.address for s in servers)
        for value, count in (("1", 1), ("1,0", 2)):
            r = run(listed, sys.executable, str(script), env={"CUDA_VISIBLE_DEVICES": value})
            assert r.returncode == 0 and r.stdout.strip() == f"init 0 count 0 {count}", (value, r.stdout + r.stderr)
    finally:
        for s in servers:
            s.stop()


def test_an_offer_serves_its_key_once(two_servers):
    """server/peer_copy.py: a fetch names an offer's one-time key; one no offer has is refused by name."""
    from cuwire.server import peer_copy
    from cuwire.server.errors import CudaFail

    with pytest.raises(ValueError, match="no offer has that key"):
        peer_copy.take_offer(two_servers[0].address, os.urandom(16), memoryview(bytearray(16)), lambda at, n: None)
    offers = peer_copy.Offers()
    key, data = offers.add(16)
    data[:] = b"x" * 16
    buf, size = offers.take(key)
    assert buf[:size] == b"x" * 16 and offers.take(key) is None  # (once)
    offers.give_back(buf)
    again, data = offers.add(10)
    assert data.obj is buf and offers.take(again)[1] == 10  # (a buffer kept for the next offer)
    with pytest.raises(CudaFail, match="hold"):  # what offers hold at once is bounded (checked before allocating)
        offers.add(peer_copy.OFFERS_MOST + 1)
    from cuwire.server.service import check_hello
    from cuwire.settings import Settings
    from cuwire.wire.hello import make_hello

    guarded = Settings(token="secret")  # a fetching server names the key, not the token; nothing else may
    assert check_hello(guarded, make_hello(join=key, peer_copy=True)) is None
    assert check_hello(guarded, make_hello(peer_copy=True)).refusal == check_hello(guarded, make_hello()).refusal
    assert check_hello(guarded, make_hello(join=key)) is not None
    stale, _ = offers.add(4)
    offers.held[stale] = (*offers.held[stale][:2], 0.0)  # (expired)
    assert offers.take(stale) is None
