"""Bytes from the wire, fuzzed with coverage guidance (atheris) for a bounded time from corpora kept in the
repository: what the server does with a client's frames (tests/fuzz/fuzz_session.py, corpus
tests/fuzz/corpus), what the client does with a server's replies (tests/fuzz/fuzz_client.py, corpus
tests/fuzz/client-corpus), and what the listener does with a connection before its session starts, its
HTTP requests and its hello (tests/fuzz/fuzz_preauth.py, corpus tests/fuzz/preauth-corpus). No input may
crash any of them. CUWIRE_FUZZ_SECONDS sets the time of each (default 10: three of them
keep CI within its time)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

FUZZ = ROOT / "tests" / "fuzz"
SECONDS = int(os.environ.get("CUWIRE_FUZZ_SECONDS", "10"))


@pytest.mark.parametrize("target, corpus", [("fuzz_session.py", "corpus"), ("fuzz_client.py", "client-corpus"),
                                            ("fuzz_preauth.py", "preauth-corpus")])
def test_fuzzed_bytes_never_crash(target, corpus, tmp_path):
    work = tmp_path / "corpus"
    shutil.copytree(FUZZ / corpus, work)  # the fuzzer adds to it: the repository's copy stays as it is
    r = subprocess.run([sys.executable, str(FUZZ / target), f"-max_total_time={SECONDS}",
                        "-rss_limit_mb=4096", f"-artifact_prefix={tmp_path}/", str(work)],
                       capture_output=True, text=True, timeout=SECONDS + 180, cwd=tmp_path)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "oom-", "timeout-")))
    assert r.returncode == 0 and "Done" in r.stderr and not crashes, (crashes, r.stderr[-4000:])


def test_replies_of_a_hostile_server_are_refused_by_name():
    """Oversized payloads, compression bombs, results larger than the program's buffer, results that do
    not parse, bytes that are not a frame: each gives the program a CUDA error and says why."""
    r = subprocess.run([sys.executable, str(FUZZ / "client_replies.py")], capture_output=True, text=True,
                       timeout=300, cwd=FUZZ)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.count("OK: ") == 7, r.stdout
