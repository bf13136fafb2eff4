// Kernel nodes read back: the runtime's cudaGraphKernelNodeGetParams and the driver's
// cuGraphKernelNodeGetParams_v2 on a captured launch, the parameters changed and read again, a node made
// from what was read, and the driver's function launched by itself.
#include "check.h"
#include "stream_kernels.h"

#include <string.h>

static int check_out(const int *d, int v, int n)
{
    int h[128];
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != v + (i & 15))
            return 0;
    return 1;
}

int main()
{
    const int n = 128;
    int *d;
    cudaStream_t s;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    streamFill<<<2, 64, 0, s>>>(d, 3, n);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphNode_t node;
    size_t count = 1;
    CHECK(cudaGraphGetNodes(g, &node, &count));

    cudaKernelNodeParams rp;
    memset(&rp, 0, sizeof rp);
    CHECK(cudaGraphKernelNodeGetParams(node, &rp));
    printf("runtime: func is streamFill %d, grid %u block %u shared %u, v %d n %d\n", rp.func == (void *)streamFill,
           rp.gridDim.x, rp.blockDim.x, rp.sharedMemBytes, *(int *)rp.kernelParams[1], *(int *)rp.kernelParams[2]);

    int v = 5;
    void *args[] = {&d, &v, (void *)&n};
    cudaKernelNodeParams np = rp;
    np.kernelParams = args;
    CHECK(cudaGraphKernelNodeSetParams(node, &np));
    memset(&rp, 0, sizeof rp);
    CHECK(cudaGraphKernelNodeGetParams(node, &rp));
    printf("runtime after set: v %d, its own array %d\n", *(int *)rp.kernelParams[1], rp.kernelParams != (void **)args);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    printf("graph ran with v 5: %s\n", check_out(d, 5, n) ? "OK" : "WRONG");

    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    CHECK_DRIVER(cuGraphKernelNodeGetParams_v2((CUgraphNode)node, &p));
    CUcontext ctx;
    CHECK_DRIVER(cuCtxGetCurrent(&ctx));
    printf("driver: func %d kern %d ctx current %d extra %d, grid %u,%u,%u block %u, v %d\n", p.func != NULL,
           p.kern != NULL, p.ctx == ctx, p.extra == NULL, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX,
           *(int *)p.kernelParams[1]);

    // their names, as the driver gives them (XLA asks them of the functions in its captures)
    const char *func_name = NULL, *kern_name = NULL;
    CUresult named = cuFuncGetName(&func_name, p.func), kern_named = cuKernelGetName(&kern_name, p.kern);
    printf("names: function %d %s, kernel %d %s\n", (int)named, func_name ? func_name : "-", (int)kern_named,
           kern_name ? kern_name : "-");

    // the driver's function by itself: its attributes, a launch of it
    int threads = 0;
    CHECK_DRIVER(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, p.func));
    printf("its function: max threads per block > 0: %d\n", threads > 0);
    int v7 = 7;
    void *args7[] = {&d, &v7, (void *)&n};
    CHECK_DRIVER(cuLaunchKernel(p.func, 1, 1, 1, n, 1, 1, 0, (CUstream)s, args7, NULL));
    CHECK(cudaStreamSynchronize(s));
    printf("launched by itself with v 7: %s\n", check_out(d, 7, n) ? "OK" : "WRONG");

    // a node made from its kernel alone names the same function and kernel
    CUDA_KERNEL_NODE_PARAMS q = p;
    int v9 = 9;
    void *args9[] = {&d, &v9, (void *)&n};
    q.func = NULL;
    q.kernelParams = args9;
    CUgraph g2;
    CUgraphNode n2;
    CHECK_DRIVER(cuGraphCreate(&g2, 0));
    CHECK_DRIVER(cuGraphAddKernelNode_v2(&n2, g2, NULL, 0, &q));
    CUDA_KERNEL_NODE_PARAMS r;
    memset(&r, 0, sizeof r);
    CHECK_DRIVER(cuGraphKernelNodeGetParams_v2(n2, &r));
    printf("made from the kernel: same func %d same kern %d, v %d\n", r.func == p.func, r.kern == p.kern,
           *(int *)r.kernelParams[1]);
    CUgraphExec e2;
    CHECK_DRIVER(cuGraphInstantiate(&e2, g2, 0));
    CHECK_DRIVER(cuGraphLaunch(e2, (CUstream)s));
    CHECK(cudaStreamSynchronize(s));
    printf("that graph ran with v 9: %s\n", check_out(d, 9, n) ? "OK" : "WRONG");

    // not a kernel node
    CUgraphNode empty;
    CHECK_DRIVER(cuGraphAddEmptyNode(&empty, g2, NULL, 0));
    printf("an empty node's kernel parameters: error %d\n", (int)cuGraphKernelNodeGetParams_v2(empty, &r));

    CHECK_DRIVER(cuGraphExecDestroy(e2));
    CHECK_DRIVER(cuGraphDestroy(g2));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(d));
    printf("kernel_node_params: done\n");
    return 0;
}
