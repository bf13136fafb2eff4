// memset: cudaMemset, cudaMemsetAsync and cudaMemset2D.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

static int failures = 0;

static void check(const char *what, bool ok) {
    printf("%s: %s\n", what, ok ? "OK" : "FAIL");
    if (!ok) failures++;
}

static unsigned long long sum(const unsigned char *p, size_t n) {
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

int main() {
    const size_t N = 10000;
    unsigned char *d, *h = (unsigned char *)malloc(N), *want = (unsigned char *)malloc(N);
    CHECK(cudaMalloc((void **)&d, N));

    // whole buffer
    CHECK(cudaMemset(d, 0x5A, N));
    CHECK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
    memset(want, 0x5A, N);
    printf("cudaMemset 0x5a: first %02x %02x last %02x sum %llu\n", h[0], h[1], h[N - 1], sum(h, N));
    check("cudaMemset whole buffer", memcmp(h, want, N) == 0);

    // a range in the middle; the value is truncated to its low byte (0x1234 -> 0x34)
    CHECK(cudaMemset(d + 100, 0x1234, 333));
    CHECK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
    memset(want + 100, 0x34, 333);
    printf("cudaMemset range: h[99] %02x h[100] %02x h[432] %02x h[433] %02x sum %llu\n", h[99], h[100], h[432],
           h[433], sum(h, N));
    check("cudaMemset range", memcmp(h, want, N) == 0);

    // async on a created stream, then on the default stream
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemsetAsync(d + 5000, 0, 4999, s));
    CHECK(cudaMemsetAsync(d + 9999, 0xFF, 1, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemsetAsync(d, 0x07, 10, 0));
    CHECK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
    memset(want + 5000, 0, 4999);
    want[9999] = 0xFF;
    memset(want, 0x07, 10);
    printf("cudaMemsetAsync: h[0] %02x h[10] %02x h[5000] %02x h[9999] %02x sum %llu\n", h[0], h[10], h[5000],
           h[9999], sum(h, N));
    check("cudaMemsetAsync", memcmp(h, want, N) == 0);

    // int array zeroed with cudaMemset
    const int M = 1024;
    int *di, *hi = (int *)malloc(M * sizeof(int));
    CHECK(cudaMalloc((void **)&di, M * sizeof(int)));
    CHECK(cudaMemset(di, 0xFF, M * sizeof(int)));
    CHECK(cudaMemset(di, 0, (M / 2) * sizeof(int)));
    CHECK(cudaMemcpy(hi, di, M * sizeof(int), cudaMemcpyDeviceToHost));
    long long isum = 0;
    for (int i = 0; i < M; i++) isum += hi[i];
    printf("int array: hi[0] %d hi[511] %d hi[512] %d sum %lld\n", hi[0], hi[M / 2 - 1], hi[M / 2], isum);
    check("cudaMemset int array", isum == -(M / 2));

    // 2D: set a width x height rectangle inside a pitched allocation
    const size_t W = 64, H = 16;
    size_t pitch = 0;
    unsigned char *dp;
    CHECK(cudaMallocPitch((void **)&dp, &pitch, W, H));
    unsigned char *h2 = (unsigned char *)malloc(W * H), *w2 = (unsigned char *)malloc(W * H);
    CHECK(cudaMemset2D(dp, pitch, 0x11, W, H));
    CHECK(cudaMemset2D(dp + 2 * pitch + 8, pitch, 0x22, 16, 4));  // rows 2..5, columns 8..23
    CHECK(cudaMemcpy2D(h2, W, dp, pitch, W, H, cudaMemcpyDeviceToHost));
    memset(w2, 0x11, W * H);
    for (size_t r = 2; r < 6; r++) memset(w2 + r * W + 8, 0x22, 16);
    printf("cudaMemset2D: row0 %02x row2[7] %02x row2[8] %02x row5[23] %02x row5[24] %02x row6[8] %02x sum %llu\n",
           h2[0], h2[2 * W + 7], h2[2 * W + 8], h2[5 * W + 23], h2[5 * W + 24], h2[6 * W + 8], sum(h2, W * H));
    check("cudaMemset2D", memcmp(h2, w2, W * H) == 0);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(di));
    CHECK(cudaFree(dp));
    free(h);
    free(want);
    free(hi);
    free(h2);
    free(w2);
    if (failures) {
        printf("memset: FAIL (%d)\n", failures);
        return 1;
    }
    printf("memset: PASS\n");
    return 0;
}
