// streams: kernels on several streams, a cross-stream dependency through cudaStreamWaitEvent,
// cudaStreamSynchronize, cudaStreamQuery.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static long long sum(const int *p, int n) {
    long long s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    return s;
}

int main() {
    const int N = 10000, T = 128, B = (N + T - 1) / T;
    const size_t bytes = N * sizeof(int);
    const int S = 4;
    cudaStream_t st[S];
    for (int k = 0; k < S - 1; k++) CHECK(cudaStreamCreate(&st[k]));
    CHECK(cudaStreamCreateWithFlags(&st[S - 1], cudaStreamNonBlocking));
    int *a, *b, *c, *e;
    CHECK(cudaMalloc((void **)&a, bytes));
    CHECK(cudaMalloc((void **)&b, bytes));
    CHECK(cudaMalloc((void **)&c, bytes));
    CHECK(cudaMalloc((void **)&e, bytes));
    cudaEvent_t aReady, bReady;
    CHECK(cudaEventCreateWithFlags(&aReady, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&bReady, cudaEventDisableTiming));

    // stream 0 makes a; stream 1 waits for it and derives b from it
    streamFill<<<B, T, 0, st[0]>>>(a, 10, N);
    CHECK(cudaEventRecord(aReady, st[0]));
    CHECK(cudaStreamWaitEvent(st[1], aReady, 0));
    streamScaleAdd<<<B, T, 0, st[1]>>>(b, a, 3, 1, N);
    CHECK(cudaEventRecord(bReady, st[1]));
    // stream 2 works alone, two kernels in order
    streamFill<<<B, T, 0, st[2]>>>(c, 30, N);
    streamScaleAdd<<<B, T, 0, st[2]>>>(c, c, 2, -60, N);
    // the non-blocking stream 3 works alone
    streamFill<<<B, T, 0, st[3]>>>(e, -5, N);
    // stream 0 waits for b, then adds it into a
    CHECK(cudaStreamWaitEvent(st[0], bReady, 0));
    streamAddInto<<<B, T, 0, st[0]>>>(a, b, N);
    CHECK(cudaGetLastError());

    for (int k = S - 1; k >= 0; k--) CHECK(cudaStreamSynchronize(st[k]));
    int queryFailures = 0;
    for (int k = 0; k < S; k++) {
        cudaError_t q = cudaStreamQuery(st[k]);
        printf("cudaStreamQuery(stream %d) after sync -> %d %s\n", k, (int)q, cudaGetErrorName(q));
        if (q != cudaSuccess) queryFailures++;
    }

    int *ha = (int *)malloc(bytes), *hb = (int *)malloc(bytes), *hc = (int *)malloc(bytes), *he = (int *)malloc(bytes);
    CHECK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hc, c, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(he, e, bytes, cudaMemcpyDeviceToHost));
    int bad = queryFailures;
    for (int i = 0; i < N; i++) {
        int x = 10 + (i & 15);
        int y = x * 3 + 1;
        if (hb[i] != y) bad++;
        if (ha[i] != x + y) bad++;
        if (hc[i] != (30 + (i & 15)) * 2 - 60) bad++;
        if (he[i] != -5 + (i & 15)) bad++;
    }
    printf("a: a[0] %d a[9999] %d sum %lld\n", ha[0], ha[N - 1], sum(ha, N));
    printf("b: b[0] %d b[9999] %d sum %lld\n", hb[0], hb[N - 1], sum(hb, N));
    printf("c: c[0] %d c[9999] %d sum %lld\n", hc[0], hc[N - 1], sum(hc, N));
    printf("e: e[0] %d e[9999] %d sum %lld\n", he[0], he[N - 1], sum(he, N));

    CHECK(cudaEventDestroy(aReady));
    CHECK(cudaEventDestroy(bReady));
    for (int k = 0; k < S; k++) CHECK(cudaStreamDestroy(st[k]));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    CHECK(cudaFree(e));
    free(ha);
    free(hb);
    free(hc);
    free(he);
    if (bad) {
        printf("streams: FAIL (%d mismatches)\n", bad);
        return 1;
    }
    printf("streams: PASS\n");
    return 0;
}
