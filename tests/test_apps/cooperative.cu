// cooperative: a cooperative launch whose grid synchronises in the middle (cudaLaunchCooperativeKernel and
// cooperative_groups::this_grid().sync()): every thread reads what another block wrote before the sync.
#include <cooperative_groups.h>
#include <stdio.h>

#include "check.h"

namespace cg = cooperative_groups;

__global__ void coopRotate(int *a, int *b, int n) {
    cg::grid_group grid = cg::this_grid();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = i * 7;
    grid.sync();
    if (i < n) b[i] = a[(i + blockDim.x) % n];  // written by the next block
}

int main() {
    const int blocks = 4, threads = 256, n = blocks * threads;
    int *a, *b, h[n];
    CHECK(cudaMalloc((void **)&a, n * sizeof(int)));
    CHECK(cudaMalloc((void **)&b, n * sizeof(int)));
    int nn = n;
    void *args[] = {&a, &b, &nn};
    CHECK(cudaLaunchCooperativeKernel((void *)coopRotate, blocks, threads, args, 0, 0));
    CHECK(cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != ((i + threads) % n) * 7;
    printf("grid-wide sync: %s (%d wrong)\n", bad ? "FAIL" : "OK", bad);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("cooperative: %s\n", bad ? "FAIL" : "PASS");
    return bad != 0;
}
