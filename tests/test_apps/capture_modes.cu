// capture_modes: each thread's stream capture mode (cudaThreadExchangeStreamCaptureMode) decides which calls
// a capture allows, as the driver decides it. cudaMalloc is "potentially unsafe": prohibited, it fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture, whose end then gives no graph; allowed, it
// works, and the capture goes on. Checked: the capturing thread in each mode, captures begun in each mode,
// and another thread allocating while one captures. PyTorch relaxes its thread's mode around the
// allocations it makes inside torch.cuda.graph.
#include <cstdio>
#include <cstring>
#include <thread>
#include <cuda_runtime.h>

#include "check.h"

static int failures;
static cudaStream_t s;
static char *d;  // what the captures write

static void expect(const char *what, cudaError_t got, cudaError_t want) {
    printf("%s: %s%s\n", what, cudaGetErrorName(got), got == want ? "" : " (UNEXPECTED)");
    if (got != want) failures++;
    cudaGetLastError();  // a failure expected here must not show up at a later check
}

static cudaStreamCaptureMode exchange(cudaStreamCaptureMode mode) {
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return mode;
}

static void begin(cudaStreamCaptureMode mode) {
    CHECK(cudaStreamBeginCapture(s, mode));
    CHECK(cudaMemsetAsync(d, 1, 64, s));
}

// Ends the capture; with a graph, runs it. What the end said.
static cudaError_t end(const char *what, cudaError_t want) {
    cudaGraph_t g = nullptr;
    cudaError_t err = cudaStreamEndCapture(s, &g);
    expect(what, err, want);
    printf("  graph: %s\n", g ? "made" : "none");
    if (g) {
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }
    return err;
}

static void allocate_in_thread(const char *what, cudaStreamCaptureMode mode, cudaError_t want, void **out) {
    std::thread t([&] {
        exchange(mode);
        expect(what, cudaMalloc(out, 256), want);
    });
    t.join();
}

int main() {
    CHECK(cudaFree(0));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&d, 256));
    CHECK(cudaMemset(d, 0, 256));
    void *p = nullptr, *q = nullptr;

    // 1. global capture, the thread in global mode: prohibited
    begin(cudaStreamCaptureModeGlobal);
    expect("global capture, cudaMalloc in global mode", cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
    end("  its end", cudaErrorStreamCaptureInvalidated);
    expect("after it, cudaMalloc", cudaMalloc(&p, 256), cudaSuccess);
    expect("after it, cudaFree", cudaFree(p), cudaSuccess);

    // 2. global capture, the thread relaxed (as PyTorch allocates in a capture): the memory is the graph's to use
    begin(cudaStreamCaptureModeGlobal);
    cudaStreamCaptureMode was = exchange(cudaStreamCaptureModeRelaxed);
    expect("global capture, cudaMalloc in relaxed mode", cudaMalloc(&p, 256), cudaSuccess);
    exchange(was);
    printf("  mode given back: %s\n", was == cudaStreamCaptureModeGlobal ? "global" : "other");
    CHECK(cudaMemsetAsync(p, 2, 64, s));
    CHECK(cudaMemcpyAsync(d + 64, p, 64, cudaMemcpyDeviceToDevice, s));
    end("  its end", cudaSuccess);
    CHECK(cudaFree(p));

    // 3. a capture begun in relaxed mode prohibits nothing
    begin(cudaStreamCaptureModeRelaxed);
    expect("relaxed capture, cudaMalloc in global mode", cudaMalloc(&p, 256), cudaSuccess);
    end("  its end", cudaSuccess);
    CHECK(cudaFree(p));

    // 4. thread-local capture, the thread in thread-local mode: prohibited
    begin(cudaStreamCaptureModeThreadLocal);
    exchange(cudaStreamCaptureModeThreadLocal);
    expect("thread-local capture, cudaMalloc in thread-local mode", cudaMalloc(&p, 256),
           cudaErrorStreamCaptureUnsupported);
    exchange(cudaStreamCaptureModeGlobal);
    end("  its end", cudaErrorStreamCaptureInvalidated);

    // 5. thread-local capture: another thread, in global mode, may
    begin(cudaStreamCaptureModeThreadLocal);
    allocate_in_thread("thread-local capture, another thread's cudaMalloc in global mode",
                       cudaStreamCaptureModeGlobal, cudaSuccess, &q);
    end("  its end", cudaSuccess);
    CHECK(cudaFree(q));

    // 6. global capture: another thread in thread-local mode may; one in global mode may not
    begin(cudaStreamCaptureModeGlobal);
    allocate_in_thread("global capture, another thread's cudaMalloc in thread-local mode",
                       cudaStreamCaptureModeThreadLocal, cudaSuccess, &q);
    end("  its end", cudaSuccess);
    CHECK(cudaFree(q));
    begin(cudaStreamCaptureModeGlobal);
    allocate_in_thread("global capture, another thread's cudaMalloc in global mode",
                       cudaStreamCaptureModeGlobal, cudaErrorStreamCaptureUnsupported, &q);
    end("  its end", cudaErrorStreamCaptureInvalidated);

    // what the graphs that ran wrote: 64 bytes of 1 (each capture's first memset), 64 of 2 (case 2's copy)
    unsigned char h[256];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int ones = 0, twos = 0;
    for (int i = 0; i < 256; i++) ones += h[i] == 1, twos += h[i] == 2;
    printf("bytes written by the graphs: %d of 1, %d of 2\n", ones, twos);
    if (ones != 64 || twos != 64) failures++;
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
    printf("capture_modes: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
