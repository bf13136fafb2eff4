"""The server's handling of bytes from the wire, fuzzed with coverage guidance (tests/fuzz/fuzz_session.py,
atheris) for a bounded time from the corpus kept in tests/fuzz/corpus: no input may crash it.
CUWIRE_FUZZ_SECONDS sets the time (default 30)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import ROOT

FUZZ = ROOT / "tests" / "fuzz"
SECONDS = int(os.environ.get("CUWIRE_FUZZ_SECONDS", "30"))


def test_fuzzed_frames_never_crash_the_session(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(FUZZ / "corpus", corpus)  # the fuzzer adds to it: the repository's copy stays as it is
    r = subprocess.run([sys.executable, str(FUZZ / "fuzz_session.py"), f"-max_total_time={SECONDS}",
                        "-rss_limit_mb=4096", f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=SECONDS + 180, cwd=tmp_path)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "oom-", "timeout-")))
    assert r.returncode == 0 and "Done" in r.stderr and not crashes, (crashes, r.stderr[-4000:])
