/* cuwire client: user objects (cuUserObjectCreate and the graph references to them), kept in the client.
 *
 * A user object is the program's pointer and destructor, with a reference count; graphs and executable
 * graphs hold references (cuGraphRetainUserObject, and as natively: a clone, a parent of a child graph
 * node and an executable graph made from a graph hold what it holds). Nothing of it concerns the server.
 * When the count reaches zero the destructor runs on a thread of its own (CUDA runs it on an internal
 * thread, and it may not call CUDA). An executable graph's references go at the first synchronizing call
 * after it is destroyed (natively: once its launches are done), so no destructor runs under work that may
 * still use the object.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_api.h"
#include "runtime.h"

struct user_object {
    void *ptr;
    CUhostFn destroy;
    unsigned long refs;
    struct user_object *next;
};

struct holding { /* `owner` (a graph or executable graph) holds `count` references to `obj` */
    uint64_t owner;
    struct user_object *obj;
    unsigned long count;
    int deferred; /* an executable graph's, destroyed: released at the next synchronization */
    struct holding *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct user_object *objects;
static struct holding *holdings;
static int any_deferred;

static struct user_object *known(CUuserObject handle)
{
    for (struct user_object *o = objects; o; o = o->next)
        if ((CUuserObject)o == handle)
            return o;
    return NULL;
}

static void *run_destructor(void *arg)
{
    struct user_object *o = arg;
    o->destroy(o->ptr);
    free(o);
    return NULL;
}

/* `count` references go; the lock is held. At zero the object leaves the list and its destructor runs on a
 * thread of its own (inline only when no thread can be made). */
static void drop(struct user_object *o, unsigned long count)
{
    o->refs -= count;
    if (o->refs)
        return;
    for (struct user_object **p = &objects; *p; p = &(*p)->next)
        if (*p == o) {
            *p = o->next;
            break;
        }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, run_destructor, o) != 0)
        run_destructor(o);
    pthread_attr_destroy(&attr);
}

/* `owner` holds `count` more references to o (no new references when `moved`); the lock is held. */
static int hold(uint64_t owner, struct user_object *o, unsigned long count, int moved)
{
    struct holding *h = holdings;
    while (h && (h->owner != owner || h->obj != o || h->deferred))
        h = h->next;
    if (!h) {
        if (!(h = calloc(1, sizeof *h)))
            return -1;
        *h = (struct holding){owner, o, 0, 0, holdings};
        holdings = h;
    }
    h->count += count;
    if (!moved)
        o->refs += count;
    return 0;
}

CUresult cuwire_local_cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                         unsigned int initialRefcount, unsigned int flags)
{
    if (!object_out || !destroy || !initialRefcount || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    struct user_object *o = malloc(sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    *o = (struct user_object){ptr, destroy, initialRefcount, objects};
    objects = o;
    pthread_mutex_unlock(&lock);
    *object_out = (CUuserObject)o;
    return CUDA_SUCCESS;
}

CUresult cuwire_local_cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = known(object);
    if (o && count) {
        o->refs += count;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuwire_local_cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = known(object);
    if (o && count && count <= o->refs) {
        drop(o, count);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuwire_local_cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
                                              unsigned int flags)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = known(object);
    if (graph && o && count && (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE) == 0)
        r = hold((uint64_t)(uintptr_t)graph, o, count, flags & CU_GRAPH_USER_OBJECT_MOVE) ? CUDA_ERROR_OUT_OF_MEMORY
                                                                                          : CUDA_SUCCESS;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuwire_local_cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct user_object *o = known(object);
    for (struct holding **p = &holdings; o && count && *p; p = &(*p)->next) {
        struct holding *h = *p;
        if (h->owner == (uint64_t)(uintptr_t)graph && h->obj == o && !h->deferred && h->count >= count) {
            h->count -= count;
            if (!h->count) {
                *p = h->next;
                free(h);
            }
            drop(o, count);
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* What `from` holds, `to` holds too (a clone, a child graph's parent, an executable graph). */
void cuwire_user_objects_share(uint64_t from, uint64_t to)
{
    if (!__atomic_load_n(&holdings, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&lock);
    for (struct holding *h = holdings; h; h = h->next)
        if (h->owner == from && !h->deferred)
            hold(to, h->obj, h->count, 0); /* (no memory: the new holder holds nothing, the program goes on) */
    pthread_mutex_unlock(&lock);
}

/* `owner` went: a graph's references go now; an executable graph's (`after_work`) at the next
 * synchronization. */
void cuwire_user_objects_release(uint64_t owner, int after_work)
{
    if (!__atomic_load_n(&holdings, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&lock);
    for (struct holding **p = &holdings; *p;) {
        struct holding *h = *p;
        if (h->owner != owner || h->deferred) {
            p = &h->next;
        } else if (after_work) {
            h->deferred = 1;
            any_deferred = 1;
            p = &h->next;
        } else {
            *p = h->next;
            drop(h->obj, h->count);
            free(h);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* The host caught up with the GPU: destroyed executable graphs' references go. */
void cuwire_user_objects_synced(void)
{
    if (!__atomic_load_n(&any_deferred, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&lock);
    any_deferred = 0;
    for (struct holding **p = &holdings; *p;) {
        struct holding *h = *p;
        if (h->deferred) {
            *p = h->next;
            drop(h->obj, h->count);
            free(h);
        } else {
            p = &h->next;
        }
    }
    pthread_mutex_unlock(&lock);
}
