/* cuwire client: the batch queue of calls that need no answer (queue.c). */
#ifndef CUWIRE_QUEUE_H
#define CUWIRE_QUEUE_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

/* Appends one queued call ([u32 id][u32 size][payload]) to the batch the next synchronous call sends. */
int cuwire_enqueue(uint32_t id, const void *payload, uint32_t size);
/* The record that switches the session thread's context (cuwire.SetContext), and what the client knows
 * of that context when the server changed it itself (cuCtxCreate, cuCtxDestroy; (uint64_t)-1: unknown). */
extern const uint32_t cuwire_set_context_record_id;
void cuwire_server_context_is(uint64_t ctx);
/* The session is lost: queued calls fail at once from now on . */
CW_FROM_PYTHON void cuwire_queue_refuse(void);
CW_FROM_PYTHON size_t cuwire_queue_take(char **data, uint64_t *count);
CW_FROM_PYTHON void cuwire_free(void *p);

#endif
