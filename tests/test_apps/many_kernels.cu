// many_kernels: one module of 300 kernels (a template instantiated 300 times), more than the server
// describes with a load (PyTorch's libraries are such): the runtime looks each kernel it launches up by
// name. Two are launched; a second run through cuwire finds both, with the module, loaded ahead
// (client/load_lists.py), and so are the answers to its occupancy questions. With "--attributes N": every
// kernel's attributes, N times over.
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <cuda_runtime.h>

#include "check.h"

template <int N>
__global__ void fill(int *out) { out[0] = N; }

// taking each instantiation's address makes nvcc emit (and the runtime register) all of them
template <int... N>
static void keep(void (**table)(int *), std::integer_sequence<int, N...>) {
    ((table[N] = fill<N + 1>), ...);
}

int main(int argc, char **argv) {
    static void (*table[300])(int *);
    keep(table, std::make_integer_sequence<int, 300>());
    if (argc > 2) {  // --attributes PASSES: every kernel's attributes, PASSES times, as CuPy's libraries ask them
        int passes = atoi(argv[2]), same = 1, first[300];
        for (int pass = 0; pass < passes; pass++)
            for (int k = 0; k < 300; k++) {
                cudaFuncAttributes attr;
                CHECK(cudaFuncGetAttributes(&attr, table[k]));
                if (pass == 0)
                    first[k] = attr.maxThreadsPerBlock;
                same &= attr.maxThreadsPerBlock == first[k] && first[k] > 0;
            }
        printf("the attributes of 300 kernels read %d times: the same each time: %s\n", passes, same ? "yes" : "no");
        return 0;
    }
    int *d, h[2] = {0, 0};
    CHECK(cudaMalloc((void **)&d, sizeof h));
    fill<7><<<1, 1>>>(d);
    fill<299><<<1, 1>>>(d + 1);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, table[41]));  // a kernel never launched, looked up all the same
    printf("fill<7> wrote %d, fill<299> wrote %d; fill<42>'s attributes read: %s\n", h[0], h[1],
           attr.maxThreadsPerBlock > 0 ? "yes" : "no");
    int blocks = 0, blocks_flags = 0;
    size_t room = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill<7>, 128, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks_flags, fill<299>, 64, 16,
                                                                 cudaOccupancyDisableCachingOverride));
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&room, fill<7>, 2, 128));
    printf("occupancy: %d blocks of 128 threads, %d of 64 threads with 16 bytes each; %zu bytes each for 2 of 128\n",
           blocks, blocks_flags, room);
    CHECK(cudaFree(d));
    return 0;
}
