// vmm: virtual memory management, as PyTorch's expandable segments use it: an address range reserved, two
// physical allocations mapped into it side by side and made accessible, a kernel and copies running across
// the seam between them; the mappings swapped (the physical memory keeps its bytes); what is refused; the
// handle behind an address (cuMemRetainAllocationHandle), before and after its release.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static int report(const char *what, int ok) {
    printf("%-52s %s\n", what, ok ? "OK" : "FAIL");
    return !ok;
}

int main() {
    int failures = 0;
    CHECK(cudaFree(0));  // the runtime makes the primary context current
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g = 0;
    CHECK_DRIVER(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("allocation granularity: %zu KiB\n", g >> 10);

    size_t free_before, free_after, total;
    CHECK(cudaMemGetInfo(&free_before, &total));
    CUdeviceptr va;
    CHECK_DRIVER(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
    CUmemGenericAllocationHandle a, b;
    CHECK_DRIVER(cuMemCreate(&a, 2 * g, &prop, 0));
    CHECK_DRIVER(cuMemCreate(&b, 2 * g, &prop, 0));
    CHECK(cudaMemGetInfo(&free_after, &total));
    failures += report("physical memory counts as used", free_before - free_after >= 4 * g);
    CHECK_DRIVER(cuMemMap(va, 2 * g, 0, a, 0));
    CHECK_DRIVER(cuMemMap(va + 2 * g, 2 * g, 0, b, 0));
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_DRIVER(cuMemSetAccess(va, 4 * g, &access, 1));
    unsigned long long flags = 0;
    CHECK_DRIVER(cuMemGetAccess(&flags, &prop.location, va + g));
    failures += report("access read back", flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    // a kernel over both mappings
    const int n = (int)(4 * g / sizeof(int));
    int *p = (int *)va, *h = (int *)malloc(4 * g);
    streamFill<<<n / 256, 256>>>(p, 5, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, p, 4 * g, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= h[i] == 5 + (i & 15);
    failures += report("a kernel across two mappings", ok);

    // copies across the seam, both ways
    const int m = (int)(g / sizeof(int)), at = n / 2 - m / 2;
    for (int i = 0; i < m; i++) h[i] = -i;
    CHECK(cudaMemcpy(p + at, h, g, cudaMemcpyHostToDevice));
    memset(h, 0, g);
    CHECK(cudaMemcpy(h, p + at - 1, g + 2 * sizeof(int), cudaMemcpyDefault));
    ok = h[0] == 5 + ((at - 1) & 15) && h[m + 1] == 5 + ((at + m) & 15);
    for (int i = 0; i < m; i++) ok &= h[i + 1] == -i;
    failures += report("copies across the seam", ok);

    // swap the two mappings: the physical memory keeps its bytes
    CHECK_DRIVER(cuMemUnmap(va, 4 * g));
    CHECK_DRIVER(cuMemMap(va, 2 * g, 0, b, 0));
    CHECK_DRIVER(cuMemMap(va + 2 * g, 2 * g, 0, a, 0));
    CHECK_DRIVER(cuMemSetAccess(va, 4 * g, &access, 1));
    CHECK(cudaMemcpy(h, p, 4 * g, cudaMemcpyDeviceToHost));
    ok = h[m / 2] == 5 + ((n / 2 + m / 2) & 15) && h[n / 2] == 5;
    for (int i = 0; i < m / 2; i++) ok &= h[n - m / 2 + i] == -i && h[i] == -(m / 2 + i);
    failures += report("mappings swapped, bytes kept", ok);

    CUmemAllocationProp back = {};
    CHECK_DRIVER(cuMemGetAllocationPropertiesFromHandle(&back, a));
    failures += report("properties from the handle", back.type == prop.type && back.location.id == 0);
    failures += report("mapping over a mapping is refused", cuMemMap(va, 2 * g, 0, a, 0) != CUDA_SUCCESS);
    failures += report("a range that is not mapped is refused", cuMemUnmap(va + 4 * g, g) != CUDA_SUCCESS);
    // the handle behind an address (a is mapped at va + 2g since the swap): the same, one more reference
    CUmemGenericAllocationHandle again = 0;
    CHECK_DRIVER(cuMemRetainAllocationHandle(&again, (void *)(va + 2 * g + 64)));
    int same = again == a;
    CHECK_DRIVER(cuMemRelease(again));
    CUmemAllocationProp after_one = {};
    failures += report("the handle behind an address, retained and released",
                       same && cuMemGetAllocationPropertiesFromHandle(&after_one, a) == CUDA_SUCCESS);

    size_t free_held;
    CHECK(cudaMemGetInfo(&free_held, &total));
    // released while mapped: the memory lives until it is unmapped
    CHECK_DRIVER(cuMemRelease(a));
    CHECK_DRIVER(cuMemRelease(b));
    CHECK(cudaMemcpy(h, p + n / 2, sizeof(int), cudaMemcpyDeviceToHost));
    failures += report("released but still mapped", h[0] == 5);
    CUmemGenericAllocationHandle back_again = 0;  // (b is mapped at va): retained after its release
    CHECK_DRIVER(cuMemRetainAllocationHandle(&back_again, (void *)(va + 64)));
    CUmemAllocationProp revived = {};
    failures += report("retained after its release, the same handle again",
                       back_again == b && cuMemGetAllocationPropertiesFromHandle(&revived, b) == CUDA_SUCCESS);
    CHECK_DRIVER(cuMemRelease(back_again));
    CHECK_DRIVER(cuMemUnmap(va, 4 * g));
    CHECK_DRIVER(cuMemAddressFree(va, 4 * g));
    size_t free_end;
    CHECK(cudaMemGetInfo(&free_end, &total));
    failures += report("physical memory given back", free_end >= free_held + 4 * g);
    free(h);
    printf("vmm: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
