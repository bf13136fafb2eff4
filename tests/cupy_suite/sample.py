"""A uniform, deterministic sample of CuPy's own tests (tests/cupy_suite/upstream, from fetch.sh), for run.sh.

Many of CuPy's test files ask the GPU something as they are imported, so the sample is taken without pytest,
where there is no GPU: each test file is parsed with `ast`, and its tests are the module's `test*` functions
and the `test*` methods of its `Test*` classes (and of classes deriving from a `...TestCase`), methods
inherited from a class of the same file included; less those marked slow or multi-GPU (`testing.slow`,
`testing.multi_gpu(2)`, `pytest.mark.slow`, on the function, its class or the module), which run.sh leaves
out as CuPy's CI does. Each directory of DIRS gives its share of COUNT in proportion to its number of
tests: its tests, sorted by node id, are taken at evenly spaced positions. No randomness: the same files give
the same sample.

Output: one pytest node id a line, relative to upstream/ (`tests/cupy_tests/.../test_x.py::TestY::test_z` or
`...::test_z`), the form pytest gives. plugin/cupy_sample.py (a pytest plugin) then keeps every collected
test whose file, class (less the `_param_N_{...}` suffix that `cupy.testing.parameterize` gives the classes
it makes of a unittest class) and function name are a line of the sample, in all its parametrizations or
evenly spaced ones (--max-params). `--summary` prints the tests found and sampled per directory to stderr.

Run: python3 tests/cupy_suite/sample.py [--count N] [--summary]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

UPSTREAM = Path(__file__).resolve().parent / "upstream"
DIRS = [  # CuPy's test directories the sample spans, relative to upstream/
    "tests/cupy_tests/cuda_tests",
    "tests/cupy_tests/core_tests",
    "tests/cupy_tests/linalg_tests",
    "tests/cupy_tests/fft_tests",
    "tests/cupy_tests/random_tests",
    "tests/cupy_tests/sorting_tests",
    "tests/cupyx_tests/scipy_tests/sparse_tests",
    "tests/cupyx_tests/scipy_tests/ndimage_tests",
]
DEFAULT_COUNT = 300
LEFT_OUT_MARKS = ("slow", "multi_gpu")  # decorators (testing.slow, pytest.mark.multi_gpu...) run.sh deselects


def left_out(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign) -> bool:
    """Whether a function or class is decorated slow or multi-GPU (or a module's pytestmark says so)."""
    exprs = [node.value] if isinstance(node, ast.Assign) else node.decorator_list
    for expr in exprs:
        for sub in ast.walk(expr):
            name = sub.attr if isinstance(sub, ast.Attribute) else sub.id if isinstance(sub, ast.Name) else None
            if name in LEFT_OUT_MARKS:
                return True
    return False


def base_names(cls: ast.ClassDef) -> list[str]:
    """The last part of each base's name: `unittest.TestCase` -> `TestCase`."""
    names = []
    for base in cls.bases:
        if isinstance(base, ast.Attribute):
            names.append(base.attr)
        elif isinstance(base, ast.Name):
            names.append(base.id)
    return names


def tests_of_file(path: Path, rel: str) -> list[str]:
    """The node ids of the tests pytest would collect from one file, as far as its source tells."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets) and left_out(node) for node in tree.body):
        return []
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def methods(cls: ast.ClassDef, seen: frozenset[str] = frozenset()) -> set[str]:
        """The test methods of a class, less those marked slow or multi-GPU (all, when the class is)."""
        if left_out(cls):
            return set()
        own = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name.startswith("test") and not left_out(n)}
        for base in base_names(cls):  # inherited from a class of this file (a mixin, a base test class)
            if base in classes and base not in seen:
                own |= methods(classes[base], seen | {cls.name})
        return own

    def is_test_class(cls: ast.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
        if cls.name.startswith("Test"):
            return True
        return any(b.endswith("TestCase") or (b in classes and b not in seen
                                              and is_test_class(classes[b], seen | {cls.name}))
                   for b in base_names(cls))

    ids = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test") \
                and not left_out(node):
            ids.append(f"{rel}::{node.name}")
        elif isinstance(node, ast.ClassDef) and is_test_class(node):
            ids += [f"{rel}::{node.name}::{name}" for name in methods(node)]
    return ids


def tests_of_dir(root: Path, directory: str) -> list[str]:
    ids = []
    for path in sorted((root / directory).rglob("test_*.py")):
        ids += tests_of_file(path, path.relative_to(root).as_posix())
    return sorted(set(ids))


def spaced(items: list[str], n: int) -> list[str]:
    """n of the items at evenly spaced positions: the middle one of each of n equal stretches."""
    n = min(n, len(items))
    return [items[(2 * i + 1) * len(items) // (2 * n)] for i in range(n)]


def sample(root: Path = UPSTREAM, count: int = DEFAULT_COUNT) -> dict[str, tuple[int, list[str]]]:
    """For each directory of DIRS: its number of tests and its share of the sample."""
    found = {d: tests_of_dir(root, d) for d in DIRS}
    total = sum(len(ids) for ids in found.values())
    if total == 0:
        raise SystemExit(f"sample.py: no tests under {root} (run tests/cupy_suite/fetch.sh first)")
    return {d: (len(ids), spaced(ids, max(1, round(count * len(ids) / total)) if ids else 0))
            for d, ids in found.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT, help=f"tests in all (default {DEFAULT_COUNT})")
    ap.add_argument("--root", type=Path, default=UPSTREAM, help="the extracted tree (default: upstream/)")
    ap.add_argument("--summary", action="store_true", help="per directory: tests found and sampled, to stderr")
    args = ap.parse_args(argv)
    chosen = sample(args.root, args.count)
    for _, ids in chosen.values():
        for node_id in ids:
            print(node_id)
    if args.summary:
        for d, (n, ids) in chosen.items():
            print(f"{d}: {len(ids)} of {n}", file=sys.stderr)
        print(f"in all: {sum(len(ids) for _, ids in chosen.values())} of {sum(n for n, _ in chosen.values())}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
