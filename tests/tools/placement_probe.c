/* Where the driver puts device memory, for issue 39's several servers as one device list
 * (docs/several-servers.md, "Addresses"): two servers' session processes must hand out distinct device
 * addresses. Native, on a GPU host; built and run by hand:
 *   gcc -O2 -o build/placement_probe tests/tools/placement_probe.c -I$CUDA/include -L$CUDA/lib64/stubs -lcuda
 *   build/placement_probe              the addresses of each kind of allocation, as the driver places them
 *   build/placement_probe hold ADDRESS the same, after holding (no access, no memory) 1 TiB on each side of
 *                                      ADDRESS (the first run's first allocation): whether the driver goes
 *                                      elsewhere
 *   build/placement_probe hold LO HI   the same, after holding [LO, HI) (the driver's fixed windows: its pool
 *                                      at 0x420000000, measured on an H200 host, 2026-11-27)
 * Through cuwire (built against the test apps' stub, tests/test_apps/build/stubs, where the toolkit has none):
 *   CUWIRE_SERVER=HOST:PORT CUWIRE_SERVER_NUMBER=N LD_LIBRARY_PATH=build/client build/placement_probe
 *                                      where a session numbered N of a device list puts each (its windows)
 * Each line: what was made, and its address. Then the reservations the hints asked (cuMemAddressReserve at
 * fixed windows low in the address space: whether the driver takes a window it is given), and the
 * mappings of the process larger than 1 GiB (the driver's own reservations of address space). */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHECK(x)                                                                                               \
    do {                                                                                                       \
        CUresult r_ = (x);                                                                                     \
        if (r_) {                                                                                              \
            printf("%s: error %d\n", #x, r_);                                                                  \
            return 1;                                                                                          \
        }                                                                                                      \
    } while (0)

static void large_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo, hi;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && hi - lo >= (1ul << 30))
            printf("mapping of %lu GiB: %s", (hi - lo) >> 30, line);
    if (f)
        fclose(f);
}

/* The values of the driver's handles of each kind (heap pointers of its own, or numbers): whether two
 * servers' sessions could hand out the same one, for the handles' namespace (docs/several-servers.md). */
static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry noop()\n{\n    ret;\n}\n";

static int handles(CUcontext primary)
{
    CUstream stream;
    CUevent event;
    CUmodule module;
    CUfunction function;
    CUlibrary library;
    CUkernel kernel;
    CUgraph graph;
    CUmemoryPool pool;
    CUcontext made;
    CUmemGenericAllocationHandle physical;
    CUmemAllocationProp prop = {0};
    CUmemPoolProps pool_props = {0};
    size_t granularity;
    prop.type = pool_props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = pool_props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&event, 0));
    CHECK(cuModuleLoadData(&module, PTX));
    CHECK(cuModuleGetFunction(&function, module, "noop"));
    CHECK(cuLibraryLoadData(&library, PTX, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&kernel, library, "noop"));
    CHECK(cuGraphCreate(&graph, 0));
    CHECK(cuMemPoolCreate(&pool, &pool_props));
    CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(cuMemCreate(&physical, granularity, &prop, 0));
    CHECK(cuCtxCreate(&made, NULL, 0, 0));
    printf("handles: context %p, made context %p, stream %p, event %p, module %p, function %p, library %p, "
           "kernel %p, graph %p, pool %p, physical allocation %#llx\n", (void *)primary, (void *)made,
           (void *)stream, (void *)event, (void *)module, (void *)function, (void *)library, (void *)kernel,
           (void *)graph, (void *)pool, (unsigned long long)physical);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long around = argc > 2 ? strtoul(argv[2], NULL, 0) : 0, until = argc > 3 ? strtoul(argv[3], NULL, 0) : 0;
    if (argc > 1 && !strcmp(argv[1], "hold") && around) {
        unsigned long lo = (around & ~((1ul << 30) - 1)) - (1ul << 40), len = 2ul << 40;
        if (until > around)
            lo = around, len = until - around;
        void *p = mmap((void *)lo, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                       -1, 0);
        printf("held [%#lx, %#lx): %s\n", lo, lo + len, p == (void *)lo ? "yes" : "no");
    }
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    size_t sizes[] = {1 << 20, 64 << 20, 1ul << 30};
    for (int i = 0; i < 3; i++) {
        CUdeviceptr d;
        CHECK(cuMemAlloc(&d, sizes[i]));
        printf("cuMemAlloc %zu MiB: %#llx\n", sizes[i] >> 20, (unsigned long long)d);
    }
    void *host;
    CHECK(cuMemAllocHost(&host, 1 << 20));
    printf("cuMemAllocHost 1 MiB: %p\n", host);
    CUdeviceptr managed, pooled;
    CHECK(cuMemAllocManaged(&managed, 1 << 20, CU_MEM_ATTACH_GLOBAL));
    printf("cuMemAllocManaged 1 MiB: %#llx\n", (unsigned long long)managed);
    CHECK(cuMemAllocAsync(&pooled, 1 << 20, 0));
    CHECK(cuCtxSynchronize());
    printf("cuMemAllocAsync 1 MiB (the default pool): %#llx\n", (unsigned long long)pooled);
    for (int j = 0; j < 4; j++) {
        CUdeviceptr want = (CUdeviceptr)(0x100000000000ull + ((unsigned long long)j << 40)), got = 0;
        CUresult r = cuMemAddressReserve(&got, 1ul << 30, 0, want, 0);
        printf("cuMemAddressReserve 1 GiB at %#llx: %s %#llx\n", (unsigned long long)want,
               r ? "error" : got == want ? "taken at" : "elsewhere,", (unsigned long long)got);
    }
    handles(ctx);
    large_mappings();
    return 0;
}
