/* cuwire client: kernel launches queued in C, with each looked-up kernel's parameter layout
 * (launches.c). */
#ifndef CUWIRE_LAUNCHES_H
#define CUWIRE_LAUNCHES_H
#include <stddef.h>
#include <stdint.h>
#include "cuda_api.h"

/* A launch's parameters packed by the kernel's layout (also for client/graphs.py's graph kernel nodes). */
long cuwire_pack_params(CUfunction f, void **params, void **extra, uint64_t *handle, char *out, size_t cap);
void cuwire_set_launch_limits(uint32_t threads, const uint32_t *block, const uint32_t *grid);
void cuwire_cache_kernel(const void *key, uint64_t handle, uint32_t n, const uint32_t *offsets,
                         const uint32_t *sizes);
void cuwire_forget_kernels(void);
int cuwire_launch_config_error(const uint32_t *grid, const uint32_t *block);
extern unsigned long long cuwire_fast_launches;

#endif
