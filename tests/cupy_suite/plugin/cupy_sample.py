"""A pytest plugin for run.sh (`-p cupy_sample`, this folder on PYTHONPATH): runs only the tests of a sample
(sample.py's output), and starts no test once a time limit has passed, so that the run still ends normally
and writes its --junitxml.

A test is kept when its file, class and function name, as `FILE::CLASS::FUNCTION` or `FILE::FUNCTION`, is a
line of the sample. The class is named without the `_param_N_{...}` suffix that `cupy.testing.parameterize`
gives the classes it makes of a unittest class (whose own name pytest never sees). All the parametrizations
of a sampled test run, or with `--max-params N` N of them, evenly spaced in the order pytest collected them
(some of CuPy's tests have thousands). `--sample-report FILE` writes what was kept as JSON: the sample's
size, the tests kept, the sample's lines that named no collected test, and whether the time limit stopped
the run. `--ran FILE` writes the node ids of the tests that ran, and `--only FILE` keeps only the tests
named there: the second side of run.sh runs exactly what the first ran before its time limit (the first
pays the compilation of CuPy's kernels, the second finds them in CuPy's cache). Memory addresses in node
ids (parameters shown as objects) are compared as 0x?.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

PARAM_SUFFIX = re.compile(r"_param_\d+_\{.*\}$", re.S)
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
state: dict = {}


def plain(nodeid: str) -> str:
    """A node id as two processes name it alike."""
    return ADDRESS.sub("0x?", nodeid).replace("\n", " ")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cupy_sample", "a sample of CuPy's tests (tests/cupy_suite)")
    group.addoption("--sample", metavar="FILE", help="run only the tests named in FILE, one a line")
    group.addoption("--sample-report", metavar="FILE", help="write what the sample selected as JSON")
    group.addoption("--max-params", type=int, metavar="N",
                    help="of each sampled test, at most N parametrizations, evenly spaced")
    group.addoption("--deadline", type=float, metavar="SECONDS",
                    help="start no test once SECONDS have passed since the session started")
    group.addoption("--ran", metavar="FILE", help="write the node ids of the tests that ran, one a line")
    group.addoption("--only", metavar="FILE", help="of the sample, run only the tests whose node ids FILE names")


def sample_key(item: pytest.Item) -> str:
    """FILE::CLASS::FUNCTION (or FILE::FUNCTION) of a collected test, as sample.py names it."""
    file = item.nodeid.split("::", 1)[0]
    function = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    cls = getattr(item, "cls", None)
    return f"{file}::{PARAM_SUFFIX.sub('', cls.__name__)}::{function}" if cls else f"{file}::{function}"


def pytest_sessionstart(session: pytest.Session) -> None:
    state.update(session=session, start=time.monotonic(), stopped=False, kept=0, sampled=0, unmatched=[],
                 ran=[])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption("sample")
    if not path:
        return
    wanted = {line.strip() for line in Path(path).read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(sample_key(item), []).append(item)
    cap = config.getoption("max_params")
    chosen = set()
    for key, group in groups.items():
        if key in wanted:
            n = min(cap, len(group)) if cap else len(group)
            chosen.update(id(group[(2 * i + 1) * len(group) // (2 * n)]) for i in range(n))
    only = config.getoption("only")
    if only:
        named = {line for line in Path(only).read_text().splitlines() if line}
        chosen &= {id(item) for item in items if plain(item.nodeid) in named}
    keep = [item for item in items if id(item) in chosen]
    drop = [item for item in items if id(item) not in chosen]
    matched = wanted & groups.keys()
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    state.update(kept=len(keep), sampled=len(wanted), unmatched=sorted(wanted - matched))


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    state["ran"].append(plain(nodeid))
    deadline = state["session"].config.getoption("deadline")
    if deadline and not state["stopped"] and time.monotonic() - state["start"] > deadline:
        state["stopped"] = True
        state["session"].shouldstop = f"cupy_sample: the time limit ({deadline:g} s, --deadline) has passed"


def pytest_terminal_summary(terminalreporter) -> None:
    if state.get("sampled"):
        terminalreporter.write_line(
            f"cupy_sample: {state['sampled']} sampled tests, {state['kept']} collected tests kept, "
            f"{len(state['unmatched'])} sampled names matched no collected test"
            + ("; stopped at the time limit" if state["stopped"] else ""))


def pytest_sessionfinish(session: pytest.Session) -> None:
    ran = session.config.getoption("ran")
    if ran:
        Path(ran).write_text("".join(f"{nodeid}\n" for nodeid in state.get("ran", [])))
    path = session.config.getoption("sample_report")
    if path:
        report = {k: state.get(k) for k in ("sampled", "kept", "unmatched", "stopped")}
        report["seconds"] = round(time.monotonic() - state.get("start", time.monotonic()), 1)
        Path(path).write_text(json.dumps(report, indent=1) + "\n")
