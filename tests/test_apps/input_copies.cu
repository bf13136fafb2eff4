// input_copies [STEPS] [--share]: the shape of a training step's start. PyTorch's `batch.to("cuda")` from
// pageable memory is a copy to the device, then cudaStreamSynchronize; the program then reuses its host
// buffer at once, and work on another stream reads what was copied. Each step here: fill a pageable buffer,
// copy it to the device on a stream and synchronize that stream, scribble over the buffer, then copy the
// device bytes on in a second (non-blocking) stream, and read a slice back on the first after an event of
// the second's (the step's one wait for an answer, as loss.item() is): it must be the step's bytes.
// Through cuwire the synchronization after copies only needs no answer (client/completion.c): the copy's
// bytes are the client's, and the server runs later calls after it; tests/test_round_trips.py counts.
// With --share, the device memory is exported by IPC first: another process could read it, so each
// synchronization waits. Every byte read is checked.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 50;
    const bool share = argc > 2 && !strcmp(argv[2], "--share");
    const size_t n = 64 << 10, slice = 256;
    unsigned char *in, *out;
    CHECK(cudaMalloc((void **)&in, n));
    CHECK(cudaMalloc((void **)&out, n));
    if (share) {
        cudaIpcMemHandle_t handle;
        CHECK(cudaIpcGetMemHandle(&handle, in));
    }
    cudaStream_t s, other;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    cudaEvent_t copied;
    CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    unsigned char *batch = (unsigned char *)malloc(n), back[slice];  // pageable, as a CPU tensor's
    int wrong = 0;
    for (int i = 0; i < steps; i++) {
        for (size_t k = 0; k < n; k++)
            batch[k] = (unsigned char)(k * 31 + i * 7);
        CHECK(cudaMemcpyAsync(in, batch, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaStreamSynchronize(s));
        memset(batch, 0xee, n);  // the program's buffer is its own again
        size_t at = (size_t)(i * 997) % (n - slice);
        CHECK(cudaMemcpyAsync(out, in, n, cudaMemcpyDeviceToDevice, other));
        CHECK(cudaEventRecord(copied, other));
        CHECK(cudaStreamWaitEvent(s, copied, 0));
        CHECK(cudaMemcpyAsync(back, out + at, slice, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        for (size_t k = 0; k < slice; k++)
            wrong += back[k] != (unsigned char)((at + k) * 31 + i * 7);
    }
    // the null stream: a synchronous copy, then cudaStreamSynchronize(0), then the bytes read back
    CHECK(cudaDeviceSynchronize());
    for (size_t k = 0; k < n; k++)
        batch[k] = (unsigned char)(k ^ 0x5a);
    CHECK(cudaMemcpy(in, batch, n, cudaMemcpyHostToDevice));
    CHECK(cudaStreamSynchronize(0));
    memset(batch, 0, n);
    CHECK(cudaMemcpy(back, in + 1000, slice, cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < slice; k++)
        wrong += back[k] != (unsigned char)((1000 + k) ^ 0x5a);
    printf("input_copies: %d steps%s, %d bytes read back wrong\n", steps, share ? " (memory shared)" : "", wrong);
    free(batch);
    CHECK(cudaEventDestroy(copied));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(other));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    return wrong != 0;
}
