// unimplemented: a CUDA runtime call that reaches a driver function cuwire does not remote (cuGraphCreate).
// Natively it succeeds: "cudaGraphCreate -> 0 cudaSuccess". Through cuwire it returns
// 801 cudaErrorNotSupported and cuwire names cuGraphCreate on stderr. Exits 0 either way.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaGraphCreate(&g, 0);
    printf("cudaGraphCreate -> %d %s\n", (int)e, cudaGetErrorName(e));
    if (e == cudaSuccess) cudaGraphDestroy(g);
    cudaGetLastError();  // clear the error, if any
    return 0;
}
