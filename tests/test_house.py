"""The package's structure, as docs/architecture.md draws it: no import circles, in any scope (an import
inside a function counts: hiding a circle there is still a circle), and the floors in their order:
`cuwire.wire` imports neither side, the client and the server never import each other, and nothing in the
package imports the emulated device (a package apart, for tests). The client's C files call each other in
no circle either."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cuwire"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules `name` imports, anywhere in it, as the longest known module each import names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            named |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    found = set()
    for module in named:
        while module and module not in known and not module.startswith("cuwire_emulated"):
            module = module.rpartition(".")[0]
        if module and module != name:
            found.add(module)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_the_scan_sees_the_imports():
    g = graph()
    assert "cuwire.wire.transport" in g["cuwire.client.runtime"]
    assert "cuwire.server.backend" in g["cuwire.server.service"]


def test_no_import_circles():
    assert circles(graph()) == []


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


FORBIDDEN = [  # (importer's prefix, imported prefix, why)
    ("cuwire.wire", "cuwire.client", "the wire is below both sides"),
    ("cuwire.wire", "cuwire.server", "the wire is below both sides"),
    ("cuwire.client", "cuwire.server", "the client runs in the program: no server code"),
    ("cuwire.server", "cuwire.client", "the server serves any client: no client code"),
    ("cuwire", "cuwire_emulated", "the emulated device is for tests: opened by name, never imported"),
]


def test_the_floors_keep_their_order():
    wrong = [f"{a} imports {b}: {why}" for a, deps in graph().items() for b in deps
             for low, high, why in FORBIDDEN if a.startswith(low) and b.startswith(high)]
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- the client's C

C_DEFINITION = re.compile(r"^[A-Za-z_][\w \*]*?\b(cuwire_\w+)\s*\([^;{]*?\)\s*\{", re.M | re.S)
C_MACRO = re.compile(r"^#define\s+(CUWIRE_\w+)\b(.*(?:\\\n.*)*)", re.M)
C_NAME = re.compile(r"\b((?:cuwire|CUWIRE)_\w+)\b")


def c_calls(folder: Path) -> dict[str, set[str]]:
    """Which C file of `folder` calls a function another of them defines (a call inside one of the headers'
    macros counts where the macro is used): file -> files."""
    texts = {p.name: re.sub(r"/\*.*?\*/", "", p.read_text(), flags=re.S) for p in sorted(folder.glob("*.[ch]"))}
    defined = {m[1]: name for name, text in texts.items() if name.endswith(".c") for m in C_DEFINITION.finditer(text)}
    macros = {m[1]: set(C_NAME.findall(m[2])) for text in texts.values() for m in C_MACRO.finditer(text)}
    calls: dict[str, set[str]] = {}
    for name, text in texts.items():
        if name.endswith(".c"):
            used = set(C_NAME.findall(text))
            used |= {n for m in used & macros.keys() for n in macros[m]}
            calls[name] = {defined[n] for n in used if n in defined and defined[n] != name}
    return calls


def test_the_client_c_calls_in_no_circle():
    """The client's C files form floors too (docs/architecture.md): session.c, capture.c and the other
    state at the bottom, the wire and the queue above them, calls.c and the entry points on top; none calls
    back into a file above it (a circle made the C hard to change one file at a time)."""
    calls = c_calls(PACKAGE / "client")
    assert "session.c" in calls["queue.c"] and "queue.c" in calls["wire.c"]  # (the scan sees the calls)
    assert circles(calls) == []
