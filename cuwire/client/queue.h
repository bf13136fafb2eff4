/* cuwire client: the batch queue of calls that need no answer (queue.c), and the calls made in C that
 * append to it (calls.c). */
#ifndef CUWIRE_QUEUE_H
#define CUWIRE_QUEUE_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

/* Appends one queued call ([u32 id][u32 size][head][bytes]) to the batch the session's next call that waits
 * sends, after the switch to the calling thread's context; *due: what the caller does next (calls.c). Each
 * session (a server: routes.h) has a queue of its own. */
#define QUEUE_KEEP 0  /* nothing */
#define QUEUE_SEND 1  /* send the queue now, without waiting for an answer */
#define QUEUE_FLUSH 2 /* the queue is large: the Python path sends it */
int cuwire_queue_append(int session, uint32_t id, const void *head, uint32_t head_size, const void *bytes, uint32_t n,
                        int *due);
int cuwire_queue_refused(int session); /* the session is lost: queued calls fail at once */
int cuwire_queue_waiting(int session); /* it has queued calls */
/* The record that switches the session thread's context (cuwire.SetContext), and what the client knows
 * of that context when the server changed it itself (cuCtxCreate, cuCtxDestroy; (uint64_t)-1: unknown). */
extern const uint32_t cuwire_set_context_record_id;
void cuwire_server_context_is(int session, uint64_t ctx);
/* The session is lost: queued calls fail at once from now on . */
CW_FROM_PYTHON void cuwire_queue_refuse(int session);
CW_FROM_PYTHON size_t cuwire_queue_take(int session, char **data, uint64_t *count);
CW_FROM_PYTHON void cuwire_free(void *p);

/* (calls.c) Queues one call ([u32 id][u32 size][payload]) for the session's server: sent with the session's
 * next call that waits, or earlier. */
int cuwire_enqueue(int session, uint32_t id, const void *payload, uint32_t size);
/* A copy as a CopyShared record when `host` is in the shared memory and `device` in one of the session's
 * allocations (a copy of pageable memory into a stream capture through a stand-in there): its CUDA result,
 * or -1 when the call takes its usual path. */
int cuwire_copy_shared(const void *host, uint64_t device, uint64_t n, void *stream, int to_device, int sync);

#endif
