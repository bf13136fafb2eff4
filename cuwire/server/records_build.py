"""Build the server's C loop over queued calls (server/records.c) as the extension cuwire.server._records.

cffi's out-of-line API mode: setup.py names `ffibuilder` in its cffi_modules, so `pip install` compiles it
(it needs a C compiler and the Python headers where the package is installed, as the client does).
`python -m cuwire.server.records_build` builds it in place, for a checkout.
"""

from __future__ import annotations

from pathlib import Path

import cffi

SERVER = Path(__file__).resolve().parent
GENERATED = SERVER.parent / "generated"
# shared memory for payloads (cuwire/wire/ring.py): the declarations between the header's cdef markers
_RING = (SERVER.parent / "wire" / "shm_ring.h").read_text()
RING_CDEF = _RING[_RING.index("/* cffi cdef: from here"):_RING.index("/* cffi cdef: to here")].split("\n", 1)[1]
# ...and the session's stream, kept for a resume (cuwire/wire/stream.py)
_STREAM = (SERVER.parent / "wire" / "stream.h").read_text()
STREAM_CDEF = _STREAM[_STREAM.index("/* cffi cdef: from here"):_STREAM.index("/* cffi cdef: to here")].split("\n", 1)[1]

CDEF = """
typedef struct cw_records cw_records;
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
cw_records *cw_records_new(void);
void cw_records_free(cw_records *s);
const char *cw_records_function(int i);
void cw_records_set_function(cw_records *s, int i, uintptr_t address);
int cw_records_kind(const char *name);
int cw_records_own(cw_records *s, int kind, uint64_t v);
void cw_records_disown(cw_records *s, int kind, uint64_t v);
int cw_records_owns(const cw_records *s, int kind, uint64_t v);
size_t cw_records_count(const cw_records *s, int kind);
size_t cw_records_handles(const cw_records *s, int kind, uint64_t *out, size_t max);
int cw_records_kernel(cw_records *s, uint64_t key, uintptr_t func, int is_kernel, uint32_t n,
                      const uint32_t *offsets, const uint32_t *sizes);
int cw_records_launch(cw_records *s, uint64_t kernel, const uint32_t *grid, const uint32_t *block,
                      uint32_t shared_mem, uint64_t stream, const char *params, size_t len,
                      const CUlaunchAttribute *attrs, uint32_t n_attrs);
int cw_records_run(cw_records *s, const char *data, size_t len, int *first_error, uint32_t *first_fn,
                   uint64_t *count);
void cw_records_ops(cw_records *s, uint32_t launch, uint32_t launch_ex, uint32_t set_context, uint32_t copy,
                    uint32_t copy_from, uint32_t node_set);
int cw_records_call(cw_records *s, const char *data, size_t len, char *out, uint32_t out_cap, uint32_t *out_len,
                    int *status, int *first_error, uint32_t *first_fn, uint64_t *count);
void cw_records_shared(cw_records *s, uint32_t copy_shared, uintptr_t base, uint64_t size);
int cw_records_host_add(cw_records *s, uint32_t host_copy, uint64_t at, uint64_t size);
void cw_records_host_remove(cw_records *s, uint64_t at);
void cw_records_ring(cw_records *s, uint32_t host_func, cw_ring *ring);
void cw_records_callbacks(cw_records *s, uint32_t host_func, int fd, long resume_ms);
void cw_records_callbacks_stop(cw_records *s);
int cw_output_start(int fd);
size_t cw_output_take(char *out, size_t cap);
int cw_records_memory_add(cw_records *s, uint64_t base, uint64_t size);
void cw_records_memory_remove(cw_records *s, uint64_t base);
int cw_records_in_memory(const cw_records *s, uint64_t address, uint64_t size);
const char *cw_records_why(const cw_records *s);
int cw_records_refused_range(cw_records *s, uint64_t *address, uint64_t *size);
void cw_records_own_context(cw_records *s, int own);
void cw_records_spin(cw_records *s, long microseconds);
void cw_records_idle(cw_records *s, long milliseconds);
void cw_records_observe(cw_records *s, uint64_t ns, uint64_t in, uint64_t out);
void *cw_records_host_node(cw_records *s, uint64_t id, void **fn);
uint64_t cw_records_host_node_id(const cw_records *s, const void *arg);
void cw_records_figures(const cw_records *s, uint64_t *out);
void cw_records_stream(cw_records *s, cw_stream *stream, void *resume_arg);
extern "Python" int cw_records_resume(void *);
int cw_records_serve(cw_records *s, int fd, const char *pending, size_t pending_len, size_t *used,
                     char *header_out, int *deferred_error, uint32_t *deferred_fn, uint64_t *count);
"""

ffibuilder = cffi.FFI()
ffibuilder.cdef(RING_CDEF + STREAM_CDEF + CDEF)
ffibuilder.set_source(
    "cuwire.server._records", '#define CW_STREAM_IMPLEMENTATION\n#include "records.c"\n'
                              '#define CW_RING_IMPLEMENTATION\n#include "shm_ring.h"\n',
    include_dirs=[str(SERVER), str(GENERATED), str(SERVER.parent / "wire")],  # socket_wait.h, shm_ring.h, stream.h
    extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"],
)

if __name__ == "__main__":
    # in place, for a checkout: the extension lands beside this file, where `import cuwire.server._records`
    # finds it (the C and object files are left in a temporary folder)
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        built = Path(ffibuilder.compile(tmpdir=tmp, verbose=False))
        for stale in SERVER.glob("_records.*.so"):  # an earlier build's, perhaps under another suffix
            stale.unlink()
        shutil.copy(built, SERVER / built.name)
        print(f"built {SERVER / built.name}")
