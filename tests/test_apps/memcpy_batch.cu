// memcpy_batch: cudaMemcpyBatchAsync (CUDA 12.8+; NCCL's copy-engine collectives, cuDF and KV-cache
// transfers use it): a batch of host-to-device copies from pageable and pinned memory with two sets of
// attributes, then a batch of device-to-device and device-to-host copies, all in a stream's order; every
// byte checked. Then the driver's answers to an empty batch, the legacy NULL stream, attribute indices
// that do not start at 0, and an invalid source access order.
#include <stdio.h>
#include <string.h>

#include "check.h"

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

int main() {
    const size_t n = 3 << 16;  // large enough to travel beside the messages
    unsigned char *pageable = (unsigned char *)malloc(n), *out = (unsigned char *)malloc(n), *pinned;
    unsigned char *d1, *d2, *d3;
    CHECK(cudaMallocHost((void **)&pinned, n));
    CHECK(cudaMalloc((void **)&d1, n));
    CHECK(cudaMalloc((void **)&d2, n));
    CHECK(cudaMalloc((void **)&d3, n));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    fill(pageable, n, 1);
    fill(pinned, n, 2);

    cudaMemcpyAttributes attrs[2] = {};
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    size_t attr_idxs[2] = {0, 1};
    void *dsts[3] = {d1, d2, d3};
    const void *srcs[3] = {pageable, pinned, pageable};
    size_t sizes[3] = {n, n, 1000};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, attr_idxs, 2, s));

    void *dsts2[2] = {out, d3 + 4096};
    const void *srcs2[2] = {d2, d1 + 4096};
    size_t sizes2[2] = {n, n - 4096};
    CHECK(cudaMemcpyBatchAsync(dsts2, srcs2, sizes2, 2, attrs, attr_idxs, 1, s));
    CHECK(cudaStreamSynchronize(s));
    printf("pinned to device to host: %s\n", memcmp(out, pinned, n) == 0 ? "OK" : "FAIL");
    memset(out, 0, n);
    CHECK(cudaMemcpy(out, d3, n, cudaMemcpyDeviceToHost));
    int same = memcmp(out, pageable, 1000) == 0 && memcmp(out + 4096, pageable + 4096, n - 4096) == 0;
    printf("pageable to device, device to device: %s\n", same ? "OK" : "FAIL");

    printf("an empty batch: %d\n", (int)cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, attrs, attr_idxs, 1, s));
    cudaGetLastError();
    printf("the legacy NULL stream: %d\n", (int)cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, attrs, attr_idxs, 1, 0));
    cudaGetLastError();
    size_t from_one[1] = {1};
    printf("attributes from copy 1: %d\n", (int)cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, from_one, 1, s));
    cudaGetLastError();
    cudaMemcpyAttributes invalid = {};
    printf("an invalid access order: %d\n", (int)cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &invalid, attr_idxs, 1, s));
    cudaGetLastError();

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(d3));
    CHECK(cudaFreeHost(pinned));
    free(pageable);
    free(out);
    return 0;
}
