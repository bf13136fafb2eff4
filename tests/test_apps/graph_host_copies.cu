// graph_host_copies: graphs whose nodes copy between page-locked host memory and the GPU (as CUDA's
// simpleCudaGraphs sample builds them), nodes added through cudaGraphAddNode's one struct (kernel, memset,
// memcpy), memory nodes through cudaGraphAddMemAllocNode / cudaGraphAddMemFreeNode and cudaDeviceGraphMemTrim
// (graphMemoryFootprint), and a capture into the program's own graph ended with no graph asked for
// (graphConditionalNodes). The first graph is launched twice, the host input changed between launches.
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static int report(const char *what, const int *h, int n, int (*want)(int, int), int arg) {
    for (int i = 0; i < n; i++)
        if (h[i] != want(i, arg)) {
            printf("%-60s FAIL at %d: %d, expected %d\n", what, i, h[i], want(i, arg));
            return 1;
        }
    printf("%-60s OK\n", what);
    return 0;
}

static int want_scaled(int i, int v) { return (v + i) * 3 + 1; }             // in = v + i; out = in * 3 + 1
static int want_summed(int i, int v) { return (v + (i & 15)) + 0x01010101; }  // fill(v), then += 0x01010101
static int want_filled(int i, int v) { return v + (i & 15); }                 // fill(v)

int main() {
    const int n = 1 << 14, blocks = n / 256;
    int failures = 0;
    int *in_h, *out_h;  // page-locked: a graph's copies may name them
    CHECK(cudaMallocHost(&in_h, n * sizeof(int)));
    CHECK(cudaMallocHost(&out_h, n * sizeof(int)));
    int *in_d, *out_d;
    CHECK(cudaMalloc(&in_d, n * sizeof(int)));
    CHECK(cudaMalloc(&out_d, n * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // 1. host -> device, a kernel, device -> host: the classic cudaGraphAdd*Node calls
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(in_h, n * sizeof(int), n, 1);
    up.dstPtr = make_cudaPitchedPtr(in_d, n * sizeof(int), n, 1);
    up.extent = make_cudaExtent(n * sizeof(int), 1, 1);
    up.kind = cudaMemcpyHostToDevice;
    cudaGraphNode_t upload, scale, download;
    CHECK(cudaGraphAddMemcpyNode(&upload, g, NULL, 0, &up));
    int mul = 3, add = 1, nn = n;
    void *scale_args[] = {&out_d, &in_d, &mul, &add, &nn};
    cudaKernelNodeParams k = {};
    k.func = (void *)streamScaleAdd;
    k.gridDim = dim3(blocks);
    k.blockDim = dim3(256);
    k.kernelParams = scale_args;
    CHECK(cudaGraphAddKernelNode(&scale, g, &upload, 1, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&download, g, &scale, 1, out_h, out_d, n * sizeof(int), cudaMemcpyDeviceToHost));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++) {
        int v = round ? 100 : 7;
        for (int i = 0; i < n; i++) in_h[i] = v + i;
        memset(out_h, 0, n * sizeof(int));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        char what[80];
        snprintf(what, sizeof what, "memcpy nodes with page-locked memory, launch %d", round + 1);
        failures += report(what, out_h, n, want_scaled, v);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // 2. the same kinds through cudaGraphAddNode's one struct: fill (kernel), memset, add (kernel), download
    CHECK(cudaGraphCreate(&g, 0));
    int *tmp_d;
    CHECK(cudaMalloc(&tmp_d, n * sizeof(int)));
    int v = 42;
    void *fill_args[] = {&out_d, &v, &nn};
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = (void *)streamFill;
    p.kernel.gridDim = dim3(blocks);
    p.kernel.blockDim = dim3(256);
    p.kernel.kernelParams = fill_args;
    cudaGraphNode_t fill, set, sum, back;
    CHECK(cudaGraphAddNode(&fill, g, NULL, NULL, 0, &p));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemset;
    p.memset.dst = tmp_d;
    p.memset.value = 1;
    p.memset.elementSize = 1;
    p.memset.width = n * sizeof(int);
    p.memset.height = 1;
    CHECK(cudaGraphAddNode(&set, g, NULL, NULL, 0, &p));
    void *sum_args[] = {&out_d, &tmp_d, &nn};
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = (void *)streamAddInto;
    p.kernel.gridDim = dim3(blocks);
    p.kernel.blockDim = dim3(256);
    p.kernel.kernelParams = sum_args;
    cudaGraphNode_t both[2] = {fill, set};
    CHECK(cudaGraphAddNode(&sum, g, both, NULL, 2, &p));
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemcpy;
    p.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(out_d, n * sizeof(int), n, 1);
    p.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(out_h, n * sizeof(int), n, 1);
    p.memcpy.copyParams.extent = make_cudaExtent(n * sizeof(int), 1, 1);
    p.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaGraphAddNode(&back, g, &sum, NULL, 1, &p));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    printf("nodes added through cudaGraphAddNode: %zu\n", count);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    memset(out_h, 0, n * sizeof(int));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("kernel, memset and memcpy nodes through cudaGraphAddNode", out_h, n, want_summed, v);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // 3. memory nodes through their own calls: allocate, fill, copy out, free
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams alloc = {};
    alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    alloc.poolProps.location.type = cudaMemLocationTypeDevice;
    alloc.poolProps.location.id = 0;
    alloc.bytesize = n * sizeof(int);
    cudaGraphNode_t made, used, copied, freed;
    CHECK(cudaGraphAddMemAllocNode(&made, g, NULL, 0, &alloc));
    printf("cudaGraphAddMemAllocNode gave an address: %s\n", alloc.dptr ? "yes" : "no");
    int *graph_d = (int *)alloc.dptr;
    v = 5;
    void *fill2_args[] = {&graph_d, &v, &nn};
    k.func = (void *)streamFill;
    k.kernelParams = fill2_args;
    CHECK(cudaGraphAddKernelNode(&used, g, &made, 1, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&copied, g, &used, 1, out_h, graph_d, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaGraphAddMemFreeNode(&freed, g, &copied, 1, graph_d));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    memset(out_h, 0, n * sizeof(int));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("memory allocation and free nodes", out_h, n, want_filled, v);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    CHECK(cudaDeviceGraphMemTrim(0));
    printf("cudaDeviceGraphMemTrim: done\n");

    // 4. a capture into a graph of the program's, ended without asking for the graph (graphConditionalNodes)
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeGlobal));
    v = 9;
    streamFill<<<blocks, 256, 0, s>>>(out_d, v, n);
    CHECK(cudaStreamEndCapture(s, nullptr));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(out_h, out_d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("a capture into the program's graph, ended with no graph asked", out_h, n, want_filled, v);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    CHECK(cudaFree(tmp_d));
    CHECK(cudaFree(in_d));
    CHECK(cudaFree(out_d));
    CHECK(cudaFreeHost(in_h));
    CHECK(cudaFreeHost(out_h));
    CHECK(cudaStreamDestroy(s));
    printf("graph_host_copies: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
