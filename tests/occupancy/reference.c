/* tests/test_occupancy.py's reference: NVIDIA's occupancy calculator (the toolkit's cuda_occupancy.h) on the
 * cases given on stdin, one a line:
 *   ask major minor maxThreadsPerBlock maxThreadsPerSM regsPerBlock regsPerSM warpSize sharedPerBlock
 *   sharedPerSM sharedPerBlockOptin reservedSharedPerBlock numRegs maxThreads sharedSizeBytes
 *   maxDynamicShared barriers carveout a b
 * (ask 1: active blocks for block size a and dynamic shared memory b; 3: the dynamic shared memory available
 * to a blocks of b threads); one answer a line, or E where the calculator refuses the case. */
#include <stdio.h>

#include "cuda_occupancy.h"

int main(void)
{
    int ask, a, b;
    long long v[18];
    while (scanf("%d", &ask) == 1) {
        for (int i = 0; i < 17; i++)
            if (scanf("%lld", &v[i]) != 1)
                return 1;
        if (scanf("%d %d", &a, &b) != 2)
            return 1;
        cudaOccDeviceProp p = {0};
        cudaOccFuncAttributes f = {0};
        cudaOccDeviceState s = {0};
        cudaOccResult r = {0};
        p.computeMajor = (int)v[0], p.computeMinor = (int)v[1], p.maxThreadsPerBlock = (int)v[2];
        p.maxThreadsPerMultiprocessor = (int)v[3], p.regsPerBlock = (int)v[4], p.regsPerMultiprocessor = (int)v[5];
        p.warpSize = (int)v[6], p.sharedMemPerBlock = (size_t)v[7], p.sharedMemPerMultiprocessor = (size_t)v[8];
        p.sharedMemPerBlockOptin = (size_t)v[9], p.reservedSharedMemPerBlock = (size_t)v[10], p.numSms = 132;
        f.numRegs = (int)v[11], f.maxThreadsPerBlock = (int)v[12], f.sharedSizeBytes = (size_t)v[13];
        f.maxDynamicSharedSizeBytes = (size_t)v[14], f.numBlockBarriers = (int)v[15];
        f.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; /* (as the header's own conversion from cudaFuncAttributes) */
        f.partitionedGCConfig = PARTITIONED_GC_OFF;
        s.cacheConfig = CACHE_PREFER_NONE, s.carveoutConfig = (int)v[16];
        if (ask == 1) {
            if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &f, &s, a, (size_t)b) != CUDA_OCC_SUCCESS)
                puts("E");
            else
                printf("%d\n", r.activeBlocksPerMultiprocessor);
        } else {
            size_t avail = 0;
            if (cudaOccAvailableDynamicSMemPerBlock(&avail, &p, &f, &s, a, b) != CUDA_OCC_SUCCESS)
                puts("E");
            else
                printf("%zu\n", avail);
        }
    }
    return 0;
}
