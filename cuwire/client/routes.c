/* cuwire client: which of the program's sessions a call goes to (docs/several-servers.md, "Sessions and
 * routing"). A program of one server has one session, 0, and every route is it: each function below
 * answers at its first test. With a device list each server gets a session, and its session process keeps
 * every mapping and handle it makes in windows of address space of its own (cuwire/address_space.py, which
 * Python hands here as it opens the session): a handle or a device address names its server by the window
 * it lies in, a device ordinal by the joined device list, and a call that names neither goes where the
 * calling thread's current context is. The generated stubs ask in the order the model gives
 * (codegen/model.py, Function.routes); queue.c and wire.c keep a queue and a connection per session.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "routes.h"
#include "table.h"
#include "session.h" /* (the calling thread's current context) */

#define WINDOWS_MAX 4 /* a session's windows: address_space.windows gives two */

static struct {
    int windows;
    uint64_t start[WINDOWS_MAX], end[WINDOWS_MAX];
    int first_device, devices; /* its devices' place in the joined list */
} routes[CW_SESSIONS_MAX];
static int sessions = 1; /* (read without a lock: set before the calls it routes, as a session opens) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A library's or kernel's handle on each other server of a list (libraries belong to no context: the
 * program holds one server's handles, the client loaded the same image on the others; client/runtime.py,
 * load_image and lookup_kernel). Under `lock`. */
struct alias {
    uint64_t key[2]; /* the handle the program holds, the session */
    uint64_t alias;
};
static cw_table aliases = CW_TABLE(struct alias, 2, 1u << 22);

/* NVML's device handles of a device list's servers, and the program's stand-ins for them (NVML_MINE + 16 n:
 * no address a process maps), both ways. Under `lock`. */
#define NVML_MINE 0xfffe000000000000ull
struct nvml_handle {
    uint64_t key[1]; /* the stand-in */
    uint64_t session, theirs;
};
struct nvml_stand_in {
    uint64_t key[2]; /* its server's handle (never 0: a first key word of 0 is an empty slot), the session */
    uint64_t mine;
};
static cw_table nvml_handles = CW_TABLE(struct nvml_handle, 1, 1u << 12);
static cw_table nvml_stand_ins = CW_TABLE(struct nvml_stand_in, 2, 1u << 12);
static uint64_t nvml_made;

int cuwire_route_sessions(void) { return __atomic_load_n(&sessions, __ATOMIC_ACQUIRE); }

int cuwire_route_add_session(int session, const uint64_t *starts, const uint64_t *ends, int windows, int devices)
{
    if (session < 0 || session >= CW_SESSIONS_MAX || windows < 0 || windows > WINDOWS_MAX || devices < 0)
        return -1;
    pthread_mutex_lock(&lock);
    routes[session].windows = windows;
    for (int i = 0; i < windows; i++) {
        routes[session].start[i] = starts[i];
        routes[session].end[i] = ends[i];
    }
    routes[session].first_device = session ? routes[session - 1].first_device + routes[session - 1].devices : 0;
    routes[session].devices = devices;
    if (session >= sessions)
        __atomic_store_n(&sessions, session + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return 0;
}

void cuwire_route_forget(void)
{
    pthread_mutex_init(&lock, NULL);
    cw_table_clear(&aliases);
    cw_table_clear(&nvml_handles);
    cw_table_clear(&nvml_stand_ins);
    nvml_made = 0;
    for (int i = 0; i < CW_SESSIONS_MAX; i++)
        routes[i].windows = routes[i].first_device = routes[i].devices = 0;
    __atomic_store_n(&sessions, 1, __ATOMIC_RELEASE);
}

int cuwire_route_value(uint64_t value)
{
    int n = cuwire_route_sessions();
    if (n == 1)
        return 0;
    for (int s = 0; s < n; s++)
        for (int i = 0; i < routes[s].windows; i++)
            if (value >= routes[s].start[i] && value < routes[s].end[i])
                return s;
    return -1;
}

/* Whether a handle has aliases: a library's kernel, loaded on each server of the list. */
static int aliased(uint64_t handle, int owner)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int s = 0; s < cuwire_route_sessions() && !found; s++) {
        const uint64_t key[2] = {handle, (uint64_t)s};
        found = s != owner && cw_table_find(&aliases, key) != NULL;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

int cuwire_route_handle(uint64_t handle)
{
    /* the special streams (0: the context's NULL stream, 1: the legacy stream, 2: per-thread) name none */
    return handle <= 2 && cuwire_route_sessions() > 1 ? -1 : cuwire_route_value(handle);
}

int cuwire_route_function(uint64_t function)
{
    /* a library's kernel names none: it is every server's (the call carries the one of its server: the alias) */
    int s = cuwire_route_handle(function);
    return s >= 0 && cuwire_route_sessions() > 1 && aliased(function, s) ? -1 : s;
}

int cuwire_route_stream(uint64_t stream)
{
    int s = cuwire_route_handle(stream);
    return s >= 0 ? s : cuwire_route_current();
}

int cuwire_route_device(int ordinal)
{
    int n = cuwire_route_sessions();
    if (n == 1)
        return 0;
    for (int s = 0; s < n; s++)
        if (ordinal >= routes[s].first_device && ordinal < routes[s].first_device + routes[s].devices)
            return s;
    return -1;
}

int cuwire_route_own_device(int ordinal)
{
    int s = cuwire_route_device(ordinal);
    return s > 0 ? ordinal - routes[s].first_device : ordinal;
}

int cuwire_route_current(void)
{
    if (cuwire_route_sessions() == 1)
        return 0;
    int s = cuwire_route_value(cuwire_current_context());
    return s >= 0 ? s : 0; /* (no context yet: the first server's, as a program's first calls are) */
}

void cuwire_route_alias_add(uint64_t handle, int session, uint64_t alias)
{
    const uint64_t key[2] = {handle, (uint64_t)session};
    pthread_mutex_lock(&lock);
    struct alias *a = handle ? cw_table_put(&aliases, key) : NULL;
    if (a)
        a->alias = alias;
    pthread_mutex_unlock(&lock);
}

uint64_t cuwire_route_alias(uint64_t handle, int session)
{
    int owner = cuwire_route_value(handle);
    if (owner < 0 || owner == session)
        return handle;
    const uint64_t key[2] = {handle, (uint64_t)session};
    pthread_mutex_lock(&lock);
    const struct alias *a = cw_table_find(&aliases, key);
    uint64_t found = a ? a->alias : 0;
    pthread_mutex_unlock(&lock);
    return found;
}

uint64_t cuwire_route_nvml_mine(int session, uint64_t theirs)
{
    if (cuwire_route_sessions() == 1 || !theirs)
        return theirs;
    const uint64_t key[2] = {theirs, (uint64_t)session};
    pthread_mutex_lock(&lock);
    struct nvml_stand_in *in = cw_table_find(&nvml_stand_ins, key);
    uint64_t mine = in ? in->mine : 0;
    if (!in) {
        const uint64_t made[1] = {NVML_MINE + 16 * (nvml_made + 1)};
        struct nvml_handle *h = cw_table_put(&nvml_handles, made);
        in = h ? cw_table_put(&nvml_stand_ins, key) : NULL;
        if (in) {
            h->session = (uint64_t)session;
            h->theirs = theirs;
            in->mine = mine = made[0];
            nvml_made++;
        } else if (h) {
            cw_table_remove(h);
        }
    }
    pthread_mutex_unlock(&lock);
    return mine;
}

static const struct nvml_handle *nvml_find(uint64_t mine) /* (under `lock`) */
{
    const uint64_t key[1] = {mine};
    return mine >= NVML_MINE ? cw_table_find(&nvml_handles, key) : NULL;
}

int cuwire_route_nvml(uint64_t mine)
{
    if (cuwire_route_sessions() == 1)
        return 0;
    pthread_mutex_lock(&lock);
    const struct nvml_handle *h = nvml_find(mine);
    int session = h ? (int)h->session : -1;
    pthread_mutex_unlock(&lock);
    return session;
}

uint64_t cuwire_route_nvml_theirs(uint64_t mine)
{
    if (cuwire_route_sessions() == 1)
        return mine;
    pthread_mutex_lock(&lock);
    const struct nvml_handle *h = nvml_find(mine);
    uint64_t theirs = h ? h->theirs : mine;
    pthread_mutex_unlock(&lock);
    return theirs;
}

int cuwire_route_first_device(int session)
{
    return session > 0 && session < CW_SESSIONS_MAX ? routes[session].first_device : 0;
}

int cuwire_route_split(const char *function)
{
    static char told[16][64]; /* the functions told of, once each (a few suffice; more are told again) */
    pthread_mutex_lock(&lock);
    int known = 0, i = 0;
    for (; i < 16 && told[i][0] && !known; i++)
        known = !strncmp(told[i], function, sizeof told[i] - 1);
    if (!known && i < 16)
        snprintf(told[i], sizeof told[i], "%s", function);
    pthread_mutex_unlock(&lock);
    if (!known)
        fprintf(stderr, "cuwire: %s names memory or handles of two servers of the device list: not served yet "
                        "(docs/several-servers.md)\n", function);
    return CUDA_ERROR_NOT_SUPPORTED;
}
