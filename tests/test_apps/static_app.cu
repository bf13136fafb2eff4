// Built with nvcc's default, the static CUDA runtime: cuwire cannot serve such a binary yet and must
// say so by name; the program then takes its own error path.
#include <cstdio>

__global__ void fill(int *p, int v) { p[threadIdx.x] = v; }

int main()
{
    int *d = nullptr;
    cudaError_t err = cudaMalloc(&d, 64 * sizeof(int));
    if (err != cudaSuccess) {
        std::printf("static_app: cudaMalloc failed: %s\n", cudaGetErrorName(err));
        return 2;
    }
    fill<<<1, 64>>>(d, 7);
    int h[64];
    err = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    std::printf("static_app: %s, h[63] = %d\n", cudaGetErrorName(err), h[63]);
    cudaFree(d);
    return err == cudaSuccess ? 0 : 2;
}
