// graph_conditional: conditional nodes and memory nodes, added with cudaGraphAddNode. A while node runs its
// body until the body's kernel clears the condition; an if/else node runs the branch a kernel before it
// chose, relaunched with the other choice; a while node's body is filled by stream capture; a memory
// allocation node gives a kernel and a copy their memory, which a free node gives back; a while node is added
// by hand into a stream's capture (cudaStreamGetCaptureInfo, cudaStreamUpdateCaptureDependencies).
#include <stdio.h>

#include "check.h"

__global__ void loopBody(int *count, cudaGraphConditionalHandle h, int limit) {
    if (threadIdx.x == 0) {
        int c = ++*count;
        cudaGraphSetConditional(h, c < limit);
    }
}

__global__ void setFlag(cudaGraphConditionalHandle h, int value) {
    if (threadIdx.x == 0) cudaGraphSetConditional(h, value);
}

__global__ void writeValue(int *p, int v) {
    if (threadIdx.x == 0) *p = v;
}

static cudaGraphNode_t kernel(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, void *f, void **args) {
    cudaKernelNodeParams p = {};
    p.func = f;
    p.gridDim = dim3(1);
    p.blockDim = dim3(32);
    p.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, deps, n, &p));
    return node;
}

// a conditional node of `type` with `size` bodies, on handle h; its body graphs into bodies
static cudaGraphNode_t conditional(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, cudaGraphConditionalHandle h,
                                   cudaGraphConditionalNodeType type, unsigned size, cudaGraph_t *bodies) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddNode(&node, g, deps, NULL, n, &p));
    for (unsigned i = 0; i < size; i++) bodies[i] = p.conditional.phGraph_out[i];
    return node;
}

static int read_int(const int *d) {
    int v = 0;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static int report(const char *what, int got, int want) {
    printf("%-46s %s (%d)\n", what, got == want ? "OK" : "FAIL", got);
    return got != want;
}

int main() {
    int failures = 0, *count, *out;
    CHECK(cudaMalloc(&count, sizeof(int)));
    CHECK(cudaMalloc(&out, sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // while: the body counts until its kernel clears the condition
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle loop_handle;
    CHECK(cudaGraphConditionalHandleCreate(&loop_handle, g, 1, cudaGraphCondAssignDefault));
    cudaGraph_t loop_body;
    conditional(g, NULL, 0, loop_handle, cudaGraphCondTypeWhile, 1, &loop_body);
    int limit = 5;
    void *loop_args[] = {&count, &loop_handle, &limit};
    kernel(loop_body, NULL, 0, (void *)loopBody, loop_args);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++) {  // the default value comes back at each launch
        CHECK(cudaMemset(count, 0, sizeof(int)));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        failures += report(round ? "a while node, launched again" : "a while node ran its body 5 times",
                           read_int(count), 5);
    }

    // if/else: a kernel before the node picks the branch
    cudaGraph_t g2;
    CHECK(cudaGraphCreate(&g2, 0));
    cudaGraphConditionalHandle if_handle;
    CHECK(cudaGraphConditionalHandleCreate(&if_handle, g2, 0, cudaGraphCondAssignDefault));
    int choice = 1;
    void *flag_args[] = {&if_handle, &choice};
    cudaGraphNode_t chooser = kernel(g2, NULL, 0, (void *)setFlag, flag_args);
    cudaGraph_t branches[2];
    conditional(g2, &chooser, 1, if_handle, cudaGraphCondTypeIf, 2, branches);
    int then_value = 111, else_value = 222;
    void *then_args[] = {&out, &then_value}, *else_args[] = {&out, &else_value};
    kernel(branches[0], NULL, 0, (void *)writeValue, then_args);
    kernel(branches[1], NULL, 0, (void *)writeValue, else_args);
    cudaGraphExec_t exec2;
    CHECK(cudaGraphInstantiate(&exec2, g2, 0));
    CHECK(cudaGraphLaunch(exec2, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("an if node took its then branch", read_int(out), 111);
    choice = 0;
    cudaKernelNodeParams kp = {};
    kp.func = (void *)setFlag;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(32);
    kp.kernelParams = flag_args;
    CHECK(cudaGraphExecKernelNodeSetParams(exec2, chooser, &kp));
    CHECK(cudaGraphLaunch(exec2, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("then its else branch", read_int(out), 222);

    // a while node whose body is captured from a stream
    cudaGraph_t g4;
    CHECK(cudaGraphCreate(&g4, 0));
    cudaGraphConditionalHandle captured_handle;
    CHECK(cudaGraphConditionalHandleCreate(&captured_handle, g4, 1, cudaGraphCondAssignDefault));
    cudaGraph_t body, captured;
    conditional(g4, NULL, 0, captured_handle, cudaGraphCondTypeWhile, 1, &body);
    CHECK(cudaStreamBeginCaptureToGraph(s, body, NULL, NULL, 0, cudaStreamCaptureModeGlobal));
    loopBody<<<1, 32, 0, s>>>(count, captured_handle, 3);
    CHECK(cudaStreamEndCapture(s, &captured));
    cudaGraphExec_t exec4;
    CHECK(cudaGraphInstantiate(&exec4, g4, 0));
    CHECK(cudaMemset(count, 0, sizeof(int)));
    CHECK(cudaGraphLaunch(exec4, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("a while node whose body was captured", read_int(count), 3);
    printf("the capture went into the body graph: %s\n", captured == body ? "yes" : "no");

    // memory nodes: allocated in the graph, used by a kernel and a copy, freed in the graph
    cudaGraph_t g3;
    CHECK(cudaGraphCreate(&g3, 0));
    cudaGraphNodeParams ap = {};
    ap.type = cudaGraphNodeTypeMemAlloc;
    ap.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.alloc.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.alloc.poolProps.location.id = 0;
    ap.alloc.bytesize = 1 << 20;
    cudaGraphNode_t alloc_node;
    CHECK(cudaGraphAddNode(&alloc_node, g3, NULL, NULL, 0, &ap));
    int *scratch = (int *)ap.alloc.dptr, value = 333;
    void *write_args[] = {&scratch, &value};
    cudaGraphNode_t writer = kernel(g3, &alloc_node, 1, (void *)writeValue, write_args);
    cudaGraphNode_t copy;
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g3, &writer, 1, out, scratch, sizeof(int), cudaMemcpyDeviceToDevice));
    cudaGraphNodeParams fp = {};
    fp.type = cudaGraphNodeTypeMemFree;
    fp.free.dptr = scratch;
    cudaGraphNode_t free_node;
    CHECK(cudaGraphAddNode(&free_node, g3, &copy, NULL, 1, &fp));
    cudaGraphExec_t exec3;
    CHECK(cudaGraphInstantiate(&exec3, g3, 0));
    CHECK(cudaGraphLaunch(exec3, s));
    CHECK(cudaStreamSynchronize(s));
    failures += report("memory allocated and freed by graph nodes", read_int(out), 333);
    void *freed = NULL;
    CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    printf("the allocation node gave an address: %s; the free node frees it: %s\n", scratch ? "yes" : "no",
           freed == scratch ? "yes" : "no");

    // a while node added by hand into a stream's capture (CUDA's graphConditionalNodes): the capture's graph
    // and last node from cudaStreamGetCaptureInfo, the node added there, the capture's dependencies set to it
    cudaStream_t cs;
    CHECK(cudaStreamCreate(&cs));
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    cudaGraph_t capture_graph;
    CHECK(cudaStreamGetCaptureInfo(cs, &status, NULL, &capture_graph, NULL, NULL, NULL));
    cudaGraphConditionalHandle hand_handle;
    CHECK(cudaGraphConditionalHandleCreate(&hand_handle, capture_graph, 1, cudaGraphCondAssignDefault));
    writeValue<<<1, 32, 0, cs>>>(out, 7);
    const cudaGraphNode_t *last = NULL;
    size_t n_last = 0;
    CHECK(cudaStreamGetCaptureInfo(cs, &status, NULL, &capture_graph, &last, NULL, &n_last));
    printf("capturing: %s; the capture's last nodes: %zu\n", status == cudaStreamCaptureStatusActive ? "yes" : "no",
           n_last);
    cudaGraph_t hand_body;
    cudaGraphNode_t hand = conditional(capture_graph, last, n_last, hand_handle, cudaGraphCondTypeWhile, 1, &hand_body);
    CHECK(cudaStreamUpdateCaptureDependencies(cs, &hand, NULL, 1, cudaStreamSetCaptureDependencies));
    writeValue<<<1, 32, 0, cs>>>(out, 444);
    cudaGraph_t g5;
    CHECK(cudaStreamEndCapture(cs, &g5));
    printf("the capture ended in the graph it was building: %s\n", g5 == capture_graph ? "yes" : "no");
    int hand_limit = 4;
    void *hand_args[] = {&count, &hand_handle, &hand_limit};
    kernel(hand_body, NULL, 0, (void *)loopBody, hand_args);
    cudaGraphExec_t exec5;
    CHECK(cudaGraphInstantiate(&exec5, g5, 0));
    CHECK(cudaMemset(count, 0, sizeof(int)));
    CHECK(cudaGraphLaunch(exec5, cs));
    CHECK(cudaStreamSynchronize(cs));
    failures += report("a while node added into a capture", read_int(count), 4);
    failures += report("the capture's work after it", read_int(out), 444);
    CHECK(cudaGraphExecDestroy(exec5));
    CHECK(cudaGraphDestroy(g5));
    CHECK(cudaStreamDestroy(cs));

    CHECK(cudaGraphExecDestroy(exec4));
    CHECK(cudaGraphExecDestroy(exec3));
    CHECK(cudaGraphExecDestroy(exec2));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g4));
    CHECK(cudaGraphDestroy(g3));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(out));
    CHECK(cudaFree(count));
    printf("graph_conditional: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
