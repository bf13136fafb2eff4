// device_query: device count, current device, every cudaDeviceProp field, a few attributes, versions.
// Its output is the device's own description, so it is compared with a per-device expected file
// (expected/device_query.emulated.out for the emulated device), not across devices.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

#define P_INT(f) printf(#f ": %d\n", (int)p.f)
#define P_UINT(f) printf(#f ": %u\n", (unsigned)p.f)
#define P_SIZE(f) printf(#f ": %zu\n", (size_t)p.f)
#define P_ARR(f)                                                                           \
    for (size_t k_ = 0; k_ < sizeof(p.f) / sizeof(p.f[0]); k_++) printf(#f "[%zu]: %d\n", k_, (int)p.f[k_])
#define P_HEX(f, n)                                                                        \
    do {                                                                                   \
        printf(#f ": ");                                                                   \
        for (int k_ = 0; k_ < (n); k_++) printf("%02x", (unsigned)(unsigned char)((const char *)&p.f)[k_]); \
        printf("\n");                                                                      \
    } while (0)

int main() {
    int count = -1;
    CHECK(cudaGetDeviceCount(&count));
    printf("device count: %d\n", count);
    if (count < 1) {
        printf("device_query: FAIL (no device)\n");
        return 1;
    }
    CHECK(cudaSetDevice(0));
    int dev = -1;
    CHECK(cudaGetDevice(&dev));
    printf("current device: %d\n", dev);

    cudaDeviceProp p;
    memset(&p, 0, sizeof(p));
    CHECK(cudaGetDeviceProperties(&p, dev));
    printf("name: %.256s\n", p.name);
    P_HEX(uuid, 16);
    P_HEX(luid, 8);
    P_UINT(luidDeviceNodeMask);
    P_SIZE(totalGlobalMem);
    P_SIZE(sharedMemPerBlock);
    P_INT(regsPerBlock);
    P_INT(warpSize);
    P_SIZE(memPitch);
    P_INT(maxThreadsPerBlock);
    P_ARR(maxThreadsDim);
    P_ARR(maxGridSize);
    P_SIZE(totalConstMem);
    P_INT(major);
    P_INT(minor);
    P_SIZE(textureAlignment);
    P_SIZE(texturePitchAlignment);
    P_INT(multiProcessorCount);
    P_INT(integrated);
    P_INT(canMapHostMemory);
    P_INT(maxTexture1D);
    P_INT(maxTexture1DMipmap);
    P_ARR(maxTexture2D);
    P_ARR(maxTexture2DMipmap);
    P_ARR(maxTexture2DLinear);
    P_ARR(maxTexture2DGather);
    P_ARR(maxTexture3D);
    P_ARR(maxTexture3DAlt);
    P_INT(maxTextureCubemap);
    P_ARR(maxTexture1DLayered);
    P_ARR(maxTexture2DLayered);
    P_ARR(maxTextureCubemapLayered);
    P_INT(maxSurface1D);
    P_ARR(maxSurface2D);
    P_ARR(maxSurface3D);
    P_ARR(maxSurface1DLayered);
    P_ARR(maxSurface2DLayered);
    P_INT(maxSurfaceCubemap);
    P_ARR(maxSurfaceCubemapLayered);
    P_SIZE(surfaceAlignment);
    P_INT(concurrentKernels);
    P_INT(ECCEnabled);
    P_INT(pciBusID);
    P_INT(pciDeviceID);
    P_INT(pciDomainID);
    P_INT(tccDriver);
    P_INT(asyncEngineCount);
    P_INT(unifiedAddressing);
    P_INT(memoryBusWidth);
    P_INT(l2CacheSize);
    P_INT(persistingL2CacheMaxSize);
    P_INT(maxThreadsPerMultiProcessor);
    P_INT(streamPrioritiesSupported);
    P_INT(globalL1CacheSupported);
    P_INT(localL1CacheSupported);
    P_SIZE(sharedMemPerMultiprocessor);
    P_INT(regsPerMultiprocessor);
    P_INT(managedMemory);
    P_INT(isMultiGpuBoard);
    P_INT(multiGpuBoardGroupID);
    P_INT(hostNativeAtomicSupported);
    P_INT(pageableMemoryAccess);
    P_INT(concurrentManagedAccess);
    P_INT(computePreemptionSupported);
    P_INT(canUseHostPointerForRegisteredMem);
    P_INT(cooperativeLaunch);
    P_SIZE(sharedMemPerBlockOptin);
    P_INT(pageableMemoryAccessUsesHostPageTables);
    P_INT(directManagedMemAccessFromHost);
    P_INT(maxBlocksPerMultiProcessor);
    P_INT(accessPolicyMaxWindowSize);
    P_SIZE(reservedSharedMemPerBlock);
    P_INT(hostRegisterSupported);
    P_INT(sparseCudaArraySupported);
    P_INT(hostRegisterReadOnlySupported);
    P_INT(timelineSemaphoreInteropSupported);
    P_INT(memoryPoolsSupported);
    P_INT(gpuDirectRDMASupported);
    P_UINT(gpuDirectRDMAFlushWritesOptions);
    P_INT(gpuDirectRDMAWritesOrdering);
    P_UINT(memoryPoolSupportedHandleTypes);
    P_INT(deferredMappingCudaArraySupported);
    P_INT(ipcEventSupported);
    P_INT(clusterLaunch);
    P_INT(unifiedFunctionPointers);
    P_INT(deviceNumaConfig);
    P_INT(deviceNumaId);
    P_INT(mpsEnabled);
    P_INT(hostNumaId);
    P_UINT(gpuPciDeviceID);
    P_UINT(gpuPciSubsystemID);
    P_INT(hostNumaMultinodeIpcSupported);
    P_ARR(reserved);

    // a few attributes, which must agree with the properties
    struct {
        const char *name;
        cudaDeviceAttr attr;
        int prop;
    } attrs[] = {
        {"cudaDevAttrMaxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock, p.maxThreadsPerBlock},
        {"cudaDevAttrMaxBlockDimX", cudaDevAttrMaxBlockDimX, p.maxThreadsDim[0]},
        {"cudaDevAttrMaxGridDimY", cudaDevAttrMaxGridDimY, p.maxGridSize[1]},
        {"cudaDevAttrWarpSize", cudaDevAttrWarpSize, p.warpSize},
        {"cudaDevAttrMultiProcessorCount", cudaDevAttrMultiProcessorCount, p.multiProcessorCount},
        {"cudaDevAttrComputeCapabilityMajor", cudaDevAttrComputeCapabilityMajor, p.major},
        {"cudaDevAttrComputeCapabilityMinor", cudaDevAttrComputeCapabilityMinor, p.minor},
        {"cudaDevAttrUnifiedAddressing", cudaDevAttrUnifiedAddressing, p.unifiedAddressing},
    };
    int bad = 0;
    for (size_t k = 0; k < sizeof(attrs) / sizeof(attrs[0]); k++) {
        int v = -1;
        CHECK(cudaDeviceGetAttribute(&v, attrs[k].attr, dev));
        printf("attribute %s: %d\n", attrs[k].name, v);
        if (v != attrs[k].prop) bad++;
    }

    int driver = 0, runtime = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    printf("driver version: %d\n", driver);
    printf("runtime version: %d\n", runtime);

    size_t freeMem = 0, totalMem = 0;
    CHECK(cudaMemGetInfo(&freeMem, &totalMem));
    printf("free <= total: %s\n", freeMem <= totalMem ? "yes" : "no");
    if (freeMem > totalMem) bad++;

    if (bad) {
        printf("device_query: FAIL (%d)\n", bad);
        return 1;
    }
    printf("device_query: PASS\n");
    return 0;
}
