// memcpy_kinds: every copy direction, pageable and pinned, sync and async, cudaMemcpyDefault, 2D copies.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

static int failures = 0;

static void report(const char *name, bool ok) {
    printf("%-32s %s\n", name, ok ? "OK" : "FAIL");
    if (!ok) failures++;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 17u + (i >> 8)) & 0xff);
}

static bool same(const unsigned char *a, const unsigned char *b, size_t n) { return memcmp(a, b, n) == 0; }

int main() {
    const size_t N = 50000;  // bytes; not a multiple of anything in particular
    unsigned char *src = (unsigned char *)malloc(N), *dst = (unsigned char *)malloc(N);
    unsigned char *pin_src, *pin_dst;
    CHECK(cudaMallocHost((void **)&pin_src, N));
    CHECK(cudaMallocHost((void **)&pin_dst, N));
    unsigned char *d1, *d2;
    CHECK(cudaMalloc((void **)&d1, N));
    CHECK(cudaMalloc((void **)&d2, N));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // pageable, synchronous
    fill(src, N, 1);
    memset(dst, 0, N);
    CHECK(cudaMemcpy(d1, src, N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dst, d1, N, cudaMemcpyDeviceToHost));
    report("H2D+D2H pageable sync", same(src, dst, N));

    CHECK(cudaMemcpy(d2, d1, N, cudaMemcpyDeviceToDevice));
    memset(dst, 0, N);
    CHECK(cudaMemcpy(dst, d2, N, cudaMemcpyDeviceToHost));
    report("D2D sync", same(src, dst, N));

    fill(src, N, 2);
    memset(dst, 0, N);
    CHECK(cudaMemcpy(dst, src, N, cudaMemcpyHostToHost));
    report("H2H sync", same(src, dst, N));

    // partial copies at offsets
    fill(src, N, 3);
    CHECK(cudaMemcpy(d1, src, N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d2 + 1000, d1 + 7, 3333, cudaMemcpyDeviceToDevice));
    memset(dst, 0, N);
    CHECK(cudaMemcpy(dst, d2 + 1000, 3333, cudaMemcpyDeviceToHost));
    report("D2D at offsets", same(src + 7, dst, 3333));

    // pinned, synchronous
    fill(pin_src, N, 4);
    memset(pin_dst, 0, N);
    CHECK(cudaMemcpy(d1, pin_src, N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(pin_dst, d1, N, cudaMemcpyDeviceToHost));
    report("H2D+D2H pinned sync", same(pin_src, pin_dst, N));

    fill(pin_src, N, 5);
    memset(pin_dst, 0, N);
    CHECK(cudaMemcpy(pin_dst, pin_src, N, cudaMemcpyHostToHost));
    report("H2H pinned sync", same(pin_src, pin_dst, N));

    // pinned, asynchronous on a created stream
    fill(pin_src, N, 6);
    memset(pin_dst, 0, N);
    CHECK(cudaMemcpyAsync(d1, pin_src, N, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(d2, d1, N, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaMemcpyAsync(pin_dst, d2, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    report("H2D+D2D+D2H pinned async", same(pin_src, pin_dst, N));

    // pageable, asynchronous on a created stream
    fill(src, N, 7);
    memset(dst, 0, N);
    CHECK(cudaMemcpyAsync(d1, src, N, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dst, d1, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    report("H2D+D2H pageable async", same(src, dst, N));

    // asynchronous on the legacy default stream
    fill(pin_src, N, 8);
    memset(pin_dst, 0, N);
    CHECK(cudaMemcpyAsync(d2, pin_src, N, cudaMemcpyHostToDevice, 0));
    CHECK(cudaMemcpyAsync(pin_dst, d2, N, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaDeviceSynchronize());
    report("H2D+D2H async default stream", same(pin_src, pin_dst, N));

    // cudaMemcpyDefault: the direction comes from the pointers
    fill(src, N, 9);
    memset(dst, 0, N);
    CHECK(cudaMemcpy(d1, src, N, cudaMemcpyDefault));
    CHECK(cudaMemcpy(d2, d1, N, cudaMemcpyDefault));
    CHECK(cudaMemcpy(dst, d2, N, cudaMemcpyDefault));
    report("default H2D+D2D+D2H pageable", same(src, dst, N));

    fill(pin_src, N, 10);
    memset(pin_dst, 0, N);
    CHECK(cudaMemcpyAsync(d1, pin_src, N, cudaMemcpyDefault, s));
    CHECK(cudaMemcpyAsync(pin_dst, d1, N, cudaMemcpyDefault, s));
    CHECK(cudaStreamSynchronize(s));
    report("default H2D+D2H pinned async", same(pin_src, pin_dst, N));

    fill(src, N, 11);
    memset(dst, 0, N);
    CHECK(cudaMemcpy(dst, src, N, cudaMemcpyDefault));
    report("default H2H", same(src, dst, N));

    // 2D: a width x height block, tight on the host, pitched on the device
    const size_t W = 100, H = 37, HP = 160;  // host destination pitch HP > W
    size_t dpitch = 0, dpitch2 = 0;
    unsigned char *dp, *dp2;
    CHECK(cudaMallocPitch((void **)&dp, &dpitch, W, H));
    CHECK(cudaMallocPitch((void **)&dp2, &dpitch2, W, H));
    report("cudaMallocPitch pitch >= width", dpitch >= W && dpitch2 >= W);

    unsigned char *h2 = (unsigned char *)malloc(W * H);
    unsigned char *hwide = (unsigned char *)malloc(HP * H);
    fill(h2, W * H, 12);
    CHECK(cudaMemcpy2D(dp, dpitch, h2, W, W, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2D(dp2, dpitch2, dp, dpitch, W, H, cudaMemcpyDeviceToDevice));
    memset(hwide, 0xAB, HP * H);
    CHECK(cudaMemcpy2D(hwide, HP, dp2, dpitch2, W, H, cudaMemcpyDeviceToHost));
    bool rows_ok = true, gaps_ok = true;
    for (size_t r = 0; r < H; r++) {
        if (memcmp(hwide + r * HP, h2 + r * W, W) != 0) rows_ok = false;
        for (size_t c = W; c < HP; c++)
            if (hwide[r * HP + c] != 0xAB) gaps_ok = false;
    }
    report("2D H2D+D2D+D2H sync rows", rows_ok);
    report("2D D2H leaves host pitch gaps", gaps_ok);

    // 2D on a stream, pinned, with a sub-rectangle (column offset 3, 40 wide, rows 5..24)
    const size_t SW = 40, SH = 20;
    unsigned char *ph = pin_src, *pw = pin_dst;
    fill(ph, W * H, 13);
    CHECK(cudaMemcpy2DAsync(dp, dpitch, ph, W, W, H, cudaMemcpyHostToDevice, s));
    memset(pw, 0xCD, HP * H);
    CHECK(cudaMemcpy2DAsync(pw, HP, dp + 5 * dpitch + 3, dpitch, SW, SH, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool sub_ok = true, sub_gaps = true;
    for (size_t r = 0; r < SH; r++) {
        if (memcmp(pw + r * HP, ph + (r + 5) * W + 3, SW) != 0) sub_ok = false;
        for (size_t c = SW; c < HP; c++)
            if (pw[r * HP + c] != 0xCD) sub_gaps = false;
    }
    for (size_t i = SH * HP; i < HP * H; i++)
        if (pw[i] != 0xCD) sub_gaps = false;
    report("2D async sub-rectangle", sub_ok);
    report("2D async leaves host gaps", sub_gaps);

    // 2D host to host with different pitches
    memset(hwide, 0x11, HP * H);
    CHECK(cudaMemcpy2D(hwide, HP, h2, W, W, H, cudaMemcpyHostToHost));
    bool hh_ok = true;
    for (size_t r = 0; r < H; r++) {
        if (memcmp(hwide + r * HP, h2 + r * W, W) != 0) hh_ok = false;
        for (size_t c = W; c < HP; c++)
            if (hwide[r * HP + c] != 0x11) hh_ok = false;
    }
    report("2D H2H", hh_ok);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dp));
    CHECK(cudaFree(dp2));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFreeHost(pin_src));
    CHECK(cudaFreeHost(pin_dst));
    free(src);
    free(dst);
    free(h2);
    free(hwide);
    if (failures) {
        printf("memcpy_kinds: FAIL (%d)\n", failures);
        return 1;
    }
    printf("memcpy_kinds: PASS\n");
    return 0;
}
