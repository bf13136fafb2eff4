/* cuwire client: what the client says on stderr: CUWIRE_TRACE's lines, the loud "unimplemented" line,
 * and names said once each. */
#define _GNU_SOURCE
#include <dlfcn.h>
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

/* ------------------------------------------------------------------ tracing */

int cuwire_trace;

/* A boolean setting as cuwire/settings.py parses it: 1, true, yes, on (any case). */
static int setting_true(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

__attribute__((constructor)) static void cuwire_trace_setting(void)
{
    const char *t = getenv("CUWIRE_TRACE");
    cuwire_trace = setting_true("CUWIRE_TRACE") ? 1 : t && !strcasecmp(t, "remote") ? CUWIRE_TRACE_REMOTE : 0;
}

/* CUWIRE_TRACE=1: each call as it starts, with the time since the first traced call (s) and the gap since
 * the previous call ended (what the program did in between), and as it ends, with its result's name and how
 * long it took; CUWIRE_TRACE=remote: only the calls the server serves. Calls may nest (a runtime function's
 * driver calls): each thread keeps its own stack of start times. */
#define TRACE_DEPTH 16
static __thread uint64_t trace_started[TRACE_DEPTH];
static __thread int trace_depth;
static uint64_t trace_origin, trace_last; /* ns: the first traced call's start, the last one's end */

static uint64_t trace_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static double trace_seconds(uint64_t now)
{
    uint64_t zero = 0;
    __atomic_compare_exchange_n(&trace_origin, &zero, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return (double)(now - __atomic_load_n(&trace_origin, __ATOMIC_RELAXED)) / 1e9;
}

/* A call whose result is no CUresult: named only. */
void cuwire_trace_note(const char *name)
{
    fprintf(stderr, "cuwire trace: %.6f %s\n", trace_seconds(trace_now_ns()), name);
}

void cuwire_trace_call(const char *name)
{
    uint64_t now = trace_now_ns(), last = __atomic_load_n(&trace_last, __ATOMIC_RELAXED);
    double at = trace_seconds(now);
    if (last && now > last)
        fprintf(stderr, "cuwire trace: %.6f %s (+%.1f us after the last call)\n", at, name, (double)(now - last) / 1e3);
    else
        fprintf(stderr, "cuwire trace: %.6f %s\n", at, name);
    if (trace_depth < TRACE_DEPTH)
        trace_started[trace_depth] = now;
    trace_depth++;
}

/* `cuda`: the result is a CUresult, said by its name (else NVML's, by its number). */
void cuwire_trace_result(const char *name, int result, int cuda)
{
    uint64_t now = trace_now_ns();
    double us = 0;
    if (trace_depth > 0 && --trace_depth < TRACE_DEPTH)
        us = (double)(now - trace_started[trace_depth]) / 1e3;
    __atomic_store_n(&trace_last, now, __ATOMIC_RELAXED);
    if (cuda)
        fprintf(stderr, "cuwire trace: %.6f %s -> %s in %.1f us\n", trace_seconds(now), name, cuwire_error_name(result),
                us);
    else
        fprintf(stderr, "cuwire trace: %.6f %s -> %d in %.1f us\n", trace_seconds(now), name, result, us);
}

/* ------------------------------------------------------------------ unimplemented functions */

int cuwire_unimplemented(const char *name, const char *header, int *warned)
{
    if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "cuwire: unimplemented CUDA function %s (%s)\n", name, header);
    if (setting_true("CUWIRE_STRICT")) {
        fprintf(stderr, "cuwire: CUWIRE_STRICT=1, aborting at %s\n", name);
        abort();
    }
    return CUWIRE_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ driver entry points */

/* Names said once each (a library may ask for the same missing entry point many times). */
void cuwire_say_once_per_name(const char *what, const char *name)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char *said[512];
    static int n;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n; i++)
        if (strcmp(said[i], name) == 0) {
            pthread_mutex_unlock(&lock);
            return;
        }
    if (n < 512)
        said[n++] = strdup(name);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "%s %s\n", what, name);
}
