"""The client library exports every function name the real libcuda.so.1 and libnvidia-ml.so.1 export,
each under its library's symbol version, so a program finds each one (see codegen/exports/README.md),
and nothing of the CUDA runtime: NVIDIA's own runs above it."""

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


@pytest.mark.parametrize("listing,count", [("libcuda.so.1.exports", 674), ("libnvidia-ml.so.1.exports", 404)])
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


def test_names_carry_their_library_s_version(client_lib):
    have = defined(client_lib)
    assert have["cuMemAlloc_v2"] == "libcuda.so.1" and have["cuMemAlloc"] == "libcuda.so.1"
    assert have["cuMemcpyHtoD_v2_ptds"] == "libcuda.so.1"
    assert have["nvmlInit_v2"] == "libnvidia_ml.so.1"  # a version node has no "-" (exports.map)
    assert [n for n in have if n.startswith(("cuda", "__cuda"))] == []  # the runtime is NVIDIA's
    assert "PyInit__cuwire" not in have  # nothing but CUDA names leaves the library
