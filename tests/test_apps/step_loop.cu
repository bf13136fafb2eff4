// step_loop [STEPS]: the shape of a training step's end, without kernels. Each step queues memsets, a
// device-to-device copy and an event record on a stream, reads one byte back into pageable memory (as
// PyTorch's loss.item() does: cudaMemcpyAsync, then cudaStreamSynchronize), then asks again whether the
// stream and the event are done, which a program may do and which needs nothing more: the copy waited for
// them. Then the same on the null stream with cudaMemcpy, cudaStreamSynchronize(0), cudaEventQuery and
// cudaDeviceSynchronize. Natively these waits cost nothing; through cuwire at a distance each would cost a
// round trip (tests/test_round_trips.py counts them with CUWIRE_STATS). Every byte read is checked.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 100;
    const size_t n = 1 << 16;
    unsigned char *a, *b;
    CHECK(cudaMalloc((void **)&a, n));
    CHECK(cudaMalloc((void **)&b, n));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    unsigned char *byte = (unsigned char *)malloc(1);  // pageable, as a Python scalar's
    int wrong = 0, not_done = 0;

    for (int i = 0; i < steps; i++) {  // on a stream of the program's
        CHECK(cudaMemsetAsync(a, (i * 7) & 0xff, n, s));
        CHECK(cudaMemsetAsync(b, 0, n, s));
        CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaEventRecord(e, s));
        CHECK(cudaMemcpyAsync(byte, b + (i % n), 1, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        wrong += *byte != ((i * 7) & 0xff);
        not_done += cudaEventQuery(e) != cudaSuccess;
        not_done += cudaStreamQuery(s) != cudaSuccess;
        CHECK(cudaEventSynchronize(e));
    }
    for (int i = 0; i < steps; i++) {  // on the null stream
        CHECK(cudaMemsetAsync(a, (i * 5) & 0xff, n, 0));
        CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaEventRecord(e, 0));
        CHECK(cudaMemcpy(byte, b + (i % n), 1, cudaMemcpyDeviceToHost));
        CHECK(cudaStreamSynchronize(0));
        wrong += *byte != ((i * 5) & 0xff);
        not_done += cudaEventQuery(e) != cudaSuccess;
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaDeviceSynchronize());
    }
    // work queued after what is known done is waited for: the byte read last is the one written last
    CHECK(cudaMemsetAsync(b, 0x5a, n, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(byte, b, 1, cudaMemcpyDeviceToHost));
    wrong += *byte != 0x5a;

    printf("step_loop: %d steps on a stream and %d on the null stream, %d bytes read back wrong; waits "
           "after the copy that were not done: %d\n", steps, steps, wrong, not_done);
    free(byte);
    CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    return wrong || not_done;
}
