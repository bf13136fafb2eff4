/* cuwire client: kernel launches queued in C, with each looked-up kernel's parameter layout
 * (launches.c). */
#ifndef CUWIRE_LAUNCHES_H
#define CUWIRE_LAUNCHES_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>
#include "cuda_api.h"

/* A launch's parameters packed by the kernel's layout (also for client/graphs.py's graph kernel nodes). */
CW_FROM_PYTHON long cuwire_pack_params(CUfunction f, void **params, void **extra, uint64_t *handle, char *out, size_t cap);
CW_FROM_PYTHON void cuwire_set_launch_limits(uint32_t threads, const uint32_t *block, const uint32_t *grid);
CW_FROM_PYTHON void cuwire_cache_kernel(const void *key, uint64_t handle, uint32_t n, const uint32_t *offsets,
                         const uint32_t *sizes);
CW_FROM_PYTHON void cuwire_forget_kernels(void);
CW_FROM_PYTHON int cuwire_launch_config_error(const uint32_t *grid, const uint32_t *block);
CW_FROM_PYTHON extern unsigned long long cuwire_fast_launches;
CW_FROM_PYTHON extern unsigned long long cuwire_fast_node_sets;
/* cuLaunchKernel and cuLaunchKernelEx queued in C, once the session is open (client/launches.py calls them for
 * a function's first launch); -1: the call takes the Python path. */
CW_FROM_PYTHON int cuwire_fast_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra);
CW_FROM_PYTHON int cuwire_fast_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);

#endif
