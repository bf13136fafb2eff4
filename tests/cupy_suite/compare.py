"""Compare two pytest --junitxml files of the same tests, native and through cuwire, test by test.

Prints each side's counts, every test that passed natively but not through cuwire (failed, errored,
skipped, or not run: the first line of its message), and one summary line, as tests/gpu_test.sh prints
its others. Exits 1 when such a test exists (or none passed natively), 2 when a file cannot be read, else
0. Tests are matched by class and name (their parametrization included); a memory address in a name
(`0x7f...`) is not part of it.

Run: python3 tests/cupy_suite/compare.py NATIVE.xml REMOTE.xml [--label cupy-suite] [--native-report J]
     [--remote-report J] [--native-seconds S] [--remote-seconds S]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
OUTCOMES = ("passed", "failed", "error", "skipped")


def outcome(case: ET.Element) -> tuple[str, str]:
    """passed, failed, error or skipped (xfail included), and the first line of the reason."""
    for tag in ("failure", "error", "skipped"):
        child = case.find(tag)
        if child is not None:
            text = (child.get("message") or child.text or "").strip()
            return ("failed" if tag == "failure" else tag), (text.splitlines() or [""])[0][:200]
    return "passed", ""


def results(path: Path) -> dict[str, list[tuple[str, str]]]:
    """test name -> the outcome of each test of that name (a name twice, in a file of two errors, is two)."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for case in ET.parse(path).getroot().iter("testcase"):
        name = ADDRESS.sub("0x?", f"{case.get('classname', '')}::{case.get('name', '')}")
        out[name].append(outcome(case))
    return out


def counts(res: dict[str, list[tuple[str, str]]]) -> Counter:
    return Counter(o for outs in res.values() for o, _ in outs)


def describe(side: str, res: dict, report: dict | None, seconds: float | None) -> str:
    c = counts(res)
    line = f"{side}: {sum(c.values())} tests, " + ", ".join(f"{c[o]} {o}{'s' * (o == 'error')}" for o in OUTCOMES)
    extra = []
    if seconds is not None:
        extra.append(f"wall {seconds:.1f} s")
    if report:
        extra.append(f"{report.get('kept')} collected tests of {report.get('sampled')} sampled names")
        if report.get("unmatched"):
            extra.append(f"{len(report['unmatched'])} sampled names matched no test")
        if report.get("stopped"):
            extra.append("STOPPED at the time limit")
    return line + (f" ({'; '.join(extra)})" if extra else "")


def load_report(path: str | None) -> dict | None:
    try:
        return json.loads(Path(path).read_text()) if path else None
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("native", type=Path)
    ap.add_argument("remote", type=Path)
    ap.add_argument("--label", default="cupy-suite")
    ap.add_argument("--native-report")
    ap.add_argument("--remote-report")
    ap.add_argument("--native-seconds", type=float)
    ap.add_argument("--remote-seconds", type=float)
    args = ap.parse_args(argv)
    label = args.label
    sides = {}
    for side, path in (("native", args.native), ("through cuwire", args.remote)):
        try:
            sides[side] = results(path)
        except (OSError, ET.ParseError) as e:
            print(f"{label}: FAIL (no results {side}: {path}: {e})")
            return 2
    native, remote = sides["native"], sides["through cuwire"]
    print(f"{label} " + describe("native", native, load_report(args.native_report), args.native_seconds))
    print(f"{label} " + describe("through cuwire", remote, load_report(args.remote_report), args.remote_seconds))

    lost = []  # (name, what happened through cuwire)
    passed_natively = 0
    for name, outs in sorted(native.items()):
        n = sum(o == "passed" for o, _ in outs)
        passed_natively += n
        there = remote.get(name, [])
        r = sum(o == "passed" for o, _ in there)
        if r < n:
            why = next(((o, m) for o, m in there if o != "passed"), ("not run", "")) if there else ("not run", "")
            lost.append((name, f"{why[0]}{': ' + why[1] if why[1] else ''}"))
    gained = sum(1 for name, outs in remote.items() if any(o == "passed" for o, _ in outs)
                 and not any(o == "passed" for o, _ in native.get(name, [])))
    total = sum(len(outs) for outs in native.values())
    if passed_natively == 0:
        print(f"{label}: FAIL (no test passed natively, {total} tests: the suite did not run)")
        return 1
    if lost:
        for name, why in lost:
            print(f"  passed natively, not through cuwire: {name}: {why}")
        print(f"{label}: FAIL ({len(lost)} of the {passed_natively} tests that passed natively did not pass "
              f"through cuwire; {total} tests)")
        return 1
    print(f"{label}: OK ({total} tests, native {passed_natively} passed, through cuwire the same "
          f"{passed_natively}" + (f", and {gained} more that did not pass natively" if gained else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
