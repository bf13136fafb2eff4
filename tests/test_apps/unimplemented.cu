// unimplemented: a CUDA runtime call that reaches a driver function cuwire does not remote
// (cuDeviceGraphMemTrim). Natively it succeeds: "cudaDeviceGraphMemTrim -> 0 cudaSuccess". Through cuwire it
// returns 801 cudaErrorNotSupported and cuwire names cuDeviceGraphMemTrim on stderr. Exits 0 either way.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    cudaError_t e = cudaDeviceGraphMemTrim(0);
    printf("cudaDeviceGraphMemTrim -> %d %s\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();  // clear the error, if any
    return 0;
}
