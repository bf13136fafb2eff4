/* cuwire client: the process's session and the calling thread's context (session.c), which every other
 * part asks and which asks none of them. */
#ifndef CUWIRE_SESSION_H
#define CUWIRE_SESSION_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* Whether the process has its session (the device snapshot came): never opens one. */
CW_FROM_PYTHON int cuwire_session_open(void);
/* The snapshot of the devices the server said at the welcome (runtime.py). */
CW_FROM_PYTHON void cuwire_set_devices(int count, int n_attrs, const int32_t *attrs, const char *const *device_names,
                                       const uint8_t *device_uuids, const uint64_t *memory, const uint64_t *contexts,
                                       const uint32_t *flags, int driver);
/* The calling thread's current context (0: none). */
CW_FROM_PYTHON uint64_t cuwire_current_context(void);
/* A context the server made for the program: its device kept, and it is the calling thread's current
 * context now, the previous one pushed; one it destroyed: forgotten, popped if it was current. */
void cuwire_context_made(CUcontext ctx, CUdevice dev);
void cuwire_context_gone(CUcontext ctx);
/* The device of a context (NULL: the calling thread's current one), as cuCtxGetDevice_v2 answers it. */
CUresult cuwire_local_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx);

#endif
