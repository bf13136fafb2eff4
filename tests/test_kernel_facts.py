"""cuwire/kernel_facts.py reads a cubin's kernels as ptxas built them: checked against what ptxas itself
says of each entry function (nvcc -Xptxas -v: registers, static shared memory, stack frame), and against
the source's own launch bounds, cluster dimensions and parameters. Whether the attributes modelled from
these are the driver's is checked on a GPU (tests/gpu_kernel_attributes.py)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from cuwire import kernel_facts

SOURCE = r"""
__constant__ float table[100];
__device__ __noinline__ int helper(int x) { return x * 3 + 1; }
__global__ void plain(int *p, int n) { p[threadIdx.x] = helper(n) + (int)table[n]; }
__global__ void empty() {}
__global__ void __launch_bounds__(256, 2) bounded(float *p) {
    __shared__ float s[1000];
    s[threadIdx.x] = p[threadIdx.x]; __syncthreads(); p[threadIdx.x] = s[999 - threadIdx.x];
}
__global__ void on_stack(float *p, int i, int n) {
    volatile float a[300];
    for (int k = 0; k < n; k++) a[k % 300] = p[k] * k;
    p[0] = a[i];
}
__global__ void __cluster_dims__(2, 1, 1) clustered(float *p) { p[blockIdx.x] = 1; }
__global__ void many_registers(double *p, int n) {
    double acc[40];
    #pragma unroll
    for (int k = 0; k < 40; k++) acc[k] = p[k * n + threadIdx.x];
    #pragma unroll
    for (int r = 0; r < 8; r++) {
        #pragma unroll
        for (int k = 0; k < 40; k++) acc[k] = acc[k] * acc[(k + r) % 40] + 1.0;
    }
    double sum = 0;
    #pragma unroll
    for (int k = 0; k < 40; k++) sum += acc[k];
    p[threadIdx.x] = sum;
}
template <typename T> __global__ void templated(T *p, T v, char c) { p[0] = v + c; }
template __global__ void templated<float>(float *, float, char);
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[bytes, dict[str, dict[str, int]]]:
    """The cubin, and ptxas's account of each entry function: name -> registers, smem, stack."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    folder = tmp_path_factory.mktemp("facts")
    (folder / "k.cu").write_text(SOURCE)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(folder / "k.cubin"),
                        str(folder / "k.cu")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    said: dict[str, dict[str, int]] = {}
    current = None
    for line in r.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = said.setdefault(m[1], {"smem": 0})
        elif current is not None and (m := re.search(r"(\d+) bytes stack frame", line)):
            current["stack"] = int(m[1])
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(m[1])
            if s := re.search(r"(\d+) bytes smem", line):
                current["smem"] = int(s[1])
    return (folder / "k.cubin").read_bytes(), said


def test_each_entry_function_as_ptxas_built_it(built):
    cubin, said = built
    facts = kernel_facts.read(cubin)
    assert facts.sm == 90
    assert set(facts.kernels) == set(said)  # entry functions only: not the __noinline__ helper
    for name, k in facts.kernels.items():
        assert (k.registers, k.shared, k.frame) == (said[name]["registers"], said[name]["smem"],
                                                   said[name]["stack"]), name
    assert facts.kernels["_Z7boundedPf"].shared == 4000 and facts.kernels["_Z8on_stackPfii"].frame >= 1200
    assert facts.kernels["_Z14many_registersPdi"].registers > 64
    assert facts.constant == 400  # (__constant__ float table[100])


def test_launch_bounds_clusters_and_parameters(built):
    facts = kernel_facts.read(built[0])
    k = facts.kernels
    assert k["_Z7boundedPf"].max_threads == 256 and k["_Z5plainPii"].max_threads == 0
    assert k["_Z9clusteredPf"].cluster == (2, 1, 1) and k["_Z9clusteredPf"].explicit_cluster
    assert k["_Z5plainPii"].cluster == (0, 0, 0) and not k["_Z5plainPii"].explicit_cluster
    assert k["_Z9templatedIfEvPT_S0_c"].params == [(0, 8), (8, 4), (12, 1)]
    assert k["_Z5emptyv"].params == []


def test_the_modelled_block_limit(built):
    """The register file's limit on a block (the model tests/gpu_kernel_attributes.py checks): 255
    registers a thread leave room for 256 threads; launch bounds lower it; few registers leave the
    device's 1024."""
    facts = kernel_facts.read(built[0])
    device = kernel_facts.Device()
    heavy = kernel_facts.KernelFacts("heavy", registers=255)
    assert kernel_facts.max_threads_per_block(heavy, device) == 256
    assert kernel_facts.max_threads_per_block(facts.kernels["_Z7boundedPf"], device) == 256
    assert kernel_facts.max_threads_per_block(facts.kernels["_Z5emptyv"], device) == 1024
    assert kernel_facts.attributes(facts, heavy, device).keys() <= kernel_facts.CHECKED
