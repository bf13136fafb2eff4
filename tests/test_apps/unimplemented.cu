// unimplemented: a CUDA runtime call that reaches a driver function cuwire does not remote
// (cuDeviceGetTexture1DLinearMaxWidth). Natively it succeeds: "cudaDeviceGetTexture1DLinearMaxWidth -> 0
// cudaSuccess". Through cuwire it returns 801 cudaErrorNotSupported and cuwire names
// cuDeviceGetTexture1DLinearMaxWidth on stderr. Exits 0 either way.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    size_t width = 0;
    cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    cudaError_t e = cudaDeviceGetTexture1DLinearMaxWidth(&width, &desc, 0);
    printf("cudaDeviceGetTexture1DLinearMaxWidth -> %d %s\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();  // clear the error, if any
    return 0;
}
