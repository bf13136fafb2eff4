/* cuwire client: the start of the embedded Python (at the first call that needs it), with the program's
 * signal handlers kept as they were, and the hooks at the process's exit and in a forked child. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "runtime.h"

/* ------------------------------------------------------------------ start-up */

/* Where this library is on disk (the path the loader used): an installed package's library finds the
 * environment it belongs to from it (client/build.py, init_code). */
const char *cuwire_library_path(void)
{
    static Dl_info info;
    return dladdr((void *)cuwire_library_path, &info) && info.dli_fname ? info.dli_fname : "";
}

int cuwire_python_ok;
int cuwire_finished; /* set once Python may no longer be called: see cuwire_python_gone */
int cuwire_forked; /* set in a child forked from this process: see forked_child() */

/* The Python half (CUWIRE_PYTHON_HALF, libcuwire_python.so beside this library: client/build.py) is cffi's embedding module.
 * This library names no Python symbol: where the process has no Python of its own (a C program), the
 * Python this library was built for is loaded first, globally (CUWIRE_LIBPYTHON, a path, else where it was
 * at build time, else its soname on the library path); a Python program's own interpreter is used as it is,
 * when it is the same Python version. Then this library's own names are made global, for the Python half to
 * find, and the half is loaded and each trampoline (python_calls.c, built) bound to its function. */
extern const struct cuwire_python_entry {
    const char *name;
    void **fn;
} cuwire_python_entries[];
static int (*python_embedded)(void); /* cffi's embedding entry point: running it starts Python */

static int python_in_reach(void)
{
    const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
    if (version) { /* the program's own Python */
        const char *v = version(), *want = CUWIRE_PYTHON_VERSION;
        if (strncmp(v, want, strlen(want)) == 0 && v[strlen(want)] == '.')
            return 1;
        fprintf(stderr, "cuwire: this program runs Python %.10s, and the client library was built for Python %s: "
                        "use cuwire installed in an environment of the program's Python\n", v, want);
        return 0;
    }
    const char *given = getenv("CUWIRE_LIBPYTHON"), *built = CUWIRE_LIBPYTHON_BUILT;
    const char *path = given && *given ? given : *built && access(built, R_OK) == 0 ? built : CUWIRE_LIBPYTHON_SONAME;
    if (dlopen(path, RTLD_NOW | RTLD_GLOBAL))
        return 1;
    fprintf(stderr, "cuwire: cannot load Python %s's shared library (%s), which the client library runs Python "
                    "with: set CUWIRE_LIBPYTHON to its path (`cuwire run` does)\n", CUWIRE_PYTHON_VERSION, dlerror());
    return 0;
}

static int load_python_half(void)
{
    Dl_info self;
    char real[PATH_MAX], half[PATH_MAX + 32];
    if (!dladdr((void *)load_python_half, &self) || !self.dli_fname || !realpath(self.dli_fname, real)) {
        fprintf(stderr, "cuwire: cannot tell where the client library is, to load its Python half\n");
        return 0;
    }
    if (!python_in_reach())
        return 0;
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL); /* the names the half reaches: global */
    char *slash = strrchr(real, '/');
    snprintf(half, sizeof half, "%.*s/" CUWIRE_PYTHON_HALF, slash ? (int)(slash - real) : 1, slash ? real : ".");
    void *h = dlopen(half, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cuwire: cannot load the client library's Python half: %s\n", dlerror());
        return 0;
    }
    for (const struct cuwire_python_entry *e = cuwire_python_entries; e->name; e++)
        if (!(*e->fn = dlsym(h, e->name))) {
            fprintf(stderr, "cuwire: %s lacks %s: it is not the one this library was built with\n", half, e->name);
            return 0;
        }
    python_embedded = (int (*)(void))dlsym(h, "cuwire_embedded");
    return python_embedded != NULL;
}

void cuwire_python_started(void) { __atomic_store_n(&cuwire_python_ok, 1, __ATOMIC_RELEASE); }

/* Whether the interpreter the client runs in can no longer be called by this thread. A Python program's
 * finalizes after its atexit handlers; its libraries' teardown (XLA's, PyTorch's) goes on in objects freed
 * then, on the thread that finalizes (the main thread), which may still take the GIL: another thread that
 * tried would be stopped by Python for good, so only one holding the GIL already may. Once finalized, Python
 * is gone for every thread. The embedded interpreter of a C program is never finalized. The session itself
 * lasts as long as the process (the server ends it when the connection closes), so calls made in C go on. */
static int (*py_is_initialized)(void), (*py_is_finalizing)(void), (*py_gil_held)(void);
static int py_state_found;

static void find_python_state(void) /* (once Python runs: its symbols are then in reach) */
{
    py_is_initialized = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    py_is_finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsFinalizing"); /* 3.13 */
    if (!py_is_finalizing)
        py_is_finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"); /* 3.11, 3.12 */
    py_gil_held = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
    __atomic_store_n(&py_state_found, 1, __ATOMIC_RELEASE);
}

int cuwire_python_gone(void)
{
    if (__atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE))
        return 1;
    if (!__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE))
        return 0; /* not started: cuwire_start_python decides */
    if (!__atomic_load_n(&py_state_found, __ATOMIC_ACQUIRE))
        find_python_state();
    if (py_is_initialized && !py_is_initialized()) {
        __atomic_store_n(&cuwire_finished, 1, __ATOMIC_RELEASE);
        return 1;
    }
    if (!py_is_finalizing || !py_is_finalizing())
        return 0;
    int main_thread = syscall(SYS_gettid) == getpid();
    return !main_thread && !(py_gil_held && py_gil_held());
}

/* A wait of the client's on the program's thread (host_fn_order.c) lets Python's other threads run, as a
 * blocking call of an extension does (Py_BEGIN_ALLOW_THREADS): a host function of the program's may need the
 * GIL the waiting thread holds. The saved state (NULL: the thread held no GIL), for cuwire_gil_restore. */
void *cuwire_gil_release(void)
{
    if (!__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE) || cuwire_python_gone())
        return NULL;
    if (!__atomic_load_n(&py_state_found, __ATOMIC_ACQUIRE))
        find_python_state();
    static void *(*save)(void);
    if (!save)
        save = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
    return py_gil_held && save && py_gil_held() ? save() : NULL;
}

void cuwire_gil_restore(void *state)
{
    static void (*restore)(void *);
    if (!state)
        return;
    if (!restore)
        restore = (void (*)(void *))dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
    restore(state);
}

/* Python's signal module, once imported, catches SIGINT to raise KeyboardInterrupt in Python code: in a C
 * program that embeds the client, that made Ctrl-C do nothing. The program's own dispositions (its
 * handlers, the default actions, what it ignores) are kept across the start, so every signal reaches the
 * program as natively. The init code imports signal (client/build.py), so no later import installs one.
 * A Python program (PyTorch) has its own interpreter's handlers already: they are kept the same way. */
static const int kept_signals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGPIPE, SIGXFSZ, SIGUSR1, SIGUSR2, SIGCHLD};
#define KEPT_SIGNALS (sizeof kept_signals / sizeof kept_signals[0])

static void keep_signals(struct sigaction *kept)
{
    for (size_t i = 0; i < KEPT_SIGNALS; i++)
        sigaction(kept_signals[i], NULL, &kept[i]);
}

static void restore_signals(const struct sigaction *kept)
{
    for (size_t i = 0; i < KEPT_SIGNALS; i++)
        sigaction(kept_signals[i], &kept[i], NULL);
}

int cuwire_start_python(void)
{
    static int said, tried;
    if (cuwire_python_gone())
        return 0; /* a Python program's teardown: calls that need Python fail quietly (DEINITIALIZED) */
    if (cuwire_forked) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "cuwire: this process was forked from a cuwire client; a forked child cannot open its "
                            "own session yet, so its CUDA calls fail (CUDA_ERROR_DEVICE_UNAVAILABLE)\n");
        return 0;
    }
    if (!__atomic_exchange_n(&tried, 1, __ATOMIC_ACQ_REL)) {
        struct sigaction kept[KEPT_SIGNALS];
        keep_signals(kept);
        if (load_python_half())
            python_embedded(); /* one try: cffi does not retry a failed start */
        restore_signals(kept);
    }
    if (__atomic_load_n(&cuwire_python_ok, __ATOMIC_ACQUIRE))
        return 1;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: the client's Python runtime did not start (see the error above); "
                        "every CUDA call that needs the server fails with CUDA_ERROR_UNKNOWN\n");
    return 0;
}

/* A trampoline called before Python started (python_calls.c): start it now. */
int cuwire_python_bind(void) { return cuwire_start_python(); }

/* C's exit: what is queued goes out and the statistics are printed (a C program's embedded Python never
 * finalizes: Python's atexit never runs there), then CUDA is deinitialized, as the driver's own exit handler
 * does it (registered at cuInit, as this one is at the first call): handlers and destructors that run after
 * it get CUDA_ERROR_DEINITIALIZED, as natively. The session ends when the process's connection closes. */
static int exit_hooked; /* exit_hook ran: CUDA is deinitialized, as the driver's is at its exit handler */

/* A call that releases something (cuEventDestroy, cuMemUnmap...) made once Python is gone at a Python
 * program's end, before C's exit handler (XLA's C++ static destructors, after the interpreter finalized):
 * it succeeds, as natively, and what it releases goes with the session, which ends with the process. */
int cuwire_released_at_end(void)
{
    return !__atomic_load_n(&exit_hooked, __ATOMIC_ACQUIRE) && !cuwire_forked && cuwire_python_gone();
}

static void exit_hook(void)
{
    if (cuwire_python_ok && !cuwire_forked && !cuwire_python_gone())
        cuwire_py_at_exit();
    __atomic_store_n(&exit_hooked, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&cuwire_finished, 1, __ATOMIC_RELEASE); /* (calls made in C stop using the socket: wire.c) */
}

int cuwire_exit_hook_ran(void) { return __atomic_load_n(&exit_hooked, __ATOMIC_ACQUIRE); }

/* A child forked from a client (fork() from C, os.fork() from Python) must not touch the parent's
 * session: gRPC and the parent's stream do not survive fork, and waiting on them hangs. Python's own
 * at-fork hooks do not run for a fork() from C, so the mark is made here, in C. */
static void forked_child(void) { cuwire_forked = 1; }

void cuwire_hook_exit(void)
{
    atexit(exit_hook);
    pthread_atfork(NULL, NULL, forked_child);
}
