"""A session's loop over queued calls, in C (records.c, built as cuwire.server._records), and what it must
know to check them: the handles and kernels the session made.

The loop keeps the session's handles of the kinds it checks (Session.owns_handle puts them here, and a
queued destroy takes one out); the Python session keeps the other kinds. The loop calls the backend's
functions through a table of their addresses: the real library's, or cffi callbacks into the emulated
device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cuwire.server._records import ffi, lib
from cuwire.server.backend import prototypes
from cuwire.server.errors import NOT_SUPPORTED, CudaFail, WireError
from cuwire.server.metrics import LATENCY_BOUNDS_US  # (records.c CW_LATENCY_BOUNDS: the same)
from cuwire.wire import layouts
from cuwire.wire.transport import TransportError

RECORD_HEADER = layouts.layout("cw_record_header")  # each queued call: function id, record size; then the record
CALL_REPLY = layouts.layout("cw_call_reply")  # a records frame's answer; its result, error text and output follow
OUTPUT_MAX = 64 << 10  # device printf output one answer carries (records.c)
CALL_RESULT_MAX = layouts.constant("CW_CALL_RESULT_MAX")
UNKNOWN = 999  # what a callback into the emulated device returns when it raised (traceback on stderr)


def function_table(backend_ffi, backend_lib) -> list[tuple[int, object]]:
    """(address, what keeps it alive) of each function the loop calls, in its table's order."""
    out = []
    i = 0
    while (name := lib.cw_records_function(i)) != ffi.NULL:
        name = ffi.string(name).decode()
        fn = getattr(backend_lib, name)
        if isinstance(fn, backend_ffi.CData):  # the real library (cffi's ABI mode): a function pointer
            out.append((int(backend_ffi.cast("uintptr_t", fn)), None))
        else:  # the emulated device: Python, called back with the arguments as C gives them
            params = prototypes()[name]
            callback = backend_ffi.callback(f"int(*)({params})", fn, error=UNKNOWN)
            out.append((int(backend_ffi.cast("uintptr_t", callback)), callback))
        i += 1
    return out


def capture_output() -> None:
    """In a session process of its own: stdout becomes a pipe that records.c drains, so that device printf
    output (which the driver writes to stdout) goes back to the program with the answers."""
    import os

    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.dup2(write_end, 1)
    os.close(write_end)
    if lib.cw_output_start(read_end) != 0:
        raise OSError("cannot start the thread that gathers device printf output")


def output_take() -> bytes:
    buf = ffi.new("char[]", OUTPUT_MAX)
    return bytes(ffi.buffer(buf, lib.cw_output_take(buf, OUTPUT_MAX)))


class RecordLoop:
    def __init__(self, table: Sequence[tuple[int, object]], ops: tuple[int, int, int, int, int, int]):
        """`ops`: the ids of cuwire's own records LaunchKernel, LaunchKernelEx, SetContext, CopyToDevice,
        CopyFromDevice, KernelNodeSet."""
        self.state = ffi.gc(lib.cw_records_new(), lib.cw_records_free)
        if self.state == ffi.NULL:
            raise MemoryError("no memory for the session's record loop")
        self.keep = [owner for _, owner in table]
        for i, (address, _) in enumerate(table):
            lib.cw_records_set_function(self.state, i, address)
        lib.cw_records_ops(self.state, *ops)
        self.kinds: dict[str, int] = {}
        self.out = ffi.new("int *"), ffi.new("uint32_t *"), ffi.new("uint64_t *")
        self.call_out = ffi.new("int *"), ffi.new("uint32_t *")  # status, result length (call)
        self.result = ffi.new("char[]", CALL_RESULT_MAX)

    def own_context(self, own: bool) -> None:
        """Whether the session has a process and a context of its own: work captured into a graph may then
        name any address, as the driver lets it (records.c, cw_stream_range)."""
        lib.cw_records_own_context(self.state, int(own))

    def spin(self, microseconds: int) -> None:
        """How long serve polls the socket for the next frame before it sleeps (socket_wait.h)."""
        lib.cw_records_spin(self.state, microseconds)

    def idle(self, seconds: float) -> None:
        """A client that sends nothing for this long ends its session (CUWIRE_IDLE_TIMEOUT; 0: never)."""
        lib.cw_records_idle(self.state, int(seconds * 1000))

    def kind(self, name: str) -> int:
        k = self.kinds.get(name)
        if k is None:
            k = self.kinds[name] = lib.cw_records_kind(name.encode())
        return k

    def own(self, kind: str, value: int) -> None:
        k = self.kind(kind)
        if k >= 0 and lib.cw_records_own(self.state, k, value) != 0:
            raise MemoryError("no memory for the session's handles")

    def disown(self, kind: str, value: int) -> None:
        k = self.kind(kind)
        if k >= 0:
            lib.cw_records_disown(self.state, k, value)

    def checks(self, kind: str) -> bool:
        """Whether this loop keeps the session's handles of `kind`: then its set is their one list (a queued
        destroy takes its handle out here, without Python), and owns, count and handles answer for it."""
        return self.kind(kind) >= 0

    def owns(self, kind: str, value: int) -> bool:
        return bool(lib.cw_records_owns(self.state, self.kind(kind), value))

    def count(self, kind: str) -> int:
        return lib.cw_records_count(self.state, self.kind(kind))

    def handles(self, kind: str) -> list[int]:
        n = self.count(kind)
        out = ffi.new("uint64_t[]", max(n, 1))
        return list(out[0:lib.cw_records_handles(self.state, self.kind(kind), out, n)])

    def ring(self, host_func: int, shared) -> None:
        """Shared memory with a client on this host (ring.Ring, made with this module's ffi), or None: its
        host functions (HostFunc records, id host_func) are posted there."""
        lib.cw_records_ring(self.state, host_func, shared.c if shared is not None else ffi.NULL)

    def callbacks(self, host_func: int, fd: int, resume: float = 0.0) -> None:
        """A client over TCP: its host functions (HostFunc records, id host_func) are posted on the
        connection `fd`, its host-function connection (Hello.callbacks); when it breaks, a post waits up to
        `resume` seconds for the client's new one (a later call here)."""
        lib.cw_records_callbacks(self.state, host_func, fd, int(resume * 1000))

    def callbacks_stop(self) -> None:
        """The session ends: host functions still waiting for the client are skipped."""
        lib.cw_records_callbacks_stop(self.state)

    def shared(self, copy_shared: int, base: int, size: int) -> None:
        """Host memory shared with a client on this host: CopyShared records (id copy_shared) copy between
        its offsets and the GPU."""
        lib.cw_records_shared(self.state, copy_shared, base, size)

    def add_host(self, host_copy: int, at: int, size: int) -> None:
        """Page-locked memory of a client over TCP mapped here at its address: HostCopy records (id
        host_copy) keep it in step with the client's copy."""
        if lib.cw_records_host_add(self.state, host_copy, at, size) != 0:
            raise CudaFail(NOT_SUPPORTED, f"a session maps at most {layouts.constant('CW_HOST_RANGES_MOST')} "
                                          "ranges of host memory for kernels over TCP")

    def remove_host(self, at: int) -> None:
        lib.cw_records_host_remove(self.state, at)

    def add_memory(self, base: int, size: int) -> None:
        if lib.cw_records_memory_add(self.state, base, size) != 0:
            raise MemoryError("no memory for the session's map of device memory")

    def remove_memory(self, base: int) -> None:
        lib.cw_records_memory_remove(self.state, base)

    def refused_range(self) -> str:
        """The last device range a queued record named outside the session's memory, said once ("" if none)."""
        address, size = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        if not lib.cw_records_refused_range(self.state, address, size):
            return ""
        return f"{size[0]} bytes at {address[0]:#x} are not in this session's memory"

    def in_memory(self, address: int, size: int) -> bool:
        """Whether the range lies in one allocation (or module global) of the session."""
        return bool(lib.cw_records_in_memory(self.state, address, size))

    def kernel(self, key: int, func: int, offsets: Sequence[int], sizes: Sequence[int],
               is_kernel: bool = False) -> None:
        """Launches naming `key` run the function at address `func` (a CUkernel with is_kernel: a graph's kernel
        node takes it as such), parameters at these offsets."""
        n = len(offsets)
        if lib.cw_records_kernel(self.state, key, func, int(is_kernel), n,
                                 ffi.new("uint32_t[]", list(offsets) or [0]),
                                 ffi.new("uint32_t[]", list(sizes) or [0])) != 0:
            raise MemoryError("no memory for the session's kernels")

    def launch(self, kernel: int, grid: Sequence[int], block: Sequence[int], shared_mem: int, stream: int,
               params: bytes) -> int:
        """A launch that waits for its answer (op LaunchKernel); the CUDA result."""
        if shared_mem >= 1 << 32:
            raise WireError(f"a launch with {shared_mem} bytes of shared memory")
        err = lib.cw_records_launch(self.state, kernel, list(grid), list(block), shared_mem, stream, params,
                                    len(params), ffi.NULL, 0)
        if err < 0:
            raise WireError(ffi.string(lib.cw_records_why(self.state)).decode())
        return err

    def run(self, data: bytes) -> tuple[int, int, int]:
        """Run a batch's records: (the first error, its function id, how many ran). A record that does not
        parse raises WireError (the records before it ran)."""
        first, fn, count = self.out
        ok = lib.cw_records_run(self.state, data, len(data), first, fn, count)
        if ok != 0:
            raise WireError(ffi.string(lib.cw_records_why(self.state)).decode())
        return first[0], fn[0], count[0]

    def call(self, data: bytes) -> tuple[int, int, int, int, bytes]:
        """Run a records frame: queued calls, then the call the client waits for. (its status, the first
        error of the queued calls, its function id, how many records ran, the call's result bytes). A
        record that does not parse raises WireError (the records before it ran)."""
        first, fn, count = self.out
        status, length = self.call_out
        ok = lib.cw_records_call(self.state, data, len(data), self.result, CALL_RESULT_MAX, length, status, first, fn,
                                 count)
        if ok != 0:
            raise WireError(ffi.string(lib.cw_records_why(self.state)).decode())
        return status[0], first[0], fn[0], count[0], bytes(ffi.buffer(self.result, length[0]))

    def host_node_id(self, arg: int) -> int:
        """The client's id the host node whose argument is `arg` posts; 0 if it is none of the session's."""
        return lib.cw_records_host_node_id(self.state, ffi.cast("void *", arg))

    def host_node(self, host_id: int) -> tuple[int, int]:
        """(function, argument) addresses for a graph host node that posts the client's host function
        `host_id` at every launch; (…, 0) when the session has no way to post it (shared memory with its
        client, or a host-function connection)."""
        fn = ffi.new("void **")
        arg = lib.cw_records_host_node(self.state, host_id, fn)
        return int(ffi.cast("uintptr_t", fn[0])), int(ffi.cast("uintptr_t", arg))

    def observe(self, ns: int, bytes_in: int, bytes_out: int) -> None:
        """A call the Python path served, for the metrics (as the C loop counts its own)."""
        lib.cw_records_observe(self.state, ns, bytes_in, bytes_out)

    def figures(self) -> dict:
        """Bytes of frames in and out, the calls' total service time (ns), and the calls per service-time
        bucket (LATENCY_BOUNDS_US, then beyond)."""
        out = ffi.new("uint64_t[]", 3 + len(LATENCY_BOUNDS_US) + 1)
        lib.cw_records_figures(self.state, out)
        return {"bytes_in": out[0], "bytes_out": out[1], "latency_ns": out[2],
                "latency": list(out[3:3 + len(LATENCY_BOUNDS_US) + 1])}

    def stream(self, conn) -> None:
        """The session's connection is a resumable stream (conn.stream, cuwire/wire/stream.py): the loop
        counts and keeps what it receives and sends there, and a break waits for the resume."""
        self.resume_handle = ffi.new_handle(conn)  # (kept alive while the loop may call back)
        lib.cw_records_stream(self.state, conn.stream.c, self.resume_handle)

    def serve(self, fd: int, pending: bytes, deferred_error: int) -> Served:
        """Serve the records frames that come next on the socket `fd`, in C, until a frame of another
        kind. `deferred_error` goes with the first answer. A broken connection raises TransportError."""
        used, header, count = ffi.new("size_t *"), ffi.new("char[16]"), ffi.new("uint64_t *")
        deferred, deferred_fn = ffi.new("int *", deferred_error), ffi.new("uint32_t *")
        r = lib.cw_records_serve(self.state, fd, pending, len(pending), used, header, deferred, deferred_fn, count)
        why = ffi.string(lib.cw_records_why(self.state)).decode()
        if r < 0:
            raise TransportError(why)
        return Served(bytes(ffi.buffer(header, 16)) if r == 1 else None, used[0], count[0], deferred[0],
                      deferred_fn[0], why)


@ffi.def_extern()
def cw_records_resume(arg) -> int:
    """records.c's connection broke: 1 when the session's stream resumed it (Connection.resumed)."""
    return 1 if ffi.from_handle(arg).resumed() else 0


@dataclass(frozen=True)
class Served:
    """What RecordLoop.serve ended with."""

    header: bytes | None  # the next frame's header (a frame of another kind), or None at the stream's end
    used: int  # how many of the bytes read ahead it took
    count: int  # records run
    deferred_error: int  # an error for the next answer: the one given, if no answer took it, or a queued one's
    deferred_fn: int  # the function id of a queued call's error (0: the one given, or a refusal)
    refusal: str  # why a frame of queued calls was refused, when that is the error
