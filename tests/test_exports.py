"""The client library exports every function name the real libcudart.so.13, libcuda.so.1 and
libnvidia-ml.so.1 export, the runtime's under its symbol version, so a program finds each one (see
codegen/exports/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

EXPORTS = ROOT / "cuwire" / "codegen" / "exports"
SHARED_TOOL = ROOT.parent / "shared" / "tools" / "missing-exports.sh"


def defined(lib: Path) -> dict[str, str]:
    """name -> version node, from the dynamic symbol table."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = {}
    for line in out.splitlines():
        sym = line.split()[-1]
        name, _, version = sym.partition("@")
        names[name] = version.lstrip("@")
    return names


@pytest.mark.parametrize("listing,count", [("libcudart.so.13.exports", 422), ("libcuda.so.1.exports", 674),
                                           ("libnvidia-ml.so.1.exports", 404)])
def test_every_real_export_is_there(client_lib, listing, count):
    want = [n for n in (EXPORTS / listing).read_text().split() if not n.startswith("cudbg")]
    have = defined(client_lib)
    missing = [n for n in want if n not in have]
    assert len(want) == count
    assert not missing, f"{len(want) - len(missing)} of {len(want)} exported; missing: {missing[:20]}"
    if SHARED_TOOL.exists():  # the project's own checker, where the checkout has it beside
        ref = ROOT.parent / "shared" / "reference"
        ref_file = next(ref.glob(listing.replace(".exports", "-*.exports")))
        r = subprocess.run(["bash", str(SHARED_TOOL), str(client_lib), str(ref_file)], capture_output=True, text=True)
        assert r.stdout.strip().splitlines()[-1] == f"{count} of {count} exported"


def test_runtime_names_carry_the_runtime_version(client_lib):
    have = defined(client_lib)
    assert have["cudaMalloc"] == "libcudart.so.13"
    assert have["__cudaRegisterFatBinary"] == "libcudart.so.13"
    assert have["cudaMemcpy_ptds"] == "libcudart.so.13"
    assert have["cuMemAlloc_v2"] == "libcuda.so.1" and have["cuMemAlloc"] == "libcuda.so.1"
    assert "PyInit__cuwire" not in have  # nothing but CUDA names leaves the library
