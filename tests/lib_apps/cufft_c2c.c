/* A cuFFT program as users write one: a batched 1D complex-to-complex FFT forward and back, and a 2D
 * real-to-complex FFT. Built with nvcc's defaults (static CUDA runtime); cuFFT calls libcuda.so.1
 * directly, private export tables included. */
#include "../test_apps/check.h"
#include <cuda_runtime.h>
#include <cufft.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_FFT(call)                                                                              \
    do {                                                                                             \
        cufftResult r_ = (call);                                                                     \
        if (r_ != CUFFT_SUCCESS) {                                                                   \
            fprintf(stderr, "%s:%d: %s: cufftResult %d\n", __FILE__, __LINE__, #call, (int)r_);     \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

enum { LEN = 1000, BATCH = 8, NX = 64, NY = 48 };

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
    static cufftComplex signal[LEN * BATCH], spectrum[LEN * BATCH];
    for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < LEN; i++) {
            signal[b * LEN + i].x = (float)((i * (b + 3)) % 17) - 8.0f;
            signal[b * LEN + i].y = (float)((i * 7 + b) % 5) * 0.5f;
        }
    cufftComplex *d;
    CHECK(cudaMalloc((void **)&d, sizeof signal));
    CHECK(cudaMemcpy(d, signal, sizeof signal, cudaMemcpyHostToDevice));
    int version = 0;
    CHECK_FFT(cufftGetVersion(&version));
    printf("cuFFT %s\n", version >= 12000 ? ">= 12.0" : "older");

    cufftHandle plan;
    CHECK_FFT(cufftPlan1d(&plan, LEN, CUFFT_C2C, BATCH));
    CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
    CHECK(cudaMemcpy(spectrum, d, sizeof spectrum, cudaMemcpyDeviceToHost));
    report("c2c forward", (const float *)spectrum, 2 * LEN * BATCH);
    CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
    CHECK(cudaMemcpy(spectrum, d, sizeof spectrum, cudaMemcpyDeviceToHost));
    report("c2c inverse (times LEN)", (const float *)spectrum, 2 * LEN * BATCH);
    CHECK_FFT(cufftDestroy(plan));

    static float image[NX * NY];
    static cufftComplex half_spectrum[NX * (NY / 2 + 1)];
    for (int i = 0; i < NX * NY; i++)
        image[i] = (float)((i * 31) % 23) * 0.125f - 1.0f;
    float *dr;
    cufftComplex *dc;
    CHECK(cudaMalloc((void **)&dr, sizeof image));
    CHECK(cudaMalloc((void **)&dc, sizeof half_spectrum));
    CHECK(cudaMemcpy(dr, image, sizeof image, cudaMemcpyHostToDevice));
    CHECK_FFT(cufftPlan2d(&plan, NX, NY, CUFFT_R2C));
    CHECK_FFT(cufftExecR2C(plan, dr, dc));
    CHECK(cudaMemcpy(half_spectrum, dc, sizeof half_spectrum, cudaMemcpyDeviceToHost));
    report("r2c 2d", (const float *)half_spectrum, 2 * NX * (NY / 2 + 1));
    CHECK_FFT(cufftDestroy(plan));

    CHECK(cudaFree(d));
    CHECK(cudaFree(dr));
    CHECK(cudaFree(dc));
    return 0;
}
