/* cuwire client: tensor maps the server's driver encoded, kept by their arguments.
 *
 * cuTensorMapEncode* writes 128 bytes on the host from its arguments alone (the device address among them):
 * the same arguments encode the same map. XLA encodes a kernel's maps before each of its launches, the
 * same maps run after run (its buffers keep their addresses), so an encode whose arguments the client saw
 * answered is answered here, with the bytes the server's driver gave; a new one goes to the server
 * (annotations `fast` and `after`). Only maps the driver encoded are kept, per context (a device of another
 * architecture may encode otherwise), at most MOST of them: past that, encodes go to the server as before.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cuda_api.h"
#include "runtime.h"
#include "table.h"

enum { TILED = 1, IM2COL, IM2COL_WIDE }; /* which encode a kept map is of (its key's first word) */
#define MAP_BYTES 128
#define ARGS_MOST 256 /* bytes of arguments of the longest encode (rank 5, im2col): about 200 */
#define MOST (1u << 14)

struct kept {
    uint64_t key[3];           /* which encode, the context, a hash */
    uint32_t length;           /* of args */
    uint8_t args[ARGS_MOST];   /* compared whole: a hash alone is no proof */
    uint8_t map[MAP_BYTES];
};
static cw_table kept = CW_TABLE(struct kept, 3, MOST);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* An encode's arguments, in one buffer: each scalar and each array the rank sizes (checked first). */
struct args {
    uint8_t bytes[ARGS_MOST];
    uint32_t length;
};

static void add(struct args *a, const void *p, size_t n)
{
    if (n == 0 || a->length == UINT32_MAX)
        return; /* (a rank-1 map's strides: none, and may be NULL) */
    if (a->length + n > sizeof a->bytes) {
        a->length = UINT32_MAX; /* (cannot happen within rank 5: then nothing is kept) */
        return;
    }
    memcpy(a->bytes + a->length, p, n);
    a->length += (uint32_t)n;
}
#define ADD(a, x) add(a, &(x), sizeof(x))

static void key_of(uint64_t which, const struct args *a, uint64_t key[3])
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < a->length; i++)
        h = (h ^ a->bytes[i]) * 1099511628211ull;
    key[0] = which, key[1] = cuwire_current_context(), key[2] = h;
}

/* CUDA_SUCCESS with the kept map written, or -1 (the server is asked). */
static int answer(uint64_t which, const struct args *a, CUtensorMap *map)
{
    uint64_t key[3];
    if (a->length == UINT32_MAX)
        return -1;
    key_of(which, a, key);
    pthread_mutex_lock(&lock);
    struct kept *k = cw_table_find(&kept, key);
    int found = k && k->length == a->length && memcmp(k->args, a->bytes, a->length) == 0;
    if (found)
        memcpy(map, k->map, MAP_BYTES);
    pthread_mutex_unlock(&lock);
    return found ? CUDA_SUCCESS : -1;
}

static void keep(uint64_t which, const struct args *a, const CUtensorMap *map)
{
    uint64_t key[3];
    if (a->length == UINT32_MAX)
        return;
    key_of(which, a, key);
    pthread_mutex_lock(&lock);
    struct kept *k = cw_table_put(&kept, key);
    if (k) {
        k->length = a->length;
        memcpy(k->args, a->bytes, a->length);
        memcpy(k->map, map, MAP_BYTES);
    }
    pthread_mutex_unlock(&lock);
}

/* The rank says how long the arrays the call reads are, so it is checked (the driver's limits: 1 to 5
 * dimensions, im2col 3 to 5), and the arrays with it, before any is read: CUDA_ERROR_INVALID_VALUE, as the
 * driver answers, or -1 to go on. */
static int tensor_map_shape(const CUtensorMap *map, cuuint32_t rank, cuuint32_t least, const void *dims,
                            const void *strides, const void *element_strides)
{
    if (!map || rank < least || rank > 5 || !dims || !element_strides || (rank > 1 && !strides))
        return CUDA_ERROR_INVALID_VALUE;
    return -1;
}

/* The arguments every encode has: the type, the rank, the address, the shape and strides. */
static void common(struct args *a, CUtensorMapDataType type, cuuint32_t rank, void *address, const cuuint64_t *dims,
                   const cuuint64_t *strides, const cuuint32_t *element_strides)
{
    uint64_t at = (uint64_t)(uintptr_t)address;
    ADD(a, type), ADD(a, rank), ADD(a, at);
    add(a, dims, rank * sizeof *dims);
    add(a, strides, (rank - 1) * sizeof *strides);
    add(a, element_strides, rank * sizeof *element_strides);
}

static void tiled_args(struct args *a, CUtensorMapDataType type, cuuint32_t rank, void *address,
                       const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                       const cuuint32_t *element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                       CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    common(a, type, rank, address, dims, strides, element_strides);
    add(a, box, rank * sizeof *box);
    ADD(a, interleave), ADD(a, swizzle), ADD(a, l2), ADD(a, oob);
}

int cuwire_check_tensor_map_tiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                  void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                  const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                  CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    int bad = boxDim ? tensor_map_shape(tensorMap, tensorRank, 1, globalDim, globalStrides, elementStrides)
                     : CUDA_ERROR_INVALID_VALUE;
    if (bad >= 0)
        return bad;
    struct args a = {.length = 0};
    tiled_args(&a, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim, elementStrides,
               interleave, swizzle, l2Promotion, oobFill);
    return answer(TILED, &a, tensorMap);
}

void cuwire_keep_tensor_map_tiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                  void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                  const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                  CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    struct args a = {.length = 0};
    tiled_args(&a, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim, elementStrides,
               interleave, swizzle, l2Promotion, oobFill);
    keep(TILED, &a, tensorMap);
}

static void im2col_args(struct args *a, CUtensorMapDataType type, cuuint32_t rank, void *address,
                        const cuuint64_t *dims, const cuuint64_t *strides, const int *lower, const int *upper,
                        cuuint32_t channels, cuuint32_t pixels, const cuuint32_t *element_strides,
                        CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                        CUtensorMapFloatOOBfill oob)
{
    common(a, type, rank, address, dims, strides, element_strides);
    add(a, lower, (rank - 2) * sizeof *lower);
    add(a, upper, (rank - 2) * sizeof *upper);
    ADD(a, channels), ADD(a, pixels), ADD(a, interleave), ADD(a, swizzle), ADD(a, l2), ADD(a, oob);
}

int cuwire_check_tensor_map_im2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                   void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                   const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                   cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                   const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                   CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                   CUtensorMapFloatOOBfill oobFill)
{
    if (!pixelBoxLowerCorner || !pixelBoxUpperCorner)
        return CUDA_ERROR_INVALID_VALUE;
    int bad = tensor_map_shape(tensorMap, tensorRank, 3, globalDim, globalStrides, elementStrides);
    if (bad >= 0)
        return bad;
    struct args a = {.length = 0};
    im2col_args(&a, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, pixelBoxLowerCorner,
                pixelBoxUpperCorner, channelsPerPixel, pixelsPerColumn, elementStrides, interleave, swizzle,
                l2Promotion, oobFill);
    return answer(IM2COL, &a, tensorMap);
}

void cuwire_keep_tensor_map_im2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                   void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                   const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                   cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                   const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                   CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                   CUtensorMapFloatOOBfill oobFill)
{
    struct args a = {.length = 0};
    im2col_args(&a, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, pixelBoxLowerCorner,
                pixelBoxUpperCorner, channelsPerPixel, pixelsPerColumn, elementStrides, interleave, swizzle,
                l2Promotion, oobFill);
    keep(IM2COL, &a, tensorMap);
}

static void im2col_wide_args(struct args *a, CUtensorMapDataType type, cuuint32_t rank, void *address,
                             const cuuint64_t *dims, const cuuint64_t *strides, int lower, int upper,
                             cuuint32_t channels, cuuint32_t pixels, const cuuint32_t *element_strides,
                             CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    common(a, type, rank, address, dims, strides, element_strides);
    ADD(a, lower), ADD(a, upper), ADD(a, channels), ADD(a, pixels), ADD(a, interleave), ADD(a, mode);
    ADD(a, swizzle), ADD(a, l2), ADD(a, oob);
}

int cuwire_check_tensor_map_im2col_wide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
                                        int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
                                        cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    int bad = tensor_map_shape(tensorMap, tensorRank, 3, globalDim, globalStrides, elementStrides);
    if (bad >= 0)
        return bad;
    struct args a = {.length = 0};
    im2col_wide_args(&a, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                     pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth, channelsPerPixel, pixelsPerColumn,
                     elementStrides, interleave, mode, swizzle, l2Promotion, oobFill);
    return answer(IM2COL_WIDE, &a, tensorMap);
}

void cuwire_keep_tensor_map_im2col_wide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
                                        int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
                                        cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    struct args a = {.length = 0};
    im2col_wide_args(&a, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                     pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth, channelsPerPixel, pixelsPerColumn,
                     elementStrides, interleave, mode, swizzle, l2Promotion, oobFill);
    keep(IM2COL_WIDE, &a, tensorMap);
}

int cuwire_check_tensor_map_address(CUtensorMap *tensorMap, void *globalAddress)
{
    (void)globalAddress;
    return tensorMap ? -1 : CUDA_ERROR_INVALID_VALUE;
}
