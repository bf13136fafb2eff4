/* Two threads, each with a context of its own (cuCtxCreate with different scheduling flags), take
 * turns asking the driver about "the current context" (cuCtxGetFlags) and allocating in it: each must
 * get its own context's answer, as with the real driver, however their calls interleave. */
#include "check.h"
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 4
static pthread_barrier_t turn;
static unsigned seen[2][ROUNDS];
static const unsigned wanted[2] = {CU_CTX_SCHED_SPIN, CU_CTX_SCHED_BLOCKING_SYNC};

static void *worker(void *arg)
{
    int me = (int)(size_t)arg;
    CUdevice dev;
    CUcontext ctx;
    CHECK_DRIVER(cuDeviceGet(&dev, 0));
    pthread_barrier_wait(&turn);
    /* both create before either asks: the context created last is the one a single server thread
     * would have current */
    if (me == 1)
        pthread_barrier_wait(&turn);
    CHECK_DRIVER(cuCtxCreate(&ctx, NULL, wanted[me], dev));
    if (me == 0)
        pthread_barrier_wait(&turn);
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&turn);
        if ((r + me) % 2 == 0) { /* one thread asks while the other waits, then they swap */
            unsigned flags = 0;
            CUdeviceptr p;
            CHECK_DRIVER(cuMemAlloc(&p, 256));
            CHECK_DRIVER(cuMemsetD32(p, (unsigned)(me * 100 + r), 64));
            CHECK_DRIVER(cuCtxGetFlags(&flags));
            unsigned back = 0;
            CHECK_DRIVER(cuMemcpyDtoH(&back, p, sizeof back));
            CHECK_DRIVER(cuMemFree(p));
            seen[me][r] = (flags & CU_CTX_SCHED_MASK) | (back == (unsigned)(me * 100 + r) ? 0 : 0x8000);
        }
        pthread_barrier_wait(&turn);
        if ((r + me) % 2 == 1) {
            unsigned flags = 0;
            CHECK_DRIVER(cuCtxGetFlags(&flags));
            seen[me][r] = flags & CU_CTX_SCHED_MASK;
        }
    }
    CHECK_DRIVER(cuCtxDestroy(ctx));
    return NULL;
}

int main(void)
{
    CHECK_DRIVER(cuInit(0));
    pthread_barrier_init(&turn, NULL, 2);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)(size_t)i);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        printf("thread %d (context flags %#x):", i, wanted[i]);
        for (int r = 0; r < ROUNDS; r++) {
            printf(" %#x", seen[i][r]);
            ok &= seen[i][r] == wanted[i];
        }
        printf("\n");
    }
    printf("each thread's calls ran in its own context: %s\n", ok ? "yes" : "NO");
    return ok ? 0 : 1;
}
