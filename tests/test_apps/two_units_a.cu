// two_units (with two_units_b.cu): kernels in two translation units linked into one program.
// This unit holds main and unitAScale; two_units_b.cu holds unitBOffset and its launcher.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

// defined in two_units_b.cu
cudaError_t launchUnitBOffset(float *p, float offset, int n);

// p[i] = p[i] * f
__global__ void unitAScale(float *p, float f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * f;
}

int main() {
    const int n = 2048;
    float *h = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 64);
    float *d;
    CHECK(cudaMalloc((void **)&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    unitAScale<<<n / 256, 256>>>(d, 2.5f, n);
    CHECK(cudaGetLastError());
    CHECK(launchUnitBOffset(d, -1.25f, n));
    unitAScale<<<n / 128, 128>>>(d, -0.5f, n);
    CHECK(cudaGetLastError());
    float *r = (float *)malloc(n * sizeof(float));
    CHECK(cudaMemcpy(r, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    double s = 0;
    for (int i = 0; i < n; i++) {
        float want = (h[i] * 2.5f + -1.25f) * -0.5f;
        if (r[i] != want) bad++;
        s += r[i];
    }
    printf("r[0] %.4f r[1] %.4f r[63] %.4f r[2047] %.4f sum %.4f\n", r[0], r[1], r[63], r[n - 1], s);
    CHECK(cudaFree(d));
    free(h);
    free(r);
    if (bad) {
        printf("two_units: FAIL (%d)\n", bad);
        return 1;
    }
    printf("two_units: PASS\n");
    return 0;
}
