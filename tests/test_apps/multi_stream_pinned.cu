// multi_stream_pinned: several streams, each copying page-locked host memory in, running a kernel and
// copying the result back out, over and over, their work ordered across streams by events (as the
// multi-copy samples do); every round checked.
#include <stdio.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

int main() {
    const int streams = 4, rounds = 12, n = 1 << 18;
    int *in[streams], *out[streams], *din[streams], *dout[streams];
    cudaStream_t s[streams];
    cudaEvent_t done[streams];
    for (int k = 0; k < streams; k++) {
        CHECK(cudaHostAlloc(&in[k], n * sizeof(int), cudaHostAllocDefault));
        CHECK(cudaMallocHost(&out[k], n * sizeof(int)));
        CHECK(cudaMalloc(&din[k], n * sizeof(int)));
        CHECK(cudaMalloc(&dout[k], n * sizeof(int)));
        CHECK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    }
    int failures = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < streams; k++) {
            for (int i = 0; i < n; i++) in[k][i] = i + r * 1000 + k;
            if (r > 0)  // this stream's round waits for the previous stream's last round
                CHECK(cudaStreamWaitEvent(s[k], done[(k + streams - 1) % streams], 0));
            CHECK(cudaMemcpyAsync(din[k], in[k], n * sizeof(int), cudaMemcpyHostToDevice, s[k]));
            streamScaleAdd<<<n / 256, 256, 0, s[k]>>>(dout[k], din[k], 3, k, n);
            CHECK(cudaMemcpyAsync(out[k], dout[k], n * sizeof(int), cudaMemcpyDeviceToHost, s[k]));
            CHECK(cudaEventRecord(done[k], s[k]));
        }
        for (int k = 0; k < streams; k++) {
            CHECK(cudaStreamSynchronize(s[k]));
            for (int i = 0; i < n; i += 997)
                if (out[k][i] != (i + r * 1000 + k) * 3 + k) {
                    printf("round %d stream %d: FAIL at %d\n", r, k, i);
                    failures++;
                    break;
                }
        }
    }
    printf("%d streams x %d rounds over page-locked memory: %s\n", streams, rounds, failures ? "FAIL" : "OK");
    for (int k = 0; k < streams; k++) {
        CHECK(cudaEventDestroy(done[k]));
        CHECK(cudaStreamDestroy(s[k]));
        CHECK(cudaFreeHost(in[k]));
        CHECK(cudaFreeHost(out[k]));
        CHECK(cudaFree(din[k]));
        CHECK(cudaFree(dout[k]));
    }
    printf("multi_stream_pinned: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
