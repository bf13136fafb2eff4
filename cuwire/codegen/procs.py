"""The driver's entry points by (name, CUDA version, stream mode), for cuGetProcAddress.

libcudart and the CUDA libraries do not link libcuda's symbols: they ask `cuGetProcAddress_v2` for each
entry point by its base name ("cuMemAlloc") and the CUDA version they were built for. The answer is
the ABI variant that was current at that version (`cuMemAlloc_v2` since 3.2), and with
CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the `_ptds`/`_ptsz` variant. The `PFN_<name>_v<ver>`
typedefs of cudaTypedefs.h (and its GL/EGL/VDPAU/profiler siblings) list every variant and the version
that introduced it; this module turns them into that table.

Which symbol a typedef names is not written anywhere: the k-th ABI version of a name is exported as
`name` (k = 0) or `name_v{k+1}`, and a per-thread variant adds `_ptds`/`_ptsz` to the variant that was
current when it appeared. Every resulting symbol is checked against the real driver's export list;
the few the Linux driver does not export (WGL, one EGL call) are left out, as the driver leaves them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TYPEDEF_HEADERS = ("cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h",
                   "cudaVDPAUTypedefs.h")
_PFN = re.compile(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\b")
_PFN_DECL = re.compile(r"\(CUDAAPI \*PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)\((.*?)\);", re.S)


@dataclass(frozen=True, order=True)
class ProcVariant:
    """One answer of cuGetProcAddress: `symbol` serves `name` from CUDA `version` on."""

    name: str
    per_thread: bool  # served only with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    version: int
    symbol: str


def typedef_versions(include: Path) -> dict[str, dict[str, set[int]]]:
    """name -> {"" | "_ptds" | "_ptsz": versions} from the PFN typedefs."""
    out: dict[str, dict[str, set[int]]] = {}
    for header in TYPEDEF_HEADERS:
        path = include / header
        if not path.exists():
            continue
        for name, version, pt in _PFN.findall(path.read_text()):
            out.setdefault(name, {}).setdefault(pt, set()).add(int(version))
    return out


def proc_variants(include: Path, exported: set[str]) -> list[ProcVariant]:
    """Every (name, version, stream mode) -> symbol, checked against the driver's exports."""
    out = []
    for name, kinds in sorted(typedef_versions(include).items()):
        plain = sorted(kinds.get("", ()))
        symbols = {v: name if k == 0 else f"{name}_v{k + 1}" for k, v in enumerate(plain)}
        for v, sym in symbols.items():
            out.append(ProcVariant(name, False, v, sym))
        for pt in ("_ptds", "_ptsz"):
            for v in sorted(kinds.get(pt, ())):
                current = max((p for p in plain if p <= v), default=None)
                base = symbols[current] if current is not None else name
                out.append(ProcVariant(name, True, v, base + pt))
    return sorted(p for p in out if p.symbol in exported)


def signatures(include: Path, exported: set[str]) -> dict[str, str]:
    """symbol -> its parameter types as the PFN typedef writes them (names dropped), for ABI checks."""
    variants = {(p.name, p.version, p.per_thread): p.symbol for p in proc_variants(include, exported)}
    out = {}
    for header in TYPEDEF_HEADERS:
        path = include / header
        if not path.exists():
            continue
        for name, version, pt, params in _PFN_DECL.findall(path.read_text()):
            symbol = variants.get((name, int(version), bool(pt)))
            if symbol:
                types = [re.sub(r"\s*\b\w+$", "", a.strip()) for a in params.split(",")]
                out[symbol] = ", ".join(t.replace("CUdevice_v1", "CUdevice") for t in types)
    return out


def check_aliases(functions, include: Path, exported: set[str]) -> None:
    """A driver alias that names an older ABI (cuDeviceGetUuid for cuDeviceGetUuid_v2) must take the same
    parameters (CUdevice_v1 is CUdevice; CUdeviceptr_v1 is 32 bits, CUdeviceptr_v2 64)."""
    sigs = signatures(include, exported)
    for f in functions:
        if f.api != "driver":
            continue
        for alias in f.aliases:
            if re.sub(r"_pt(ds|sz)$", "", alias) == f.name:
                continue
            mine, theirs = sigs.get(f.name), sigs.get(alias)
            if mine is None or theirs is None or mine != theirs:
                raise SystemExit(f"codegen: alias {alias} of {f.name}: their ABIs differ or are unknown "
                                 f"({theirs!r} vs {mine!r})")
