// events: create, record, synchronize, query, elapsed time (only its sign), destroy.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

__global__ void eventsIota(int *out, int base, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + i;
}

static int failures = 0;

// every call shown here is expected to succeed
static void show(const char *what, cudaError_t e) {
    printf("%s -> %d %s\n", what, (int)e, cudaGetErrorName(e));
    if (e != cudaSuccess) failures++;
}

int main() {
    const int n = 4096;
    int *d, *h = (int *)malloc(n * sizeof(int));
    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));

    cudaEvent_t start, stop, marker;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventCreateWithFlags(&marker, cudaEventDisableTiming));
    // an event never recorded counts as complete
    show("cudaEventQuery(never recorded)", cudaEventQuery(marker));

    // on the default stream
    CHECK(cudaEventRecord(start, 0));
    eventsIota<<<n / 128, 128>>>(d, 1000, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop, 0));
    show("cudaEventSynchronize(stop)", cudaEventSynchronize(stop));
    show("cudaEventQuery(stop)", cudaEventQuery(stop));
    float ms = -1.0f;
    show("cudaEventElapsedTime", cudaEventElapsedTime(&ms, start, stop));
    printf("elapsed >= 0: %s\n", ms >= 0.0f ? "yes" : "no");
    if (!(ms >= 0.0f)) failures++;

    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    long long s = 0;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        s += h[i];
        if (h[i] != 1000 + i) ok = false;
    }
    printf("default stream: sum %lld %s\n", s, ok ? "OK" : "FAIL");

    // on a created stream
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    CHECK(cudaEventRecord(start, st));
    eventsIota<<<n / 256, 256, 0, st>>>(d, -7, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(marker, st));
    CHECK(cudaEventRecord(stop, st));
    show("cudaEventSynchronize(marker)", cudaEventSynchronize(marker));
    show("cudaEventSynchronize(stop)", cudaEventSynchronize(stop));
    show("cudaEventQuery(marker)", cudaEventQuery(marker));
    ms = -1.0f;
    show("cudaEventElapsedTime(stream)", cudaEventElapsedTime(&ms, start, stop));
    printf("elapsed >= 0: %s\n", ms >= 0.0f ? "yes" : "no");
    if (!(ms >= 0.0f)) failures++;
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    s = 0;
    bool ok2 = true;
    for (int i = 0; i < n; i++) {
        s += h[i];
        if (h[i] != -7 + i) ok2 = false;
    }
    printf("created stream: sum %lld %s\n", s, ok2 ? "OK" : "FAIL");

    show("cudaEventDestroy(start)", cudaEventDestroy(start));
    show("cudaEventDestroy(stop)", cudaEventDestroy(stop));
    show("cudaEventDestroy(marker)", cudaEventDestroy(marker));
    CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(d));
    free(h);
    if (!ok || !ok2 || failures) {
        printf("events: FAIL\n");
        return 1;
    }
    printf("events: PASS\n");
    return 0;
}
