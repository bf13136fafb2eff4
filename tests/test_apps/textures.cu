// textures: CUDA arrays (2D, 3D, layered, cubemap, mipmapped), texture objects over arrays, linear and
// pitched memory (point and linear filtering, clamped and wrapped addressing, normalized coordinates),
// surface objects read and written by a kernel, and 2D and 3D copies to and from arrays. Every result is
// checked against the host's own computation.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

__global__ void texShift2D(float *out, cudaTextureObject_t t, int w, int h, float dx) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f + dx, y + 0.5f);
}

__global__ void texNormalized2D(float *out, cudaTextureObject_t t, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, (x + 0.25f) / w + 1.0f, (y + 0.75f) / h);
}

__global__ void texRead3D(float *out, cudaTextureObject_t t, int w, int h, int d) {
    int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
    if (x < w && y < h && z < d) out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, d - z - 0.5f);
}

__global__ void texReadLayered(float *out, cudaTextureObject_t t, int w, int h, int layers) {
    int x = threadIdx.x, y = blockIdx.x, l = blockIdx.y;
    if (x < w && y < h && l < layers) out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, layers - 1 - l);
}

__global__ void texReadCube(float *out, cudaTextureObject_t t, const float4 *dirs, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = texCubemap<float>(t, dirs[i].x, dirs[i].y, dirs[i].z);
}

__global__ void texFetchLinear(int *out, cudaTextureObject_t t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<int>(t, n - 1 - i);
}

__global__ void texLod(float *out, cudaTextureObject_t t, int w, float lod) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < w) out[y * w + x] = tex2DLod<float>(t, (x + 0.5f) / w, (y + 0.5f) / w, lod);
}

__global__ void surfScale(cudaSurfaceObject_t s, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) {
        int v = surf2Dread<int>(s, x * 4, y);
        surf2Dwrite(v * 2 + y, s, x * 4, y);
    }
}

static int report(const char *what, int ok) {
    printf("%-56s %s\n", what, ok ? "OK" : "FAIL");
    return !ok;
}

static float value2d(int x, int y) { return (float)(y * 100 + x); }

static cudaTextureObject_t texture_over(cudaResourceDesc *res, cudaTextureAddressMode mode, cudaTextureFilterMode filter,
                                        int normalized) {
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = mode;
    td.filterMode = filter;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = normalized;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, res, &td, NULL));
    return t;
}

int main() {
    int failures = 0;
    const int W = 64, H = 32;
    static float h2d[H][W], out[64 * 64 * 8];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) h2d[y][x] = value2d(x, y);
    float *dout;
    CHECK(cudaMalloc(&dout, sizeof out));

    // a 2D float array: point sampling, clamped at the edge
    cudaChannelFormatDesc f1 = cudaCreateChannelDesc<float>();
    cudaArray_t a2;
    CHECK(cudaMallocArray(&a2, &f1, W, H));
    CHECK(cudaMemcpy2DToArray(a2, 0, 0, h2d, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a2;
    cudaTextureObject_t t = texture_over(&res, cudaAddressModeClamp, cudaFilterModePoint, 0);
    texShift2D<<<dim3(1, H), W>>>(dout, t, W, H, 3.0f);
    CHECK(cudaMemcpy(out, dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) ok &= out[y * W + x] == value2d(x + 3 < W ? x + 3 : W - 1, y);
    failures += report("2D array, point sampling, clamped", ok);
    CHECK(cudaDestroyTextureObject(t));

    // the same array: linear filtering, normalized coordinates, wrapped
    t = texture_over(&res, cudaAddressModeWrap, cudaFilterModeLinear, 1);
    texNormalized2D<<<dim3(1, H), W>>>(dout, t, W, H);
    CHECK(cudaMemcpy(out, dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {  // x - 0.25 between texels x - 1 and x (wrapped); y + 0.25 between y and y + 1
            int x0 = (x + W - 1) % W, y1 = (y + 1) % H;
            float top = 0.25f * value2d(x0, y) + 0.75f * value2d(x, y);
            float bottom = 0.25f * value2d(x0, y1) + 0.75f * value2d(x, y1);
            float want = 0.75f * top + 0.25f * bottom;
            ok &= fabsf(out[y * W + x] - want) <= 1e-3f * (fabsf(want) + 100.0f);
        }
    failures += report("2D array, linear filtering, normalized, wrapped", ok);
    CHECK(cudaDestroyTextureObject(t));

    // a copy back out of the array, into the middle of a larger pitched host buffer
    static float back[H + 2][W + 8];
    memset(back, 0, sizeof back);
    CHECK(cudaMemcpy2DFromArray(&back[1][4], (W + 8) * sizeof(float), a2, 2 * sizeof(float), 1, (W - 2) * sizeof(float),
                                H - 1, cudaMemcpyDeviceToHost));
    ok = back[0][4] == 0 && back[1][3] == 0;
    for (int y = 0; y < H - 1; y++)
        for (int x = 0; x < W - 2; x++) ok &= back[y + 1][x + 4] == value2d(x + 2, y + 1);
    failures += report("2D copy from an array at an offset", ok);
    cudaExtent extent;
    unsigned flags;
    cudaChannelFormatDesc got;
    CHECK(cudaArrayGetInfo(&got, &extent, &flags, a2));
    printf("array info: %zu x %zu x %zu, %d-bit float channel, flags %u\n", extent.width, extent.height, extent.depth,
           got.x, flags);

    // a 3D array, filled with cudaMemcpy3D from pitched host memory, read back the other way round
    const int X = 16, Y = 8, Z = 4;
    static float h3d[Z][Y][X];
    for (int z = 0; z < Z; z++)
        for (int y = 0; y < Y; y++)
            for (int x = 0; x < X; x++) h3d[z][y][x] = (float)(z * 1000 + y * 10 + x);
    cudaArray_t a3;
    CHECK(cudaMalloc3DArray(&a3, &f1, make_cudaExtent(X, Y, Z)));
    cudaMemcpy3DParms p3 = {};
    p3.srcPtr = make_cudaPitchedPtr(h3d, X * sizeof(float), X, Y);
    p3.dstArray = a3;
    p3.extent = make_cudaExtent(X, Y, Z);
    p3.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p3));
    res.res.array.array = a3;
    t = texture_over(&res, cudaAddressModeClamp, cudaFilterModePoint, 0);
    texRead3D<<<dim3(Y, Z), X>>>(dout, t, X, Y, Z);
    CHECK(cudaMemcpy(out, dout, X * Y * Z * sizeof(float), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int z = 0; z < Z; z++)
        for (int y = 0; y < Y; y++)
            for (int x = 0; x < X; x++) ok &= out[(z * Y + y) * X + x] == h3d[Z - 1 - z][y][x];
    failures += report("3D array by cudaMemcpy3D, tex3D", ok);
    CHECK(cudaDestroyTextureObject(t));
    static float h3back[Z][Y][X];
    cudaMemcpy3DParms q3 = {};
    q3.srcArray = a3;
    q3.srcPos = make_cudaPos(0, 1, 1);
    q3.dstPtr = make_cudaPitchedPtr(h3back, X * sizeof(float), X, Y);
    q3.extent = make_cudaExtent(X, Y - 1, Z - 1);
    q3.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&q3));
    ok = 1;
    for (int z = 0; z < Z - 1; z++)
        for (int y = 0; y < Y - 1; y++)
            for (int x = 0; x < X; x++) ok &= h3back[z][y][x] == h3d[z + 1][y + 1][x];
    failures += report("3D copy out of an array, from an offset", ok);

    // a layered 2D array: each layer its own image
    const int L = 3;
    cudaArray_t al;
    CHECK(cudaMalloc3DArray(&al, &f1, make_cudaExtent(X, Y, L), cudaArrayLayered));
    p3.dstArray = al;
    p3.extent = make_cudaExtent(X, Y, L);
    CHECK(cudaMemcpy3D(&p3));
    res.res.array.array = al;
    t = texture_over(&res, cudaAddressModeClamp, cudaFilterModePoint, 0);
    texReadLayered<<<dim3(Y, L), X>>>(dout, t, X, Y, L);
    CHECK(cudaMemcpy(out, dout, X * Y * L * sizeof(float), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int l = 0; l < L; l++)
        for (int y = 0; y < Y; y++)
            for (int x = 0; x < X; x++) ok &= out[(l * Y + y) * X + x] == h3d[L - 1 - l][y][x];
    failures += report("layered 2D array, tex2DLayered", ok);
    CHECK(cudaDestroyTextureObject(t));

    // a cubemap: six faces of 5 x 5, looked up by direction
    const int C = 5;
    static float hc[6][C][C];
    for (int f = 0; f < 6; f++)
        for (int y = 0; y < C; y++)
            for (int x = 0; x < C; x++) hc[f][y][x] = (float)(f * 100 + y * 10 + x);
    cudaArray_t ac;
    CHECK(cudaMalloc3DArray(&ac, &f1, make_cudaExtent(C, C, 6), cudaArrayCubemap));
    p3.srcPtr = make_cudaPitchedPtr(hc, C * sizeof(float), C, C);
    p3.dstArray = ac;
    p3.extent = make_cudaExtent(C, C, 6);
    CHECK(cudaMemcpy3D(&p3));
    res.res.array.array = ac;
    t = texture_over(&res, cudaAddressModeClamp, cudaFilterModePoint, 1);
    // a direction per face, and off-centre ones: (s, t) on the face is (0.3, -0.5) or the like, never on a
    // texel's edge
    const float4 dirs[8] = {{1, 0, 0, 0}, {-1, 0, 0, 0}, {0, 1, 0, 0}, {0, -1, 0, 0}, {0, 0, 1, 0}, {0, 0, -1, 0},
                            {1, 0.5f, -0.3f, 0}, {0.1f, -0.7f, -1, 0}};
    const int want_cube[8] = {22, 122, 222, 322, 422, 522, 13, 542};
    float4 *ddirs;
    CHECK(cudaMalloc(&ddirs, sizeof dirs));
    CHECK(cudaMemcpy(ddirs, dirs, sizeof dirs, cudaMemcpyHostToDevice));
    texReadCube<<<1, 8>>>(dout, t, ddirs, 8);
    CHECK(cudaMemcpy(out, dout, 8 * sizeof(float), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int i = 0; i < 8; i++) ok &= out[i] == (float)want_cube[i];
    failures += report("cubemap, texCubemap", ok);
    if (!ok)
        for (int i = 0; i < 8; i++) printf("  direction %d: %g (expected %d)\n", i, out[i], want_cube[i]);
    CHECK(cudaDestroyTextureObject(t));

    // a texture over linear device memory: tex1Dfetch
    const int N = 1000;
    static int hlin[N], iout[N];
    for (int i = 0; i < N; i++) hlin[i] = i * 7 - 300;
    int *dlin;
    CHECK(cudaMalloc(&dlin, N * sizeof(int)));
    CHECK(cudaMemcpy(dlin, hlin, N * sizeof(int), cudaMemcpyHostToDevice));
    cudaResourceDesc lin = {};
    lin.resType = cudaResourceTypeLinear;
    lin.res.linear.devPtr = dlin;
    lin.res.linear.desc = cudaCreateChannelDesc<int>();
    lin.res.linear.sizeInBytes = N * sizeof(int);
    t = texture_over(&lin, cudaAddressModeClamp, cudaFilterModePoint, 0);
    texFetchLinear<<<(N + 255) / 256, 256>>>((int *)dout, t, N);
    CHECK(cudaMemcpy(iout, dout, N * sizeof(int), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int i = 0; i < N; i++) ok &= iout[i] == hlin[N - 1 - i];
    failures += report("linear memory, tex1Dfetch", ok);
    cudaResourceDesc asked;
    CHECK(cudaGetTextureObjectResourceDesc(&asked, t));
    failures += report("resource read back from the texture object",
                       asked.resType == cudaResourceTypeLinear && asked.res.linear.devPtr == dlin);
    CHECK(cudaDestroyTextureObject(t));

    // a texture over pitched device memory
    float *dp;
    size_t pitch;
    CHECK(cudaMallocPitch(&dp, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(dp, pitch, h2d, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc pr = {};
    pr.resType = cudaResourceTypePitch2D;
    pr.res.pitch2D.devPtr = dp;
    pr.res.pitch2D.desc = f1;
    pr.res.pitch2D.width = W;
    pr.res.pitch2D.height = H;
    pr.res.pitch2D.pitchInBytes = pitch;
    t = texture_over(&pr, cudaAddressModeClamp, cudaFilterModePoint, 0);
    texShift2D<<<dim3(1, H), W>>>(dout, t, W, H, -2.0f);
    CHECK(cudaMemcpy(out, dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) ok &= out[y * W + x] == value2d(x >= 2 ? x - 2 : 0, y);
    failures += report("pitched memory, point sampling, clamped", ok);
    CHECK(cudaDestroyTextureObject(t));

    // a surface: a kernel reads each int and writes it back changed
    cudaChannelFormatDesc i1 = cudaCreateChannelDesc<int>();
    cudaArray_t as;
    CHECK(cudaMallocArray(&as, &i1, X, Y, cudaArraySurfaceLoadStore));
    static int hs[Y][X], hsback[Y][X];
    for (int y = 0; y < Y; y++)
        for (int x = 0; x < X; x++) hs[y][x] = y * X + x;
    CHECK(cudaMemcpy2DToArray(as, 0, 0, hs, X * sizeof(int), X * sizeof(int), Y, cudaMemcpyHostToDevice));
    cudaResourceDesc sr = {};
    sr.resType = cudaResourceTypeArray;
    sr.res.array.array = as;
    cudaSurfaceObject_t surf;
    CHECK(cudaCreateSurfaceObject(&surf, &sr));
    surfScale<<<Y, X>>>(surf, X, Y);
    CHECK(cudaMemcpy2DFromArray(hsback, X * sizeof(int), as, 0, 0, X * sizeof(int), Y, cudaMemcpyDeviceToHost));
    ok = 1;
    for (int y = 0; y < Y; y++)
        for (int x = 0; x < X; x++) ok &= hsback[y][x] == hs[y][x] * 2 + y;
    failures += report("surface read and written by a kernel", ok);
    CHECK(cudaDestroySurfaceObject(surf));

    // a mipmapped array: level 1 filled and sampled with tex2DLod
    const int M = 16;
    cudaMipmappedArray_t mm;
    CHECK(cudaMallocMipmappedArray(&mm, &f1, make_cudaExtent(M, M, 0), 3));
    cudaArray_t level1;
    CHECK(cudaGetMipmappedArrayLevel(&level1, mm, 1));
    static float hm[M / 2][M / 2];
    for (int y = 0; y < M / 2; y++)
        for (int x = 0; x < M / 2; x++) hm[y][x] = (float)(y * 8 + x) + 0.5f;
    CHECK(cudaMemcpy2DToArray(level1, 0, 0, hm, M / 2 * sizeof(float), M / 2 * sizeof(float), M / 2,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc mr = {};
    mr.resType = cudaResourceTypeMipmappedArray;
    mr.res.mipmap.mipmap = mm;
    cudaTextureDesc md = {};
    md.addressMode[0] = md.addressMode[1] = cudaAddressModeClamp;
    md.filterMode = cudaFilterModePoint;
    md.mipmapFilterMode = cudaFilterModePoint;
    md.readMode = cudaReadModeElementType;
    md.normalizedCoords = 1;
    md.maxMipmapLevelClamp = 2;
    CHECK(cudaCreateTextureObject(&t, &mr, &md, NULL));
    texLod<<<M / 2, M / 2>>>(dout, t, M / 2, 1.0f);
    CHECK(cudaMemcpy(out, dout, M / 2 * M / 2 * sizeof(float), cudaMemcpyDeviceToHost));
    ok = 1;
    for (int y = 0; y < M / 2; y++)
        for (int x = 0; x < M / 2; x++) ok &= out[y * (M / 2) + x] == hm[y][x];
    failures += report("mipmapped array, level 1, tex2DLod", ok);
    CHECK(cudaDestroyTextureObject(t));

    CHECK(cudaFreeMipmappedArray(mm));
    CHECK(cudaFreeArray(as));
    CHECK(cudaFreeArray(ac));
    CHECK(cudaFreeArray(al));
    CHECK(cudaFreeArray(a3));
    CHECK(cudaFreeArray(a2));
    CHECK(cudaFree(dp));
    CHECK(cudaFree(dlin));
    CHECK(cudaFree(ddirs));
    CHECK(cudaFree(dout));
    printf("textures: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
