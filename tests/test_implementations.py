"""Every function the annotations hand to hand-written code has that code: a `custom` function its Python
half (a missing cffi def_extern would return 0, which reads as success) and a `local` function its C."""

from __future__ import annotations

import json
import re

from conftest import ROOT


def manifest() -> list[dict]:
    return json.loads((ROOT / "cuwire" / "generated" / "api_manifest.json").read_text())["functions"]


def test_every_custom_function_has_its_python_half():
    text = "".join(p.read_text() for p in (ROOT / "cuwire" / "client").glob("*.py"))
    defined = set(re.findall(r'def_extern\(name="cuwire_py_(\w+)"', text))
    custom = {f["name"] for f in manifest() if f["mode"] == "custom"}
    assert custom - defined == set()


def test_every_local_function_has_its_c():
    text = "".join(p.read_text() for p in (ROOT / "cuwire" / "client").glob("*.c"))
    defined = set(re.findall(r"\bcuwire_local_(\w+)\s*\([^;{]*\)\s*\{", text))
    local = {f["name"] for f in manifest() if f["mode"] == "local"}
    assert local - defined == set()


def test_python_halves_take_what_their_c_stub_passes():
    """cffi calls a Python half with the boundary arguments of generated/client_cdefs.h; a def with another
    count would fail at the call, as an internal error, only when the program first makes it."""
    cdefs = (ROOT / "cuwire" / "generated" / "client_cdefs.h").read_text()
    passed = {name: 0 if args.strip() in ("", "void") else args.count(",") + 1
              for name, args in re.findall(r"cuwire_py_(\w+)\(([^)]*)\);", cdefs)}
    text = "".join(p.read_text() for p in (ROOT / "cuwire" / "client").glob("*.py"))
    text += (ROOT / "cuwire" / "generated" / "client_calls.py").read_text()
    taken = {name: 0 if not args.strip() else args.count(",") + 1
             for name, args in re.findall(r'def_extern\(name="cuwire_py_(\w+)".*\)\ndef \w+\(([^)]*)\)', text)}
    assert taken and {n: (taken[n], passed[n]) for n in taken if n in passed and taken[n] != passed[n]} == {}


def test_every_c_function_the_stubs_call_is_defined(client_lib):
    """The C that the annotations name (`fast`, `after`, local functions) is linked in: a name left
    undefined in the shared library would only fail when the program first calls it."""
    import subprocess

    out = subprocess.run(["nm", "-D", "--undefined-only", str(client_lib)], capture_output=True, text=True,
                         check=True).stdout
    assert [line.split()[-1] for line in out.splitlines() if "cuwire" in line] == []
