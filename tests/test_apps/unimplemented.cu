// unimplemented: a CUDA runtime call that reaches a driver function cuwire does not remote
// (cuMemRangeGetAttribute, under cudaMemRangeGetAttribute). Natively it succeeds: "cudaMemRangeGetAttribute
// -> 0 cudaSuccess". Through cuwire it returns 801 cudaErrorNotSupported and cuwire names
// cuMemRangeGetAttribute on stderr. Exits 0 either way.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    int *managed = nullptr;
    if (cudaMallocManaged(&managed, 4096) != cudaSuccess) {
        printf("cudaMallocManaged failed\n");
        return 1;
    }
    int read_mostly = -1;
    cudaError_t e = cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly, cudaMemRangeAttributeReadMostly,
                                             managed, 4096);
    printf("cudaMemRangeGetAttribute -> %d %s\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();  // clear the error, if any
    cudaFree(managed);
    return 0;
}
