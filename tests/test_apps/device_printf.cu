// device_printf: printf in kernels, between the host's own lines: the device's lines come out where the
// synchronisation that ends each kernel puts them, in the program's stdout.
#include <stdio.h>

#include "check.h"

__global__ void hello(int round) {
    if (threadIdx.x < 4) printf("device: round %d, thread %d\n", round, threadIdx.x);
}

int main() {
    for (int round = 0; round < 3; round++) {
        printf("host: before round %d\n", round);
        hello<<<1, 32>>>(round);
        CHECK(cudaDeviceSynchronize());
        printf("host: after round %d\n", round);
    }
    printf("device_printf: PASS\n");
    return 0;
}
