// error_paths: calls that fail, their error codes and names, and normal work afterwards.
// Prints only numeric codes and cudaGetErrorName (never cudaGetErrorString).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

static int bad = 0;

static void expect(const char *what, cudaError_t got, cudaError_t want) {
    printf("%s -> %d %s\n", what, (int)got, cudaGetErrorName(got));
    if (got != want) bad++;
}

__global__ void errorsTouch(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 2 * i + 1;
}

int main() {
    expect("cudaGetLastError at start", cudaGetLastError(), cudaSuccess);

    void *huge = nullptr;
    expect("cudaMalloc(1<<50)", cudaMalloc(&huge, (size_t)1 << 50), cudaErrorMemoryAllocation);
    expect("cudaGetLastError", cudaGetLastError(), cudaErrorMemoryAllocation);
    expect("cudaGetLastError again", cudaGetLastError(), cudaSuccess);

    expect("cudaFree(0x1234)", cudaFree((void *)0x1234), cudaErrorInvalidValue);
    expect("cudaGetLastError", cudaGetLastError(), cudaErrorInvalidValue);

    expect("cudaFree(NULL)", cudaFree(nullptr), cudaSuccess);

    expect("cudaSetDevice(9999)", cudaSetDevice(9999), cudaErrorInvalidDevice);
    expect("cudaGetLastError", cudaGetLastError(), cudaErrorInvalidDevice);

    int *d;
    const int n = 4096;
    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    CHECK(cudaMemset(d, 0, n * sizeof(int)));

    // A launch the device cannot run fails at once (CUDA 13 says cudaErrorInvalidValue; older releases
    // said cudaErrorInvalidConfiguration).
    errorsTouch<<<2, 2048>>>(d, n);  // more threads per block than any device allows
    expect("launch with 2048 threads: cudaGetLastError", cudaGetLastError(), cudaErrorInvalidValue);
    expect("cudaGetLastError again", cudaGetLastError(), cudaSuccess);
    expect("cudaDeviceSynchronize", cudaDeviceSynchronize(), cudaSuccess);

    errorsTouch<<<0, 128>>>(d, n);  // an empty grid is invalid too
    expect("launch with 0 blocks: cudaPeekAtLastError", cudaPeekAtLastError(), cudaErrorInvalidValue);
    expect("cudaGetLastError", cudaGetLastError(), cudaErrorInvalidValue);
    expect("cudaGetLastError again", cudaGetLastError(), cudaSuccess);

    // the failed launches wrote nothing
    int *h = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    int nonzero = 0;
    for (int i = 0; i < n; i++) nonzero += h[i] != 0;
    printf("elements written by failed launches: %d\n", nonzero);
    if (nonzero) bad++;

    // normal work still succeeds
    errorsTouch<<<n / 256, 256>>>(d, n);
    expect("normal launch: cudaGetLastError", cudaGetLastError(), cudaSuccess);
    expect("cudaDeviceSynchronize", cudaDeviceSynchronize(), cudaSuccess);
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    long long s = 0;
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        s += h[i];
        if (h[i] != 2 * i + 1) wrong++;
    }
    printf("after errors: sum %lld %s\n", s, wrong ? "FAIL" : "OK");
    if (wrong) bad++;
    expect("cudaFree", cudaFree(d), cudaSuccess);
    free(h);
    if (bad) {
        printf("error_paths: FAIL (%d)\n", bad);
        return 1;
    }
    printf("error_paths: PASS\n");
    return 0;
}
