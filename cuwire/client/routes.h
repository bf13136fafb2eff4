/* cuwire client: which session a call goes to (routes.c), asked by the generated stubs before they queue
 * or send a call: each answer a session's number, or -1 when the argument names none (the next is asked). */
#ifndef CUWIRE_ROUTES_H
#define CUWIRE_ROUTES_H
#include "python.h"
#include <stdint.h>

/* the sessions a program may have: its own server's, or a device list's (address_space.MOST_SERVERS + 1,
 * which tests/test_routes.py holds this to) */
#define CW_SESSIONS_MAX 9
int cuwire_route_handle(uint64_t handle); /* a handle of a context-bound kind: by its window */
int cuwire_route_value(uint64_t value);   /* a device address: by its window */
int cuwire_route_device(int ordinal);     /* a device of the joined list */
int cuwire_route_current(void);           /* the calling thread's current context's (never -1) */
/* The sessions open: 1 but in a device list. Python adds each as it opens (its windows and devices), and a
 * forked child forgets them with its parent's sessions. */
CW_FROM_PYTHON int cuwire_route_sessions(void);
CW_FROM_PYTHON int cuwire_route_add_session(int session, const uint64_t *starts, const uint64_t *ends, int windows,
                                            int devices);
CW_FROM_PYTHON void cuwire_route_forget(void);

#endif
