// mempool: stream-ordered allocation (cudaMallocAsync, cudaFreeAsync) from the device's default pool and from
// a pool of the program's own; pool attributes set and read back, an int attribute without touching the
// bytes beside it.
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static int check(const char *what, const int *h, int v, int n) {
    for (int i = 0; i < n; i++)
        if (h[i] != v + (i & 15)) {
            printf("%-40s FAIL at %d: %d\n", what, i, h[i]);
            return 1;
        }
    printf("%-40s OK\n", what);
    return 0;
}

int main() {
    const int n = 1 << 16;
    static int h[1 << 16];
    int failures = 0;
    cudaMemPool_t pool, own;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t threshold = UINT64_MAX, got = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    printf("%-40s %s\n", "release threshold read back", got == UINT64_MAX ? "OK" : "FAIL");
    failures += got != UINT64_MAX;
    struct { int value, guard; } reuse = {-1, 12345};
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse.value));
    printf("opportunistic reuse: %d, the int beside it: %d\n", reuse.value, reuse.guard);
    failures += reuse.guard != 12345;

    for (int round = 0; round < 5; round++) {
        int *p;
        CHECK(cudaMallocAsync((void **)&p, n * sizeof(int), s));
        streamFill<<<n / 256, 256, 0, s>>>(p, round * 100, n);
        CHECK(cudaMemcpyAsync(h, p, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaFreeAsync(p, s));
        CHECK(cudaStreamSynchronize(s));
        failures += h[n - 1] != round * 100 + 15;
    }
    failures += check("five rounds from the default pool", h, 400, n);

    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CHECK(cudaMemPoolCreate(&own, &props));
    int *q;
    CHECK(cudaMallocFromPoolAsync((void **)&q, n * sizeof(int), own, s));
    streamFill<<<n / 256, 256, 0, s>>>(q, 7, n);
    CHECK(cudaMemcpyAsync(h, q, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(q, s));
    CHECK(cudaStreamSynchronize(s));
    failures += check("an allocation from a pool of our own", h, 7, n);
    CHECK(cudaMemPoolTrimTo(own, 0));
    CHECK(cudaMemPoolDestroy(own));
    CHECK(cudaStreamDestroy(s));
    printf("mempool: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
