"""The client library works inside a running Python process, not only in C/C++ programs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
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


# the same calls, the last four in an atexit handler the program registered before its first CUDA call
AT_EXIT = EXPECTED.replace("cuMemcpyDtoH_v2", "main ends\ncuMemcpyDtoH_v2", 1)


@pytest.mark.parametrize("at_exit", [False, True], ids=["main", "atexit"])
def test_inside_python(at_exit, client_lib, server):
    """Also: CUDA works in the program's atexit handlers, which run after cuwire's (registered later): the
    session lasts as long as the process."""
    env = {**os.environ, "CUWIRE_SERVER": server.address, "CUWIRE_STATS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "python_host.py"),
                        *(["--at-exit"] if at_exit else []), str(client_lib)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (AT_EXIT if at_exit else EXPECTED), r.stderr
    assert "cuwire stats" in r.stderr or "API calls" in r.stderr  # printed at exit, before the handler
