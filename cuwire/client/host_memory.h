/* cuwire client: host memory of the client's own and memory shared with a server on this host
 * (host_memory.c). */
#ifndef CUWIRE_HOST_MEMORY_H
#define CUWIRE_HOST_MEMORY_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* Host memory shared with a server on this host: page-locked allocations are carved from
 * it, and copies between it and the GPU travel as CopyShared records, without their bytes (calls.c). */
CW_FROM_PYTHON void cuwire_shared_host_set(uint64_t base, uint64_t size, uint64_t server_base, int fd);
int cuwire_shared_offset(const void *p, uint64_t n, uint64_t *offset); /* whether [p, p + n) lies in it */
CW_IN_PYTHON int cuwire_py_host_alloc(uint64_t size, uint64_t *address);
int cuwire_host_locked(const void *p, int *shared);
int cuwire_shares_host_memory(void);
/* Managed memory made in the shared memory: its size at dptr (0: none such), and its freeing. */
size_t cuwire_shared_managed_size(CUdeviceptr dptr);
int cuwire_shared_managed_free(CUdeviceptr dptr);

#endif
