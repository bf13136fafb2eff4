/* cuwire client: host memory of the client's own and memory shared with a server on this host
 * (host_memory.c). */
#ifndef CUWIRE_HOST_MEMORY_H
#define CUWIRE_HOST_MEMORY_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

/* Host memory shared with a server on this host: page-locked allocations are carved from
 * it, and copies between it and the GPU travel as CopyShared records, without their bytes. */
CW_FROM_PYTHON void cuwire_shared_host_set(uint64_t base, uint64_t size, uint64_t server_base, int fd);
int cuwire_copy_shared(const void *host, uint64_t device, uint64_t n, void *stream, int to_device, int sync);
CW_IN_PYTHON int cuwire_py_host_alloc(uint64_t size, uint64_t *address);
int cuwire_host_locked(const void *p, int *shared);
int cuwire_shares_host_memory(void);

#endif
