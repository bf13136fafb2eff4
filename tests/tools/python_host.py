"""The client library inside a running Python process (as PyTorch loads it): ctypes opens it, the
embedded cffi code runs in this interpreter, and driver calls reach the server.
Usage: python_host.py [--at-exit] [LIB] (default libcuda.so.1: cuwire's under `cuwire run`, the real one natively)
--at-exit: the copy back and the frees run in an atexit handler registered before the first CUDA call (so after
every one registered later, cuwire's among them), as libraries' teardown (XLA's) calls CUDA."""

import atexit
import ctypes
import sys

args = [a for a in sys.argv[1:] if a != "--at-exit"]
at_exit = len(args) < len(sys.argv) - 1
cu = ctypes.CDLL(args[0] if args else "libcuda.so.1")
count, device, context = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_void_p()
ptr = ctypes.c_uint64()
n = 1 << 20
src = (ctypes.c_ubyte * n)(*[(i * 13) & 0xFF for i in range(n)])
dst = (ctypes.c_ubyte * n)()


def finish() -> None:
    print("cuMemcpyDtoH_v2 ->", cu.cuMemcpyDtoH_v2(dst, ptr, ctypes.c_size_t(n)))
    print("round trip:", "OK" if bytes(src) == bytes(dst) else "FAIL")
    print("cuMemFree_v2 ->", cu.cuMemFree_v2(ptr))
    print("cuDevicePrimaryCtxRelease_v2 ->", cu.cuDevicePrimaryCtxRelease_v2(device), flush=True)


if at_exit:
    atexit.register(finish)
print("cuInit ->", cu.cuInit(0))
print("cuDeviceGetCount ->", cu.cuDeviceGetCount(ctypes.byref(count)), "devices >= 1:", count.value >= 1)
print("cuDeviceGet ->", cu.cuDeviceGet(ctypes.byref(device), 0))
print("cuDevicePrimaryCtxRetain ->", cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
print("cuCtxSetCurrent ->", cu.cuCtxSetCurrent(context))
print("cuMemAlloc_v2 ->", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n)))
print("cuMemcpyHtoD_v2 ->", cu.cuMemcpyHtoD_v2(ptr, src, ctypes.c_size_t(n)))
if at_exit:
    print("main ends", flush=True)
else:
    finish()
