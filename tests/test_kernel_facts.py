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
namespace { __global__ void unnamed_namespace(float *p) { p[0] = 1; } }
static __global__ void file_static(float *p) { p[0] = 2; }
void launch_local(float *p) { unnamed_namespace<<<1, 1>>>(p); file_static<<<1, 1>>>(p); }
template __global__ void templated<float>(float *, float, char);
__global__ void five_barriers(int *p) {
    asm volatile("bar.sync 4, 64;"); p[threadIdx.x] = 2; asm volatile("bar.sync 1, 64;");
}
"""
# kernels whose stack their callees decide (CALLS and DEEPER, two units nvlink joins), and one compiled for
# an older PTX version than its machine code's (OLDER, from compute_80)
CALLS = r"""
__device__ float deeper(float *p, int n);
__device__ float recursive(float *p, int n) {
    float a[32]; for (int i = 0; i < 32; i++) a[i] = p[i] * n;
    return n ? recursive(p, n - 1) + a[n & 31] : a[0];
}
__global__ void calls_itself(float *p, int n) { p[0] = recursive(p, n); }
__global__ void calls_another_unit(float *p, int n) {
    float c[8]; for (int i = 0; i < 8; i++) c[i] = deeper(p + i, n); p[0] = c[n & 7];
}
"""
DEEPER = r"""
__device__ float deeper(float *p, int n) {
    float a[100]; for (int i = 0; i < 100; i++) a[i] = p[i] * n; return a[n % 100];
}
"""
OLDER = r"""
__global__ void older(float *p, int n) { double a[40]; for (int i = 0; i < 40; i++) a[i] = p[i * n]; p[0] = a[n % 40]; }
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
    assert "_Z11file_staticPf" in facts.kernels  # (local symbols, as a static kernel's)
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
    # barriers (occupancy.py): __syncthreads is barrier 0; bar.sync 4 makes five; none, none
    assert (k["_Z7boundedPf"].barriers, k["_Z13five_barriersPi"].barriers, k["_Z5plainPii"].barriers) == (1, 5, 0)


def _build(folder, *steps: list[str]) -> None:
    for step in steps:
        r = subprocess.run(step, capture_output=True, text=True, timeout=300, cwd=folder)
        assert r.returncode == 0, r.stderr


def test_stack_with_callees_and_the_ptx_version(tmp_path):
    """A linked kernel's stack is its frame and its callees' deepest (LOCAL_SIZE_BYTES), unknown for a
    recursive one; the PTX version is the one compiled from, not the machine code's."""
    if shutil.which("nvcc") is None or shutil.which("nvlink") is None:
        pytest.skip("no nvcc")
    for name, text in (("calls.cu", CALLS), ("deeper.cu", DEEPER), ("older.cu", OLDER)):
        (tmp_path / name).write_text(text)
    _build(tmp_path, ["nvcc", "-cubin", "-rdc=true", "-arch=sm_90", "-o", "calls.o", "calls.cu"],
           ["nvcc", "-cubin", "-rdc=true", "-arch=sm_90", "-o", "deeper.o", "deeper.cu"],
           ["nvlink", "-arch=sm_90", "calls.o", "deeper.o", "-o", "linked.cubin"],
           ["nvcc", "-cubin", "-gencode=arch=compute_80,code=sm_90", "-o", "older.cubin", "older.cu"])
    linked = kernel_facts.read((tmp_path / "linked.cubin").read_bytes())
    another, itself = linked.kernels["_Z18calls_another_unitPfi"], linked.kernels["_Z12calls_itselfPfi"]
    assert another.frame == 0 and another.stack >= 400  # (deeper's float a[100])
    assert itself.stack is None
    device = kernel_facts.Device()
    assert kernel_facts.model(linked, another, device)[3] == another.stack
    assert 3 not in kernel_facts.model(linked, itself, device)
    assert kernel_facts.read((tmp_path / "calls.o").read_bytes()).kernels["_Z18calls_another_unitPfi"].stack is None
    older = kernel_facts.read((tmp_path / "older.cubin").read_bytes())
    assert (older.sm, older.ptx) == (90, 80) and linked.ptx == 90


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


def test_a_cubin_not_as_read_here_is_a_value_error(built):
    """A damaged cubin (a symbol table whose string table index points past the sections, a truncated
    file) is ValueError, which the client takes as "load it as asked", never another exception."""
    import struct

    cubin = bytearray(built[0])
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", cubin, 0x3A)
    for i in range(shnum):
        if struct.unpack_from("<I", cubin, shoff + i * shentsize + 4)[0] == 2:  # SHT_SYMTAB: its sh_link
            struct.pack_into("<I", cubin, shoff + i * shentsize + 40, shnum + 5)
    for damaged in (bytes(cubin), built[0][:100], b"\x7fELF" + bytes(60)):
        with pytest.raises(ValueError):
            kernel_facts.read(damaged)
