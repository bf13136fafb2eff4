// graph_host_copies: graphs whose nodes copy between page-locked host memory and the GPU (as CUDA's
// simpleCudaGraphs sample builds them), nodes added through cudaGraphAddNode's one struct (kernel, memset,
// memcpy), memory nodes through cudaGraphAddMemAllocNode / cudaGraphAddMemFreeNode and cudaDeviceGraphMemTrim
// (graphMemoryFootprint), and a capture into the program's own graph ended with no graph asked for
// (graphConditionalNodes), and copies of pageable memory: a malloc'd buffer in, a variable on the stack out,
// read by a host node (simpleCudaGraphs); captured asynchronous copies (graphMemoryNodes); a child graph's,
// through a clone; launches queued one after another, each with a host node (simpleCudaGraphs), whose
// parameters are then read back and set; a pitched copy; a capture over two streams joined by events
// (graphMemoryNodes). Graphs with host inputs are launched twice, the input changed. A graph's memory freed
// outside it and in another graph (graphMemoryNodes).
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

// a memcpy node's parameters read back: the program's own pointers and the copy's extent
static int reads_back(cudaGraphNode_t node, const void *src, const void *dst, size_t width, size_t height,
                      size_t dst_pitch) {
    cudaMemcpy3DParms p = {};
    CHECK(cudaGraphMemcpyNodeGetParams(node, &p));
    return p.srcPtr.ptr == src && p.dstPtr.ptr == dst && p.extent.width == width && p.extent.height == height &&
           p.extent.depth == 1 && (!dst_pitch || p.dstPtr.pitch == dst_pitch);
}

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
    printf("memcpy nodes' parameters read back, page-locked memory: up %s, down %s\n",
           reads_back(upload, in_h, in_d, n * sizeof(int), 1, 0) ? "OK" : "FAIL",
           reads_back(download, out_d, out_h, n * sizeof(int), 1, 0) ? "OK" : "FAIL");
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
    // an edge with data: a programmatic dependency (XLA's command buffers put them between kernels), from the
    // sum kernel to a kernel that fills a buffer of its own
    int *mark_d, seven = 7;
    CHECK(cudaMalloc(&mark_d, n * sizeof(int)));
    void *mark_args[] = {&mark_d, &seven, &nn};
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = (void *)streamFill;
    p.kernel.gridDim = dim3(blocks);
    p.kernel.blockDim = dim3(256);
    p.kernel.kernelParams = mark_args;
    cudaGraphEdgeData programmatic = {};
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    cudaGraphNode_t mark, mark_dep = NULL;
    CHECK(cudaGraphAddNode(&mark, g, &sum, &programmatic, 1, &p));
    cudaGraphEdgeData mark_edge = {};
    size_t n_mark_deps = 1;
    CHECK(cudaGraphNodeGetDependencies(mark, &mark_dep, &mark_edge, &n_mark_deps));
    printf("a programmatic edge added: %zu dependency, the sum node: %d, type %d, from port %d\n", n_mark_deps,
           mark_dep == sum, (int)mark_edge.type, (int)mark_edge.from_port);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    printf("nodes added through cudaGraphAddNode: %zu\n", count);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    memset(out_h, 0, n * sizeof(int));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("kernel, memset and memcpy nodes through cudaGraphAddNode", out_h, n, want_summed, v);
    int *mark_h = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(mark_h, mark_d, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += report("the kernel after a programmatic edge", mark_h, n, want_filled, 7);
    free(mark_h);
    CHECK(cudaFree(mark_d));
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
    cudaMemAllocNodeParams read_back = {};
    CHECK(cudaGraphMemAllocNodeGetParams(made, &read_back));
    int descs_ok = read_back.accessDescCount == 0 || (read_back.accessDescs && read_back.accessDescs[0].location.id == 0);
    printf("its parameters read back: the address %s, the size %s, access descriptors readable: %s\n",
           read_back.dptr == alloc.dptr ? "the same" : "another",
           read_back.bytesize == alloc.bytesize ? "the same" : "another", descs_ok ? "yes" : "no");
    failures += read_back.dptr != alloc.dptr || read_back.bytesize != alloc.bytesize || !descs_ok;
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

    // 5. pageable host memory in a graph (simpleCudaGraphs, jacobiCudaGraphs): host -> device from malloc'd
    //    memory, a kernel, device -> host into a variable on the stack that a host node then reads
    int *page_in = (int *)malloc(n * sizeof(int));
    int last = 0, seen_by_host_node = 0;
    struct Seen { int *from; int *to; } seen = {&last, &seen_by_host_node};
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t up2, scale2, down2, host2;
    CHECK(cudaGraphAddMemcpyNode1D(&up2, g, NULL, 0, in_d, page_in, n * sizeof(int), cudaMemcpyHostToDevice));
    k.func = (void *)streamScaleAdd;
    k.kernelParams = scale_args;  // out_d = in_d * 3 + 1
    CHECK(cudaGraphAddKernelNode(&scale2, g, &up2, 1, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&down2, g, &scale2, 1, &last, out_d + n - 1, sizeof(int),
                                   cudaMemcpyDeviceToHost));
    cudaHostNodeParams hp = {};
    hp.fn = [](void *p) { Seen *s = (Seen *)p; *s->to = *s->from; };
    hp.userData = &seen;
    CHECK(cudaGraphAddHostNode(&host2, g, &down2, 1, &hp));
    printf("memcpy nodes' parameters read back, pageable memory: up %s, down %s\n",
           reads_back(up2, page_in, in_d, n * sizeof(int), 1, 0) ? "OK" : "FAIL",
           reads_back(down2, out_d + n - 1, &last, sizeof(int), 1, 0) ? "OK" : "FAIL");
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));  // (the executable graph keeps what it needs)
    for (int round = 0; round < 2; round++) {
        int base = round ? 1000 : 3;
        for (int i = 0; i < n; i++) page_in[i] = base + i;
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        int want = want_scaled(n - 1, base);
        printf("pageable memory in a graph, launch %d: last %s, the host node saw it %s\n", round + 1,
               last == want ? "OK" : "FAIL", seen_by_host_node == want ? "OK" : "FAIL");
        failures += (last != want) + (seen_by_host_node != want);
    }
    CHECK(cudaGraphExecDestroy(exec));

    // 6. a capture of asynchronous copies of pageable memory (graphMemoryNodes)
    int *page_out = (int *)malloc(n * sizeof(int));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpyAsync(in_d, page_in, n * sizeof(int), cudaMemcpyHostToDevice, s));
    streamScaleAdd<<<blocks, 256, 0, s>>>(out_d, in_d, mul, add, n);
    CHECK(cudaMemcpyAsync(page_out, out_d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++) {
        int base = round ? 77 : 5;
        for (int i = 0; i < n; i++) page_in[i] = base + i;
        memset(page_out, 0, n * sizeof(int));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        char what[80];
        snprintf(what, sizeof what, "captured copies of pageable memory, launch %d", round + 1);
        failures += report(what, page_out, n, want_scaled, base);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    free(page_out);
    free(page_in);

    // 7. a copy to pageable memory in a child graph, the child destroyed, the parent cloned and destroyed
    //    before the clone is instantiated: the node's stand-in goes with the graphs that hold it
    int tail[4] = {0, 0, 0, 0};
    cudaGraph_t child, parent, clone;
    CHECK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t copy_tail, child_node;
    CHECK(cudaGraphAddMemcpyNode1D(&copy_tail, child, NULL, 0, tail, out_d + n - 4, sizeof tail,
                                   cudaMemcpyDeviceToHost));
    CHECK(cudaGraphCreate(&parent, 0));
    CHECK(cudaGraphAddChildGraphNode(&child_node, parent, NULL, 0, child));
    CHECK(cudaGraphDestroy(child));
    CHECK(cudaGraphClone(&clone, parent));
    CHECK(cudaGraphDestroy(parent));
    CHECK(cudaGraphInstantiate(&exec, clone, 0));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    int tail_ok = 1;
    for (int i = 0; i < 4; i++)
        tail_ok &= tail[i] == want_scaled(n - 4 + i, 77);
    printf("a child graph's copy to pageable memory, through a clone: %s\n", tail_ok ? "OK" : "FAIL");
    failures += !tail_ok;
    CHECK(cudaGraphExecDestroy(exec));

    // 8. launches queued one after another, a host node reading and clearing what a copy to the stack wrote
    //    (simpleCudaGraphs: the same value every launch, the host node resets it to 0 in between)
    struct Log { int *value; int seen[3]; int count; } log = {&last, {0, 0, 0}, 0};
    last = 0;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t down3, host3;
    CHECK(cudaGraphAddMemcpyNode1D(&down3, g, NULL, 0, &last, out_d + n - 1, sizeof(int), cudaMemcpyDeviceToHost));
    hp.fn = [](void *p) { Log *l = (Log *)p; if (l->count < 3) l->seen[l->count++] = *l->value; *l->value = 0; };
    hp.userData = &log;
    CHECK(cudaGraphAddHostNode(&host3, g, &down3, 1, &hp));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    int want_last = want_scaled(n - 1, 77), queued_ok = log.count == 3 && last == 0;
    for (int i = 0; i < 3; i++) queued_ok &= log.seen[i] == want_last;
    printf("three launches queued, each host node saw its copy: %s\n", queued_ok ? "OK" : "FAIL");
    failures += !queued_ok;
    //    the host node's parameters: read back, set in the executable graph only, then in the graph
    cudaHostNodeParams got = {};
    CHECK(cudaGraphHostNodeGetParams(host3, &got));
    Log in_exec = {&last, {0, 0, 0}, 0}, in_graph = {&last, {0, 0, 0}, 0};
    cudaHostNodeParams changed = hp;
    changed.userData = &in_exec;
    CHECK(cudaGraphExecHostNodeSetParams(exec, host3, &changed));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    changed.userData = &in_graph;
    CHECK(cudaGraphHostNodeSetParams(host3, &changed));
    CHECK(cudaGraphLaunch(exec, s));  // (the executable graph keeps what it was set to)
    cudaGraphExec_t exec2;
    CHECK(cudaGraphInstantiate(&exec2, g, 0));
    CHECK(cudaGraphLaunch(exec2, s));
    CHECK(cudaStreamSynchronize(s));
    cudaHostNodeParams now = {};
    CHECK(cudaGraphHostNodeGetParams(host3, &now));
    int params_ok = got.fn == hp.fn && got.userData == &log && log.count == 3 && in_exec.count == 2 &&
                    in_graph.count == 1 && in_exec.seen[1] == want_last && in_graph.seen[0] == want_last &&
                    now.userData == &in_graph;
    printf("a host node's parameters read back and set, in the executable graph and the graph: %s\n",
           params_ok ? "OK" : "FAIL");
    failures += !params_ok;
    CHECK(cudaGraphExecDestroy(exec2));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // 9. a pitched copy to pageable memory: 4 rows of 16 ints, 24 ints apart; the bytes between rows stay
    int pitched[4 * 24];
    memset(pitched, 0x5a, sizeof pitched);
    cudaMemcpy3DParms down = {};
    down.srcPtr = make_cudaPitchedPtr(out_d, 16 * sizeof(int), 16, 4);
    down.dstPtr = make_cudaPitchedPtr(pitched, 24 * sizeof(int), 16, 4);
    down.extent = make_cudaExtent(16 * sizeof(int), 4, 1);
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t down4;
    CHECK(cudaGraphAddMemcpyNode(&down4, g, NULL, 0, &down));
    printf("a pitched copy's parameters read back: %s\n",
           reads_back(down4, out_d, pitched, 16 * sizeof(int), 4, 24 * sizeof(int)) ? "OK" : "FAIL");
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    int pitched_ok = 1;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 24; c++)
            pitched_ok &= pitched[r * 24 + c] == (c < 16 ? want_scaled(r * 16 + c, 77) : 0x5a5a5a5a);
    printf("a pitched copy to pageable memory, the bytes between rows left alone: %s\n", pitched_ok ? "OK" : "FAIL");
    failures += !pitched_ok;
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // 10. a capture over two streams (graphMemoryNodes): the second joins through an event, copies to pageable
    //     memory, and is joined back
    cudaStream_t side;
    cudaEvent_t fork, filled, side_done;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&fork));
    CHECK(cudaEventCreate(&filled));
    CHECK(cudaEventCreate(&side_done));
    int *page_side = (int *)malloc(n * sizeof(int));
    int fill_value = 40;
    void *side_fill_args[] = {&out_d, &fill_value, &nn};
    cudaStreamCaptureStatus side_before, side_during, side_after;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamIsCapturing(side, &side_before));
    CHECK(cudaStreamWaitEvent(side, fork, 0));
    CHECK(cudaStreamIsCapturing(side, &side_during));
    CHECK(cudaLaunchKernel((void *)streamFill, dim3(blocks), dim3(256), side_fill_args, 0, s));
    CHECK(cudaEventRecord(filled, s));
    CHECK(cudaStreamWaitEvent(side, filled, 0));
    CHECK(cudaMemcpyAsync(page_side, out_d, n * sizeof(int), cudaMemcpyDeviceToHost, side));
    struct Runs { int *copied; int count, saw; } runs = {page_side, 0, 0};
    CHECK(cudaLaunchHostFunc(side, [](void *p) { Runs *r = (Runs *)p; r->count++; r->saw = r->copied[5]; }, &runs));
    CHECK(cudaEventRecord(side_done, side));
    CHECK(cudaStreamWaitEvent(s, side_done, 0));
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaStreamIsCapturing(side, &side_after));
    printf("the second stream's capture status: before %d, joined %d, after %d\n", (int)side_before,
           (int)side_during, (int)side_after);
    failures += side_before != cudaStreamCaptureStatusNone || side_during != cudaStreamCaptureStatusActive ||
                side_after != cudaStreamCaptureStatusNone;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++) {
        memset(page_side, 0, n * sizeof(int));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        char what[80];
        snprintf(what, sizeof what, "a capture over two streams, launch %d", round + 1);
        failures += report(what, page_side, n, want_filled, 40);
        printf("its captured host function: ran %d times, saw the copy %s\n", runs.count,
               runs.saw == want_filled(5, 40) ? "OK" : "FAIL");
        failures += runs.count != round + 1 || runs.saw != want_filled(5, 40);
        runs.saw = 0;
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(filled));
    CHECK(cudaEventDestroy(side_done));
    CHECK(cudaStreamDestroy(side));
    free(page_side);

    // 11. a graph's memory freed outside it, then in another graph (graphMemoryNodes): the allocation node
    //     makes it again at every launch, at the same address
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t made2, filled2;
    alloc.dptr = NULL;
    CHECK(cudaGraphAddMemAllocNode(&made2, g, NULL, 0, &alloc));
    int *kept_d = (int *)alloc.dptr;
    CHECK(cudaGraphAddMemsetNode(&filled2, g, &made2, 1, &(const cudaMemsetParams &)cudaMemsetParams{
        kept_d, 0, 0x01010101, sizeof(int), (size_t)n, 1}));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFree(kept_d));  // outside the stream
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaFreeAsync(kept_d, s));  // outside the graph
    CHECK(cudaStreamSynchronize(s));
    cudaGraph_t frees;
    cudaGraphNode_t free_node;
    cudaGraphExec_t free_exec;
    CHECK(cudaGraphCreate(&frees, 0));
    CHECK(cudaGraphAddMemFreeNode(&free_node, frees, NULL, 0, kept_d));  // in a different graph
    CHECK(cudaGraphInstantiate(&free_exec, frees, 0));
    CHECK(cudaGraphDestroy(frees));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(out_h, kept_d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaGraphLaunch(free_exec, s));
    CHECK(cudaStreamSynchronize(s));
    int kept_ok = 1;
    for (int i = 0; i < n; i++) kept_ok &= out_h[i] == 0x01010101;
    printf("a graph's memory freed outside it, then by another graph: %s\n", kept_ok ? "OK" : "FAIL");
    failures += !kept_ok;
    CHECK(cudaGraphExecDestroy(free_exec));
    CHECK(cudaGraphExecDestroy(exec));

    // 12. a memcpy node's parameters set: in the graph (its executable graphs keep the old ones), in an
    //     executable graph, and in a graph instantiated again
    {
        int *alt_h;
        CHECK(cudaMallocHost(&alt_h, n * sizeof(int)));
        CHECK(cudaMemset(out_d, 0x11, n * sizeof(int)));
        cudaGraph_t sg;
        cudaGraphNode_t down5;
        cudaGraphExec_t e1, e2;
        CHECK(cudaGraphCreate(&sg, 0));
        CHECK(cudaGraphAddMemcpyNode1D(&down5, sg, NULL, 0, out_h, out_d, n * sizeof(int), cudaMemcpyDeviceToHost));
        CHECK(cudaGraphInstantiate(&e1, sg, 0));
        CHECK(cudaGraphMemcpyNodeSetParams1D(down5, alt_h, out_d, n * sizeof(int), cudaMemcpyDeviceToHost));
        memset(out_h, 0, n * sizeof(int));
        memset(alt_h, 0, n * sizeof(int));
        CHECK(cudaGraphLaunch(e1, s));
        CHECK(cudaStreamSynchronize(s));
        int old_kept = out_h[0] == 0x11111111 && out_h[n - 1] == 0x11111111 && alt_h[0] == 0;
        int set_reads_back = reads_back(down5, out_d, alt_h, n * sizeof(int), 1, 0);
        CHECK(cudaGraphExecMemcpyNodeSetParams1D(e1, down5, alt_h, out_d + n / 2, n / 2 * sizeof(int),
                                                 cudaMemcpyDeviceToHost));
        CHECK(cudaMemset(out_d, 0x22, n * sizeof(int)));
        CHECK(cudaGraphLaunch(e1, s));
        CHECK(cudaStreamSynchronize(s));
        int exec_set = alt_h[0] == 0x22222222 && alt_h[n / 2 - 1] == 0x22222222 && alt_h[n / 2] == 0;
        CHECK(cudaGraphInstantiate(&e2, sg, 0));
        CHECK(cudaMemset(out_d, 0x33, n * sizeof(int)));
        CHECK(cudaGraphLaunch(e2, s));
        CHECK(cudaStreamSynchronize(s));
        int again = alt_h[n - 1] == 0x33333333 && out_h[0] == 0x11111111;
        printf("a memcpy node's parameters set: the executable graph kept the old %s, read back %s, set in the "
               "executable graph %s, instantiated again %s\n", old_kept ? "OK" : "FAIL",
               set_reads_back ? "OK" : "FAIL", exec_set ? "OK" : "FAIL", again ? "OK" : "FAIL");
        failures += !old_kept + !set_reads_back + !exec_set + !again;
        CHECK(cudaGraphExecDestroy(e2));
        CHECK(cudaGraphExecDestroy(e1));
        CHECK(cudaGraphDestroy(sg));
        CHECK(cudaFreeHost(alt_h));
    }

    CHECK(cudaFree(tmp_d));
    CHECK(cudaFree(in_d));
    CHECK(cudaFree(out_d));
    CHECK(cudaFreeHost(in_h));
    CHECK(cudaFreeHost(out_h));
    CHECK(cudaStreamDestroy(s));
    printf("graph_host_copies: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
