/* cuwire client: the C helpers that generated stubs (generated/client_stubs.c) and the hand-written
 * C files share: the features with files of their own have headers of their own (start.h, session.h,
 * capture.h, trace.h, queue.h, host_memory.h, launches.h), included here; the rest follow. Python reaches the ones declared
 * in client/build.py's cdef. */
#ifndef CUWIRE_RUNTIME_H
#define CUWIRE_RUNTIME_H
#include "python.h"
#include <stddef.h>
#include <stdint.h>

#include "frames.h"
#include "capture.h"
#include "host_memory.h"
#include "launches.h"
#include "queue.h"
#include "routes.h"
#include "session.h"
#include "start.h"
#include "trace.h"

#define CUWIRE_EXPORT __attribute__((visibility("default")))
#define CUWIRE_NOT_SUPPORTED 801 /* CUDA_ERROR_NOT_SUPPORTED */

/* cuGetProcAddress's table (generated/client_procs.c): found is 0 (no such name), 1, or 2 (too new). */
void *cuwire_proc_lookup(const char *name, int version, int per_thread, int *found);
/* The name of a CUresult value (generated from the enum in client_stubs.c). */
const char *cuwire_error_name(int code);
const char *cuwire_error_name_or_null(int code); /* NULL: a code the headers do not name */
/* The server driver's text for a CUresult, kept for cuGetErrorString's fast path (driver_local.c). */
CW_FROM_PYTHON void cuwire_keep_error_string(int error, const char *text);


/* Calls that wait, made in C (wire.c), each on its session's connection (`session`: a route, routes.h): the
 * largest result they bring back (larger ones take the Python path, their bytes beside the messages). */
#define CUWIRE_CALL_RESULT_MAX CW_CALL_RESULT_MAX /* (cuwire/wire/frames.h) */
int cuwire_call(int session, uint32_t fn, const void *rec, uint32_t size, void *result, uint32_t result_len);
CW_IN_PYTHON void cuwire_py_wire_broken(int session, const char *why);
CW_FROM_PYTHON void cuwire_wire_set(int session, int fd);
CW_FROM_PYTHON void cuwire_wire_keep(int session, int fd); /* at the program's end: a copy of the socket, the C side's own */
int cuwire_wire_without_python(int session); /* calls made in C go on after Python finalized */
CW_FROM_PYTHON void cuwire_wire_stream(int session, void *s); /* its cw_stream (cuwire/wire/stream.h), or NULL */
CW_IN_PYTHON int cuwire_py_resume(int session);          /* the connection broke: 1 when the session's stream resumed it */
CW_FROM_PYTHON void cuwire_wire_spin(long microseconds);
CW_FROM_PYTHON void cuwire_queue_send_every(long microseconds); /* queue.c: CUWIRE_SEND_EVERY_US */
CW_FROM_PYTHON void cuwire_wire_acquire(int session);
CW_FROM_PYTHON void cuwire_wire_release(int session);
CW_FROM_PYTHON void cuwire_wire_forget(void);
CW_FROM_PYTHON int cuwire_wire_stats(uint32_t *ids, uint64_t *counts, uint64_t *ns, int max, uint64_t *totals);
CW_FROM_PYTHON int cuwire_wire_send_queued(int session);
int cuwire_wire_in_c(int session); /* the session's calls go on the C wire now (not Python's, not after Python) */
uint64_t cuwire_wire_my_early(void); /* the early frames the calling thread sent */
void cuwire_wire_quiet_thread(void);  /* this thread leaves a broken connection to the program's next call */
/* sender.c: a thread of the client's that sends the queued calls (CUWIRE_SEND_THREAD) */
CW_FROM_PYTHON void cuwire_sender_start(void);
int cuwire_sender_poke(int session); /* 1: it will send the session's queue; 0: it does not run (the caller sends) */
CW_FROM_PYTHON uint64_t cuwire_sender_sent(void); /* the early frames it sent (--stats) */
/* What the client knows the GPU has finished (completion.c): every send is counted (waits: the sender
 * waits for the answer); calls annotated `completes` note what they finished, and those annotated
 * `answered_when_done` are answered here while it is known. */
#define CUWIRE_DONE_STREAM 1
#define CUWIRE_DONE_EVENT 2
#define CUWIRE_DONE_CONTEXT 3
CW_FROM_PYTHON void cuwire_note_sent(int waits);
void cuwire_done_before(uint64_t *all, uint64_t *mine);
int cuwire_known_done(int kind, uint64_t handle);
void cuwire_note_done(int kind, uint64_t handle, uint64_t all, uint64_t mine);
void cuwire_forget_done(void);
void cuwire_note_event_record(uint64_t event, uint64_t stream, int captured);
void cuwire_note_copy_queued(uint64_t stream, uint64_t all); /* a copy to the device, with its bytes (calls.c) */
void cuwire_note_queued(const void *record, uint32_t size); /* queue.c appended a record */
void cuwire_note_releasing(uint64_t handle); /* handle_pools.c queues a destroy that cannot fail */
void cuwire_note_stream_given(uint64_t stream, uint64_t context); /* handle_pools.c gave out a stream */
void cuwire_note_stream_gone(uint64_t stream); /* ...destroyed it, or it went with its context */
void cuwire_note_memory_shared(void); /* IPC or shareable handles: synchronizations are never barriers */
CW_FROM_PYTHON extern unsigned long long cuwire_answered_done;
/* The session's device allocations (device_memory.c). */
CW_FROM_PYTHON int cuwire_track_alloc(uint64_t base, uint64_t size);
CW_FROM_PYTHON void cuwire_untrack_alloc(uint64_t base);
CW_FROM_PYTHON uint64_t cuwire_allocation_of(uint64_t address, uint64_t *size);
int cuwire_in_allocation(uint64_t address, uint64_t n);
CW_FROM_PYTHON void cuwire_forget_allocations(void);
/* The server's device ranges, reserved in this process too, so that no host memory comes to lie there. */
CW_FROM_PYTHON void cuwire_guard_device_range(uint64_t base, uint64_t size);
int cuwire_guarded(uint64_t lo, uint64_t hi);

/* Managed memory over TCP: a host copy kept in step with the server's at calls (managed.c). */
int cuwire_managed_alloc(uint64_t *dptr, size_t size, unsigned int flags);
uint64_t cuwire_managed_free(uint64_t address); /* its size, or 0: not managed memory made over TCP */
int cuwire_managed_holds(uint64_t p, size_t n);
CUresult cuwire_managed_range(CUdeviceptr p, size_t count);
/* managed_hints.c: what cuMemAdvise and cuMemPrefetchAsync said, for cuMemRangeGetAttribute */
void cuwire_hints_advise(uint64_t p, size_t n, int advice, CUmemLocation location);
void cuwire_hints_prefetched(uint64_t p, size_t n, CUmemLocation location);
void cuwire_hints_forget(uint64_t p, size_t n);
CW_FROM_PYTHON int cuwire_managed_before_call(void);
CW_IN_PYTHON int cuwire_py_managed_alloc(uint64_t size, unsigned int flags, uint64_t *address); /* (server-side managed memory) */
void cuwire_managed_synced(void);
/* Page-locked memory over TCP that kernels reach: the server maps memory at the program's address, and
 * managed.c keeps the two copies in step (HostCopy records). */
int cuwire_host_mapped_add(uint64_t address, uint64_t size);
int cuwire_host_mapped_add_again(uint64_t address, uint64_t size); /* a run left mapped (host_memory.c) */
int cuwire_host_mapped_forget(uint64_t address);
int cuwire_host_mapped_within(uint64_t lo, uint64_t hi, uint64_t *at, uint64_t *size);
int cuwire_host_mapped_span(uint64_t lo, uint64_t hi, uint64_t *span_lo, uint64_t *span_hi);
int cuwire_keeping_in_step(void); /* this thread keeps the copies in step now (managed.c) */
int cuwire_host_mapped_holds(uint64_t p, size_t n);
/* A call passes `v` to the server as a device address: page-locked memory of the program's own there is
 * mapped by the server (host_memory.c). */
CW_FROM_PYTHON void cuwire_host_reference(uint64_t v);
int cuwire_own_page_locked(const void *p);   /* page-locked memory of the program's own (host_memory.c) */
/* Host functions queued and not run yet (host_fn_order.c): callbacks.c tells, calls.c waits. */
void cuwire_host_fn_queued(uint64_t id);
void cuwire_host_fn_done(uint64_t id);
void cuwire_host_fn_running(int running);
void cuwire_host_fns_stopped(void);
void cuwire_host_fns_forget(void);
int cuwire_host_functions_wait(void); /* the host functions queued so far have run: 0, or a refusal after 30 s */
CW_FROM_PYTHON extern unsigned long long cuwire_host_fn_waits;   /* those waits (--stats) */
CW_FROM_PYTHON extern unsigned long long cuwire_host_fn_wait_ns; /* (and how long they took) */
CW_IN_PYTHON int cuwire_py_host_map(uint64_t address, uint64_t size);   /* RegisterHost, anonymous: 0 or the error */
CW_IN_PYTHON int cuwire_py_host_unmap(uint64_t address);

/* Graph copies of pageable memory through stand-ins in the shared memory (graph_copies.c): what nodes
 * wrote goes to the program (caught_up: the host caught up with the GPU; else before a host function). */
void cuwire_graph_copies_back(int caught_up);
/* An asynchronous copy of pageable memory into or out of a stream capture: the stand-in in the shared
 * memory it goes through, or NULL for the usual path. */
const void *cuwire_capture_standin(const void *host, uint64_t device, uint64_t n, void *stream, int to_device);
/* User objects held by graphs and executable graphs (user_objects.c). */
void cuwire_user_objects_share(uint64_t from, uint64_t to);
void cuwire_user_objects_release(uint64_t owner, int after_work);
void cuwire_user_objects_synced(void);
/* The graph and last nodes of a stream's capture, from the server (client/graphs.py): a CUDA result. */
CW_IN_PYTHON int cuwire_py_capture_info(uint64_t stream, void *graph, void *deps, void *edges, void *count);
/* The host caught up with the GPU: stand-ins' and managed memory's bytes come back (graph_copies.c). */
void cuwire_synced(void);
/* All of a buffer to or from a socket (wire.c): 0, or -1 when the connection broke or ended. */
int cuwire_send_all(int fd, const char *buf, size_t len);
int cuwire_recv_all(int fd, char *buf, size_t len, long spin);
/* Device printf output from the server, to the program's stdout (wire.c). */
CW_FROM_PYTHON void cuwire_write_output(const char *buf, size_t len);
/* Host functions in streams, run by a thread of the client's (client/callbacks.c). */
CW_FROM_PYTHON void cuwire_callbacks_ring(void *r);
CW_FROM_PYTHON void cuwire_callbacks_socket(int route, int fd);
/* A graph host node's function, kept for every launch of its graph: its id (callbacks.c). */
CW_FROM_PYTHON uint64_t cuwire_keep_host_fn(CUhostFn fn, void *user, int *err);
CW_FROM_PYTHON int cuwire_host_fn_of(uint64_t id, void **fn, void **user); /* what is kept under a host node's id */
CW_FROM_PYTHON void cuwire_callbacks_stop(void);
CW_FROM_PYTHON void cuwire_callbacks_forget(void);
CW_IN_PYTHON int cuwire_py_host_free(uint64_t address);
CW_IN_PYTHON int cuwire_py_host_register_at(uint64_t address, uint64_t size, uint64_t *offset);
CW_IN_PYTHON int cuwire_py_host_unregister_at(uint64_t offset);
CW_IN_PYTHON int cuwire_py_host_register_again(uint64_t address, uint64_t size, uint64_t offset);
/* A shared mapping of a memory file the program registers: the server maps the same file there (host_files.py). */
CW_IN_PYTHON int cuwire_py_host_register_file(uint64_t address, uint64_t size, const char *path, uint64_t offset,
                                              uint64_t device, uint64_t inode);
CW_IN_PYTHON int cuwire_py_host_unregister_file(uint64_t address);

/* Streams and events made ahead, in batches (handle_pools.c, through client/launches.py), and every attribute
 * of a kernel or function asked at once (answers_cache.c): CUDA results. */
CW_IN_PYTHON int cuwire_py_make_handles(uint32_t kind, uint32_t flags, int32_t priority, uint32_t count, uint64_t *out,
                           uint32_t *made);
/* A copy between the memory of two servers of a device list, server to server (runtime.py, copy_between) */
CW_IN_PYTHON int cuwire_py_copy_between(uint64_t dst, uint64_t src, uint64_t size);
CW_IN_PYTHON int cuwire_py_function_attributes(uint64_t kernel, uint64_t function, int32_t device, int32_t *statuses,
                                  int32_t *values, int count);
int cuwire_note_stream_flags(CUstream *stream, unsigned int flags);
CW_FROM_PYTHON void cuwire_forget_pools(uint64_t context);
/* moves when the kept answers of the kernel a handle is are forgotten (answers_cache.c) */
CW_FROM_PYTHON unsigned long long cuwire_answers_generation_of(uint64_t handle);
/* Occupancy questions asked ahead (answers_cache.c; frames.h's CW_ASK_*): the program's, each as the server
 * answered it, go to its run's list while recording is on; the Preload's answers are kept as the program's. */
CW_IN_PYTHON void cuwire_py_asked(uint32_t ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c);
/* ...and the client's own answer to one, of a kernel it named (cuwire/occupancy.py): 0 and *value, else -1. */
CW_IN_PYTHON int cuwire_py_model_occupancy(uint32_t ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c,
                                           int64_t *value);
CW_FROM_PYTHON void cuwire_record_questions(int on);
/* GPUs of different models (a device list's, or one server's): each answer kept per device (answers_cache.c). */
CW_FROM_PYTHON void cuwire_answers_per_device(int on);
CW_FROM_PYTHON unsigned long long cuwire_answers_cleared(void); /* moves when every kept answer is forgotten */
/* `handle` (a CUkernel or CUfunction given out) is kernel number `kernel` (its image and name: load_lists.py). */
CW_FROM_PYTHON void cuwire_note_kernel(uint64_t handle, uint64_t kernel);
CW_FROM_PYTHON void cuwire_keep_kernel_function(uint64_t kernel, uint64_t function); /* (answers_cache.c) */
CW_FROM_PYTHON void cuwire_keep_answer_ahead(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c,
                                             int64_t value, const int32_t *attributes, const int32_t *values,
                                             int count);
/* The attributes the program set of the kernel of `handle` (answers_cache.c): how many, -1 when unknown. */
CW_FROM_PYTHON int cuwire_sets_of(uint64_t handle, int32_t *attributes, int32_t *values, int most);
/* ...their digest now (0, -1 when unknown), and that of sets given (UINT64_MAX: not sets a program makes) */
CW_FROM_PYTHON int cuwire_sets_digest_now(uint64_t handle, uint64_t *digest);
CW_FROM_PYTHON uint64_t cuwire_sets_digest_of(const int32_t *attributes, const int32_t *values, int count);
void cuwire_forget_limits(void); /* (answers_cache.c: the kept cuCtxGetLimit answers) */
/* Every attribute of a loaded kernel (kernel 1, on dev) or function (0), as its load brought them (answers_cache.c). */
CW_FROM_PYTHON void cuwire_keep_every_attribute(int kernel, uint64_t handle, int dev, const int32_t *statuses,
                                                const int32_t *values, int count);

/* The generated stubs' table (generated/client_stubs.c): each function's name and mode, its calls and the
 * calls its fast path answered, for --stats. */
CW_FROM_PYTHON extern const char *const cuwire_names[];
CW_FROM_PYTHON extern const char *const cuwire_modes[];
CW_FROM_PYTHON extern unsigned long long cuwire_counts[];
CW_FROM_PYTHON extern unsigned long long cuwire_fast_hits[];
CW_FROM_PYTHON extern unsigned long long cuwire_queued_hits[];
CW_FROM_PYTHON extern const int cuwire_n_functions;
CW_IN_PYTHON int cuwire_py_connect(void);
CW_IN_PYTHON uint64_t cuwire_py_export_table_size(const void *uuid);
CW_IN_PYTHON uint64_t cuwire_py_module_functions(uint64_t context, uint64_t module, void *callback, void *userdata);
CW_IN_PYTHON int cuwire_py_flush(int session);
CW_IN_PYTHON int cuwire_py_send_queued(int session);
CW_IN_PYTHON int cuwire_py_callbacks(int route); /* the route's session's host-function connection */
CW_IN_PYTHON int cuwire_py_callbacks_again(int route); /* ...opened again: its descriptor, or -1 */

#endif
