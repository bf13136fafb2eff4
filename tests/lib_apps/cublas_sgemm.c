/* A cuBLAS program as users write one: SGEMM and a strided-batched SGEMM on the default handle, plus
 * SAXPY and SNRM2 (a result returned to the host). Built with nvcc's defaults (static CUDA runtime);
 * cuBLAS calls libcuda.so.1 directly, private export tables included. */
#include <cublas_v2.h>
#include "../test_apps/check.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_BLAS(call)                                                                             \
    do {                                                                                             \
        cublasStatus_t s_ = (call);                                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

enum { M = 192, N = 160, K = 96, BATCH = 4 };

static void fill(float *x, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

static void report(const char *what, const float *x, int n)
{
    double sum = 0, asum = 0;
    for (int i = 0; i < n; i++) {
        sum += x[i];
        asum += x[i] < 0 ? -x[i] : x[i];
    }
    printf("%s: first=%.9g last=%.9g sum=%.9g abs-sum=%.9g\n", what, x[0], x[n - 1], sum, asum);
}

int main(void)
{
    static float a[BATCH * M * K], b[BATCH * K * N], c[BATCH * M * N];
    fill(a, BATCH * M * K, 1);
    fill(b, BATCH * K * N, 2);
    float *da, *db, *dc;
    CHECK(cudaMalloc((void **)&da, sizeof a));
    CHECK(cudaMalloc((void **)&db, sizeof b));
    CHECK(cudaMalloc((void **)&dc, sizeof c));
    CHECK(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dc, 0, sizeof c));

    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    int version = 0;
    CHECK_BLAS(cublasGetVersion(h, &version));
    printf("cuBLAS %s\n", version >= 130000 ? ">= 13.0" : "older than 13.0");
    CHECK_BLAS(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));

    const float one = 1.0f, zero = 0.0f, half = 0.5f;
    /* column-major C (M x N) = A (M x K) * B (K x N) */
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, dc, M));
    CHECK(cudaMemcpy(c, dc, sizeof(float) * M * N, cudaMemcpyDeviceToHost));
    report("sgemm", c, M * N);

    CHECK_BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, da, K, (long long)M * K, db, K,
                                         (long long)K * N, &zero, dc, M, (long long)M * N, BATCH));
    CHECK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
    report("sgemm strided batched (A transposed)", c, BATCH * M * N);

    CHECK_BLAS(cublasSaxpy(h, M * N, &half, dc, 1, dc + M * N, 1));
    float norm = 0;
    CHECK_BLAS(cublasSnrm2(h, M * N, dc + M * N, 1, &norm));
    CHECK(cudaMemcpy(c, dc + M * N, sizeof(float) * M * N, cudaMemcpyDeviceToHost));
    report("saxpy", c, M * N);
    printf("snrm2: %.9g\n", norm);

    CHECK_BLAS(cublasDestroy(h));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    return 0;
}
