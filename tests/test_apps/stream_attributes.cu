// stream_attributes: stream and kernel-node attributes: an access policy window (persisting L2: the
// window, hit ratio and properties) and a synchronization policy set on a stream, read back, copied to
// another stream; a window set on a graph's kernel node, read back, copied to another node; the stream's
// and the graph's kernels still give their results; the persisting lines of L2 reset.
#include <stdio.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static void print_window(const char *what, const cudaAccessPolicyWindow &w, const void *base) {
    printf("%s: base %s, %zu bytes, hit ratio %.2f, hit property %d, miss property %d\n", what,
           w.base_ptr == base ? "as set" : "other", w.num_bytes, w.hitRatio, (int)w.hitProp, (int)w.missProp);
}

static int check(const char *what, const int *h, int n, int mul, int add, int v) {
    for (int i = 0; i < n; i++)
        if (h[i] != (v + (i & 15)) * mul + add) {
            printf("%s: FAIL at %d: %d\n", what, i, h[i]);
            return 1;
        }
    printf("%s: OK\n", what);
    return 0;
}

int main() {
    const int n = 1 << 16, blocks = n / 256;
    static int h[1 << 16];
    int *a, *b, failures = 0;
    CHECK(cudaMalloc(&a, n * sizeof(int)));
    CHECK(cudaMalloc(&b, n * sizeof(int)));
    cudaStream_t s, t;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamCreate(&t));

    cudaStreamAttrValue v = {}, got = {};
    v.accessPolicyWindow.base_ptr = a;
    v.accessPolicyWindow.num_bytes = n * sizeof(int);
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &got));
    print_window("stream window", got.accessPolicyWindow, a);
    v = {};
    v.syncPolicy = cudaSyncPolicyYield;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v));
    got = {};
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &got));
    printf("stream synchronization policy: %d\n", (int)got.syncPolicy);
    CHECK(cudaStreamCopyAttributes(t, s));
    got = {};
    CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeAccessPolicyWindow, &got));
    print_window("copied stream window", got.accessPolicyWindow, a);
    got = {};
    CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeSynchronizationPolicy, &got));
    printf("copied synchronization policy: %d\n", (int)got.syncPolicy);

    streamFill<<<blocks, 256, 0, s>>>(a, 7, n);
    streamScaleAdd<<<blocks, 256, 0, s>>>(b, a, 3, 1, n);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, b, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("kernels in the stream with a window", h, n, 3, 1, 7);

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    int v2 = 11, mul = 2, add = 5, count = n;
    void *fill_args[] = {&a, &v2, &count}, *scale_args[] = {&b, &a, &mul, &add, &count};
    cudaKernelNodeParams p = {};
    p.gridDim = dim3(blocks);
    p.blockDim = dim3(256);
    p.func = (void *)streamFill;
    p.kernelParams = fill_args;
    cudaGraphNode_t fill, scale;
    CHECK(cudaGraphAddKernelNode(&fill, g, NULL, 0, &p));
    p.func = (void *)streamScaleAdd;
    p.kernelParams = scale_args;
    CHECK(cudaGraphAddKernelNode(&scale, g, &fill, 1, &p));
    cudaKernelNodeAttrValue kv = {}, kgot = {};
    kv.accessPolicyWindow.base_ptr = b;
    kv.accessPolicyWindow.num_bytes = 4096;
    kv.accessPolicyWindow.hitRatio = 1.0f;
    kv.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    kv.accessPolicyWindow.missProp = cudaAccessPropertyNormal;
    CHECK(cudaGraphKernelNodeSetAttribute(fill, cudaKernelNodeAttributeAccessPolicyWindow, &kv));
    CHECK(cudaGraphKernelNodeGetAttribute(fill, cudaKernelNodeAttributeAccessPolicyWindow, &kgot));
    print_window("node window", kgot.accessPolicyWindow, b);
    CHECK(cudaGraphKernelNodeCopyAttributes(scale, fill));
    kgot = {};
    CHECK(cudaGraphKernelNodeGetAttribute(scale, cudaKernelNodeAttributeAccessPolicyWindow, &kgot));
    print_window("copied node window", kgot.accessPolicyWindow, b);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphLaunch(e, t));
    CHECK(cudaStreamSynchronize(t));
    CHECK(cudaMemcpy(h, b, n * sizeof(int), cudaMemcpyDeviceToHost));
    failures += check("graph kernels with windows", h, n, 2, 5, 11);

    CHECK(cudaCtxResetPersistingL2Cache());
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(t));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
