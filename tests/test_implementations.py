"""Every function the annotations hand to hand-written code has that code: a `custom` function its Python
half (a missing cffi def_extern would return 0, which reads as success) and a `local` function its C."""

from __future__ import annotations

import json
import re

from conftest import ROOT


def manifest() -> list[dict]:
    return json.loads((ROOT / "generated" / "api_manifest.json").read_text())["functions"]


def test_every_custom_function_has_its_python_half():
    text = "".join(p.read_text() for p in (ROOT / "client").glob("*.py"))
    defined = set(re.findall(r'def_extern\(name="cuwire_py_(\w+)"', text))
    custom = {f["name"] for f in manifest() if f["mode"] == "custom"}
    assert custom - defined == set()


def test_every_local_function_has_its_c():
    text = "".join(p.read_text() for p in (ROOT / "client").glob("*.c"))
    defined = set(re.findall(r"\bcuwire_local_(\w+)\s*\([^;{]*\)\s*\{", text))
    local = {f["name"] for f in manifest() if f["mode"] == "local"}
    assert local - defined == set()
