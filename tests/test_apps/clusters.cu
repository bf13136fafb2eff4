// clusters: thread block clusters (sm_90): a kernel launched with a cluster dimension attribute
// (cudaLaunchKernelEx) and one with a compile-time __cluster_dims__, each block reading its neighbour's
// shared memory in the cluster (distributed shared memory) after a cluster-wide sync; how many clusters can
// be active at once and the largest cluster size (the occupancy calculator's cluster calls).
#include <cooperative_groups.h>
#include <stdio.h>

#include "check.h"

namespace cg = cooperative_groups;

__device__ void rank_and_neighbour(int *out) {
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ int mine;
    unsigned rank = cluster.block_rank();
    if (threadIdx.x == 0) mine = blockIdx.x * 10;
    cluster.sync();
    int *theirs = cluster.map_shared_rank(&mine, (rank + 1) % cluster.num_blocks());
    if (threadIdx.x == 0) out[blockIdx.x] = (int)rank * 1000 + *theirs;
    cluster.sync();  // (no block leaves while another still reads its shared memory)
}

__global__ void clusterNeighbour(int *out) { rank_and_neighbour(out); }

__global__ void __cluster_dims__(4, 1, 1) clusterNeighbourFixed(int *out) { rank_and_neighbour(out); }

static int check(const char *what, const int *h, int blocks, int size) {
    int bad = 0;
    for (int b = 0; b < blocks; b++) {
        int rank = b % size, first = b - rank;
        bad += h[b] != rank * 1000 + (first + (rank + 1) % size) * 10;
    }
    printf("%-48s %s (%d wrong)\n", what, bad ? "FAIL" : "OK", bad);
    return bad != 0;
}

int main() {
    const int blocks = 16;
    int *out, h[blocks];
    CHECK(cudaMalloc(&out, sizeof h));
    int failures = 0;

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(32);
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, (void *)clusterNeighbour, &config));
    printf("clusters of 2 that can be active at once: %s\n", clusters > 0 ? "some" : "none");
    // as cuBLASLt and cuDNN ask: every cluster width in turn, the grid following it; then again, backwards
    int sweep[2][4];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 4; i++) {
            int width = pass ? 4 - i : i + 1;
            cudaLaunchConfig_t one = config;
            cudaLaunchAttribute wide = attr;
            one.gridDim = dim3(width);
            wide.val.clusterDim.x = width;
            one.attrs = &wide;
            CHECK(cudaOccupancyMaxActiveClusters(&sweep[pass][width - 1], (void *)clusterNeighbour, &one));
        }
    int same = 1, some = 1;
    for (int i = 0; i < 4; i++) {
        same &= sweep[0][i] == sweep[1][i];
        some &= sweep[0][i] > 0;
    }
    printf("clusters of widths 1 to 4, asked twice: some of each: %s, the same both times: %s\n", some ? "yes" : "no",
           same ? "yes" : "no");
    // a set of the kernel's attributes may change the answers: asked again (through cuwire: of the server)
    CHECK(cudaFuncSetAttribute((void *)clusterNeighbour, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    int again = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&again, (void *)clusterNeighbour, &config));
    printf("clusters of 2 after an attribute set: the same: %s\n", again == clusters ? "yes" : "no");
    int largest = 0;
    config.numAttrs = 0;  // (the largest cluster size the kernel can have, whatever the launch asks)
    CHECK(cudaOccupancyMaxPotentialClusterSize(&largest, (void *)clusterNeighbour, &config));
    config.numAttrs = 1;
    printf("the largest cluster size: a power of two from 2 to 16: %s\n",
           largest >= 2 && largest <= 16 && (largest & (largest - 1)) == 0 ? "yes" : "no");
    CHECK(cudaLaunchKernelEx(&config, clusterNeighbour, out));
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    failures += check("clusters of 2 from a launch attribute", h, blocks, 2);

    clusterNeighbourFixed<<<blocks, 32>>>(out);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    failures += check("clusters of 4 from __cluster_dims__", h, blocks, 4);
    CHECK(cudaFree(out));
    printf("clusters: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
