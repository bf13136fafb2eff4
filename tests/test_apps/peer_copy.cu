// peer_copy: cudaMemcpyPeer and cudaMemcpyPeerAsync between two allocations of the one GPU (as a peer
// bandwidth test run on a single GPU does), small and large, checked byte for byte; peer access asked of
// the device itself.
#include <stdio.h>
#include <string.h>

#include "check.h"

int main() {
    int failures = 0, can = -1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 0));
    printf("device 0 can access itself as a peer: %d\n", can);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    const size_t sizes[] = {4, 4096, 1 << 20, 64 << 20};
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        unsigned char *a, *b, *h = (unsigned char *)malloc(n), *back = (unsigned char *)malloc(n);
        for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + k);
        CHECK(cudaMalloc(&a, n));
        CHECK(cudaMalloc(&b, n));
        CHECK(cudaMemcpy(a, h, n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpyPeer(b, 0, a, 0, n));
        CHECK(cudaMemcpy(back, b, n, cudaMemcpyDeviceToHost));
        int ok = memcmp(h, back, n) == 0;
        CHECK(cudaMemset(a, 0, n));
        CHECK(cudaMemcpyPeerAsync(a, 0, b, 0, n, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(back, a, n, cudaMemcpyDeviceToHost));
        ok &= memcmp(h, back, n) == 0;
        printf("%9zu bytes peer, both ways: %s\n", n, ok ? "OK" : "FAIL");
        failures += !ok;
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        free(h);
        free(back);
    }
    CHECK(cudaStreamDestroy(s));
    printf("peer_copy: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
