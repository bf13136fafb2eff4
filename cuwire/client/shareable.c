/* Shareable handles (cuMemExportToShareableHandle, cuMemPoolExportToShareableHandle and their imports) as
 * POSIX file descriptors, the kind a program passes between its processes over a Unix socket (CUDA's
 * memMapIPCDrv, streamOrderedAllocationIPC).
 *
 * The driver's descriptor lives in the exporting session's process on the server (server/ipc.py); what the
 * program gets is a descriptor of its own: a small memory file holding the 64 bytes that stand for the
 * driver's handle. Passed to another process of the program's, it still holds them; that process's import
 * reads them and its session fetches the driver's descriptor from the exporting session's process. The
 * program closes its descriptors as it would the driver's. Other handle types are refused by name. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_api.h"
#include "runtime.h"

#define HANDLE_BYTES 64
#define POSIX_FD 1 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
#define NOT_SUPPORTED 801

void cuwire_after_ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags); /* device_memory.c */

int cuwire_py_cuMemExportToShareableHandle(void *, uint64_t, uint64_t, int64_t, uint64_t);
int cuwire_py_cuMemImportFromShareableHandle(void *, void *, uint64_t, int64_t);
int cuwire_py_cuMemPoolExportToShareableHandle(void *, uint64_t, uint64_t, int64_t, uint64_t);
int cuwire_py_cuMemPoolImportFromShareableHandle(void *, void *, uint64_t, int64_t, uint64_t);

static int refused(int type, const char *call)
{
    char what[160];
    snprintf(what, sizeof what, "cuwire: not supported: %s of handle type %d: cuwire shares memory between "
                                "processes through POSIX file descriptors only:", call, type);
    cuwire_say_once_per_name(what, call);
    return NOT_SUPPORTED;
}

/* The program's descriptor for the server's 64 bytes, written where the call writes a descriptor. */
static int give_descriptor(const unsigned char *bytes, void *out)
{
    int fd = memfd_create("cuwire-shareable-handle", MFD_CLOEXEC);
    if (fd < 0)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY: no descriptor left */
    if (pwrite(fd, bytes, HANDLE_BYTES, 0) != HANDLE_BYTES) {
        close(fd);
        return 2;
    }
    *(int *)out = fd;
    return 0;
}

/* The 64 bytes a descriptor of the program's holds (one cuwire made here or in another process). */
static int read_descriptor(void *os_handle, unsigned char *bytes)
{
    int fd = (int)(intptr_t)os_handle;
    return fd >= 0 && pread(fd, bytes, HANDLE_BYTES, 0) == HANDLE_BYTES && pread(fd, bytes, 1, HANDLE_BYTES) == 0;
}

int cuwire_fast_export_shareable(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                 CUmemAllocationHandleType handleType, unsigned long long flags)
{
    if (handleType != POSIX_FD)
        return refused(handleType, "cuMemExportToShareableHandle");
    if (!shareableHandle)
        return CUDA_ERROR_INVALID_VALUE;
    if (!CUWIRE_READY())
        return CUWIRE_NOT_READY;
    unsigned char bytes[HANDLE_BYTES];
    int status = cuwire_py_cuMemExportToShareableHandle(bytes, HANDLE_BYTES, handle, handleType, flags);
    return status ? status : give_descriptor(bytes, shareableHandle);
}

int cuwire_fast_import_shareable(CUmemGenericAllocationHandle *handle, void *osHandle,
                                 CUmemAllocationHandleType shHandleType)
{
    if (shHandleType != POSIX_FD)
        return refused(shHandleType, "cuMemImportFromShareableHandle");
    unsigned char bytes[HANDLE_BYTES];
    if (!handle || !read_descriptor(osHandle, bytes))
        return CUDA_ERROR_INVALID_VALUE; /* not a descriptor of a shareable handle cuwire made */
    if (!CUWIRE_READY())
        return CUWIRE_NOT_READY;
    return cuwire_py_cuMemImportFromShareableHandle(handle, bytes, HANDLE_BYTES, shHandleType);
}

int cuwire_fast_export_pool(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType,
                            unsigned long long flags)
{
    if (handleType != POSIX_FD)
        return refused(handleType, "cuMemPoolExportToShareableHandle");
    if (!handle_out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!CUWIRE_READY())
        return CUWIRE_NOT_READY;
    unsigned char bytes[HANDLE_BYTES];
    int status = cuwire_py_cuMemPoolExportToShareableHandle(bytes, HANDLE_BYTES, (uint64_t)(uintptr_t)pool,
                                                            handleType, flags);
    return status ? status : give_descriptor(bytes, handle_out);
}

int cuwire_fast_import_pool(CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType handleType,
                            unsigned long long flags)
{
    if (handleType != POSIX_FD)
        return refused(handleType, "cuMemPoolImportFromShareableHandle");
    unsigned char bytes[HANDLE_BYTES];
    if (!pool_out || !read_descriptor(handle, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    if (!CUWIRE_READY())
        return CUWIRE_NOT_READY;
    return cuwire_py_cuMemPoolImportFromShareableHandle(pool_out, bytes, HANDLE_BYTES, handleType, flags);
}

/* After cuMemPoolImportPointer: the allocation another process exported is this session's device memory
 * now (its size leads the bytes, server/ipc.py), as after cuIpcOpenMemHandle. */
void cuwire_after_pool_import_pointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
    (void)pool;
    CUipcMemHandle handle;
    memcpy(handle.reserved, shareData->reserved, sizeof handle.reserved);
    cuwire_after_ipc_open(ptr_out, handle, 0);
}
