// Libraries set a kernel's attributes before each of its launches, for several kernels in turn, each time
// to the value it already has (PyTorch's CNN step does; cuDNN's attention sets two of one kernel in turn). Through cuwire, the repeats are answered by the
// client (client/answers_cache.c): tests/test_cli.py counts what reached the server.
#include <cstdio>

#include "check.h"

__global__ void addOne(float *p)
{
    extern __shared__ float scratch[];
    scratch[threadIdx.x] = p[threadIdx.x] + 1.0f;
    p[threadIdx.x] = scratch[threadIdx.x];
}

__global__ void twice(float *p)
{
    extern __shared__ float scratch[];
    scratch[threadIdx.x] = p[threadIdx.x] * 2.0f;
    p[threadIdx.x] = scratch[threadIdx.x];
}

int main()
{
    const int n = 32, rounds = 10;
    float *d, h[n];
    CHECK(cudaMalloc(&d, sizeof h));
    CHECK(cudaMemset(d, 0, sizeof h));
    int fits = 1;
    for (int i = 0; i < rounds; i++) {
        CHECK(cudaFuncSetAttribute(addOne, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
        CHECK(cudaFuncSetAttribute(addOne, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        CHECK(cudaFuncSetAttribute(twice, cudaFuncAttributeMaxDynamicSharedMemorySize, 50000));
        int blocks = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, addOne, n, 65536));
        fits = fits && blocks >= 1;
        addOne<<<1, n, 65536>>>(d);
        twice<<<1, n, 50000>>>(d);
    }
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("after %d rounds of (x + 1) * 2: p[0]=%.1f p[31]=%.1f\n", rounds, h[0], h[n - 1]);
    std::printf("occupancy with 64 KiB of dynamic shared memory: at least one block: %s\n", fits ? "yes" : "no");
    cudaFuncAttributes a, b;  // every attribute, as the runtime reads them, after the sets
    CHECK(cudaFuncGetAttributes(&a, addOne));
    CHECK(cudaFuncGetAttributes(&b, twice));
    std::printf("read after the sets: dynamic shared memory at most %d and %d, max threads per block %d\n",
                a.maxDynamicSharedSizeBytes, b.maxDynamicSharedSizeBytes, a.maxThreadsPerBlock);
    CHECK(cudaFree(d));
    std::printf("attribute_sets: PASS\n");
    return 0;
}
