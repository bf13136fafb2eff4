// graph_updates: a graph of kernel nodes, its executable graph's nodes given new parameters before each
// run, as XLA updates its command buffers when their buffers move. Through cuwire a set that changes only
// the parameters and the grid of a kernel node the client knows is queued (client/kernel_nodes.c;
// tests/test_round_trips.py counts what reached the server); one that changes the block goes to the server;
// after the executable graph is updated from its graph, its sets are queued again; after an update from a
// clone of the graph, they go to the server. Every run is checked.
#include <cstdio>
#include <cuda_runtime.h>

#include "check.h"
#include "stream_kernels.h"

const int N = 4096, NODES = 8, CHUNK = N / NODES, RUNS = 20;

struct Node {
    int *at;
    int value, count;
    void *args[3];
};

static int run_right(cudaGraphExec_t exec, cudaStream_t s, const int *buffer, int base) {
    static int h[N];
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, buffer, sizeof h, cudaMemcpyDeviceToHost));
    int right = 1;
    for (int i = 0; i < N; i++)
        right &= h[i] == base + i / CHUNK + (i % CHUNK & 15);
    return right;
}

// every node's parameters set in the executable graph: its slice of `buffer`, the value base + its index
static void set_all(cudaGraphExec_t exec, cudaGraphNode_t *nodes, Node *args, int *buffer, int base, int block) {
    for (int i = 0; i < NODES; i++) {
        args[i].at = buffer + i * CHUNK;
        args[i].value = base + i;
        cudaKernelNodeParams p = {};
        p.func = (void *)streamFill;
        p.gridDim = dim3((CHUNK + block - 1) / block);
        p.blockDim = dim3(block);
        p.kernelParams = args[i].args;
        CHECK(cudaGraphExecKernelNodeSetParams(exec, nodes[i], &p));
    }
}

int main() {
    int *buffers[2];
    CHECK(cudaMalloc((void **)&buffers[0], N * sizeof(int)));
    CHECK(cudaMalloc((void **)&buffers[1], N * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t nodes[NODES];
    Node args[NODES];
    for (int i = 0; i < NODES; i++) {
        args[i] = {buffers[0] + i * CHUNK, i, CHUNK, {}};
        args[i].args[0] = &args[i].at, args[i].args[1] = &args[i].value, args[i].args[2] = &args[i].count;
        cudaKernelNodeParams p = {};
        p.func = (void *)streamFill;
        p.gridDim = dim3((CHUNK + 255) / 256);
        p.blockDim = dim3(256);
        p.kernelParams = args[i].args;
        CHECK(cudaGraphAddKernelNode(&nodes[i], graph, i ? &nodes[i - 1] : nullptr, i ? 1 : 0, &p));
    }
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    int right = 0;
    for (int r = 0; r < RUNS; r++) {  // the buffers alternate, the values change
        set_all(exec, nodes, args, buffers[r % 2], 100 * r, 256);
        right += run_right(exec, s, buffers[r % 2], 100 * r);
    }
    set_all(exec, nodes, args, buffers[0], 5000, 128);  // another block: the server judges it
    int other_block = run_right(exec, s, buffers[0], 5000);
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(exec, graph, &info));
    set_all(exec, nodes, args, buffers[1], 7000, 256);
    int after_update = run_right(exec, s, buffers[1], 7000);
    // updated from a clone (nodes of its own): the sets still name the first graph's nodes, and go to the server
    cudaGraph_t clone;
    CHECK(cudaGraphClone(&clone, graph));
    CHECK(cudaGraphExecUpdate(exec, clone, &info));
    set_all(exec, nodes, args, buffers[0], 9000, 256);
    int after_clone = run_right(exec, s, buffers[0], 9000);
    printf("%d kernel nodes set in their executable graph before each of %d runs: right %d; with another block: "
           "%s; after an update from their graph: %s; from a clone of it: %s\n", NODES, RUNS, right,
           other_block ? "right" : "WRONG", after_update ? "right" : "WRONG", after_clone ? "right" : "WRONG");
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(buffers[0]));
    CHECK(cudaFree(buffers[1]));
    return 0;
}
