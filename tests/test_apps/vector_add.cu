// vector_add: c = a + b over n = 1<<16 floats, 256 threads per block.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

__global__ void vectorAdd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = 1 << 16;
    const size_t bytes = n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(n - i) * 0.001f;  // not exactly representable: the sum rounds to float32
        c[i] = -1.0f;
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    const int threads = 256, blocks = (n + threads - 1) / threads;
    vectorAdd<<<blocks, threads>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));

    int bad = 0;
    for (int i = 0; i < n; i++) {
        float want = a[i] + b[i];
        if (c[i] != want) bad++;
    }
    const int show[] = {0, 1, 2, 255, 256, 4097, n / 2, n - 2, n - 1};
    for (int k = 0; k < (int)(sizeof(show) / sizeof(show[0])); k++)
        printf("c[%d] = %.6f\n", show[k], c[show[k]]);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    free(a);
    free(b);
    free(c);
    if (bad) {
        printf("vector_add: FAIL (%d mismatches)\n", bad);
        return 1;
    }
    printf("vector_add: PASS\n");
    return 0;
}
