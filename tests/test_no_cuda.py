"""Where no CUDA is installed: cuwire's libraries under the names programs load, a program that opens
the runtime itself with dlopen, and a named refusal for a statically linked runtime."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import APPS, ROOT

EXPECTED = APPS / "expected"


def real_cuda_libraries() -> list[str]:
    """Every libcudart/libcuda file on this machine that is not cuwire's own."""
    roots = ["/usr", "/opt", "/lib", "/lib64", str(Path.home() / ".cache"), str(ROOT / ".cache"), sys.prefix]
    found = set()
    for root in roots:
        out = subprocess.run(["find", root, "-xdev", "(", "-name", "libcudart.so*", "-o", "-name", "libcuda.so*",
                              ")", "-type", "f"], capture_output=True, text=True).stdout
        found.update(p for p in out.split() if "/build/client/" not in p)
    return sorted(found)


@pytest.fixture(scope="module")
def maps_probe(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("probe") / "maps_probe.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(ROOT / "tests" / "tools" / "maps_probe.c")],
                   check=True)
    return out


def cuwire_run(server: str, *program: str, env: dict[str, str] | None = None, hide: list[str] | None = None):
    """`cuwire run --server ... -- program`, optionally in a mount namespace where `hide` files are empty."""
    cmd = [sys.executable, "-m", "cuwire.cli", "run", "--server", server, "--", *program]
    if hide:
        mounts = "".join(f"mount --bind /dev/null {f} && " for f in hide)
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", mounts + 'exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_dlopen_app_without_preload(apps, client_lib, server):
    env = {**os.environ, "LD_LIBRARY_PATH": str(client_lib.parent), "CUWIRE_SERVER": server.address}
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([str(apps / "dlopen_app")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (EXPECTED / "dlopen_app.out").read_text()


def test_static_runtime_is_refused_by_name(apps, client_lib, server):
    r = cuwire_run(server.address, str(apps / "static_app"))
    assert "links the CUDA runtime statically" in r.stderr and "rebuild it with `nvcc -cudart shared`" in r.stderr
    assert r.returncode == 2  # the program's own error path
    assert r.stdout.startswith("static_app: cudaMalloc failed")


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare -m")
def test_no_real_cuda_in_the_process(apps, client_lib, server, maps_probe, tmp_path):
    hidden = real_cuda_libraries()
    maps = tmp_path / "maps.txt"
    env = {"LD_PRELOAD": str(maps_probe), "CUWIRE_MAPS_OUT": str(maps)}
    for app in ("vector_add", "dlopen_app"):
        r = cuwire_run(server.address, str(apps / app), env=env, hide=hidden)
        assert r.returncode == 0, r.stderr
        assert r.stdout == (EXPECTED / f"{app}.out").read_text()
    lines = maps.read_text().splitlines()
    probed = {line.split(" in ", 1)[1] for line in lines if line.startswith("probe ran in ")}
    assert {str(apps / "vector_add"), str(apps / "dlopen_app")} <= probed  # the probe ran in both apps
    mapped = {line for line in lines if not line.startswith("probe ran")}
    assert mapped and all("/build/client/libcuwire.so" in m for m in mapped), mapped
