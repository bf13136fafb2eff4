// callbacks: host functions in streams (cudaLaunchHostFunc, cudaStreamAddCallback) run in stream order,
// after the work queued before them and before the work queued after them, on two streams. Through cuwire
// they run on a thread of the client's, posted through shared memory or, over TCP, on a connection of the
// session's own.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

struct seen {
    const char *name;
    const int *host;  // a pinned buffer a copy before the function filled
    int expect;       // what its element 5 must be by then
    int saw, status;  // what it found (printed by main, in a fixed order: streams run concurrently)
};

static int order[16], n_order;

static void CUDART_CB host_fn(void *arg) {
    struct seen *s = (struct seen *)arg;
    usleep(20000);  // the stream's next work must wait for this
    s->saw = s->host[5];
    order[n_order++] = s->expect;
}

static void CUDART_CB fill_fn(void *arg) {  // writes the pinned buffer the stream's next copy reads
    int *host = (int *)arg;
    usleep(20000);
    for (int i = 0; i < 4096; i++) host[i] = 7 * i + 1;
}

static void CUDART_CB stream_callback(cudaStream_t stream, cudaError_t status, void *arg) {
    (void)stream;
    struct seen *s = (struct seen *)arg;
    s->saw = s->host[5];
    s->status = (int)status;
    order[n_order++] = s->expect;
}

int main() {
    const int n = 4096;
    int *d, *h;
    cudaStream_t a, b;
    CHECK(cudaMalloc((void **)&d, 2 * n * sizeof(int)));
    CHECK(cudaMallocHost((void **)&h, 2 * n * sizeof(int)));
    CHECK(cudaStreamCreate(&a));
    CHECK(cudaStreamCreate(&b));
    memset(h, 0, 2 * n * sizeof(int));

    struct seen s1 = {"cudaLaunchHostFunc on a", h, 105, -1, -1};
    struct seen s2 = {"cudaStreamAddCallback on b", h + n, 205, -1, -1};
    struct seen s3 = {"cudaLaunchHostFunc on a", h, 305, -1, -1};
    streamFill<<<n / 256, 256, 0, a>>>(d, 100, n);
    CHECK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, a));
    CHECK(cudaLaunchHostFunc(a, host_fn, &s1));
    streamFill<<<n / 256, 256, 0, b>>>(d + n, 200, n);
    CHECK(cudaMemcpyAsync(h + n, d + n, n * sizeof(int), cudaMemcpyDeviceToHost, b));
    CHECK(cudaStreamAddCallback(b, stream_callback, &s2, 0));
    CHECK(cudaStreamSynchronize(b));
    streamFill<<<n / 256, 256, 0, a>>>(d, 300, n);  // after the first function on a
    CHECK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, a));
    CHECK(cudaLaunchHostFunc(a, host_fn, &s3));
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    CHECK(cudaEventRecord(done, a));
    CHECK(cudaEventSynchronize(done));  // the event follows the function: it ran by now
    for (struct seen *s : {&s1, &s2, &s3})
        printf("%-26s saw %d (expected %d)%s\n", s->name, s->saw, s->expect, s == &s2 && s->status ? ", error status" : "");
    int ok = s1.saw == 105 && s2.saw == 205 && s3.saw == 305 && s2.status == 0 && n_order == 3 && order[0] != 305 && order[2] == 305 && h[5] == 305;
    printf("host functions ran: %d, the last one before the event that followed it: %s\n", n_order,
           n_order == 3 && order[2] == 305 ? "yes" : "no");
    // a host function fills page-locked memory that the stream's next copy takes to the device: the copy reads
    // it when the stream reaches it, after the function (as XLA's transfers of host arrays do)
    int *staged, *back;
    CHECK(cudaMallocHost((void **)&staged, n * sizeof(int)));
    CHECK(cudaMallocHost((void **)&back, n * sizeof(int)));
    memset(staged, 0, n * sizeof(int));
    CHECK(cudaLaunchHostFunc(a, fill_fn, staged));
    CHECK(cudaMemcpyAsync(d, staged, n * sizeof(int), cudaMemcpyHostToDevice, a));
    CHECK(cudaMemcpyAsync(back, d, n * sizeof(int), cudaMemcpyDeviceToHost, a));
    CHECK(cudaStreamSynchronize(a));
    int staged_ok = 1;
    for (int i = 0; i < n; i++)
        staged_ok = staged_ok && back[i] == 7 * i + 1;
    printf("a copy after the host function that filled its source: %s\n", staged_ok ? "OK" : "FAIL");
    ok = ok && staged_ok;
    CHECK(cudaFreeHost(staged));
    CHECK(cudaFreeHost(back));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(h));
    printf("callbacks: %s\n", ok ? "PASS" : "FAIL");
    return !ok;
}
