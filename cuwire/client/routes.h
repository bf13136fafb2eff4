/* cuwire client: which session a call goes to (routes.c), asked by the generated stubs before they queue
 * or send a call: each answer a session's number, or -1 when the argument names none (the next is asked). */
#ifndef CUWIRE_ROUTES_H
#define CUWIRE_ROUTES_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

/* the sessions a program may have: its own server's, or a device list's (address_space.MOST_SERVERS + 1,
 * which tests/test_routes.py holds this to) */
#define CW_SESSIONS_MAX 9
CW_FROM_PYTHON int cuwire_route_handle(uint64_t handle); /* a handle of a context-bound kind: by its window */
/* A CUfunction: by its window, but a library's CUkernel passed as one (NVIDIA's runtime does: the occupancy
 * questions, cuFuncSetAttribute) names none, being every server's (aliased). Asked of CUfunction arguments
 * alone, so that a stream's or an event's route takes no lock. */
CW_FROM_PYTHON int cuwire_route_function(uint64_t function);
/* A stream: by its window, and a special one (the NULL, legacy and per-thread streams) by the current
 * context, whose stream it is (never -1). */
CW_FROM_PYTHON int cuwire_route_stream(uint64_t stream);
CW_FROM_PYTHON int cuwire_route_value(uint64_t value);   /* a device address: by its window */
CW_FROM_PYTHON int cuwire_route_device(int ordinal);     /* a device of the joined list */
CW_FROM_PYTHON int cuwire_route_current(void);           /* the calling thread's current context's (never -1) */
/* A device of the joined list as its own server numbers it (the ordinal a call carries to that server). */
CW_FROM_PYTHON int cuwire_route_own_device(int ordinal);
/* A call whose arguments name two servers: the client's to split where an annotation says how (a copy between
 * their memory, a stream of one waiting for an event of the other: client/peers.c), else refused by name
 * (cuwire_route_split). cuwire_route_also joins the answer for one more argument into a call's route. */
#define CW_ROUTE_SPLIT (-2)
static inline int cuwire_route_also(int route, int more)
{
    return route == CW_ROUTE_SPLIT || more < 0 ? route : route < 0 || route == more ? more : CW_ROUTE_SPLIT;
}
CW_FROM_PYTHON int cuwire_route_split(const char *function); /* says so, once a function; CUDA_ERROR_NOT_SUPPORTED */
/* A copy of unified addresses (cuMemcpy, cuMemcpyAsync) between two servers' device memory, server to server
 * (peers.c): its CUDA result, or -1 when both are not device memory of two servers. */
int cuwire_copy_across(uint64_t dst, uint64_t src, size_t n);
/* A library's or kernel's handle on another server of the list (they belong to no context: the client
 * loads a library on each server): the handle itself where it is that server's (or lies in no window), 0
 * where that server has none. */
CW_FROM_PYTHON uint64_t cuwire_route_alias(uint64_t handle, int session);
CW_FROM_PYTHON void cuwire_route_alias_add(uint64_t handle, int session, uint64_t alias);
/* NVML's device handles in a device list: each server's NVML gives handles of its own process, which may be
 * equal across servers, so the program holds the client's stand-ins (cuwire_route_nvml_mine), one for each
 * server's handle and always the same one; a call carries the server's (cuwire_route_nvml_theirs) to the
 * server it names (cuwire_route_nvml). With one server the program holds NVML's handles, unchanged. */
CW_FROM_PYTHON uint64_t cuwire_route_nvml_mine(int session, uint64_t theirs); /* 0: the table is full */
CW_FROM_PYTHON int cuwire_route_nvml(uint64_t mine);        /* its server's session; -1: no stand-in of ours */
CW_FROM_PYTHON uint64_t cuwire_route_nvml_theirs(uint64_t mine); /* its server's handle; itself if no stand-in */
/* The first device of a session's in the joined list (an NVML index its server gives, made the list's). */
CW_FROM_PYTHON int cuwire_route_first_device(int session);
/* The sessions open: 1 but in a device list. Python adds each as it opens (its windows and devices), and a
 * forked child forgets them with its parent's sessions. */
CW_FROM_PYTHON int cuwire_route_sessions(void);
CW_FROM_PYTHON int cuwire_route_add_session(int session, const uint64_t *starts, const uint64_t *ends, int windows,
                                            int devices);
CW_FROM_PYTHON void cuwire_route_forget(void);

#endif
