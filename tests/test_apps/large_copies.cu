// large_copies: copies large enough to travel beside the messages (64 KiB and more), up to more than the
// shared memory a local session takes (cuwire/wire/ring.py), both ways, sync and async, pageable and pinned:
// every byte must come back as it went.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

static const char *verdict(const unsigned char *a, const unsigned char *b, size_t n) {
    return memcmp(a, b, n) == 0 ? "OK" : "FAIL";
}

int main() {
    const size_t sizes[] = {64 << 10, 4 << 20, (4 << 20) + 1, (9 << 20) + 7, (40 << 20) + 3};
    const size_t largest = (40 << 20) + 3;
    unsigned char *src = (unsigned char *)malloc(largest), *dst = (unsigned char *)malloc(largest);
    unsigned char *pinned;
    void *d1, *d2;
    cudaStream_t stream;
    CHECK(cudaMallocHost((void **)&pinned, largest));
    CHECK(cudaMalloc(&d1, largest));
    CHECK(cudaMalloc(&d2, largest));
    CHECK(cudaStreamCreate(&stream));
    int failures = 0;
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        const char *v;
        fill(src, n, k);
        memset(dst, 0, n);
        CHECK(cudaMemcpy(d1, src, n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(dst, d2, n, cudaMemcpyDeviceToHost));
        printf("%9zu bytes, sync pageable:  %s\n", n, v = verdict(src, dst, n));
        failures += v[0] == 'F';

        fill(src, n, k + 100);
        memset(dst, 0, n);
        CHECK(cudaMemcpyAsync(d2, src, n, cudaMemcpyHostToDevice, stream));
        CHECK(cudaMemcpyAsync(dst, d2, n, cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        printf("%9zu bytes, async pageable: %s\n", n, v = verdict(src, dst, n));
        failures += v[0] == 'F';

        fill(pinned, n, k + 200);
        memset(dst, 0, n);
        CHECK(cudaMemcpy(d1, pinned, n, cudaMemcpyDefault));
        CHECK(cudaMemcpy(dst, d1, n, cudaMemcpyDefault));
        printf("%9zu bytes, pinned default: %s\n", n, v = verdict(pinned, dst, n));
        failures += v[0] == 'F';

        fill(pinned, n, k + 300);  // a pinned buffer out and back on a stream: the copies are queued
        memcpy(src, pinned, n);
        CHECK(cudaMemcpyAsync(d2, pinned, n, cudaMemcpyHostToDevice, stream));
        CHECK(cudaStreamSynchronize(stream));
        memset(pinned, 0, n);
        CHECK(cudaMemcpyAsync(pinned, d2, n, cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        printf("%9zu bytes, async pinned:   %s\n", n, v = verdict(src, pinned, n));
        failures += v[0] == 'F';
    }
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFreeHost(pinned));
    free(src);
    free(dst);
    printf("large_copies: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
