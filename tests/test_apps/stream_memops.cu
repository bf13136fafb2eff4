// stream_memops: 32- and 64-bit values written to device memory and waited for in stream order
// (cuStreamWriteValue32/64, cuStreamWaitValue32/64, around a kernel), and as one batch (cuStreamBatchMemOp,
// with a memory barrier); managed memory attached to a stream;
// the device's graph memory figures read and reset; peer access to the only GPU refused as natively.
#include <stdio.h>

#include "check.h"

__global__ void addOne(unsigned int *p) {
    if (threadIdx.x == 0) *p += 1;
}

int main() {
    int failures = 0;
    CHECK(cudaFree(0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned int *flag;
    unsigned long long *wide;
    CHECK(cudaMalloc((void **)&flag, sizeof *flag));
    CHECK(cudaMalloc((void **)&wide, sizeof *wide));
    const unsigned long long pattern = 0x0123456789abcdefULL;
    CHECK_DRIVER(cuStreamWriteValue32(s, (CUdeviceptr)flag, 41, 0));
    CHECK_DRIVER(cuStreamWaitValue32(s, (CUdeviceptr)flag, 41, CU_STREAM_WAIT_VALUE_EQ));
    addOne<<<1, 32, 0, s>>>(flag);
    CHECK_DRIVER(cuStreamWaitValue32(s, (CUdeviceptr)flag, 40, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK_DRIVER(cuStreamWriteValue64(s, (CUdeviceptr)wide, pattern, 0));
    CHECK_DRIVER(cuStreamWaitValue64(s, (CUdeviceptr)wide, 0x100, CU_STREAM_WAIT_VALUE_AND));
    CHECK(cudaStreamSynchronize(s));
    unsigned int h32 = 0;
    unsigned long long h64 = 0;
    CHECK(cudaMemcpy(&h32, flag, sizeof h32, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&h64, wide, sizeof h64, cudaMemcpyDeviceToHost));
    printf("%-46s %s (%u)\n", "a 32-bit value written, waited for, added to", h32 == 42 ? "OK" : "FAIL", h32);
    printf("%-46s %s (%#llx)\n", "a 64-bit value written and waited for", h64 == pattern ? "OK" : "FAIL", h64);
    failures += h32 != 42 || h64 != pattern;

    // the same in one batch: write, wait, write 64 bits, a memory barrier; then the kernel adds one
    CUstreamBatchMemOpParams ops[4] = {};
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = (CUdeviceptr)flag;
    ops[0].writeValue.value = 100;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[1].waitValue.address = (CUdeviceptr)flag;
    ops[1].waitValue.value = 100;
    ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[2].writeValue.address = (CUdeviceptr)wide;
    ops[2].writeValue.value64 = ~pattern;
    ops[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    CHECK_DRIVER(cuStreamBatchMemOp(s, 4, ops, 0));
    addOne<<<1, 32, 0, s>>>(flag);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(&h32, flag, sizeof h32, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&h64, wide, sizeof h64, cudaMemcpyDeviceToHost));
    printf("%-46s %s (%u, %#llx)\n", "the same as one batch of memory operations",
           h32 == 101 && h64 == ~pattern ? "OK" : "FAIL", h32, h64);
    failures += h32 != 101 || h64 != ~pattern;

    // a graph's batch memory operation node, built by hand: read back, set in the graph (its executable keeps
    // the old operations), set in the executable; one added through cuGraphAddNode; one a capture made
    {
        CUcontext ctx;
        CHECK_DRIVER(cuCtxGetCurrent(&ctx));
        CUstreamBatchMemOpParams w[2] = {};
        w[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        w[0].writeValue.address = (CUdeviceptr)flag;
        w[0].writeValue.value = 7;
        w[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
        w[1].writeValue.address = (CUdeviceptr)wide;
        w[1].writeValue.value64 = 0x77;
        CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {ctx, 2, w, 0};
        CUgraph g;
        CUgraphNode node;
        CUgraphExec e;
        CHECK_DRIVER(cuGraphCreate(&g, 0));
        CHECK_DRIVER(cuGraphAddBatchMemOpNode(&node, g, NULL, 0, &bp));
        CUDA_BATCH_MEM_OP_NODE_PARAMS got = {};
        CHECK_DRIVER(cuGraphBatchMemOpNodeGetParams(node, &got));
        int read_back = got.ctx == ctx && got.count == 2 && got.flags == 0 && got.paramArray != w &&
                        got.paramArray[0].writeValue.value == 7 && got.paramArray[1].writeValue.value64 == 0x77;
        CHECK_DRIVER(cuGraphInstantiate(&e, g, 0));
        w[0].writeValue.value = 8;
        CHECK_DRIVER(cuGraphBatchMemOpNodeSetParams(node, &bp));
        CHECK_DRIVER(cuGraphLaunch(e, (CUstream)s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&h32, flag, sizeof h32, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(&h64, wide, sizeof h64, cudaMemcpyDeviceToHost));
        int first = h32 == 7 && h64 == 0x77;
        w[0].writeValue.value = 9;
        CHECK_DRIVER(cuGraphExecBatchMemOpNodeSetParams(e, node, &bp));
        CHECK_DRIVER(cuGraphLaunch(e, (CUstream)s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&h32, flag, sizeof h32, cudaMemcpyDeviceToHost));
        int in_exec = h32 == 9;
        CHECK_DRIVER(cuGraphBatchMemOpNodeGetParams(node, &got));
        int graph_set = got.paramArray[0].writeValue.value == 8;
        CHECK_DRIVER(cuGraphExecDestroy(e));

        CUgraphNodeParams np = {};
        np.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        np.memOp.ctx = ctx;
        np.memOp.count = 1;
        np.memOp.paramArray = w;
        w[0].writeValue.value = 10;
        CUgraphNode added;
        CHECK_DRIVER(cuGraphAddNode_v2(&added, g, &node, NULL, 1, &np));
        CHECK_DRIVER(cuGraphInstantiate(&e, g, 0));
        CHECK_DRIVER(cuGraphLaunch(e, (CUstream)s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&h32, flag, sizeof h32, cudaMemcpyDeviceToHost));
        int through_add_node = h32 == 10;
        CHECK_DRIVER(cuGraphExecDestroy(e));
        CHECK_DRIVER(cuGraphDestroy(g));

        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        CHECK_DRIVER(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)flag, 11, 0));
        CHECK(cudaStreamEndCapture(s, (cudaGraph_t *)&g));
        size_t count = 1;
        CHECK_DRIVER(cuGraphGetNodes(g, &node, &count));
        CUgraphNodeType type;
        CHECK_DRIVER(cuGraphNodeGetType(node, &type));
        CHECK_DRIVER(cuGraphInstantiate(&e, g, 0));
        CHECK_DRIVER(cuGraphLaunch(e, (CUstream)s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&h32, flag, sizeof h32, cudaMemcpyDeviceToHost));
        int captured = count == 1 && type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP && h32 == 11;
        CHECK_DRIVER(cuGraphExecDestroy(e));
        CHECK_DRIVER(cuGraphDestroy(g));
        printf("a batch memory operation node: read back %s, launched %s, set in the executable %s, set in the "
               "graph %s, through cuGraphAddNode %s, captured %s\n", read_back ? "OK" : "FAIL", first ? "OK" : "FAIL",
               in_exec ? "OK" : "FAIL", graph_set ? "OK" : "FAIL", through_add_node ? "OK" : "FAIL",
               captured ? "OK" : "FAIL");
        failures += !read_back + !first + !in_exec + !graph_set + !through_add_node + !captured;
    }

    int *m;
    CHECK(cudaMallocManaged((void **)&m, 4096));
    CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    CHECK(cudaStreamSynchronize(s));
    m[0] = 7;
    printf("%-46s %s\n", "managed memory attached to a stream", m[0] == 7 ? "OK" : "FAIL");
    CHECK(cudaFree(m));

    unsigned long long used = 1, zero = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    printf("graph memory in use before any graph: %llu bytes\n", used);

    cudaError_t enable = cudaDeviceEnablePeerAccess(0, 0);
    cudaGetLastError();
    cudaError_t disable = cudaDeviceDisablePeerAccess(0);
    cudaGetLastError();
    printf("peer access to the only GPU: %s; disabled: %s\n", cudaGetErrorName(enable), cudaGetErrorName(disable));

    CHECK(cudaFree(wide));
    CHECK(cudaFree(flag));
    CHECK(cudaStreamDestroy(s));
    printf("stream_memops: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
