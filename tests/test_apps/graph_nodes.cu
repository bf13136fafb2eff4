// graph_nodes: a graph built node by node (kernel, memset, device-to-device memcpy, empty, child graph,
// event record and wait, and host nodes, with dependencies), its nodes listed, its shape read back (roots,
// edges, dependencies, dependents), a dependency removed and a node destroyed; instantiated, uploaded and
// launched several times, a node disabled and enabled in the executable; a kernel node's parameters
// changed in the executable graph; the executable graph updated from a changed graph; node types read
// back, a graph cloned.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static int host_calls = 0;
static void CUDART_CB count_call(void *p) { (*(int *)p)++; }

static int check(const char *what, const int *h, int n, int (*want)(int, int), int arg) {
    for (int i = 0; i < n; i++)
        if (h[i] != want(i, arg)) {
            printf("%-52s FAIL at %d: %d, expected %d\n", what, i, h[i], want(i, arg));
            return 1;
        }
    printf("%-52s OK\n", what);
    return 0;
}

// a = fill(v); b = a * 3 + 1; c = 0x01010101 (memset); c += b; d = c (memcpy)
static int want_d(int i, int v) { return (v + (i & 15)) * 3 + 1 + 0x01010101; }

static cudaGraphNode_t kernel_node(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n_deps, void *f, int blocks,
                                   void **args) {
    cudaKernelNodeParams p = {};
    p.func = f;
    p.gridDim = dim3(blocks);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, deps, n_deps, &p));
    return node;
}

int main() {
    const int n = 1 << 14, blocks = n / 256;
    int *a, *b, *c, *d;
    static int h[1 << 14];
    int failures = 0;
    CHECK(cudaMalloc(&a, n * sizeof(int)));
    CHECK(cudaMalloc(&b, n * sizeof(int)));
    CHECK(cudaMalloc(&c, n * sizeof(int)));
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    int v = 10, mul = 3, add = 1, nn = n;
    void *fill_args[] = {&a, &v, &nn};
    cudaGraphNode_t fill = kernel_node(g, NULL, 0, (void *)streamFill, blocks, fill_args);
    void *scale_args[] = {&b, &a, &mul, &add, &nn};
    cudaGraphNode_t scale = kernel_node(g, &fill, 1, (void *)streamScaleAdd, blocks, scale_args);
    cudaMemsetParams ms = {};
    ms.dst = c;
    ms.value = 1;
    ms.elementSize = 1;
    ms.width = n * sizeof(int);
    ms.height = 1;
    cudaGraphNode_t memset_node;
    CHECK(cudaGraphAddMemsetNode(&memset_node, g, NULL, 0, &ms));
    cudaGraphNode_t join;
    cudaGraphNode_t both[2] = {scale, memset_node};
    CHECK(cudaGraphAddEmptyNode(&join, g, both, 2));
    void *add_args[] = {&c, &b, &nn};
    cudaGraphNode_t add_node = kernel_node(g, &join, 1, (void *)streamAddInto, blocks, add_args);
    cudaGraphNode_t copy;
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, NULL, 0, d, c, n * sizeof(int), cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddDependencies(g, &add_node, &copy, NULL, 1));
    cudaGraphNode_t record;
    CHECK(cudaGraphAddEventRecordNode(&record, g, &copy, 1, done));
    cudaHostNodeParams hp = {count_call, &host_calls};
    cudaGraphNode_t host;
    CHECK(cudaGraphAddHostNode(&host, g, &copy, 1, &hp));
    cudaEvent_t ready;
    CHECK(cudaEventCreate(&ready));
    cudaGraphNode_t wait;
    CHECK(cudaGraphAddEventWaitNode(&wait, g, NULL, 0, ready));
    CHECK(cudaGraphAddDependencies(g, &wait, &fill, NULL, 1));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    cudaGraphNode_t listed[16];
    size_t room = 16;
    CHECK(cudaGraphGetNodes(g, listed, &room));
    int found = 0;
    for (size_t i = 0; i < room; i++) found += listed[i] == host;
    printf("nodes in the graph: %zu, listed %zu, the host node among them: %d\n", count, room, found);

    // the graph's shape read back
    cudaGraphNode_t roots[16], from[16], to[16], deps[4];
    cudaGraphEdgeData edge_data[16];
    size_t n_roots = 16, n_edges = 0, n_listed = 16, n_deps = 0, n_dependents = 4;
    CHECK(cudaGraphGetRootNodes(g, roots, &n_roots));
    int roots_found = 0;
    for (size_t i = 0; i < n_roots; i++) roots_found += roots[i] == wait || roots[i] == memset_node;
    CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n_edges));
    CHECK(cudaGraphGetEdges(g, from, to, edge_data, &n_listed));
    int into_join = 0, default_data = 1;
    for (size_t i = 0; i < n_listed; i++) {
        into_join += to[i] == join && (from[i] == scale || from[i] == memset_node);
        default_data &= edge_data[i].type == 0 && edge_data[i].from_port == 0 && edge_data[i].to_port == 0;
    }
    CHECK(cudaGraphNodeGetDependencies(join, NULL, NULL, &n_deps));
    CHECK(cudaGraphNodeGetDependentNodes(copy, deps, NULL, &n_dependents));
    int dependents_found = 0;
    for (size_t i = 0; i < n_dependents; i++) dependents_found += deps[i] == record || deps[i] == host;
    printf("roots: %zu (the wait and memset nodes: %d); edges: %zu, listed %zu (%d into the join, default data: %d)\n",
           n_roots, roots_found, n_edges, n_listed, into_join, default_data);
    printf("the join's dependencies: %zu; the copy's dependents: %zu (the record and host nodes: %d)\n", n_deps,
           n_dependents, dependents_found);
    // a dependency removed and put back; a node added and destroyed
    CHECK(cudaGraphRemoveDependencies(g, &wait, &fill, NULL, 1));
    size_t fewer = 0, roots_then = 0;
    CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &fewer));
    CHECK(cudaGraphGetRootNodes(g, NULL, &roots_then));
    CHECK(cudaGraphAddDependencies(g, &wait, &fill, NULL, 1));
    cudaGraphNode_t extra;
    CHECK(cudaGraphAddEmptyNode(&extra, g, &host, 1));
    size_t with_extra = 0, without = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &with_extra));
    CHECK(cudaGraphDestroyNode(extra));
    CHECK(cudaGraphGetNodes(g, NULL, &without));
    printf("a dependency removed: %zu edges, %zu roots; a node added and destroyed: %zu, then %zu nodes\n", fewer,
           roots_then, with_extra, without);

    // the graph drawn in DOT, into a file of the program's; a path that cannot be written is refused
    char dot_path[64];
    snprintf(dot_path, sizeof dot_path, "/tmp/cuwire-graph-nodes-%d.dot", (int)getpid());
    CHECK(cudaGraphDebugDotPrint(g, dot_path, cudaGraphDebugDotFlagsVerbose));
    char head[8] = "";
    FILE *dot = fopen(dot_path, "r");
    size_t dot_len = dot ? fread(head, 1, 7, dot) : 0;
    if (dot)
        fclose(dot);
    unlink(dot_path);
    cudaError_t unwritable = cudaGraphDebugDotPrint(g, "/nonexistent-cuwire/graph.dot", 0);
    cudaGetLastError();
    printf("the graph drawn in DOT: %s; to a path that cannot be written: %s\n",
           dot_len == 7 && strncmp(head, "digraph", 7) == 0 ? "a digraph" : "FAIL", unwritable ? "refused" : "FAIL");

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    unsigned long long exec_flags = 1;
    CHECK(cudaGraphExecGetFlags(exec, &exec_flags));
    CHECK(cudaGraphUpload(exec, s));
    for (int round = 0; round < 3; round++) {
        CHECK(cudaMemset(d, 0, n * sizeof(int)));
        CHECK(cudaEventRecord(ready, s));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaEventSynchronize(done));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("a graph built node by node, launched 3 times", h, n, want_d, 10);
    printf("the executable's flags: %llu\n", exec_flags);

    // the copy node disabled in the executable: d stays as set; enabled again
    CHECK(cudaGraphNodeSetEnabled(exec, copy, 0));
    unsigned int enabled = 1;
    CHECK(cudaGraphNodeGetEnabled(exec, copy, &enabled));
    CHECK(cudaMemset(d, 0, n * sizeof(int)));
    CHECK(cudaEventRecord(ready, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    int zeros = 1;
    for (int i = 0; i < n; i++) zeros &= h[i] == 0;
    CHECK(cudaGraphNodeSetEnabled(exec, copy, 1));
    unsigned int enabled_again = 0;
    CHECK(cudaGraphNodeGetEnabled(exec, copy, &enabled_again));
    printf("%-52s %s\n", "the copy node disabled, then enabled", zeros && !enabled && enabled_again ? "OK" : "FAIL");
    failures += !(zeros && !enabled && enabled_again);

    // the fill kernel's value changed in the executable graph only
    int v2 = 500;
    void *fill_args2[] = {&a, &v2, &nn};
    cudaKernelNodeParams p = {};
    p.func = (void *)streamFill;
    p.gridDim = dim3(blocks);
    p.blockDim = dim3(256);
    p.kernelParams = fill_args2;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, fill, &p));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("a kernel node's parameters set in the executable", h, n, want_d, 500);

    // the graph changed (its fill value), the executable updated from it
    int v3 = 7000;
    void *fill_args3[] = {&a, &v3, &nn};
    p.kernelParams = fill_args3;
    CHECK(cudaGraphKernelNodeSetParams(fill, &p));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(exec, g, &info));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("the executable updated from the changed graph", h, n, want_d, 7000);

    // node types, a clone, a graph inside a graph
    cudaGraphNodeType types[4];
    CHECK(cudaGraphNodeGetType(fill, &types[0]));
    CHECK(cudaGraphNodeGetType(memset_node, &types[1]));
    CHECK(cudaGraphNodeGetType(copy, &types[2]));
    CHECK(cudaGraphNodeGetType(join, &types[3]));
    printf("node types: kernel %d, memset %d, memcpy %d, empty %d\n", types[0], types[1], types[2], types[3]);
    cudaGraph_t clone, outer;
    CHECK(cudaGraphClone(&clone, g));
    CHECK(cudaGraphCreate(&outer, 0));
    cudaGraphNode_t child;
    CHECK(cudaGraphAddChildGraphNode(&child, outer, NULL, 0, clone));
    int *e;
    CHECK(cudaMalloc(&e, n * sizeof(int)));
    cudaGraphNode_t after;
    CHECK(cudaGraphAddMemcpyNode1D(&after, outer, &child, 1, e, d, n * sizeof(int), cudaMemcpyDeviceToDevice));
    cudaGraphExec_t outer_exec;
    CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));
    CHECK(cudaGraphLaunch(outer_exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, e, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("a clone as a child graph, then a copy after it", h, n, want_d, 7000);

    // parameters read back, events swapped, a node found in the clone, the child node's own graph
    cudaMemsetParams got = {};
    CHECK(cudaGraphMemsetNodeGetParams(memset_node, &got));
    cudaEvent_t ev = NULL, waited = NULL;
    CHECK(cudaGraphEventRecordNodeGetEvent(record, &ev));
    int events_ok = ev == done;
    CHECK(cudaGraphEventRecordNodeSetEvent(record, ready));
    CHECK(cudaGraphEventRecordNodeGetEvent(record, &ev));
    events_ok &= ev == ready;
    CHECK(cudaGraphEventRecordNodeSetEvent(record, done));
    CHECK(cudaGraphEventWaitNodeGetEvent(wait, &waited));
    events_ok &= waited == ready;
    CHECK(cudaGraphExecEventRecordNodeSetEvent(exec, record, done));
    CHECK(cudaGraphExecEventWaitNodeSetEvent(exec, wait, ready));
    cudaGraphNode_t in_clone = NULL;
    CHECK(cudaGraphNodeFindInClone(&in_clone, fill, clone));
    cudaGraphNodeType clone_type;
    CHECK(cudaGraphNodeGetType(in_clone, &clone_type));
    cudaGraph_t inner;
    CHECK(cudaGraphChildGraphNodeGetGraph(child, &inner));
    size_t inner_nodes = 0;
    CHECK(cudaGraphGetNodes(inner, NULL, &inner_nodes));
    printf("memset node read back: dst %s, value %u, element size %u, width %zu\n", got.dst == c ? "ok" : "wrong",
           got.value, got.elementSize, got.width);
    cudaMemsetParams changed = ms;  // a memset node's parameters set, in the graph and in its executable graph
    changed.value = 2;
    CHECK(cudaGraphMemsetNodeSetParams(memset_node, &changed));
    CHECK(cudaGraphMemsetNodeGetParams(memset_node, &got));
    CHECK(cudaGraphExecMemsetNodeSetParams(exec, memset_node, &ms));
    printf("memset node set: value %u\n", got.value);
    printf("events read back and set: %s; found in the clone: a node of type %d; the child's graph: %zu nodes\n",
           events_ok ? "OK" : "FAIL", clone_type, inner_nodes);
    failures += !events_ok;
    printf("the host node ran %d times (7 launches)\n", host_calls);
    failures += host_calls != 7;

    // a child graph node's work swapped in the executable graph for another graph of the same shape
    cudaGraph_t ones, twos, holder;
    cudaGraphNode_t one_node, two_node, holder_node;
    cudaMemsetParams fill_e = {};
    fill_e.dst = e;
    fill_e.elementSize = sizeof(int);
    fill_e.width = n;
    fill_e.height = 1;
    fill_e.value = 1;
    CHECK(cudaGraphCreate(&ones, 0));
    CHECK(cudaGraphAddMemsetNode(&one_node, ones, NULL, 0, &fill_e));
    fill_e.value = 2;
    CHECK(cudaGraphCreate(&twos, 0));
    CHECK(cudaGraphAddMemsetNode(&two_node, twos, NULL, 0, &fill_e));
    CHECK(cudaGraphCreate(&holder, 0));
    CHECK(cudaGraphAddChildGraphNode(&holder_node, holder, NULL, 0, ones));
    cudaGraphExec_t holder_exec;
    CHECK(cudaGraphInstantiate(&holder_exec, holder, 0));
    int child_set[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        if (round)
            CHECK(cudaGraphExecChildGraphNodeSetParams(holder_exec, holder_node, twos));
        CHECK(cudaGraphLaunch(holder_exec, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(h, e, n * sizeof(int), cudaMemcpyDeviceToHost));
        child_set[round] = h[0] == round + 1 && h[n - 1] == round + 1;
    }
    printf("a child graph node set in the executable graph: before %s, after %s\n", child_set[0] ? "OK" : "FAIL",
           child_set[1] ? "OK" : "FAIL");
    failures += !child_set[0] || !child_set[1];
    //    and through the one-struct calls: the memset node in `ones` set to 5, `ones` set back into the executable
    cudaGraphNodeParams as_memset = {};
    as_memset.type = cudaGraphNodeTypeMemset;
    as_memset.memset.dst = e;
    as_memset.memset.elementSize = sizeof(int);
    as_memset.memset.width = n;
    as_memset.memset.height = 1;
    as_memset.memset.value = 5;
    CHECK(cudaGraphNodeSetParams(one_node, &as_memset));
    cudaGraphNodeParams as_child = {};
    as_child.type = cudaGraphNodeTypeGraph;
    as_child.graph.graph = ones;
    CHECK(cudaGraphExecNodeSetParams(holder_exec, holder_node, &as_child));
    CHECK(cudaGraphLaunch(holder_exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, e, n * sizeof(int), cudaMemcpyDeviceToHost));
    printf("set through cudaGraphNodeSetParams and cudaGraphExecNodeSetParams: %s\n",
           h[0] == 5 && h[n - 1] == 5 ? "OK" : "FAIL");
    failures += h[0] != 5 || h[n - 1] != 5;
    CHECK(cudaGraphExecDestroy(holder_exec));
    CHECK(cudaGraphDestroy(holder));
    CHECK(cudaGraphDestroy(twos));
    CHECK(cudaGraphDestroy(ones));

    CHECK(cudaGraphExecDestroy(outer_exec));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(outer));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaEventDestroy(ready));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(e));
    CHECK(cudaFree(d));
    CHECK(cudaFree(c));
    CHECK(cudaFree(b));
    CHECK(cudaFree(a));
    printf("graph_nodes: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
