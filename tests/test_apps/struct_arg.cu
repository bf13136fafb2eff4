// struct_arg: a kernel taking a struct by value (mixed field types, so alignment and padding matter)
// and a block reduction in dynamic shared memory (extern __shared__, sized at launch).
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cuda_runtime.h>

#include "check.h"

// offsets: tag 0, scale 8, offset 16, count 20, bias 24, flag 28; size 32, alignment 8
struct Mixed {
    char tag;
    double scale;
    int offset;
    short count;
    float bias;
    char flag;
};

// out[i] = (float)(in[i] * scale + offset) + bias * count + (flag ? tag : 0)
__global__ void structApply(Mixed m, const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = (float)((double)in[i] * m.scale + (double)m.offset);
        out[i] = v + m.bias * (float)m.count + (m.flag ? (float)m.tag : 0.0f);
    }
}

// each block sums its blockDim.x elements (a power of two) into out[blockIdx.x]
__global__ void blockSum(const int *in, int *out, int n) {
    extern __shared__ int buf[];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
}

int main() {
    int bad = 0;
    printf("sizeof(Mixed) %zu alignof(Mixed) %zu offsets %zu %zu %zu %zu %zu %zu\n", sizeof(Mixed), alignof(Mixed),
           offsetof(Mixed, tag), offsetof(Mixed, scale), offsetof(Mixed, offset), offsetof(Mixed, count),
           offsetof(Mixed, bias), offsetof(Mixed, flag));

    // struct by value
    const int n = 1000;
    float *in = (float *)malloc(n * sizeof(float)), *out = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) in[i] = (float)(i % 50) - 10.0f;
    float *din, *dout;
    CHECK(cudaMalloc((void **)&din, n * sizeof(float)));
    CHECK(cudaMalloc((void **)&dout, n * sizeof(float)));
    CHECK(cudaMemcpy(din, in, n * sizeof(float), cudaMemcpyHostToDevice));
    Mixed m;
    m.tag = 'A';
    m.scale = 0.5;
    m.offset = -3;
    m.count = 4;
    m.bias = 0.375f;
    m.flag = 1;
    structApply<<<(n + 63) / 64, 64>>>(m, din, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    double s = 0;
    for (int i = 0; i < n; i++) {
        float want = (float)((double)in[i] * m.scale + (double)m.offset) + m.bias * (float)m.count + (float)m.tag;
        if (out[i] != want) bad++;
        s += out[i];
    }
    printf("structApply flag=1: out[0] %.3f out[1] %.3f out[999] %.3f sum %.3f\n", out[0], out[1], out[n - 1], s);

    m.flag = 0;
    m.tag = 'z';
    m.scale = -1.25;
    m.count = -2;
    structApply<<<(n + 255) / 256, 256>>>(m, din, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    s = 0;
    for (int i = 0; i < n; i++) {
        float want = (float)((double)in[i] * m.scale + (double)m.offset) + m.bias * (float)m.count;
        if (out[i] != want) bad++;
        s += out[i];
    }
    printf("structApply flag=0: out[0] %.3f out[1] %.3f out[999] %.3f sum %.3f\n", out[0], out[1], out[n - 1], s);

    // dynamic shared memory
    const int N = 5000, T = 256, B = (N + T - 1) / T;
    int *hin = (int *)malloc(N * sizeof(int)), *hout = (int *)malloc(B * sizeof(int));
    for (int i = 0; i < N; i++) hin[i] = (i * 37) % 1000 - 300;
    int *dsin, *dsout;
    CHECK(cudaMalloc((void **)&dsin, N * sizeof(int)));
    CHECK(cudaMalloc((void **)&dsout, B * sizeof(int)));
    CHECK(cudaMemcpy(dsin, hin, N * sizeof(int), cudaMemcpyHostToDevice));
    blockSum<<<B, T, T * sizeof(int)>>>(dsin, dsout, N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hout, dsout, B * sizeof(int), cudaMemcpyDeviceToHost));
    long long total = 0, want_total = 0;
    printf("blockSum (%d blocks):", B);
    for (int b = 0; b < B; b++) {
        int want = 0;
        for (int i = b * T; i < (b + 1) * T && i < N; i++) want += hin[i];
        if (hout[b] != want) bad++;
        printf(" %d", hout[b]);
        total += hout[b];
        want_total += want;
    }
    printf("\nblockSum total %lld\n", total);
    if (total != want_total) bad++;

    // again with smaller blocks: a different dynamic shared size
    const int T2 = 64, B2 = (N + T2 - 1) / T2;
    int *dsout2, *hout2 = (int *)malloc(B2 * sizeof(int));
    CHECK(cudaMalloc((void **)&dsout2, B2 * sizeof(int)));
    blockSum<<<B2, T2, T2 * sizeof(int)>>>(dsin, dsout2, N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hout2, dsout2, B2 * sizeof(int), cudaMemcpyDeviceToHost));
    total = 0;
    for (int b = 0; b < B2; b++) total += hout2[b];
    printf("blockSum %d blocks of %d: first %d last %d total %lld\n", B2, T2, hout2[0], hout2[B2 - 1], total);
    if (total != want_total) bad++;

    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dsin));
    CHECK(cudaFree(dsout));
    CHECK(cudaFree(dsout2));
    free(in);
    free(out);
    free(hin);
    free(hout);
    free(hout2);
    if (bad) {
        printf("struct_arg: FAIL (%d)\n", bad);
        return 1;
    }
    printf("struct_arg: PASS\n");
    return 0;
}
