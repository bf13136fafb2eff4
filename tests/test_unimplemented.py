"""A function cuwire does not remote says so by name and returns "not supported"; it never falls through."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import compile_against_client

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = r"""
#include <stdio.h>
#include "cuda_api.h"
int main(void) {
    int a = cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                       CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    int b = cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                       CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    unsigned fans;
    int c = nvmlDeviceGetNumFans(0, &fans);
    printf("%d %d %d\n", a, b, c);
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(client_lib, tmp_path_factory) -> Path:
    return compile_against_client(PROGRAM, tmp_path_factory.mktemp("unimpl"), client_lib)


def test_unimplemented_says_so_once_and_returns_not_supported(program):
    r = subprocess.run([str(program)], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "CUWIRE_STRICT": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["801", "801", "3"]  # CUDA_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_SUPPORTED
    assert r.stderr.count("cuwire: unimplemented CUDA function cuFlushGPUDirectRDMAWrites (cuda.h)") == 1
    assert "cuwire: unimplemented CUDA function nvmlDeviceGetNumFans (nvml.h)" in r.stderr


def test_strict_mode_aborts(program):
    r = subprocess.run([str(program)], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "CUWIRE_STRICT": "1"})
    assert r.returncode != 0
    assert "cuwire: unimplemented CUDA function cuFlushGPUDirectRDMAWrites" in r.stderr
    assert "aborting" in r.stderr
