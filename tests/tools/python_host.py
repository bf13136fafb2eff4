"""The client library inside a running Python process (as PyTorch will load it): ctypes opens it, the
embedded cffi code runs in this interpreter, and calls reach the server. Usage: python_host.py LIB"""

import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
count = ctypes.c_int(0)
print("cudaGetDeviceCount ->", lib.cudaGetDeviceCount(ctypes.byref(count)), "devices >= 1:", count.value >= 1)
ptr = ctypes.c_void_p()
n = 1 << 20
print("cudaMalloc ->", lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(n)))
src = (ctypes.c_ubyte * n)(*[(i * 13) & 0xFF for i in range(n)])
dst = (ctypes.c_ubyte * n)()
print("cudaMemcpy H2D ->", lib.cudaMemcpy(ptr, src, ctypes.c_size_t(n), 1))
print("cudaMemcpy D2H ->", lib.cudaMemcpy(dst, ptr, ctypes.c_size_t(n), 2))
print("round trip:", "OK" if bytes(src) == bytes(dst) else "FAIL")
print("cudaFree ->", lib.cudaFree(ptr))
