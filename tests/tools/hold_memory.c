/* hold_memory: allocates N MiB of device memory through the driver API (cuwire's libcuda), says
 * "allocated", then keeps its session busy until it is killed. make gpu-test kills it with SIGKILL and
 * watches the GPU's own memory figure come back. Built against cuwire's declarations and client library. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda_api.h"

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 8192;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 1;
    if (cuMemAlloc_v2(&d, mib << 20) || cuMemsetD8_v2(d, 1, mib << 20) || cuCtxSynchronize())
        return 2;
    printf("allocated\n");
    fflush(stdout);
    for (;;) {
        cuCtxSynchronize();
        usleep(1000);
    }
}
