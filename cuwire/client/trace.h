/* cuwire client: what the client says on stderr (trace.c): CUWIRE_TRACE's lines, unimplemented functions. */
#ifndef CUWIRE_TRACE_H
#define CUWIRE_TRACE_H
#include <stddef.h>
#include <stdint.h>

/* Says once, on stderr, that a CUDA function is not remoted yet; aborts when CUWIRE_STRICT=1. */
int cuwire_unimplemented(const char *name, const char *header, int *warned);
/* CUWIRE_TRACE=1: every CUDA call the program makes is named on stderr as it starts. */
extern int cuwire_trace; /* 0, 1 (every call), CUWIRE_TRACE_REMOTE (the calls the server serves) */
#define CUWIRE_TRACE_REMOTE 2
void cuwire_trace_call(const char *name);
void cuwire_trace_note(const char *name);
void cuwire_trace_result(const char *name, int result, int cuda); /* cuda: a CUresult (else NVML's) */
/* Says `what name` on stderr, once per name. */
void cuwire_say_once_per_name(const char *what, const char *name);

#endif
