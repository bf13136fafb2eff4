"""Two processes of one job, each on its own server (issue 39's training across servers, as Gloo does it):
each sets CUWIRE_SERVER before its first CUDA call, keeps its data in its own server's device memory, and
they all-reduce through the host (a pipe here, TCP for Gloo): each copies its part from the device, sends
it, adds the other's and copies the sum back. Both end with the same sum, each server served one session.
The emulated device; tests/multi_gpu_apps/ddp_across_servers.py is the same with PyTorch on GPUs."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ServerProcess

JOB = r"""
import ctypes, multiprocessing as mp, os, struct, sys

N = 1024

def rank_main(rank, server, pipe, out):
    os.environ["CUWIRE_SERVER"] = server  # (read at this process's first CUDA call)
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx, mem = ctypes.c_void_p(), ctypes.c_uint64()
    assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0 and cuda.cuMemAlloc_v2(ctypes.byref(mem), N * 4) == 0
    mine = (ctypes.c_float * N)(*[(rank + 1) * i for i in range(N)])  # this rank's gradient
    assert cuda.cuMemcpyHtoD_v2(mem, mine, N * 4) == 0
    local = (ctypes.c_float * N)()
    assert cuda.cuMemcpyDtoH_v2(local, mem, N * 4) == 0  # the all-reduce: device -> host -> peer
    pipe.send(bytes(local))
    theirs = (ctypes.c_float * N).from_buffer_copy(pipe.recv())
    summed = (ctypes.c_float * N)(*[a + b for a, b in zip(local, theirs)])
    assert cuda.cuMemcpyHtoD_v2(mem, summed, N * 4) == 0  # ... and the sum back to the device
    back = (ctypes.c_float * N)()
    assert cuda.cuMemcpyDtoH_v2(back, mem, N * 4) == 0
    out.put((rank, sum(back)))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, s, p, out)) for r, (s, p) in enumerate(zip(sys.argv[1:3], (a, b)))]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    print(results, all(p.exitcode == 0 for p in procs))
"""


def test_two_ranks_on_two_servers_all_reduce_through_the_host(tmp_path, client_lib):
    from cuwire import cli

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    servers = [ServerProcess(tmp_path / name) for name in ("a", "b")]
    try:
        script = tmp_path / "job.py"
        script.write_text(JOB)
        env = cli.program_env(client_lib, "", None, False, base=dict(os.environ))
        env.pop("CUWIRE_SERVER")  # each rank names its own
        r = subprocess.run([sys.executable, str(script), *(s.address for s in servers)], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        expected = float(sum(3 * i for i in range(1024)))  # rank 0's i plus rank 1's 2i
        assert r.stdout.split("\n")[0] == f"[(0, {expected}), (1, {expected})] True", r.stdout + r.stderr
        for s in servers:  # each server served one session, for one rank
            assert s.text().count(" opened for pid ") == 1, s.text()
    finally:
        for s in servers:
            s.stop()
