// tensor_map: Hopper's tensor memory accelerator (TMA). A 2D tiled tensor map of a float matrix, encoded
// with cuTensorMapEncodeTiled (through cudaGetDriverEntryPointByVersion, as CUTLASS gets it), passed to a
// kernel as a __grid_constant__ parameter; the kernel copies a tile into shared memory with
// cp.async.bulk.tensor and writes it out: a tile inside, one across two edges (zeros outside), and one
// after cuTensorMapReplaceAddress points the map at another matrix; then a tile through the first map
// encoded again (through cuwire, the client answers an encode it saw: client/tensor_maps.c). Then the
// driver's answers to a rank of 0, a box too large and a misaligned address.
#include <cuda.h>
#include <cuda/barrier>
#include <cudaTypedefs.h>
#include <stdio.h>

#include "check.h"

using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;

constexpr int W = 100, H = 40;          // the matrix: H rows of W floats (a row is 400 bytes)
constexpr int BOX_X = 32, BOX_Y = 8;    // the tile

__global__ void tmaTile(const __grid_constant__ CUtensorMap map, float *out, int x0, int y0) {
    __shared__ alignas(128) float tile[BOX_Y][BOX_X];
#pragma nv_diag_suppress static_var_with_dynamic_init
    __shared__ barrier bar;
    if (threadIdx.x == 0) {
        init(&bar, blockDim.x);
        cde::fence_proxy_async_shared_cta();
    }
    __syncthreads();
    barrier::arrival_token token;
    if (threadIdx.x == 0) {
        cde::cp_async_bulk_tensor_2d_global_to_shared(&tile, &map, x0, y0, bar);
        token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));
    } else {
        token = bar.arrive();
    }
    bar.wait(std::move(token));
    for (int i = threadIdx.x; i < BOX_X * BOX_Y; i += blockDim.x) out[i] = tile[i / BOX_X][i % BOX_X];
}

static float value(int x, int y, float sign) { return sign * (float)(y * 1000 + x); }

static int tile(const CUtensorMap &map, float *out, int x0, int y0, float sign, const char *what) {
    static float h[BOX_X * BOX_Y];
    tmaTile<<<1, 128>>>(map, out, x0, y0);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    int outside = 0;
    for (int i = 0; i < BOX_X * BOX_Y; i++) {
        int x = x0 + i % BOX_X, y = y0 + i / BOX_X;
        float want = x < W && y < H ? value(x, y, sign) : 0.0f;
        outside += !(x < W && y < H);
        if (h[i] != want) {
            printf("%s: FAIL at (%d, %d): %g, expected %g\n", what, x, y, h[i], want);
            return 1;
        }
    }
    printf("%s: OK (%d of %d elements outside the matrix, read as zeros)\n", what, outside, BOX_X * BOX_Y);
    return 0;
}

int main() {
    static float h[W * H];
    float *a, *b, *out;
    CHECK(cudaMalloc(&a, sizeof h));
    CHECK(cudaMalloc(&b, sizeof h));
    CHECK(cudaMalloc(&out, BOX_X * BOX_Y * sizeof(float)));
    for (int i = 0; i < W * H; i++) h[i] = value(i % W, i / W, 1.0f);
    CHECK(cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice));
    for (int i = 0; i < W * H; i++) h[i] = value(i % W, i / W, -1.0f);
    CHECK(cudaMemcpy(b, h, sizeof h, cudaMemcpyHostToDevice));

    PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    PFN_cuTensorMapReplaceAddress_v12000 replace = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found));
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", (void **)&replace, 12000, cudaEnableDefault,
                                           &found));
    CUtensorMap map;
    cuuint64_t dims[2] = {W, H}, strides[1] = {W * sizeof(float)};
    cuuint32_t box[2] = {BOX_X, BOX_Y}, element_strides[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, a, dims, strides, box, element_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    printf("cuTensorMapEncodeTiled: %d\n", (int)r);
    int failures = r != CUDA_SUCCESS;
    failures += tile(map, out, 0, 0, 1.0f, "a tile inside");
    failures += tile(map, out, 80, 36, 1.0f, "a tile across two edges");
    printf("cuTensorMapReplaceAddress: %d\n", (int)replace(&map, b));
    failures += tile(map, out, 16, 8, -1.0f, "a tile of the other matrix");
    CUtensorMap again;
    r = encode(&again, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, a, dims, strides, box, element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    printf("cuTensorMapEncodeTiled again: %d\n", (int)r);
    failures += r != CUDA_SUCCESS;
    failures += tile(again, out, 80, 36, 1.0f, "a tile through the map encoded again");

    CUtensorMap bad;
    cuuint32_t big_box[2] = {512, BOX_Y};
    printf("rank 0: %d\n", (int)encode(&bad, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 0, a, dims, strides, box,
                                       element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    printf("a box of 512: %d\n", (int)encode(&bad, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, a, dims, strides, big_box,
                                             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                             CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    printf("a misaligned address: %d\n", (int)encode(&bad, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (char *)a + 4, dims,
                                                     strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                     CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(out));
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
