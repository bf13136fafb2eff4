// two_units, second translation unit: a kernel and the host function that launches it.
#include <cuda_runtime.h>

// p[i] = p[i] + offset
__global__ void unitBOffset(float *p, float offset, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] + offset;
}

cudaError_t launchUnitBOffset(float *p, float offset, int n) {
    unitBOffset<<<(n + 511) / 512, 512>>>(p, offset, n);
    return cudaGetLastError();
}
