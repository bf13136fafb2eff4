"""Windows of address space for the servers of a device list (cuwire/address_space.py,
docs/several-servers.md): a session told its place keeps every mapping it makes, device memory among them,
in windows of its own, and programs run through it as through any session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compile_against_client, run_remote
from test_apps_e2e import EXPECTED

from cuwire import address_space
from cuwire.address_space import LOW_END, LOW_SLOT, LOWEST, MOST_SERVERS, USER_SPACE_END, WINDOW_SIZE, WINDOWS_START
from cuwire.wire import ring

# A program's device pointers (three allocations, from two calls that make memory), then handles of four kinds
POINTERS = r"""
#include <stdint.h>
#include <stdio.h>
#include "cuda_api.h"

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr a, b, c;
    size_t pitch;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 1;
    if (cuMemAlloc_v2(&a, 1 << 20) || cuMemAlloc_v2(&b, 3000) || cuMemAllocPitch_v2(&c, &pitch, 100, 10, 4))
        return 2;
    CUstream stream;
    CUevent event;
    CUgraph graph;
    if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) || cuEventCreate(&event, 0) || cuGraphCreate(&graph, 0))
        return 3;
    printf("%llu %llu %llu\n", (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);
    printf("%llu %llu %llu %llu\n", (unsigned long long)(uintptr_t)ctx, (unsigned long long)(uintptr_t)stream,
           (unsigned long long)(uintptr_t)event, (unsigned long long)(uintptr_t)graph);
    return 0;
}
"""

# What a session process does before CUDA starts, in a process of its own: the hold, then new mappings
KEEP_IN = """
import json, mmap, sys
from cuwire import address_space
from cuwire.wire import ring
from cuwire.server._records import lib
windows = address_space.windows(int(sys.argv[1]))
kept = address_space.keep_in(lib, windows)
start, end = windows[-1]
maps = [mmap.mmap(-1, size) for size in (4096, 1 << 20, 64 << 20)]  # (Python's own, through mmap(2))
import ctypes
print(json.dumps({"kept": kept, "start": start, "end": end,
                  "mapped": [ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in maps],
                  "reserved": lib.cw_reserve(1 << 30)}))
"""


def test_each_server_of_a_list_has_windows_of_its_own():
    assert address_space.windows(0) == []  # a program's only server: its memory lies where its driver puts it
    each = [address_space.windows(n) for n in range(1, MOST_SERVERS + 1)]
    assert each[0] == [(LOW_END - LOW_SLOT, LOW_END), (WINDOWS_START, WINDOWS_START + WINDOW_SIZE)]
    ranges = sorted(r for windows in each for r in windows)
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # apart
    assert ranges[0][0] >= 512 << 30  # above where a single server's driver puts its pool (from 8 GiB)
    assert ranges[-1][1] <= 0x550000000000  # below where a program's heap and libraries lie
    assert ranges[-1][1] <= ring.HOST_REGION[0]  # apart from the client's shared page-locked memory
    assert address_space.windows(MOST_SERVERS + 1) == []
    assert address_space.outside(each[0]) == [(LOWEST, LOW_END - LOW_SLOT), (LOW_END, WINDOWS_START),
                                              (WINDOWS_START + WINDOW_SIZE, USER_SPACE_END)]


@pytest.mark.parametrize("number", [1, MOST_SERVERS])
def test_a_process_that_keeps_its_mappings_in_a_window_maps_nothing_outside(number):
    r = subprocess.run([sys.executable, "-c", KEEP_IN, str(number)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["kept"]
    for address in [*seen["mapped"], seen["reserved"]]:
        assert seen["start"] <= address < seen["end"], (hex(address), seen)


def pointers_and_handles(client_lib: Path, server, tmp_path: Path, env: dict[str, str]) -> list[int]:
    exe = compile_against_client(POINTERS, tmp_path, client_lib, "pointers")
    r = run_remote(exe, client_lib, server.address, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return [int(word) for word in r.stdout.split()]


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_list_servers_device_memory_and_handles_lie_in_its_window(transport, client_lib, server, tmp_path):
    start, end = address_space.windows(2)[-1]
    listed = {"CUWIRE_SERVER_NUMBER": "2", "CUWIRE_TRANSPORT": transport}
    given = pointers_and_handles(client_lib, server, tmp_path, listed)
    assert len(given) == 7 and all(start <= p < end for p in given), [hex(p) for p in given]
    alone = pointers_and_handles(client_lib, server, tmp_path, {"CUWIRE_TRANSPORT": transport})
    assert not any(WINDOWS_START <= p < address_space.windows(MOST_SERVERS)[-1][1] for p in alone), alone


WINDOWED_APPS = ["vector_add", "memcpy_kinds", "mapped_memory", "managed_memory", "mempool", "vmm", "graphs",
                 "callbacks", "large_copies", "textures", "peer_copy", "graph_nodes"]


@pytest.mark.parametrize("name", WINDOWED_APPS)
def test_apps_give_the_same_output_through_a_later_servers_session(name, apps: Path, client_lib, server):
    r = run_remote(apps / name, client_lib, server.address, env={"CUWIRE_SERVER_NUMBER": "1"})
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    # every handle the session gave lies in its windows, as a GPU driver's do (they point into its memory)
    assert "lies outside the session's windows" not in server.text()


def test_a_server_number_past_the_windows_is_refused_by_name(client_lib, server, tmp_path):
    exe = compile_against_client(POINTERS, tmp_path, client_lib, "pointers")
    r = run_remote(exe, client_lib, server.address, env={"CUWIRE_SERVER_NUMBER": str(MOST_SERVERS + 1)})
    assert r.returncode != 0
    assert f"CUWIRE_SERVER_NUMBER='{MOST_SERVERS + 1}': expected a whole number from 0 to {MOST_SERVERS}" in r.stderr


def test_a_hello_past_the_windows_is_refused_by_the_session_by_name(server):
    from cuwire import cli

    reply = cli.handshake(server.address, cli.make_hello("", server_number=MOST_SERVERS + 1))
    assert f"names this server as number {MOST_SERVERS + 1}, which has no window of address space" in reply.error


class Reserving:
    """A driver whose cuMemAddressReserve refuses an address asked for outside the windows, as the GPU's
    driver did in a session holding the rest (measured on an H200 host, 2026-11-27)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def cuMemAddressReserve(self, ptr, size, alignment, addr, flags) -> int:
        self.asked.append(addr)
        if addr:
            return 2  # CUDA_ERROR_OUT_OF_MEMORY
        ptr[0] = 0xF102000000
        return 0


@pytest.mark.parametrize("windows", [[], address_space.windows(1)])
def test_an_address_asked_of_a_reservation_is_a_hint_in_a_sessions_windows(windows):
    from types import SimpleNamespace

    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.server import vmm
    from cuwire.server.backend import cuda_ffi

    lib, added = Reserving(), []
    s = SimpleNamespace(ffi=cuda_ffi(), lib=lib, vmm=None, server=SimpleNamespace(windows=windows),
                        records=SimpleNamespace(add_memory=lambda at, size: added.append((at, size))))
    r = vmm.cuMemAddressReserve(s, pb.cuMemAddressReserve_Args(size=1 << 30, addr=0x100000000000))
    if windows:  # asked again where the driver chooses: in the session's windows
        assert (r.status, r.ptr, lib.asked, added) == (0, 0xF102000000, [0x100000000000, 0], [(0xF102000000, 1 << 30)])
    else:  # a single server's session: the driver's answer, as natively
        assert (r.status, lib.asked, added) == (2, [0x100000000000], [])


def test_a_handle_outside_a_sessions_windows_is_said_once_a_kind_and_counted(caplog):
    from types import SimpleNamespace

    from cuwire.server.session import Session

    windows = address_space.windows(1)
    s = SimpleNamespace(name="7", server=SimpleNamespace(windows=windows), handles={}, casts={}, handles_outside=0,
                        kinds_outside=set(), records=SimpleNamespace(checks=lambda kind: False))
    s.outside_windows = lambda kind, value: Session.outside_windows(s, kind, value)
    inside = windows[1][0] + 0x40
    for value in (inside, 0x2C2FA5C0, 0x2C2FA600):  # (the primary context from the main heap: 0x2c2fa5c0, measured)
        Session.owns_handle(s, "CUctx_st", value)
    Session.owns_handle(s, "CUstream_st", 0x2C2FA700)
    assert s.handles == {"CUctx_st": {inside, 0x2C2FA5C0, 0x2C2FA600}, "CUstream_st": {0x2C2FA700}}  # still owned
    assert s.handles_outside == 3
    said = [r.getMessage() for r in caplog.records if "outside the session's windows" in r.getMessage()]
    assert said == ["session 7: a CUctx_st handle 0x2c2fa5c0 lies outside the session's windows of address space "
                    "(another server of the program's device list could give the same value)",
                    "session 7: a CUstream_st handle 0x2c2fa700 lies outside the session's windows of address space "
                    "(another server of the program's device list could give the same value)"]


def test_a_server_of_sessions_in_one_process_refuses_a_list_place_by_name(tmp_path):
    from conftest import ServerProcess

    from cuwire import cli

    s = ServerProcess(tmp_path, "--isolation", "thread")
    try:
        reply = cli.handshake(s.address, cli.make_hello("", server_number=1))
        assert "runs every session in one process (--isolation thread), which cannot keep" in reply.error
        assert not cli.handshake(s.address, cli.make_hello("")).error  # a program's only server: served
    finally:
        s.stop()


def test_two_servers_of_a_list_give_values_that_never_meet(client_lib, server, fresh_server, tmp_path):
    """As a program of a two-server list would see them: each server's pointers and handles in its own
    windows, none equal to the other's (two emulated servers lay memory out alike: without windows their
    values would meet)."""
    first = pointers_and_handles(client_lib, server, tmp_path, {"CUWIRE_SERVER_NUMBER": "1"})
    second = pointers_and_handles(client_lib, fresh_server, tmp_path, {"CUWIRE_SERVER_NUMBER": "2"})
    for values, number in ((first, 1), (second, 2)):
        assert all(address_space.within(address_space.windows(number), v, 1) for v in values), [hex(v) for v in values]
    assert not set(first) & set(second)


@pytest.mark.parametrize("name", ["managed_memory", "mapped_memory", "large_copies", "callbacks"])
def test_apps_over_tcp_give_the_same_output_through_a_list_servers_session(name, apps: Path, client_lib, server):
    """Over TCP the client maps its copy of managed and page-locked memory at the server's addresses, which
    now lie in the session's windows: the same output."""
    r = run_remote(apps / name, client_lib, server.address,
                   env={"CUWIRE_SERVER_NUMBER": "1", "CUWIRE_TRANSPORT": "tcp", "CUWIRE_STATS": "1"})
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    assert f"transport: TCP to {server.address}" in r.stderr
