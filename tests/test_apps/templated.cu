// templated: one templated kernel instantiated for int, float and double.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

// y[i] = a * x[i] + y[i]. The values below make every product and sum exact in each type,
// so the result does not depend on whether the compiler fuses the multiply-add.
template <typename T>
__global__ void axpy(T a, const T *x, T *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T>
static int run(const char *type, const char *fmt, T a, T xscale, T yscale) {
    const int n = 3000;
    T *x = (T *)malloc(n * sizeof(T)), *y = (T *)malloc(n * sizeof(T)), *r = (T *)malloc(n * sizeof(T));
    for (int i = 0; i < n; i++) {
        x[i] = (T)(i % 101) * xscale;
        y[i] = (T)(n - i) * yscale;
    }
    T *dx, *dy;
    CHECK(cudaMalloc((void **)&dx, n * sizeof(T)));
    CHECK(cudaMalloc((void **)&dy, n * sizeof(T)));
    CHECK(cudaMemcpy(dx, x, n * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y, n * sizeof(T), cudaMemcpyHostToDevice));
    axpy<T><<<(n + 127) / 128, 128>>>(a, dx, dy, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(r, dy, n * sizeof(T), cudaMemcpyDeviceToHost));
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        T want = a * x[i] + y[i];
        if (r[i] != want) bad++;
        sum += (double)r[i];
    }
    printf("axpy<%s>: r[0] ", type);
    printf(fmt, r[0]);
    printf(" r[1] ");
    printf(fmt, r[1]);
    printf(" r[%d] ", n - 1);
    printf(fmt, r[n - 1]);
    printf(" sum %.4f %s\n", sum, bad ? "FAIL" : "OK");
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    free(x);
    free(y);
    free(r);
    return bad;
}

int main() {
    int bad = 0;
    bad += run<int>("int", "%d", -3, 7, 2);
    bad += run<float>("float", "%.4f", 1.5f, 0.25f, 0.5f);
    bad += run<double>("double", "%.4f", -2.25, 0.125, 0.0625);
    if (bad) {
        printf("templated: FAIL (%d)\n", bad);
        return 1;
    }
    printf("templated: PASS\n");
    return 0;
}
