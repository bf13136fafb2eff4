/* cuwire client: the driver's private export tables (cuGetExportTable), built in the program's process.
 *
 * NVIDIA's libcudart (and the runtime that cuBLAS, cuDNN and cuFFT carry inside them) asks libcuda for
 * undocumented tables of function pointers by UUID. Which tables there are, their layouts and what each
 * slot must do were learned from ZLUDA's dark_api and Lupine's driver shim, and checked against the
 * UUIDs that libcudart.so.13 contains. Each slot here answers from the client's own state or through
 * cuwire's public driver entry points (which reach the server); none touches a real libcuda.
 *
 * A slot no table here implements points at a function that names the table and slot on stderr and
 * returns CUDA_ERROR_NOT_SUPPORTED, so a caller never jumps through NULL. An unknown UUID is named once
 * and refused with CUDA_ERROR_NOT_SUPPORTED.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"
#include "runtime.h"

/* ------------------------------------------------------------------ slots nobody implemented */

/* Slot functions take no declared parameters: callers pass whatever the real slot takes, which the
 * x86-64 calling convention makes harmless for a function that ignores them. */
static CUresult unsupported_slot(const char *table, int slot)
{
    char what[96];
    snprintf(what, sizeof what, "%s slot %d", table, slot);
    cuwire_say_once_per_name("cuwire: unimplemented private driver table entry", what);
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define UNSUPPORTED(table, n) \
    static CUresult table##_##n(void) { return unsupported_slot(#table, n); }
#define SIZE_WORD(slots) ((void *)(uintptr_t)((slots) * sizeof(void *)))

/* ------------------------------------------------------------------ CUDART_INTERFACE */

/* A module from what __cudaRegisterFatBinary was given (a fatbin wrapper, a fatbin or a cubin): the
 * public cuModuleLoadData takes all three. */
static CUresult cudart_module_from_cubin(CUmodule *module, const void *image)
{
    if (!module)
        return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadData(module, image);
}

/* The ext variants carry host-variable registrations we have never seen used: refuse them by name. */
static CUresult cudart_module_from_cubin_ext1(CUmodule *module, const void *image, void *a3, void *a4,
                                              unsigned a5)
{
    if (a3 || a4 || a5)
        return unsupported_slot("CUDART_INTERFACE (extra arguments)", 6);
    return cudart_module_from_cubin(module, image);
}

static CUresult cudart_module_from_cubin_ext2(const void *image, CUmodule *module, void *a3, void *a4,
                                              unsigned a5)
{
    if (a3 || a4 || a5)
        return unsupported_slot("CUDART_INTERFACE (extra arguments)", 8);
    return cudart_module_from_cubin(module, image);
}

/* The device's primary context without retaining it: the handle cuDevicePrimaryCtxRetain returns. The
 * server's session already holds the primary context, so a retain and a release leave it as it was. */
static CUresult cudart_primary_context(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = cuDevicePrimaryCtxRetain(pctx, dev);
    if (err == CUDA_SUCCESS)
        err = cuDevicePrimaryCtxRelease_v2(dev);
    return err;
}

static void cudart_noop(size_t arg) { (void)arg; }
static CUresult cudart_load_compilers(void) { return CUDA_SUCCESS; }

UNSUPPORTED(CUDART_INTERFACE, 3)
UNSUPPORTED(CUDART_INTERFACE, 4)
UNSUPPORTED(CUDART_INTERFACE, 5)
UNSUPPORTED(CUDART_INTERFACE, 9)
UNSUPPORTED(CUDART_INTERFACE, 10)
UNSUPPORTED(CUDART_INTERFACE, 11)

static const void *const cudart_interface[13] = {
    SIZE_WORD(13),
    (void *)cudart_module_from_cubin,
    (void *)cudart_primary_context,
    (void *)CUDART_INTERFACE_3,
    (void *)CUDART_INTERFACE_4,
    (void *)CUDART_INTERFACE_5,
    (void *)cudart_module_from_cubin_ext1,
    (void *)cudart_noop,
    (void *)cudart_module_from_cubin_ext2,
    (void *)CUDART_INTERFACE_9,
    (void *)CUDART_INTERFACE_10,
    (void *)CUDART_INTERFACE_11,
    (void *)cudart_load_compilers,
};

/* ------------------------------------------------------------------ tools: no profiler attached */

static uintptr_t no_tool(void) { return 0; }

static const void *const tools_tls[3] = {SIZE_WORD(3), (void *)no_tool, (void *)no_tool};

/* Buffers the runtime reads its tool callbacks from: all zero means no tool subscribed. */
static void hooks_buffer1(void **ptr, size_t *size)
{
    static uint64_t buffer[1024];
    *ptr = buffer;
    *size = 1024;
}

static void hooks_buffer2(void **ptr, size_t *size)
{
    static uint64_t buffer[16];
    *ptr = buffer;
    *size = 14;
}

static const void *const tools_callback_hooks[7] = {
    SIZE_WORD(7),        (void *)no_tool, (void *)hooks_buffer1, (void *)no_tool, (void *)no_tool,
    (void *)no_tool, (void *)hooks_buffer2,
};

/* ------------------------------------------------------------------ context-local storage */

/* What the runtime keeps per context (its own state for each context it uses), looked up before most
 * runtime calls: kept here, never on the server. A NULL context means the calling thread's current one. */
struct cls_entry {
    CUcontext ctx;
    void *key, *value;
};

static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cls_entry *cls;
static int cls_n, cls_cap;

static CUcontext cls_context(CUcontext ctx)
{
    if (!ctx || ctx == (CUcontext)(intptr_t)-1)
        cuCtxGetCurrent(&ctx);
    return ctx;
}

static struct cls_entry *cls_find(CUcontext ctx, void *key)
{
    for (int i = 0; i < cls_n; i++)
        if (cls[i].ctx == ctx && cls[i].key == key)
            return &cls[i];
    return NULL;
}

/* The destructor is not kept: the runtime frees its own values, and a context outlives the process's
 * use of it here (the server frees the real one with the session). */
static CUresult cls_put(CUcontext ctx, void *key, void *value, void (*dtor)(CUcontext, void *, void *))
{
    (void)dtor;
    ctx = cls_context(ctx);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&cls_lock);
    struct cls_entry *e = cls_find(ctx, key);
    if (!e) {
        if (cls_n == cls_cap) {
            int cap = cls_cap ? 2 * cls_cap : 16;
            struct cls_entry *grown = realloc(cls, cap * sizeof *grown);
            if (!grown) {
                pthread_mutex_unlock(&cls_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            cls = grown, cls_cap = cap;
        }
        e = &cls[cls_n++];
        e->ctx = ctx, e->key = key;
    }
    e->value = value;
    pthread_mutex_unlock(&cls_lock);
    return CUDA_SUCCESS;
}

static CUresult cls_delete(CUcontext ctx, void *key)
{
    ctx = cls_context(ctx);
    pthread_mutex_lock(&cls_lock);
    struct cls_entry *e = cls_find(ctx, key);
    if (e)
        *e = cls[--cls_n];
    pthread_mutex_unlock(&cls_lock);
    return CUDA_SUCCESS;
}

static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
    ctx = cls_context(ctx);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&cls_lock);
    struct cls_entry *e = cls_find(ctx, key);
    if (e && value)
        *value = e->value;
    pthread_mutex_unlock(&cls_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* No size word: the table is four entries, the last NULL. */
static const void *const context_local_storage[4] = {(void *)cls_put, (void *)cls_delete, (void *)cls_get, NULL};

/* ------------------------------------------------------------------ context checks */

static CUresult context_check(CUcontext ctx, uint32_t *wrapped, const void **inner)
{
    (void)ctx, (void)inner;
    if (wrapped)
        *wrapped = 0; /* never a wrapped (interop) context */
    return CUDA_SUCCESS;
}

UNSUPPORTED(CONTEXT_CHECKS, 1)
UNSUPPORTED(CONTEXT_CHECKS, 4)
UNSUPPORTED(CONTEXT_CHECKS, 5)
UNSUPPORTED(CONTEXT_CHECKS, 6)
UNSUPPORTED(CONTEXT_CHECKS, 7)
UNSUPPORTED(CONTEXT_CHECKS, 8)
UNSUPPORTED(CONTEXT_CHECKS, 9)
UNSUPPORTED(CONTEXT_CHECKS, 10)
UNSUPPORTED(CONTEXT_CHECKS, 11)
UNSUPPORTED(CONTEXT_CHECKS, 12)
UNSUPPORTED(CONTEXT_CHECKS, 13)
UNSUPPORTED(CONTEXT_CHECKS, 14)
#define C(n) (void *)CONTEXT_CHECKS_##n

static const void *const context_checks[15] = {
    SIZE_WORD(15), C(1), (void *)context_check, (void *)no_tool, C(4), C(5), C(6), C(7), C(8), C(9), C(10), C(11),
    C(12), C(13), C(14),
};

/* ------------------------------------------------------------------ tables the runtime does not use */

UNSUPPORTED(CTX_CREATE_BYPASS, 1)
static const void *const ctx_create_bypass[2] = {SIZE_WORD(2), (void *)CTX_CREATE_BYPASS_1};

UNSUPPORTED(HEAP_ACCESS, 1)
UNSUPPORTED(HEAP_ACCESS, 2)
static const void *const heap_access[3] = {SIZE_WORD(3), (void *)HEAP_ACCESS_1, (void *)HEAP_ACCESS_2};

/* ------------------------------------------------------------------ tables the CUDA libraries use */

/* cuBLAS (cublasCreate) and cuFFT ask for these. Three slots of the first are answered as Lupine found
 * that cuBLAS needs them (lupinemachines/lupine, cuda_client.cpp); slot 7 of the second iterates the
 * functions of a module (cuBLAS and cuFFT call it after cuModuleLoadData); every other slot is named
 * when called and refused. Their sizes are the real driver's (580, CUDA
 * 13.0, measured with tests/tools/export_tables_probe.c on the H100). */
static uint64_t library_object[64];

/* 6e163fbe slot 7: the functions of a module, each reported to a callback (client/modules.py). */
static uint64_t module_functions(uint64_t ctx, uint64_t module, void *callback, void *userdata, uint64_t a4,
                                 uint64_t a5)
{
    (void)a4, (void)a5;
    if (!CUWIRE_READY())
        return 0;
    return cuwire_py_module_functions(ctx, module, callback, userdata);
}

static CUresult library_slot4(uint64_t handle, uint64_t *out)
{
    if (!out)
        return CUDA_ERROR_UNKNOWN;
    *out = handle != 0;
    return CUDA_SUCCESS;
}

static CUresult library_slot39(uint64_t a0, uint64_t a1, uint64_t *out)
{
    (void)a0;
    if (!a1 || !out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = 0;
    return CUDA_SUCCESS;
}

static CUresult library_slot51(uint64_t a0, uint64_t a1, uint64_t *out)
{
    (void)a0;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (a1 == UINT64_MAX)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (uint64_t)(uintptr_t)library_object;
    return CUDA_SUCCESS;
}

UNSUPPORTED(LIBRARY_21318C60, 1) UNSUPPORTED(LIBRARY_21318C60, 2) UNSUPPORTED(LIBRARY_21318C60, 3)
UNSUPPORTED(LIBRARY_21318C60, 5) UNSUPPORTED(LIBRARY_21318C60, 6) UNSUPPORTED(LIBRARY_21318C60, 7)
UNSUPPORTED(LIBRARY_21318C60, 8) UNSUPPORTED(LIBRARY_21318C60, 9) UNSUPPORTED(LIBRARY_21318C60, 10)
UNSUPPORTED(LIBRARY_21318C60, 11) UNSUPPORTED(LIBRARY_21318C60, 12) UNSUPPORTED(LIBRARY_21318C60, 13)
UNSUPPORTED(LIBRARY_21318C60, 14) UNSUPPORTED(LIBRARY_21318C60, 15) UNSUPPORTED(LIBRARY_21318C60, 16)
UNSUPPORTED(LIBRARY_21318C60, 17) UNSUPPORTED(LIBRARY_21318C60, 18) UNSUPPORTED(LIBRARY_21318C60, 19)
UNSUPPORTED(LIBRARY_21318C60, 20) UNSUPPORTED(LIBRARY_21318C60, 21) UNSUPPORTED(LIBRARY_21318C60, 22)
UNSUPPORTED(LIBRARY_21318C60, 23) UNSUPPORTED(LIBRARY_21318C60, 24) UNSUPPORTED(LIBRARY_21318C60, 25)
UNSUPPORTED(LIBRARY_21318C60, 26) UNSUPPORTED(LIBRARY_21318C60, 27) UNSUPPORTED(LIBRARY_21318C60, 28)
UNSUPPORTED(LIBRARY_21318C60, 29) UNSUPPORTED(LIBRARY_21318C60, 30) UNSUPPORTED(LIBRARY_21318C60, 31)
UNSUPPORTED(LIBRARY_21318C60, 32) UNSUPPORTED(LIBRARY_21318C60, 33) UNSUPPORTED(LIBRARY_21318C60, 34)
UNSUPPORTED(LIBRARY_21318C60, 35) UNSUPPORTED(LIBRARY_21318C60, 36) UNSUPPORTED(LIBRARY_21318C60, 37)
UNSUPPORTED(LIBRARY_21318C60, 38) UNSUPPORTED(LIBRARY_21318C60, 40) UNSUPPORTED(LIBRARY_21318C60, 41)
UNSUPPORTED(LIBRARY_21318C60, 42) UNSUPPORTED(LIBRARY_21318C60, 43) UNSUPPORTED(LIBRARY_21318C60, 44)
UNSUPPORTED(LIBRARY_21318C60, 45) UNSUPPORTED(LIBRARY_21318C60, 46) UNSUPPORTED(LIBRARY_21318C60, 47)
UNSUPPORTED(LIBRARY_21318C60, 48) UNSUPPORTED(LIBRARY_21318C60, 49) UNSUPPORTED(LIBRARY_21318C60, 50)
UNSUPPORTED(LIBRARY_21318C60, 52) UNSUPPORTED(LIBRARY_21318C60, 53) UNSUPPORTED(LIBRARY_21318C60, 54)
UNSUPPORTED(LIBRARY_21318C60, 55) UNSUPPORTED(LIBRARY_21318C60, 56) UNSUPPORTED(LIBRARY_21318C60, 57)
UNSUPPORTED(LIBRARY_21318C60, 58) UNSUPPORTED(LIBRARY_21318C60, 59) UNSUPPORTED(LIBRARY_21318C60, 60)
UNSUPPORTED(LIBRARY_21318C60, 61) UNSUPPORTED(LIBRARY_21318C60, 62) UNSUPPORTED(LIBRARY_21318C60, 63)
UNSUPPORTED(LIBRARY_21318C60, 64) UNSUPPORTED(LIBRARY_21318C60, 65) UNSUPPORTED(LIBRARY_21318C60, 66)
UNSUPPORTED(LIBRARY_21318C60, 67) UNSUPPORTED(LIBRARY_21318C60, 68) UNSUPPORTED(LIBRARY_21318C60, 69)
UNSUPPORTED(LIBRARY_21318C60, 70) UNSUPPORTED(LIBRARY_21318C60, 71) UNSUPPORTED(LIBRARY_21318C60, 72)
UNSUPPORTED(LIBRARY_21318C60, 73) UNSUPPORTED(LIBRARY_21318C60, 74) UNSUPPORTED(LIBRARY_21318C60, 75)
UNSUPPORTED(LIBRARY_21318C60, 76) UNSUPPORTED(LIBRARY_21318C60, 77) UNSUPPORTED(LIBRARY_21318C60, 78)
UNSUPPORTED(LIBRARY_21318C60, 79) UNSUPPORTED(LIBRARY_21318C60, 80) UNSUPPORTED(LIBRARY_21318C60, 81)
UNSUPPORTED(LIBRARY_21318C60, 82) UNSUPPORTED(LIBRARY_21318C60, 83) UNSUPPORTED(LIBRARY_21318C60, 84)
UNSUPPORTED(LIBRARY_21318C60, 85) UNSUPPORTED(LIBRARY_21318C60, 86) UNSUPPORTED(LIBRARY_21318C60, 87)
UNSUPPORTED(LIBRARY_21318C60, 88) UNSUPPORTED(LIBRARY_21318C60, 89) UNSUPPORTED(LIBRARY_21318C60, 90)
UNSUPPORTED(LIBRARY_21318C60, 91) UNSUPPORTED(LIBRARY_21318C60, 92)

static const void *const library_21318c60[93] = {
    SIZE_WORD(93), (void *)LIBRARY_21318C60_1, (void *)LIBRARY_21318C60_2, (void *)LIBRARY_21318C60_3,
    (void *)library_slot4, (void *)LIBRARY_21318C60_5, (void *)LIBRARY_21318C60_6, (void *)LIBRARY_21318C60_7,
    (void *)LIBRARY_21318C60_8, (void *)LIBRARY_21318C60_9, (void *)LIBRARY_21318C60_10, (void *)LIBRARY_21318C60_11,
    (void *)LIBRARY_21318C60_12, (void *)LIBRARY_21318C60_13, (void *)LIBRARY_21318C60_14,
    (void *)LIBRARY_21318C60_15, (void *)LIBRARY_21318C60_16, (void *)LIBRARY_21318C60_17,
    (void *)LIBRARY_21318C60_18, (void *)LIBRARY_21318C60_19, (void *)LIBRARY_21318C60_20,
    (void *)LIBRARY_21318C60_21, (void *)LIBRARY_21318C60_22, (void *)LIBRARY_21318C60_23,
    (void *)LIBRARY_21318C60_24, (void *)LIBRARY_21318C60_25, (void *)LIBRARY_21318C60_26,
    (void *)LIBRARY_21318C60_27, (void *)LIBRARY_21318C60_28, (void *)LIBRARY_21318C60_29,
    (void *)LIBRARY_21318C60_30, (void *)LIBRARY_21318C60_31, (void *)LIBRARY_21318C60_32,
    (void *)LIBRARY_21318C60_33, (void *)LIBRARY_21318C60_34, (void *)LIBRARY_21318C60_35,
    (void *)LIBRARY_21318C60_36, (void *)LIBRARY_21318C60_37, (void *)LIBRARY_21318C60_38, (void *)library_slot39,
    (void *)LIBRARY_21318C60_40, (void *)LIBRARY_21318C60_41, (void *)LIBRARY_21318C60_42,
    (void *)LIBRARY_21318C60_43, (void *)LIBRARY_21318C60_44, (void *)LIBRARY_21318C60_45,
    (void *)LIBRARY_21318C60_46, (void *)LIBRARY_21318C60_47, (void *)LIBRARY_21318C60_48,
    (void *)LIBRARY_21318C60_49, (void *)LIBRARY_21318C60_50, (void *)library_slot51, (void *)LIBRARY_21318C60_52,
    (void *)LIBRARY_21318C60_53, (void *)LIBRARY_21318C60_54, (void *)LIBRARY_21318C60_55,
    (void *)LIBRARY_21318C60_56, (void *)LIBRARY_21318C60_57, (void *)LIBRARY_21318C60_58,
    (void *)LIBRARY_21318C60_59, (void *)LIBRARY_21318C60_60, (void *)LIBRARY_21318C60_61,
    (void *)LIBRARY_21318C60_62, (void *)LIBRARY_21318C60_63, (void *)LIBRARY_21318C60_64,
    (void *)LIBRARY_21318C60_65, (void *)LIBRARY_21318C60_66, (void *)LIBRARY_21318C60_67,
    (void *)LIBRARY_21318C60_68, (void *)LIBRARY_21318C60_69, (void *)LIBRARY_21318C60_70,
    (void *)LIBRARY_21318C60_71, (void *)LIBRARY_21318C60_72, (void *)LIBRARY_21318C60_73,
    (void *)LIBRARY_21318C60_74, (void *)LIBRARY_21318C60_75, (void *)LIBRARY_21318C60_76,
    (void *)LIBRARY_21318C60_77, (void *)LIBRARY_21318C60_78, (void *)LIBRARY_21318C60_79,
    (void *)LIBRARY_21318C60_80, (void *)LIBRARY_21318C60_81, (void *)LIBRARY_21318C60_82,
    (void *)LIBRARY_21318C60_83, (void *)LIBRARY_21318C60_84, (void *)LIBRARY_21318C60_85,
    (void *)LIBRARY_21318C60_86, (void *)LIBRARY_21318C60_87, (void *)LIBRARY_21318C60_88,
    (void *)LIBRARY_21318C60_89, (void *)LIBRARY_21318C60_90, (void *)LIBRARY_21318C60_91,
    (void *)LIBRARY_21318C60_92,
};

UNSUPPORTED(LIBRARY_6E163FBE, 1) UNSUPPORTED(LIBRARY_6E163FBE, 2) UNSUPPORTED(LIBRARY_6E163FBE, 3)
UNSUPPORTED(LIBRARY_6E163FBE, 4) UNSUPPORTED(LIBRARY_6E163FBE, 5) UNSUPPORTED(LIBRARY_6E163FBE, 6)
UNSUPPORTED(LIBRARY_6E163FBE, 8) UNSUPPORTED(LIBRARY_6E163FBE, 9)
UNSUPPORTED(LIBRARY_6E163FBE, 10) UNSUPPORTED(LIBRARY_6E163FBE, 11) UNSUPPORTED(LIBRARY_6E163FBE, 12)
UNSUPPORTED(LIBRARY_6E163FBE, 13) UNSUPPORTED(LIBRARY_6E163FBE, 14) UNSUPPORTED(LIBRARY_6E163FBE, 15)
UNSUPPORTED(LIBRARY_6E163FBE, 16) UNSUPPORTED(LIBRARY_6E163FBE, 17) UNSUPPORTED(LIBRARY_6E163FBE, 18)
UNSUPPORTED(LIBRARY_6E163FBE, 19) UNSUPPORTED(LIBRARY_6E163FBE, 20) UNSUPPORTED(LIBRARY_6E163FBE, 21)
UNSUPPORTED(LIBRARY_6E163FBE, 22) UNSUPPORTED(LIBRARY_6E163FBE, 23) UNSUPPORTED(LIBRARY_6E163FBE, 24)
UNSUPPORTED(LIBRARY_6E163FBE, 25) UNSUPPORTED(LIBRARY_6E163FBE, 26) UNSUPPORTED(LIBRARY_6E163FBE, 27)
UNSUPPORTED(LIBRARY_6E163FBE, 28) UNSUPPORTED(LIBRARY_6E163FBE, 29) UNSUPPORTED(LIBRARY_6E163FBE, 30)
UNSUPPORTED(LIBRARY_6E163FBE, 31) UNSUPPORTED(LIBRARY_6E163FBE, 32) UNSUPPORTED(LIBRARY_6E163FBE, 33)
UNSUPPORTED(LIBRARY_6E163FBE, 34) UNSUPPORTED(LIBRARY_6E163FBE, 35) UNSUPPORTED(LIBRARY_6E163FBE, 36)
UNSUPPORTED(LIBRARY_6E163FBE, 37) UNSUPPORTED(LIBRARY_6E163FBE, 38) UNSUPPORTED(LIBRARY_6E163FBE, 39)
UNSUPPORTED(LIBRARY_6E163FBE, 40) UNSUPPORTED(LIBRARY_6E163FBE, 41) UNSUPPORTED(LIBRARY_6E163FBE, 42)
UNSUPPORTED(LIBRARY_6E163FBE, 43) UNSUPPORTED(LIBRARY_6E163FBE, 44) UNSUPPORTED(LIBRARY_6E163FBE, 45)
UNSUPPORTED(LIBRARY_6E163FBE, 46) UNSUPPORTED(LIBRARY_6E163FBE, 47) UNSUPPORTED(LIBRARY_6E163FBE, 48)
UNSUPPORTED(LIBRARY_6E163FBE, 49) UNSUPPORTED(LIBRARY_6E163FBE, 50) UNSUPPORTED(LIBRARY_6E163FBE, 51)
UNSUPPORTED(LIBRARY_6E163FBE, 52) UNSUPPORTED(LIBRARY_6E163FBE, 53) UNSUPPORTED(LIBRARY_6E163FBE, 54)
UNSUPPORTED(LIBRARY_6E163FBE, 55) UNSUPPORTED(LIBRARY_6E163FBE, 56) UNSUPPORTED(LIBRARY_6E163FBE, 57)
UNSUPPORTED(LIBRARY_6E163FBE, 58) UNSUPPORTED(LIBRARY_6E163FBE, 59) UNSUPPORTED(LIBRARY_6E163FBE, 60)
UNSUPPORTED(LIBRARY_6E163FBE, 61) UNSUPPORTED(LIBRARY_6E163FBE, 62) UNSUPPORTED(LIBRARY_6E163FBE, 63)
UNSUPPORTED(LIBRARY_6E163FBE, 64) UNSUPPORTED(LIBRARY_6E163FBE, 65) UNSUPPORTED(LIBRARY_6E163FBE, 66)
UNSUPPORTED(LIBRARY_6E163FBE, 67) UNSUPPORTED(LIBRARY_6E163FBE, 68) UNSUPPORTED(LIBRARY_6E163FBE, 69)
UNSUPPORTED(LIBRARY_6E163FBE, 70) UNSUPPORTED(LIBRARY_6E163FBE, 71) UNSUPPORTED(LIBRARY_6E163FBE, 72)
UNSUPPORTED(LIBRARY_6E163FBE, 73) UNSUPPORTED(LIBRARY_6E163FBE, 74) UNSUPPORTED(LIBRARY_6E163FBE, 75)
UNSUPPORTED(LIBRARY_6E163FBE, 76) UNSUPPORTED(LIBRARY_6E163FBE, 77) UNSUPPORTED(LIBRARY_6E163FBE, 78)
UNSUPPORTED(LIBRARY_6E163FBE, 79) UNSUPPORTED(LIBRARY_6E163FBE, 80) UNSUPPORTED(LIBRARY_6E163FBE, 81)
UNSUPPORTED(LIBRARY_6E163FBE, 82) UNSUPPORTED(LIBRARY_6E163FBE, 83) UNSUPPORTED(LIBRARY_6E163FBE, 84)
UNSUPPORTED(LIBRARY_6E163FBE, 85) UNSUPPORTED(LIBRARY_6E163FBE, 86) UNSUPPORTED(LIBRARY_6E163FBE, 87)
UNSUPPORTED(LIBRARY_6E163FBE, 88) UNSUPPORTED(LIBRARY_6E163FBE, 89) UNSUPPORTED(LIBRARY_6E163FBE, 90)
UNSUPPORTED(LIBRARY_6E163FBE, 91) UNSUPPORTED(LIBRARY_6E163FBE, 92) UNSUPPORTED(LIBRARY_6E163FBE, 93)
UNSUPPORTED(LIBRARY_6E163FBE, 94) UNSUPPORTED(LIBRARY_6E163FBE, 95) UNSUPPORTED(LIBRARY_6E163FBE, 96)
UNSUPPORTED(LIBRARY_6E163FBE, 97) UNSUPPORTED(LIBRARY_6E163FBE, 98)

static const void *const library_6e163fbe[99] = {
    SIZE_WORD(99), (void *)LIBRARY_6E163FBE_1, (void *)LIBRARY_6E163FBE_2, (void *)LIBRARY_6E163FBE_3,
    (void *)LIBRARY_6E163FBE_4, (void *)LIBRARY_6E163FBE_5, (void *)LIBRARY_6E163FBE_6, (void *)module_functions,
    (void *)LIBRARY_6E163FBE_8, (void *)LIBRARY_6E163FBE_9, (void *)LIBRARY_6E163FBE_10, (void *)LIBRARY_6E163FBE_11,
    (void *)LIBRARY_6E163FBE_12, (void *)LIBRARY_6E163FBE_13, (void *)LIBRARY_6E163FBE_14,
    (void *)LIBRARY_6E163FBE_15, (void *)LIBRARY_6E163FBE_16, (void *)LIBRARY_6E163FBE_17,
    (void *)LIBRARY_6E163FBE_18, (void *)LIBRARY_6E163FBE_19, (void *)LIBRARY_6E163FBE_20,
    (void *)LIBRARY_6E163FBE_21, (void *)LIBRARY_6E163FBE_22, (void *)LIBRARY_6E163FBE_23,
    (void *)LIBRARY_6E163FBE_24, (void *)LIBRARY_6E163FBE_25, (void *)LIBRARY_6E163FBE_26,
    (void *)LIBRARY_6E163FBE_27, (void *)LIBRARY_6E163FBE_28, (void *)LIBRARY_6E163FBE_29,
    (void *)LIBRARY_6E163FBE_30, (void *)LIBRARY_6E163FBE_31, (void *)LIBRARY_6E163FBE_32,
    (void *)LIBRARY_6E163FBE_33, (void *)LIBRARY_6E163FBE_34, (void *)LIBRARY_6E163FBE_35,
    (void *)LIBRARY_6E163FBE_36, (void *)LIBRARY_6E163FBE_37, (void *)LIBRARY_6E163FBE_38,
    (void *)LIBRARY_6E163FBE_39, (void *)LIBRARY_6E163FBE_40, (void *)LIBRARY_6E163FBE_41,
    (void *)LIBRARY_6E163FBE_42, (void *)LIBRARY_6E163FBE_43, (void *)LIBRARY_6E163FBE_44,
    (void *)LIBRARY_6E163FBE_45, (void *)LIBRARY_6E163FBE_46, (void *)LIBRARY_6E163FBE_47,
    (void *)LIBRARY_6E163FBE_48, (void *)LIBRARY_6E163FBE_49, (void *)LIBRARY_6E163FBE_50,
    (void *)LIBRARY_6E163FBE_51, (void *)LIBRARY_6E163FBE_52, (void *)LIBRARY_6E163FBE_53,
    (void *)LIBRARY_6E163FBE_54, (void *)LIBRARY_6E163FBE_55, (void *)LIBRARY_6E163FBE_56,
    (void *)LIBRARY_6E163FBE_57, (void *)LIBRARY_6E163FBE_58, (void *)LIBRARY_6E163FBE_59,
    (void *)LIBRARY_6E163FBE_60, (void *)LIBRARY_6E163FBE_61, (void *)LIBRARY_6E163FBE_62,
    (void *)LIBRARY_6E163FBE_63, (void *)LIBRARY_6E163FBE_64, (void *)LIBRARY_6E163FBE_65,
    (void *)LIBRARY_6E163FBE_66, (void *)LIBRARY_6E163FBE_67, (void *)LIBRARY_6E163FBE_68,
    (void *)LIBRARY_6E163FBE_69, (void *)LIBRARY_6E163FBE_70, (void *)LIBRARY_6E163FBE_71,
    (void *)LIBRARY_6E163FBE_72, (void *)LIBRARY_6E163FBE_73, (void *)LIBRARY_6E163FBE_74,
    (void *)LIBRARY_6E163FBE_75, (void *)LIBRARY_6E163FBE_76, (void *)LIBRARY_6E163FBE_77,
    (void *)LIBRARY_6E163FBE_78, (void *)LIBRARY_6E163FBE_79, (void *)LIBRARY_6E163FBE_80,
    (void *)LIBRARY_6E163FBE_81, (void *)LIBRARY_6E163FBE_82, (void *)LIBRARY_6E163FBE_83,
    (void *)LIBRARY_6E163FBE_84, (void *)LIBRARY_6E163FBE_85, (void *)LIBRARY_6E163FBE_86,
    (void *)LIBRARY_6E163FBE_87, (void *)LIBRARY_6E163FBE_88, (void *)LIBRARY_6E163FBE_89,
    (void *)LIBRARY_6E163FBE_90, (void *)LIBRARY_6E163FBE_91, (void *)LIBRARY_6E163FBE_92,
    (void *)LIBRARY_6E163FBE_93, (void *)LIBRARY_6E163FBE_94, (void *)LIBRARY_6E163FBE_95,
    (void *)LIBRARY_6E163FBE_96, (void *)LIBRARY_6E163FBE_97, (void *)LIBRARY_6E163FBE_98,
};

UNSUPPORTED(LIBRARY_69A28E9F, 1) UNSUPPORTED(LIBRARY_69A28E9F, 2) UNSUPPORTED(LIBRARY_69A28E9F, 3)
UNSUPPORTED(LIBRARY_69A28E9F, 4) UNSUPPORTED(LIBRARY_69A28E9F, 5) UNSUPPORTED(LIBRARY_69A28E9F, 6)
UNSUPPORTED(LIBRARY_69A28E9F, 7) UNSUPPORTED(LIBRARY_69A28E9F, 8) UNSUPPORTED(LIBRARY_69A28E9F, 9)
UNSUPPORTED(LIBRARY_69A28E9F, 10) UNSUPPORTED(LIBRARY_69A28E9F, 11) UNSUPPORTED(LIBRARY_69A28E9F, 12)
UNSUPPORTED(LIBRARY_69A28E9F, 13) UNSUPPORTED(LIBRARY_69A28E9F, 14) UNSUPPORTED(LIBRARY_69A28E9F, 15)
UNSUPPORTED(LIBRARY_69A28E9F, 16) UNSUPPORTED(LIBRARY_69A28E9F, 17) UNSUPPORTED(LIBRARY_69A28E9F, 18)
UNSUPPORTED(LIBRARY_69A28E9F, 19) UNSUPPORTED(LIBRARY_69A28E9F, 20) UNSUPPORTED(LIBRARY_69A28E9F, 21)
UNSUPPORTED(LIBRARY_69A28E9F, 22) UNSUPPORTED(LIBRARY_69A28E9F, 23) UNSUPPORTED(LIBRARY_69A28E9F, 24)
UNSUPPORTED(LIBRARY_69A28E9F, 25) UNSUPPORTED(LIBRARY_69A28E9F, 26) UNSUPPORTED(LIBRARY_69A28E9F, 27)
UNSUPPORTED(LIBRARY_69A28E9F, 28) UNSUPPORTED(LIBRARY_69A28E9F, 29) UNSUPPORTED(LIBRARY_69A28E9F, 30)
UNSUPPORTED(LIBRARY_69A28E9F, 31) UNSUPPORTED(LIBRARY_69A28E9F, 32) UNSUPPORTED(LIBRARY_69A28E9F, 33)

static const void *const library_69a28e9f[34] = {
    SIZE_WORD(34), (void *)LIBRARY_69A28E9F_1, (void *)LIBRARY_69A28E9F_2, (void *)LIBRARY_69A28E9F_3,
    (void *)LIBRARY_69A28E9F_4, (void *)LIBRARY_69A28E9F_5, (void *)LIBRARY_69A28E9F_6, (void *)LIBRARY_69A28E9F_7,
    (void *)LIBRARY_69A28E9F_8, (void *)LIBRARY_69A28E9F_9, (void *)LIBRARY_69A28E9F_10, (void *)LIBRARY_69A28E9F_11,
    (void *)LIBRARY_69A28E9F_12, (void *)LIBRARY_69A28E9F_13, (void *)LIBRARY_69A28E9F_14,
    (void *)LIBRARY_69A28E9F_15, (void *)LIBRARY_69A28E9F_16, (void *)LIBRARY_69A28E9F_17,
    (void *)LIBRARY_69A28E9F_18, (void *)LIBRARY_69A28E9F_19, (void *)LIBRARY_69A28E9F_20,
    (void *)LIBRARY_69A28E9F_21, (void *)LIBRARY_69A28E9F_22, (void *)LIBRARY_69A28E9F_23,
    (void *)LIBRARY_69A28E9F_24, (void *)LIBRARY_69A28E9F_25, (void *)LIBRARY_69A28E9F_26,
    (void *)LIBRARY_69A28E9F_27, (void *)LIBRARY_69A28E9F_28, (void *)LIBRARY_69A28E9F_29,
    (void *)LIBRARY_69A28E9F_30, (void *)LIBRARY_69A28E9F_31, (void *)LIBRARY_69A28E9F_32,
    (void *)LIBRARY_69A28E9F_33,
};

/* ------------------------------------------------------------------ integrity check */

/* The runtime proves it talks to NVIDIA's driver: it hashes what the driver told it (version, devices)
 * with the addresses of the tables it was given, and compares with the driver's answer. The hash is
 * HMAC over MD2 (RFC 2104, RFC 1319) with a fixed key; a wrong answer makes every runtime call fail
 * with cudaErrorSoftwareValidityNotEstablished. */
static const uint8_t MD2_S[256] = {
    0x29, 0x2E, 0x43, 0xC9, 0xA2, 0xD8, 0x7C, 0x01, 0x3D, 0x36, 0x54, 0xA1, 0xEC, 0xF0, 0x06, 0x13, 0x62, 0xA7, 0x05,
    0xF3, 0xC0, 0xC7, 0x73, 0x8C, 0x98, 0x93, 0x2B, 0xD9, 0xBC, 0x4C, 0x82, 0xCA, 0x1E, 0x9B, 0x57, 0x3C, 0xFD, 0xD4,
    0xE0, 0x16, 0x67, 0x42, 0x6F, 0x18, 0x8A, 0x17, 0xE5, 0x12, 0xBE, 0x4E, 0xC4, 0xD6, 0xDA, 0x9E, 0xDE, 0x49, 0xA0,
    0xFB, 0xF5, 0x8E, 0xBB, 0x2F, 0xEE, 0x7A, 0xA9, 0x68, 0x79, 0x91, 0x15, 0xB2, 0x07, 0x3F, 0x94, 0xC2, 0x10, 0x89,
    0x0B, 0x22, 0x5F, 0x21, 0x80, 0x7F, 0x5D, 0x9A, 0x5A, 0x90, 0x32, 0x27, 0x35, 0x3E, 0xCC, 0xE7, 0xBF, 0xF7, 0x97,
    0x03, 0xFF, 0x19, 0x30, 0xB3, 0x48, 0xA5, 0xB5, 0xD1, 0xD7, 0x5E, 0x92, 0x2A, 0xAC, 0x56, 0xAA, 0xC6, 0x4F, 0xB8,
    0x38, 0xD2, 0x96, 0xA4, 0x7D, 0xB6, 0x76, 0xFC, 0x6B, 0xE2, 0x9C, 0x74, 0x04, 0xF1, 0x45, 0x9D, 0x70, 0x59, 0x64,
    0x71, 0x87, 0x20, 0x86, 0x5B, 0xCF, 0x65, 0xE6, 0x2D, 0xA8, 0x02, 0x1B, 0x60, 0x25, 0xAD, 0xAE, 0xB0, 0xB9, 0xF6,
    0x1C, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7E, 0x0F, 0x55, 0x47, 0xA3, 0x23, 0xDD, 0x51, 0xAF, 0x3A, 0xC3, 0x5C, 0xF9,
    0xCE, 0xBA, 0xC5, 0xEA, 0x26, 0x2C, 0x53, 0x0D, 0x6E, 0x85, 0x28, 0x84, 0x09, 0xD3, 0xDF, 0xCD, 0xF4, 0x41, 0x81,
    0x4D, 0x52, 0x6A, 0xDC, 0x37, 0xC8, 0x6C, 0xC1, 0xAB, 0xFA, 0x24, 0xE1, 0x7B, 0x08, 0x0C, 0xBD, 0xB1, 0x4A, 0x78,
    0x88, 0x95, 0x8B, 0xE3, 0x63, 0xE8, 0x6D, 0xE9, 0xCB, 0xD5, 0xFE, 0x3B, 0x00, 0x1D, 0x39, 0xF2, 0xEF, 0xB7, 0x0E,
    0x66, 0x58, 0xD0, 0xE4, 0xA6, 0x77, 0x72, 0xF8, 0xEB, 0x75, 0x4B, 0x0A, 0x31, 0x44, 0x50, 0xB4, 0x8F, 0xED, 0x1F,
    0x1A, 0xDB, 0x99, 0x8D, 0x33, 0x9F, 0x11, 0x83, 0x14};
static const uint8_t INTEGRITY_KEY[16] = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                          0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};

struct md2 {
    uint8_t x[48], checksum[16], n, last;
};

static void md2_byte(struct md2 *s, uint8_t b)
{
    s->x[16 + s->n] = b;
    s->x[32 + s->n] = s->x[s->n] ^ b;
    s->last = (s->checksum[s->n] ^= MD2_S[b ^ s->last]);
    if (++s->n < 16)
        return;
    s->n = 0;
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = (s->x[k] ^= MD2_S[t]);
        t = (uint8_t)(t + round);
    }
}

static void md2_update(struct md2 *s, const void *data, size_t len, uint8_t mask)
{
    const uint8_t *b = data;
    for (size_t i = 0; i < len; i++)
        md2_byte(s, b[i] ^ mask);
}

static void md2_final(struct md2 *s, uint8_t out[16])
{
    uint8_t pad = (uint8_t)(16 - s->n), checksum[16];
    for (int i = 0; i < pad; i++)
        md2_byte(s, pad);
    memcpy(checksum, s->checksum, 16);
    md2_update(s, checksum, 16, 0);
    memcpy(out, s->x, 16);
}

struct __attribute__((packed)) integrity_header {
    uint32_t driver_version, version, pid, tid;
    uint64_t cudart_table, integrity_table, integrity_fn, unix_seconds;
};
struct __attribute__((packed)) integrity_device {
    CUuuid uuid;
    int32_t pci_domain, pci_bus, pci_device;
};

/* Exposed for the unit test (tests/test_export_tables.py checks a published test vector). */
CUWIRE_EXPORT void cuwire_integrity_hash(const void *header, const void *devices, int n_devices, uint64_t out[2])
{
    struct md2 s;
    uint8_t inner[16], outer[16];
    memset(&s, 0, sizeof s);
    md2_update(&s, INTEGRITY_KEY, 16, 0x36);
    md2_update(&s, header, sizeof(struct integrity_header), 0);
    md2_update(&s, devices, (size_t)n_devices * sizeof(struct integrity_device), 0);
    md2_final(&s, inner);
    memset(&s, 0, sizeof s);
    md2_update(&s, INTEGRITY_KEY, 16, 0x5c);
    md2_update(&s, inner, 16, 0);
    md2_final(&s, outer);
    memcpy(out, outer, 16);
}

static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2]);
static const void *const integrity_table[3] = {SIZE_WORD(3), (void *)integrity_check, NULL};

static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2])
{
    if (!result)
        return CUDA_ERROR_INVALID_VALUE;
    if (version % 10 < 2) { /* these versions expect fixed answers */
        result[0] = version % 10 == 0 ? 0x3341181C03CB675CULL : 0x1841181C03CB675CULL;
        result[1] = 0x8ED383AA1F4CD1E8ULL;
        return CUDA_SUCCESS;
    }
    int driver = 0, count = 0;
    CUresult err = cuDriverGetVersion(&driver);
    if (!err)
        err = cuDeviceGetCount(&count);
    if (err)
        return err;
    struct integrity_device devices[64];
    if (count > 64)
        count = 64;
    for (int i = 0; i < count && !err; i++) {
        CUdevice dev;
        CUuuid uuid;
        int domain = 0, bus = 0, device = 0;
        err = cuDeviceGet(&dev, i);
        if (!err)
            err = cuDeviceGetUuid_v2(&uuid, dev);
        if (!err)
            err = cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
        if (!err)
            err = cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
        if (!err)
            err = cuDeviceGetAttribute(&device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
        devices[i] = (struct integrity_device){uuid, domain, bus, device};
    }
    if (err)
        return err;
    struct integrity_header h = {
        (uint32_t)driver, version, (uint32_t)getpid(), (uint32_t)(uintptr_t)pthread_self(),
        (uint64_t)(uintptr_t)cudart_interface, (uint64_t)(uintptr_t)integrity_table,
        (uint64_t)(uintptr_t)integrity_table[1], unix_seconds,
    };
    cuwire_integrity_hash(&h, devices, count, result);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ the lookup */

struct export_table {
    const char *name;
    uint8_t uuid[16];
    const void *const *table; /* NULL: refused quietly (an expected probe) */
};

static const struct export_table export_tables[] = {
    {"CUDART_INTERFACE", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     cudart_interface},
    {"TOOLS_TLS", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     tools_tls},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     tools_callback_hooks},
    {"CONTEXT_LOCAL_STORAGE",
     {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     context_local_storage},
    {"CTX_CREATE_BYPASS", {0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72, 0x86},
     ctx_create_bypass},
    {"HEAP_ACCESS", {0x19, 0x5b, 0xcb, 0xf4, 0xd6, 0x7d, 0x02, 0x4a, 0xac, 0xc5, 0x1d, 0x29, 0xce, 0xa6, 0x31, 0xae},
     heap_access},
    {"INTEGRITY_CHECK", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     integrity_table},
    {"CONTEXT_CHECKS", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     context_checks},
    {"LIBRARY_21318C60", {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     library_21318c60},
    {"LIBRARY_6E163FBE", {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e},
     library_6e163fbe},
    {"LIBRARY_69A28E9F", {0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9},
     library_69a28e9f},
    /* Asked for by libcudart 13 before cuInit; the real driver's answer is not needed to run. */
    {"CUDART_PROBE_F8CF", {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
     NULL},
};

/* ------------------------------------------------------------------ tables cuwire does not know */

/* A CUDA library may ask for a table no one has described. Where the server's driver has it, the client
 * serves a table of the same size whose every slot names itself and refuses, so the library takes its
 * own error path instead of reading a table that is not there. */
#define ANY_SLOT(n) static CUresult unknown_slot_##n(void) { return unsupported_slot("an unknown table", n); }
#define ANY_SLOTS_10(t) ANY_SLOT(t##0) ANY_SLOT(t##1) ANY_SLOT(t##2) ANY_SLOT(t##3) ANY_SLOT(t##4) ANY_SLOT(t##5) \
    ANY_SLOT(t##6) ANY_SLOT(t##7) ANY_SLOT(t##8) ANY_SLOT(t##9)
ANY_SLOT(1) ANY_SLOT(2) ANY_SLOT(3) ANY_SLOT(4) ANY_SLOT(5) ANY_SLOT(6) ANY_SLOT(7) ANY_SLOT(8) ANY_SLOT(9)
ANY_SLOTS_10(1) ANY_SLOTS_10(2) ANY_SLOTS_10(3) ANY_SLOTS_10(4) ANY_SLOTS_10(5) ANY_SLOTS_10(6) ANY_SLOTS_10(7)
ANY_SLOTS_10(8) ANY_SLOTS_10(9) ANY_SLOTS_10(10) ANY_SLOTS_10(11)
ANY_SLOT(120) ANY_SLOT(121) ANY_SLOT(122) ANY_SLOT(123) ANY_SLOT(124) ANY_SLOT(125) ANY_SLOT(126) ANY_SLOT(127)
#define A(n) (void *)unknown_slot_##n
#define A10(t) A(t##0), A(t##1), A(t##2), A(t##3), A(t##4), A(t##5), A(t##6), A(t##7), A(t##8), A(t##9)
#define MAX_UNKNOWN_SLOTS 128
static const void *const unknown_slots[MAX_UNKNOWN_SLOTS] = {
    NULL, A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9), A10(1), A10(2), A10(3), A10(4), A10(5), A10(6),
    A10(7), A10(8), A10(9), A10(10), A10(11), A(120), A(121), A(122), A(123), A(124), A(125), A(126), A(127),
};

struct served_table {
    uint8_t uuid[16];
    const void **table;
};
static pthread_mutex_t served_lock = PTHREAD_MUTEX_INITIALIZER;
static struct served_table served[32];
static int n_served;

static const void *const *serve_unknown_table(const CUuuid *id)
{
    pthread_mutex_lock(&served_lock);
    for (int i = 0; i < n_served; i++)
        if (memcmp(served[i].uuid, id->bytes, 16) == 0) {
            pthread_mutex_unlock(&served_lock);
            return served[i].table;
        }
    pthread_mutex_unlock(&served_lock);
    /* only once a session is open (the libraries ask after cuInit): never connect just for this */
    if (!cuwire_session_open() || !CUWIRE_READY())
        return NULL;
    uint64_t size = cuwire_py_export_table_size(id->bytes);
    if (size < 8 || size > MAX_UNKNOWN_SLOTS * 8)
        return NULL;
    const void **table = malloc(size);
    if (!table)
        return NULL;
    table[0] = (void *)(uintptr_t)size;
    memcpy(table + 1, unknown_slots + 1, size - 8);
    pthread_mutex_lock(&served_lock);
    if (n_served < 32) {
        memcpy(served[n_served].uuid, id->bytes, 16);
        served[n_served++].table = table;
    }
    pthread_mutex_unlock(&served_lock);
    return table;
}

CUresult cuwire_local_cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof export_tables / sizeof export_tables[0]; i++) {
        const struct export_table *t = &export_tables[i];
        if (memcmp(t->uuid, pExportTableId->bytes, 16) != 0)
            continue;
        if (cuwire_trace == 1)
            fprintf(stderr, "cuwire trace: cuGetExportTable(%s)%s\n", t->name, t->table ? "" : ": refused");
        if (!t->table)
            return CUDA_ERROR_NOT_FOUND;
        *ppExportTable = t->table;
        return CUDA_SUCCESS;
    }
    char uuid[40];
    const unsigned char *u = (const unsigned char *)pExportTableId->bytes;
    for (int i = 0; i < 16; i++)
        snprintf(uuid + 2 * i, 3, "%02x", u[i]);
    const void *const *table = serve_unknown_table(pExportTableId);
    if (table) {
        cuwire_say_once_per_name("cuwire: unknown private driver table requested (cuGetExportTable), served with "
                                 "slots that each refuse (CUDA_ERROR_NOT_SUPPORTED):", uuid);
        *ppExportTable = table;
        return CUDA_SUCCESS;
    }
    cuwire_say_once_per_name("cuwire: unknown private driver table requested (cuGetExportTable), refused:", uuid);
    return CUDA_ERROR_NOT_SUPPORTED;
}
