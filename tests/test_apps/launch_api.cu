// Kernel launches through the API calls rather than <<<>>>: cudaLaunchKernel, cudaLaunchKernelEx
// (cudaLaunchKernelExC), plus function attributes, occupancy, pointer attributes and a driver entry
// point, the calls programs use to size and check their launches.
#include <cstdio>
#include <cuda.h>

__global__ void scaleAdd(float *out, const float *in, float scale, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = in[i] * scale + 1.0f;
}

#define CHECK(x)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            std::printf("%s -> %s\n", #x, cudaGetErrorName(e_));                   \
            return 1;                                                              \
        }                                                                          \
    } while (0)

int main()
{
    const int n = 4096;
    float h[n], *din, *dout;
    for (int i = 0; i < n; i++)
        h[i] = (float)i;
    CHECK(cudaMalloc(&din, n * sizeof(float)));
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    CHECK(cudaMemcpy(din, h, sizeof h, cudaMemcpyHostToDevice));

    float scale = 2.0f;
    int count = n;
    void *args[] = {&dout, &din, &scale, &count};
    CHECK(cudaLaunchKernel((const void *)scaleAdd, dim3(n / 256), dim3(256), args, 0, 0));
    CHECK(cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("cudaLaunchKernel: out[0]=%.1f out[4095]=%.1f\n", h[0], h[n - 1]);

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(n / 128);
    config.blockDim = dim3(128);
    scale = 3.0f;
    CHECK(cudaLaunchKernelEx(&config, scaleAdd, dout, (const float *)din, scale, count));
    CHECK(cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("cudaLaunchKernelEx: out[0]=%.1f out[4095]=%.1f\n", h[0], h[n - 1]);

    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, scaleAdd));
    std::printf("cudaFuncGetAttributes: maxThreadsPerBlock=%d, sharedSizeBytes=%zu\n", attr.maxThreadsPerBlock,
                attr.sharedSizeBytes);
    CHECK(cudaFuncSetAttribute(scaleAdd, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192));
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scaleAdd, 256, 0));
    std::printf("cudaOccupancyMaxActiveBlocksPerMultiprocessor(256 threads): at least one: %s\n",
                blocks >= 1 ? "yes" : "no");

    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, din + 16));
    std::printf("cudaPointerGetAttributes: type=%d device=%d offset ok=%s\n", (int)pa.type, pa.device,
                pa.devicePointer == (void *)(din + 16) ? "yes" : "no");

    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPoint("cuDriverGetVersion", &fn, cudaEnableDefault, &q));
    int version = 0;
    CUresult r = ((CUresult(*)(int *))fn)(&version);
    std::printf("cudaGetDriverEntryPoint(cuDriverGetVersion): status=%d, call -> %d, version >= 13000: %s\n",
                (int)q, (int)r, version >= 13000 ? "yes" : "no");

    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    std::printf("launch_api: PASS\n");
    return 0;
}
