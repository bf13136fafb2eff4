"""The client library's side of a call that waits, in this Python process: the driver API through
ctypes against a cuwire server, timed per call, and profiled (the client's Python runs in this
interpreter). Under `cuwire run`, or with LD_LIBRARY_PATH=build/client and CUWIRE_SERVER set.

    cuwire run [--emulated] -- python3 bench/call_probe.py [--profile]
"""

from __future__ import annotations

import ctypes
import sys
import time

cu = ctypes.CDLL("libcuda.so.1")
device, context, ptr = ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0 and cu.cuCtxSetCurrent(context) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4)) == 0
word = ctypes.c_uint32(7)


def calls(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        cu.cuMemcpyDtoH_v2(ctypes.byref(word), ptr, ctypes.c_size_t(4))
    return (time.perf_counter() - start) / n * 1e6


calls(200)
print(f"cuMemcpyDtoH_v2 of 4 bytes, a call that waits: {calls(2000):.1f} us")
if "--profile" in sys.argv:
    import cProfile
    import pstats

    cProfile.run("calls(2000)", "/tmp/call_probe.prof")
    pstats.Stats("/tmp/call_probe.prof").sort_stats("tottime").print_stats(14)
