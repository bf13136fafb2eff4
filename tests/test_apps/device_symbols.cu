// device_symbols: __device__ and __constant__ variables, cudaMemcpyToSymbol / FromSymbol (with offsets),
// cudaGetSymbolAddress, cudaGetSymbolSize, and kernels that read and write them.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

#define NSYM 16

__device__ int symArray[NSYM];
__device__ float symScale;
__constant__ int symTable[8];

// symArray[i] = symArray[i] * symTable[i % 8] + i;  out[i] = symArray[i] * symScale
__global__ void symbolsApply(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = symArray[i] * symTable[i % 8] + i;
        symArray[i] = v;
        out[i] = (float)v * symScale;
    }
}

// one thread: symScale *= 2
__global__ void symbolsDoubleScale() {
    if (blockIdx.x == 0 && threadIdx.x == 0) symScale = symScale * 2.0f;
}

// through a plain pointer (from cudaGetSymbolAddress): p[i] += add
__global__ void symbolsAddThroughPointer(int *p, int add, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += add;
}

int main() {
    int bad = 0;
    size_t sz = 0;
    CHECK(cudaGetSymbolSize(&sz, symArray));
    printf("cudaGetSymbolSize(symArray): %zu\n", sz);
    if (sz != NSYM * sizeof(int)) bad++;
    CHECK(cudaGetSymbolSize(&sz, symScale));
    printf("cudaGetSymbolSize(symScale): %zu\n", sz);
    if (sz != sizeof(float)) bad++;
    CHECK(cudaGetSymbolSize(&sz, symTable));
    printf("cudaGetSymbolSize(symTable): %zu\n", sz);
    if (sz != 8 * sizeof(int)) bad++;

    int h[NSYM];
    for (int i = 0; i < NSYM; i++) h[i] = i + 1;
    CHECK(cudaMemcpyToSymbol(symArray, h, sizeof(h)));
    int part[4] = {100, 101, 102, 103};
    CHECK(cudaMemcpyToSymbol(symArray, part, sizeof(part), 8 * sizeof(int)));  // elements 8..11
    float scale = 0.75f;
    CHECK(cudaMemcpyToSymbol(symScale, &scale, sizeof(scale)));
    int table[8] = {1, -1, 2, -2, 3, -3, 4, 5};
    CHECK(cudaMemcpyToSymbol(symTable, table, sizeof(table)));
    int tail[2] = {7, 9};
    CHECK(cudaMemcpyToSymbol(symTable, tail, sizeof(tail), 6 * sizeof(int), cudaMemcpyHostToDevice));  // 6..7

    int back[NSYM];
    CHECK(cudaMemcpyFromSymbol(back, symArray, sizeof(back)));
    printf("symArray after copies:");
    for (int i = 0; i < NSYM; i++) printf(" %d", back[i]);
    printf("\n");
    int t8[8];
    CHECK(cudaMemcpyFromSymbol(t8, symTable, sizeof(t8)));
    printf("symTable:");
    for (int i = 0; i < 8; i++) printf(" %d", t8[i]);
    printf("\n");

    int expectArr[NSYM];
    for (int i = 0; i < NSYM; i++) expectArr[i] = (i >= 8 && i < 12) ? 100 + (i - 8) : i + 1;
    int expectTable[8] = {1, -1, 2, -2, 3, -3, 7, 9};

    float *dout;
    CHECK(cudaMalloc((void **)&dout, NSYM * sizeof(float)));
    symbolsApply<<<2, 8>>>(dout, NSYM);
    CHECK(cudaGetLastError());
    float out[NSYM];
    CHECK(cudaMemcpy(out, dout, sizeof(out), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpyFromSymbol(back, symArray, sizeof(back)));
    printf("symbolsApply out:");
    for (int i = 0; i < NSYM; i++) printf(" %.2f", out[i]);
    printf("\n");
    printf("symArray after kernel:");
    for (int i = 0; i < NSYM; i++) printf(" %d", back[i]);
    printf("\n");
    for (int i = 0; i < NSYM; i++) {
        expectArr[i] = expectArr[i] * expectTable[i % 8] + i;
        if (back[i] != expectArr[i]) bad++;
        if (out[i] != (float)expectArr[i] * 0.75f) bad++;
    }

    symbolsDoubleScale<<<1, 32>>>();
    CHECK(cudaGetLastError());
    float s2 = 0;
    CHECK(cudaMemcpyFromSymbol(&s2, symScale, sizeof(s2)));
    printf("symScale after doubling: %.3f\n", s2);
    if (s2 != 1.5f) bad++;

    int *addr = nullptr;
    CHECK(cudaGetSymbolAddress((void **)&addr, symArray));
    printf("cudaGetSymbolAddress(symArray) non-null: %s\n", addr ? "yes" : "no");
    if (!addr) bad++;
    symbolsAddThroughPointer<<<1, NSYM>>>(addr + 4, 1000, 8);  // elements 4..11
    CHECK(cudaGetLastError());
    int mid[6];
    CHECK(cudaMemcpyFromSymbol(mid, symArray, sizeof(mid), 3 * sizeof(int), cudaMemcpyDeviceToHost));  // 3..8
    printf("symArray[3..8] after pointer kernel:");
    for (int i = 0; i < 6; i++) printf(" %d", mid[i]);
    printf("\n");
    for (int i = 0; i < 6; i++) {
        int j = 3 + i;
        int want = expectArr[j] + ((j >= 4 && j < 12) ? 1000 : 0);
        if (mid[i] != want) bad++;
    }
    // the symbol's address works with plain copies too
    int viaPtr[NSYM];
    CHECK(cudaMemcpy(viaPtr, addr, sizeof(viaPtr), cudaMemcpyDeviceToHost));
    long long s = 0;
    for (int i = 0; i < NSYM; i++) s += viaPtr[i];
    printf("sum via cudaMemcpy from symbol address: %lld\n", s);
    long long want = 0;
    for (int i = 0; i < NSYM; i++) want += expectArr[i] + ((i >= 4 && i < 12) ? 1000 : 0);
    if (s != want) bad++;

    int *taddr = nullptr;
    CHECK(cudaGetSymbolAddress((void **)&taddr, symTable));
    printf("cudaGetSymbolAddress(symTable) non-null: %s\n", taddr ? "yes" : "no");
    if (!taddr) bad++;

    CHECK(cudaFree(dout));
    if (bad) {
        printf("device_symbols: FAIL (%d)\n", bad);
        return 1;
    }
    printf("device_symbols: PASS\n");
    return 0;
}
