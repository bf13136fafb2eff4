"""The client library works inside a running Python process, not only in C/C++ programs."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

EXPECTED = """cuInit -> 0
cuDeviceGetCount -> 0 devices >= 1: True
cuDeviceGet -> 0
cuDevicePrimaryCtxRetain -> 0
cuCtxSetCurrent -> 0
cuMemAlloc_v2 -> 0
cuMemcpyHtoD_v2 -> 0
cuMemcpyDtoH_v2 -> 0
round trip: OK
cuMemFree_v2 -> 0
cuDevicePrimaryCtxRelease_v2 -> 0
"""


def test_inside_python(client_lib, server):
    env = {**os.environ, "CUWIRE_SERVER": server.address}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "python_host.py"), str(client_lib)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == EXPECTED, r.stderr
