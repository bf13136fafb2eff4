// unimplemented: a CUDA runtime call that reaches a driver function cuwire does not remote
// (cuLogsCurrent, under cudaLogsCurrent). Natively it succeeds: "cudaLogsCurrent -> 0 cudaSuccess".
// Through cuwire it returns 801 cudaErrorNotSupported and cuwire names cuLogsCurrent on stderr. Exits 0
// either way.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    cudaLogIterator iterator = 0;
    cudaError_t e = cudaLogsCurrent(&iterator, 0);
    printf("cudaLogsCurrent -> %d %s\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();  // clear the error, if any
    return 0;
}
