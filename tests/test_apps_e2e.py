"""Every test app, unmodified, through the real client library, a real gRPC connection and a real server
whose backend is the emulated device; its stdout must equal the expected output. Each runs on both
layers: the driver layer (NVIDIA's own libcudart on cuwire's libcuda.so.1) and the runtime layer
(cuwire's runtime stand-in preloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import APPS, run_layer, run_remote

EXPECTED = APPS / "expected"
APPS_SAME_AS_NATIVE = ["vector_add", "memcpy_kinds", "memset", "events", "streams", "device_symbols", "templated",
                       "struct_arg", "two_units", "error_paths", "launch_api", "static_app", "dlopen_app",
                       "driver_api", "contexts_threads"]
LAYERS = ["driver", "runtime"]


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("name", APPS_SAME_AS_NATIVE)
def test_app_output_matches(name, layer, apps: Path, client_lib, server):
    r = run_layer(layer, apps / name, client_lib, server.address)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout == (EXPECTED / f"{name}.out").read_text(), r.stderr
    assert "EMULATED" in r.stderr  # the emulated device always says so
    assert "unimplemented" not in r.stderr, r.stderr


@pytest.mark.parametrize("layer", LAYERS)
def test_device_query_reports_the_emulated_device(layer, apps, client_lib, server):
    r = run_layer(layer, apps / "device_query", client_lib, server.address)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (EXPECTED / "device_query.emulated.out").read_text()


def test_unimplemented_function_is_loud(apps, client_lib, server):
    r = run_remote(apps / "unimplemented", client_lib, server.address)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (EXPECTED / "unimplemented.out").read_text()
    assert "cuwire: unimplemented CUDA function cudaGraphCreate (cuda_runtime_api.h)" in r.stderr
