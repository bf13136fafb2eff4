"""Where no CUDA is installed: cuwire's libcuda.so.1 under NVIDIA's runtime from the pinned wheel, a
program that opens the runtime itself with dlopen, and a program with nvcc's default static runtime."""

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


def test_static_runtime_runs(apps, client_lib, server):
    """nvcc's default links the runtime into the program: it opens libcuda.so.1 and asks for the
    driver's private tables, which cuwire's libcuda serves."""
    r = cuwire_run(server.address, str(apps / "static_app"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (EXPECTED / "static_app.out").read_text()
    assert "unknown private driver table" not in r.stderr and "unimplemented" not in r.stderr, r.stderr


def wheel_runtime() -> Path:
    from cuwire import cli

    found = cli.nvidia_runtime_dir()
    assert found is not None, "the nvidia-cuda-runtime wheel (a dependency of cuwire) is not installed"
    return (found / "libcudart.so.13").resolve()


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare -m")
def test_no_real_cuda_in_the_process(apps, client_lib, server, maps_probe, tmp_path):
    """With every libcuda and every other libcudart on the machine hidden, programs run through
    `cuwire run`: NVIDIA's runtime comes from the wheel, libcuda is cuwire's, nothing else is mapped."""
    runtime = wheel_runtime()
    hidden = [p for p in real_cuda_libraries() if Path(p).resolve() != runtime]
    maps = tmp_path / "maps.txt"
    env = {"LD_PRELOAD": str(maps_probe), "CUWIRE_MAPS_OUT": str(maps)}
    for app in ("vector_add", "dlopen_app", "static_app"):
        r = cuwire_run(server.address, str(apps / app), env=env, hide=hidden)
        assert r.returncode == 0, r.stderr
        assert r.stdout == (EXPECTED / f"{app}.out").read_text()
    lines = maps.read_text().splitlines()
    probed = {line.split(" in ", 1)[1] for line in lines if line.startswith("probe ran in ")}
    assert {str(apps / a) for a in ("vector_add", "dlopen_app", "static_app")} <= probed  # the probe ran in each
    mapped = {line for line in lines if not line.startswith("probe ran")}
    assert any("/build/client/libcuwire.so" in m for m in mapped), mapped
    assert all("/build/client/libcuwire" in m or m == str(runtime) for m in mapped), mapped  # (and its Python half)
