/* cuwire client: whether the embedded Python runs and may be called (start.c): what every call that
 * needs Python or the session checks first. */
#ifndef CUWIRE_START_H
#define CUWIRE_START_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

/* True once the embedded Python runtime started; the first sync call starts it. If it cannot start,
 * calls fail loudly with CUDA_ERROR_UNKNOWN instead of cffi's silent zero. */
extern int cuwire_python_ok, cuwire_forked, cuwire_finished;
int cuwire_start_python(void);
int cuwire_python_gone(void);
int cuwire_released_at_end(void); /* a releasing call's success once Python is gone at a program's end */
int cuwire_exit_hook_ran(void);    /* the process's exit handler ran: CUDA is deinitialized, as natively */
#define CUWIRE_READY() \
    ((__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE) && !cuwire_forked && !cuwire_python_gone()) || \
     cuwire_start_python())
/* The error a call returns when it cannot reach Python: CUDA_ERROR_DEINITIALIZED once a Python program's
 * interpreter finalizes (libraries' teardown goes on after it; calls made in C still reach the session,
 * which lasts as long as the process), CUDA_ERROR_DEVICE_UNAVAILABLE in a forked child,
 * CUDA_ERROR_UNKNOWN when Python failed to start. */
#define CUWIRE_NOT_READY (cuwire_python_gone() ? 4 : cuwire_forked ? 46 : 999)
CW_FROM_PYTHON void cuwire_python_started(void);
CW_IN_PYTHON void cuwire_py_at_exit(void);
CW_FROM_PYTHON void cuwire_hook_exit(void);
CW_FROM_PYTHON const char *cuwire_library_path(void);
/* A wait of the client's lets Python's other threads run: the saved state, or NULL (no GIL held). */
void *cuwire_gil_release(void);
void cuwire_gil_restore(void *state);

#endif
