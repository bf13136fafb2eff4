"""The client library works inside a running Python process, not only in C/C++ programs."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

EXPECTED = """cudaGetDeviceCount -> 0 devices >= 1: True
cudaMalloc -> 0
cudaMemcpy H2D -> 0
cudaMemcpy D2H -> 0
round trip: OK
cudaFree -> 0
"""


def test_inside_python(client_lib, server):
    env = {**os.environ, "CUWIRE_SERVER": server.address}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "python_host.py"), str(client_lib)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == EXPECTED, r.stderr
