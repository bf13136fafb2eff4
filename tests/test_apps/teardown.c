/* teardown: CUDA ends where it ends natively. The program registers an atexit handler before its first CUDA
 * call (so it runs after every handler registered later: the driver's, registered at cuInit, among them) and
 * has a destructor function; both read back device memory and free it through the driver API. Natively both
 * get CUDA_ERROR_DEINITIALIZED: the driver deinitialized at its exit handler; through cuwire too (its exit
 * handler, registered at the first call). A Python program's atexit handlers run before C's exit, CUDA still
 * there: tests/tools/python_host.py --at-exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static CUdeviceptr d;
static int values[256];

static void read_back(const char *where, int free_it)
{
    int out[256];
    CUresult r = cuMemcpyDtoH(out, d, sizeof out);
    printf("%s: read back %s (%d)", where, r == CUDA_SUCCESS && !memcmp(out, values, sizeof out) ? "OK" : "FAIL",
           (int)r);
    if (free_it) {
        r = cuMemFree(d);
        printf(", freed %s (%d)", r == CUDA_SUCCESS ? "OK" : "FAIL", (int)r);
    }
    printf("\n");
    fflush(stdout);
}

static void at_exit(void) { read_back("atexit handler registered before CUDA", 0); }

__attribute__((destructor)) static void destructor(void) { read_back("destructor", 1); }

int main(void)
{
    atexit(at_exit);
    CUdevice dev;
    CUcontext ctx;
    CHECK_DRIVER(cuInit(0));
    CHECK_DRIVER(cuDeviceGet(&dev, 0));
    CHECK_DRIVER(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_DRIVER(cuCtxSetCurrent(ctx));
    for (int i = 0; i < 256; i++)
        values[i] = i * 7;
    CHECK_DRIVER(cuMemAlloc(&d, sizeof values));
    CHECK_DRIVER(cuMemcpyHtoD(d, values, sizeof values));
    read_back("main", 0);
    return 0;
}
