// mapped_memory: page-locked host memory that kernels read and write in place, without copies: through
// cudaHostGetDevicePointer (cudaHostAllocMapped), and through the host pointer itself (unified addressing
// makes every page-locked allocation the GPU's at its own address); and memory the program allocated itself
// and registered (cudaHostRegister: a heap buffer not page-aligned, a stack array, and with --shared-pages two
// buffers that share a page). Through cuwire this
// needs a server on the same host, which shares the memory (CUWIRE_TRANSPORT=auto).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static int check(const char *what, const int *p, int n, int mul, int add) {
    for (int i = 0; i < n; i++)
        if (p[i] != (i - 100) * mul + add) {
            printf("%-44s FAIL at %d: %d\n", what, i, p[i]);
            return 1;
        }
    printf("%-44s OK\n", what);
    return 0;
}

int main(int argc, char **argv) {
    const int shared_pages = argc > 1 && !strcmp(argv[1], "--shared-pages");
    const int n = 10000;
    int failures = 0;
    int *a, *b, *da, *db;
    CHECK(cudaHostAlloc((void **)&a, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaMallocHost((void **)&b, n * sizeof(int)));
    for (int i = 0; i < n; i++) a[i] = i - 100;
    CHECK(cudaHostGetDevicePointer((void **)&da, a, 0));
    CHECK(cudaHostGetDevicePointer((void **)&db, b, 0));
    streamScaleAdd<<<(n + 255) / 256, 256>>>(db, da, 3, 7, n);  // the GPU reads a, writes b, no copy
    CHECK(cudaDeviceSynchronize());
    failures += check("kernel through cudaHostGetDevicePointer", b, n, 3, 7);

    streamScaleAdd<<<(n + 255) / 256, 256>>>(a, a, 2, 0, n);  // in place, through the host pointer
    CHECK(cudaDeviceSynchronize());
    failures += check("kernel through the host pointer", a, n, 2, 0);

    int *d;  // and a copy into device memory and back to mapped memory still works
    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    CHECK(cudaMemcpy(d, a, n * sizeof(int), cudaMemcpyHostToDevice));
    streamScaleAdd<<<(n + 255) / 256, 256>>>(d, d, 1, 5, n);
    CHECK(cudaMemcpy(b, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("copies to and from mapped memory", b, n, 2, 5);
    CHECK(cudaFree(d));

    // memory of the program's own, registered: the GPU writes it in place, through its device pointer and
    // through its own address; unregistered, it keeps what the GPU wrote
    int *heap = (int *)malloc(n * sizeof(int) + 12) + 3;
    for (int i = 0; i < n; i++) heap[i] = i - 100;
    CHECK(cudaHostRegister(heap, n * sizeof(int), cudaHostRegisterMapped));
    int *dheap;
    CHECK(cudaHostGetDevicePointer((void **)&dheap, heap, 0));
    streamScaleAdd<<<(n + 255) / 256, 256>>>(dheap, dheap, 4, 1, n);
    CHECK(cudaDeviceSynchronize());
    failures += check("kernel on registered heap memory", heap, n, 4, 1);
    streamScaleAdd<<<(n + 255) / 256, 256>>>(heap, heap, 1, 2, n);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostUnregister(heap));
    failures += check("its host pointer, then unregistered", heap, n, 4, 3);
    free(heap - 3);
    int stack[512];
    for (int i = 0; i < 512; i++) stack[i] = i - 100;
    CHECK(cudaHostRegister(stack, sizeof stack, cudaHostRegisterDefault));
    streamScaleAdd<<<2, 256>>>(stack, stack, 5, 0, 512);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostUnregister(stack));
    failures += check("kernel on a registered stack array", stack, 512, 5, 0);

    // with --shared-pages: registrations that share a page (small buffers of one heap block, as numpy's
    // are; through cuwire: over TCP only, tests/test_apps_e2e.py; with a server on this host the second one's
    // pages do not move). First, one that starts in a page mapped for another's earlier (a kernel used it)
    // and goes on past it: the rest of its pages are mapped too
    if (shared_pages) {
    int *pages;
    if (posix_memalign((void **)&pages, 4096, 3 * 4096) != 0) return 1;
    for (int i = 0; i < 3 * 1024; i++) pages[i] = i - 100;
    CHECK(cudaHostRegister(pages, 100 * sizeof(int), cudaHostRegisterMapped));
    streamScaleAdd<<<1, 128>>>(pages, pages, 2, 0, 100);
    CHECK(cudaDeviceSynchronize());
    int *later = pages + 200;  // in the first page, 2,000 ints long: into the third
    CHECK(cudaHostRegister(later, 2000 * sizeof(int), cudaHostRegisterMapped));
    streamScaleAdd<<<8, 256>>>(later, later, 3, 1, 2000);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostUnregister(later));
    CHECK(cudaHostUnregister(pages));
    int bad = 0;
    for (int i = 0; i < 100; i++) bad += pages[i] != (i - 100) * 2;
    for (int i = 0; i < 2000; i++) bad += later[i] != (i + 200 - 100) * 3 + 1;
    printf("%-44s %s\n", "a registration from a page mapped before", bad ? "FAIL" : "OK");
    failures += bad != 0;
    free(pages);
    // then two registered at once, a kernel reading one and writing the other
    int *block = (int *)malloc(3000 * sizeof(int));
    int *first = block + 10, *second = block + 1200;  // 4 KiB apart: the same page or the next
    for (int i = 0; i < 1000; i++) first[i] = i - 100, second[i] = 0;
    CHECK(cudaHostRegister(first, 1000 * sizeof(int), cudaHostRegisterMapped));
    CHECK(cudaHostRegister(second, 1000 * sizeof(int), cudaHostRegisterMapped));
    streamScaleAdd<<<4, 256>>>(second, first, 6, 1, 1000);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostUnregister(first));
    CHECK(cudaHostUnregister(second));
    failures += check("two registrations sharing a page", second, 1000, 6, 1);
    free(block);
    }

    CHECK(cudaFreeHost(a));
    CHECK(cudaFreeHost(b));
    printf("mapped_memory: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
