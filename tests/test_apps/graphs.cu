// graphs: work captured from a stream (a memset and two kernels) into a graph, which runs nothing until it is
// launched, three times; the stream's capture status while capturing and after; an executable graph made
// with parameters (cudaGraphInstantiateWithParams, uploaded first) launched once more.
#include <stdio.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

int main() {
    const int n = 1 << 14;
    static int h[1 << 14];
    int *d, *count;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    CHECK(cudaMalloc((void **)&count, n * sizeof(int)));
    CHECK(cudaMemset(d, 0x11, n * sizeof(int)));
    CHECK(cudaMemset(count, 0, n * sizeof(int)));

    cudaStreamCaptureStatus status;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaStreamIsCapturing(s, &status));
    printf("capturing: %s\n", status == cudaStreamCaptureStatusActive ? "yes" : "no");
    CHECK(cudaMemsetAsync(d, 0, n * sizeof(int), s));
    streamFill<<<n / 256, 256, 0, s>>>(d, 10, n);
    streamScaleAdd<<<n / 256, 256, 0, s>>>(d, d, 2, 1, n);
    streamScaleAdd<<<n / 256, 256, 0, s>>>(count, count, 1, 1, n);  // counts the graph's launches
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaStreamIsCapturing(s, &status));
    printf("capturing after the end: %s\n", status == cudaStreamCaptureStatusActive ? "yes" : "no");

    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    printf("before any launch, untouched: %s\n", h[0] == 0x11111111 ? "yes" : "no");
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    int failures = h[0] != 0x11111111;
    for (int round = 1; round <= 3; round++) {
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int i = 0; i < n; i++) bad += h[i] != (10 + (i & 15)) * 2 + 1;
        CHECK(cudaMemcpy(h, count, sizeof h, cudaMemcpyDeviceToHost));
        printf("launch %d: %s, launches counted %d\n", round, bad ? "FAIL" : "OK", h[0]);
        failures += bad != 0 || h[0] != round;
    }
    CHECK(cudaGraphExecDestroy(exec));
    cudaGraphInstantiateParams params = {};
    params.flags = cudaGraphInstantiateFlagUpload;
    params.uploadStream = s;
    params.result_out = cudaGraphInstantiateError;
    CHECK(cudaGraphInstantiateWithParams(&exec, graph, &params));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, count, sizeof h, cudaMemcpyDeviceToHost));
    printf("instantiated with parameters (uploaded to the stream first): %s, launches counted %d\n",
           params.result_out == cudaGraphInstantiateSuccess ? "success" : "error", h[0]);
    failures += params.result_out != cudaGraphInstantiateSuccess || h[0] != 4;
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(count));
    printf("graphs: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
