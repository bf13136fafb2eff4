// stream_kernels.h: the kernels several test apps share (streams, graphs, graph_nodes, stream_attributes,
// occupancy), kept here once. The emulated device runs them by their names (cuwire/emulated/kernels.py).
#pragma once

__global__ void streamFill(int *p, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + (i & 15);
}

__global__ void streamScaleAdd(int *dst, const int *src, int mul, int add, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] * mul + add;
}

__global__ void streamAddInto(int *dst, const int *src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
