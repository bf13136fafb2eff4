"""Every test app, unmodified, through the real client library, a real gRPC connection and a real server
whose backend is the emulated device; its stdout must equal the expected output. NVIDIA's own
libcudart runs each one on cuwire's libcuda.so.1, as `cuwire run` runs it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import APPS, ServerProcess, compile_against_client, run_remote

EXPECTED = APPS / "expected"
APPS_SAME_AS_NATIVE = ["vector_add", "memcpy_kinds", "memset", "events", "streams", "device_symbols", "templated",
                       "struct_arg", "two_units", "error_paths", "launch_api", "static_app", "dlopen_app",
                       "driver_api", "contexts_threads", "large_copies", "mapped_memory", "callbacks", "managed_memory",
                       "cooperative", "mempool", "device_printf", "graphs", "vmm", "textures", "graph_nodes",
                       "peer_copy", "multi_stream_pinned", "clusters", "graph_conditional", "stream_memops",
                       "stream_attributes", "tensor_map", "memcpy_batch",
                       "occupancy", "graph_host_copies", "user_objects", "kernel_node_params",
                       "managed_hints", "capture_modes", "teardown", "step_loop", "input_copies", "start_up",
                       "many_kernels", "graph_updates"]
# how each CUWIRE_TRANSPORT travels to a server on this host (--stats names it)
TRANSPORTS = {"auto": "Unix socket and shared memory", "unix": "Unix socket and shared memory", "tcp": "TCP"}


@pytest.mark.parametrize("name", APPS_SAME_AS_NATIVE)
def test_app_output_matches(name, apps: Path, client_lib, server):
    r = run_remote(apps / name, client_lib, server.address)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    assert "EMULATED" in r.stderr  # the emulated device always says so
    assert "unimplemented" not in r.stderr, r.stderr


# apps whose kernels come from libraries in many ways: by the runtime, many of them, templated, two
# translation units, device globals, graphs and kernel nodes read back, a __grid_constant__ tensor map
NAMED_LOAD_APPS = ["vector_add", "templated", "two_units", "device_symbols", "many_kernels", "launch_api",
                   "graph_nodes", "kernel_node_params", "tensor_map", "struct_arg", "cooperative", "clusters"]


@pytest.mark.parametrize("named", ["1", "0"])
@pytest.mark.parametrize("name", NAMED_LOAD_APPS)
def test_app_output_matches_with_named_loads(name, named, apps: Path, client_lib, server):
    """CUWIRE_NAMED_LOADS=1, the default (the client names libraries and kernels and does not wait for their
    loads and lookups), and 0 (each load and lookup asked of the server), with no list of a last run: the
    same output."""
    r = run_remote(apps / name, client_lib, server.address, env={"CUWIRE_NAMED_LOADS": named, "CUWIRE_STATS": "1",
                                                                 "CUWIRE_LOAD_LISTS": ""})
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    assert ("loaded without waiting, under handles the client named" in r.stderr) == (named == "1"), r.stderr


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize("name", ["large_copies", "vector_add"])
def test_every_transport_gives_the_same_output(name, transport, apps: Path, client_lib, server):
    """A local server is reached over its Unix socket, payloads through shared memory (auto, unix), or
    over TCP (tcp): the same bytes either way."""
    r = run_remote(apps / name, client_lib, server.address, env={"CUWIRE_TRANSPORT": transport, "CUWIRE_STATS": "1"})
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    assert f"transport: {TRANSPORTS[transport]} to {server.address}" in r.stderr
    # page-locked buffers live in host memory shared with the server: their copies carry no bytes
    assert ("cuwire.CopyShared" in r.stderr) == (name == "large_copies" and transport != "tcp"), r.stderr


def test_mapped_memory_over_tcp_keeps_the_servers_copy_in_step(apps: Path, client_lib, server):
    """Over TCP the GPU cannot reach the client's memory: page-locked memory that a call passes as a device
    address (a kernel's parameter, through cudaHostGetDevicePointer or the host pointer itself, registered
    memory on the heap and the stack alike, two registrations sharing a page, one that starts in a page mapped
    for another's earlier and goes on past it) is mapped by the server at the same
    address, and the two copies
    are kept in step at calls (HostCopy records): a kernel's writes come back after the synchronization, the
    program's and a copy's reach the server's copy before the next call."""
    r = run_remote(apps / "mapped_memory", client_lib, server.address, "--shared-pages",
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    expected = (EXPECTED / "mapped_memory.out").read_text().splitlines()
    assert r.stdout.splitlines() == [*expected[:-1], f"{'a registration from a page mapped before':44} OK",
                                     f"{'two registrations sharing a page':44} OK", expected[-1]], \
        r.stderr
    assert "cuwire.RegisterHost" in r.stderr, r.stderr  # (the HostCopy records are queued: no round trip)


def test_page_locked_memory_over_tcp_is_mapped_within_the_sessions_budget(apps: Path, client_lib, tmp_path):
    """The host memory a session maps for a client over TCP counts against CUWIRE_HOST_MEMORY: past it the
    server refuses (its log says why), the client says so once, and the calls given that memory fail as
    calls given memory the GPU cannot reach do: no crash, no hang."""
    small = ServerProcess(tmp_path, env={"CUWIRE_HOST_MEMORY": "16384"})
    try:
        r = run_remote(apps / "mapped_memory", client_lib, small.address, env={"CUWIRE_TRANSPORT": "tcp"})
    finally:
        small.stop()
    assert r.returncode == 1 and "cudaErrorIllegalAddress" in r.stdout, r.stdout + r.stderr
    assert r.stderr.count("the server did not map page-locked memory") == 1, r.stderr
    assert "CUDA_ERROR_OUT_OF_MEMORY" in r.stderr
    assert "would take the session past its budget (16384 bytes, CUWIRE_HOST_MEMORY)" in small.log_path.read_text()


def test_page_locked_copies_over_tcp_map_nothing(apps: Path, client_lib, server):
    """Page-locked memory that is only the host side of copies (PyTorch's pinned buffers) is not mapped by the
    server: the client makes those copies itself, and memory kept in step would cost a round trip at each
    synchronization."""
    r = run_remote(apps / "multi_stream_pinned", client_lib, server.address,
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (EXPECTED / "multi_stream_pinned.out").read_text(), r.stderr
    assert "cuwire.RegisterHost" not in r.stderr and "cuwire.HostCopy" not in r.stderr, r.stderr


def test_graph_copies_of_host_memory_over_tcp_are_refused_by_name(apps: Path, client_lib, server):
    """A graph runs on the server: over TCP its memcpy nodes cannot reach the program's host memory, and the
    program is told so (the server's reason comes with the reply), not only given the error code."""
    r = run_remote(apps / "graph_host_copies", client_lib, server.address, env={"CUWIRE_TRANSPORT": "tcp"})
    assert r.returncode == 1 and "cudaErrorNotSupported" in r.stdout
    assert "cuwire: not supported: cuGraphAddMemcpyNode: a memcpy node with host memory the server cannot reach" \
        in r.stderr, r.stderr


def test_managed_memory_over_tcp_keeps_a_host_copy_in_step(apps: Path, client_lib, server):
    """Over TCP, managed memory is the server's with a host copy here at the same address: the host's
    changes go to the device before the next call, the device's come back after each synchronization."""
    r = run_remote(apps / "managed_memory", client_lib, server.address,
                   env={"CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (EXPECTED / "managed_memory.out").read_text(), r.stderr
    assert f"transport: TCP to {server.address}" in r.stderr and "cuwire.ManagedAlloc" in r.stderr


@pytest.mark.parametrize("name", ["callbacks", "graph_nodes"])
def test_host_functions_over_tcp_run_on_a_connection_of_their_own(name, apps: Path, client_lib, server):
    """Over TCP the server posts the program's host functions (stream callbacks, graph host nodes) on a
    connection of the session's own, which the client opens at its first one: the same output."""
    r = run_remote(apps / name, client_lib, server.address, env={"CUWIRE_TRANSPORT": "tcp"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    assert "host functions go to the client on a connection of their own" in server.text()


def test_page_locked_memory_past_the_shared_budget_is_the_clients_own(apps: Path, client_lib, tmp_path):
    """A server that shares less host memory than the program pins: cudaMallocHost still succeeds (memory
    of the client's own, its copies travelling as pageable ones do), with the same results."""
    s = ServerProcess(tmp_path, env={"CUWIRE_HOST_MEMORY": str(8 << 20)})
    try:
        r = run_remote(apps / "large_copies", client_lib, s.address, env={"CUWIRE_STATS": "1"})
    finally:
        s.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (EXPECTED / "large_copies.out").read_text()
    assert "transport: Unix socket and shared memory" in r.stderr and "cuwire.CopyShared" not in r.stderr


def test_device_query_reports_the_emulated_device(apps, client_lib, server):
    r = run_remote(apps / "device_query", client_lib, server.address)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (EXPECTED / "device_query.emulated.out").read_text()


def test_unimplemented_function_is_loud(apps, client_lib, server):
    r = run_remote(apps / "unimplemented", client_lib, server.address)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (EXPECTED / "unimplemented.out").read_text()
    # NVIDIA's runtime asks cuwire's libcuda for cuLogsCurrent, which names itself
    assert "cuwire: unimplemented CUDA function cuLogsCurrent (cuda.h)" in r.stderr


@pytest.mark.parametrize("name", ["ipc", "ipc_shareable"])
def test_ipc_between_two_processes_of_a_program(name, apps: Path, client_lib, tmp_path):
    """ipc, ipc_shareable: a program's two processes, a session each, share device memory and an event
    (cudaIpc*), a physical allocation and a pool's allocation (file descriptors over a Unix socket). The
    emulated device's memory is its process's, so its sessions are threads here (a GPU's driver opens
    another process's memory: make gpu-test runs them against a server whose sessions are processes)."""
    s = ServerProcess(tmp_path, "--isolation", "thread")
    try:
        r = run_remote(apps / name, client_lib, s.address)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
        assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    finally:
        s.stop()


@pytest.mark.parametrize("name, refused", [
    ("ipc", "cudaIpcOpenMemHandle((void **)&d, h.memory, cudaIpcMemLazyEnablePeerAccess) failed: 801"),
    ("ipc_shareable", "cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)allocation_fd, "
                      "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) failed: 801")])
def test_ipc_to_sessions_in_processes_reaches_the_exporter(name, refused, apps: Path, client_lib, server):
    """With sessions in processes of their own, the importing session's server finds what the exporting
    one noted (and, for a file descriptor, gets it from the exporter's process over the IPC folder's
    socket); only then does the emulated device refuse another process's memory, with
    cudaErrorNotSupported (a handle nobody exported is cudaErrorInvalidValue, 1), which the program says."""
    r = run_remote(apps / name, client_lib, server.address)
    assert r.returncode == 1
    assert refused in r.stdout, r.stdout + r.stderr


MEMCPY_NODE_SET = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_api.h"
static CUDA_MEMCPY3D down(CUdeviceptr from, void *to, size_t n) {
    CUDA_MEMCPY3D c; memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE; c.srcDevice = from;
    c.dstMemoryType = CU_MEMORYTYPE_HOST; c.dstHost = to;
    c.WidthInBytes = n; c.Height = 1; c.Depth = 1;
    return c;
}
int main(void) {
    CUdevice dev; CUcontext ctx; CUdeviceptr d; CUgraph g; CUgraphNode node; void *pinned, *other;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc_v2(&d, 4096) || cuMemHostAlloc(&pinned, 4096, 0) || cuMemHostAlloc(&other, 4096, 0) ||
        cuGraphCreate(&g, 0))
        return 1;
    CUDA_MEMCPY3D c = down(d, pinned, 4096);
    if (cuGraphAddMemcpyNode(&node, g, NULL, 0, &c, ctx)) return 2;
    char *pageable = malloc(4096);
    c = down(d, pageable, 4096);
    printf("set to pageable memory: %d\n", (int)cuGraphMemcpyNodeSetParams(node, &c));
    c = down(d, other, 4096);
    printf("set to page-locked memory: %d\n", (int)cuGraphMemcpyNodeSetParams(node, &c));
    CUDA_MEMCPY3D back; memset(&back, 0, sizeof back);
    CUresult got = cuGraphMemcpyNodeGetParams(node, &back);
    printf("read back: %d, the new memory: %d\n", (int)got, back.dstHost == other);
    return 0;
}
"""


def test_memcpy_node_set_to_pageable_memory_is_refused_by_name(client_lib, server, tmp_path):
    """A memcpy node's parameters may be set to page-locked memory (the server shares it), not to pageable
    memory, for which no stand-in is made: refused as not supported, and named."""
    exe = compile_against_client(MEMCPY_NODE_SET, tmp_path, client_lib, "memcpy_node_set")
    r = run_remote(exe, client_lib, server.address)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ("set to pageable memory: 801\nset to page-locked memory: 0\n"
                        "read back: 0, the new memory: 1\n"), r.stderr
    assert "a memcpy node's parameters set to pageable host memory" in r.stderr
    assert "cuGraphMemcpyNodeSetParams" in r.stderr


PAGE_LOCKED_AGAIN = r"""
#include <stdio.h>
#include <string.h>
#include "cuda_api.h"
int main(void) {  /* page-locked memory a memset writes and the program reads, freed and allocated again, 50 times */
    CUdevice dev; CUcontext ctx; int wrong = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    for (unsigned int i = 1; i <= 50; i++) {
        unsigned int *p, v = 0;
        if (cuMemHostAlloc((void **)&p, 4096, 0x02 /* CU_MEMHOSTALLOC_DEVICEMAP */)) return 2;
        memset(p, 0, 4096);  /* the program's zeros: the server's copy must have them, whatever it held before */
        if (cuMemsetD32Async((CUdeviceptr)p, i, 512, 0) || cuStreamSynchronize(0)) return 3;
        p[600] = 1000 + i;  /* ...and this, read back through the GPU's view of the memory */
        if (i % 2)
            p[700] = 77;  /* (an odd round's: the next round's zeros must reach the server's copy over it) */
        if (cuMemcpyDtoH_v2(&v, (CUdeviceptr)(p + 600), 4)) return 4;
        wrong += p[0] != i || p[511] != i || p[512] != 0 || p[1023] != 0 || v != 1000 + i || p[700] != (i % 2 ? 77 : 0);
        if (cuMemFreeHost(p)) return 5;
    }
    printf("50 rounds, %d wrong\n", wrong);
    return 0;
}
"""


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_page_locked_memory_freed_and_allocated_again_is_mapped_again_without_asking(transport, client_lib, server,
                                                                                     tmp_path):
    """Page-locked memory freed and allocated again (XLA's transfers) costs no unregistration and no
    registration. Over TCP, where the server maps such memory at the program's address once a call passes
    it as a device address, the server's run stays mapped when freed (client/host_memory.c, left mapped):
    its copy gets the program's bytes whole before the next call, whatever it held, and the GPU's writes come
    back. Over the Unix socket, where it is carved from the memory shared with the server, a freed allocation
    stays registered for the next of its size (client/shared_host.py, keep)."""
    program = compile_against_client(PAGE_LOCKED_AGAIN, tmp_path, client_lib, "page_locked_again")
    r = subprocess.run([str(program)], capture_output=True, text=True, timeout=120, env={
        **os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_TRANSPORT": transport, "CUWIRE_STATS": "1"})
    assert r.returncode == 0 and r.stdout == "50 rounds, 0 wrong\n", r.stdout + r.stderr
    sent = dict(re.findall(r"(cuwire\.\w+) (\d+)", re.search(r"top calls sent to the server, by count: (.*)",
                                                              r.stderr)[1]))
    # (without the runs left mapped: 50 of each; the heap gives the same address again almost always)
    assert int(sent.get("cuwire.RegisterHost", 0)) <= 10 and int(sent.get("cuwire.UnregisterHost", 0)) <= 10, sent
