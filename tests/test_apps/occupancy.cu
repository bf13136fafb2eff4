// occupancy: cuOccupancyMaxPotentialBlockSize(WithFlags), the driver's occupancy calculator (Numba's forall
// and driver-API programs use it), got through cudaGetDriverEntryPointByVersion for a kernel's function:
// with no dynamic shared memory, with a callback that asks shared memory by block size, under a block size
// limit, with a flag; each compared with the CUDA runtime's own calculator (cuda_runtime.h's templates),
// and the block size used for a launch whose results are checked. Relations only are printed (the numbers
// belong to the GPU).
#include <cudaTypedefs.h>
#include <stdio.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static size_t CUDA_CB shared_for(int block) { return (size_t)block * 16; }

static void say(const char *what, CUresult r, int grid, int block, int rgrid, int rblock, int limit, int sms) {
    printf("%s: %d, as the runtime's: %s, whole warps: %s, within the limit: %s, whole waves: %s\n", what, (int)r,
           grid == rgrid && block == rblock ? "yes" : "no", block > 0 && (block % 32 == 0 || block == limit) ? "yes" : "no",
           block > 0 && block <= limit ? "yes" : "no", grid > 0 && grid % sms == 0 ? "yes" : "no");
}

int main() {
    PFN_cuOccupancyMaxPotentialBlockSize_v6050 potential = nullptr;
    PFN_cuOccupancyMaxPotentialBlockSizeWithFlags_v7000 potential_flags = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuOccupancyMaxPotentialBlockSize", (void **)&potential, 12000,
                                           cudaEnableDefault, &found));
    CHECK(cudaGetDriverEntryPointByVersion("cuOccupancyMaxPotentialBlockSizeWithFlags", (void **)&potential_flags,
                                           12000, cudaEnableDefault, &found));
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)streamFill));
    int sms, grid, block, rgrid, rblock;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

    CUresult r = potential(&grid, &block, (CUfunction)f, nullptr, 0, 0);
    CHECK(cudaOccupancyMaxPotentialBlockSize(&rgrid, &rblock, streamFill, 0, 0));
    say("no dynamic shared memory", r, grid, block, rgrid, rblock, 1024, sms);
    int launch_block = block;

    r = potential(&grid, &block, (CUfunction)f, shared_for, 0, 0);
    CHECK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&rgrid, &rblock, streamFill, shared_for, 0));
    say("shared memory by block size", r, grid, block, rgrid, rblock, 1024, sms);

    r = potential(&grid, &block, (CUfunction)f, nullptr, 4096, 100);
    CHECK(cudaOccupancyMaxPotentialBlockSize(&rgrid, &rblock, streamFill, 4096, 100));
    say("4 KiB of shared memory, at most 100 threads", r, grid, block, rgrid, rblock, 100, sms);

    r = potential_flags(&grid, &block, (CUfunction)f, nullptr, 0, 0, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE);
    CHECK(cudaOccupancyMaxPotentialBlockSizeWithFlags(&rgrid, &rblock, streamFill, 0, 0,
                                                      cudaOccupancyDisableCachingOverride));
    say("caching override disabled", r, grid, block, rgrid, rblock, 1024, sms);

    printf("no place for the grid size: %d\n", (int)potential(nullptr, &block, (CUfunction)f, nullptr, 0, 0));

    const int n = 1 << 16;
    static int h[1 << 16];
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    streamFill<<<(n + launch_block - 1) / launch_block, launch_block>>>(d, 5, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != 5 + (i & 15);
    printf("a launch with that block size: %s\n", bad ? "FAIL" : "OK");
    CHECK(cudaFree(d));
    return bad ? 1 : 0;
}
