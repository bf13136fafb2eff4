"""The server's C loop over queued calls (server/records.c), driven directly with a table of Python
functions in place of the driver: what reaches the driver, with which arguments, and what is refused."""

from __future__ import annotations

import struct

import pytest

from cuwire.generated import server_handlers as generated
from cuwire.server.backend import cuda_ffi
from cuwire.server.errors import WireError
from cuwire.server.records import RECORD_HEADER, RecordLoop, function_table
from cuwire.server.session import HOST_COPY, RECORD_IDS
from cuwire.wire import layouts

ffi = cuda_ffi()
LAUNCH, LAUNCH_EX, SET_CONTEXT, COPY, COPY_FROM, NODE_SET = RECORD_IDS
LAUNCH_HEAD = layouts.layout("cw_launch_head")  # (cuwire/wire/frames.h, as client/launches.c packs it)
INVALID_HANDLE = 400
INVALID_VALUE = 1
COPY_HEAD = layouts.layout("cw_copy_head")
COPY_FROM_HEAD = layouts.layout("cw_copy_from")


class FakeDriver:
    """Each function the loop calls notes its arguments and returns 0."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        def fn(*args):
            self.calls.append((name, *(self.value(name, a) for a in args)))
            return 0
        return fn

    @staticmethod
    def value(name, a):
        if isinstance(a, ffi.CData) and ffi.typeof(a).kind == "pointer":
            return int(ffi.cast("uintptr_t", a))
        return a


@pytest.fixture
def driver():
    return FakeDriver()


@pytest.fixture
def loop(driver):
    return RecordLoop(function_table(ffi, driver), RECORD_IDS)


def record(name: str, *values) -> bytes:
    fn, layout = next((i, layout) for i, (n, layout) in generated.RECORDS.items() if n == name)
    return RECORD_HEADER.pack(fn, layout.size) + layout.pack(*values)


def launch(kernel: int, params: bytes, stream: int = 0) -> bytes:
    body = LAUNCH_HEAD.pack(kernel, 2, 1, 1, 32, 1, 1, 0, stream) + params
    return RECORD_HEADER.pack(LAUNCH, len(body)) + body


def test_owned_handles_reach_the_driver_others_do_not(loop, driver):
    events = [0x1000 + 16 * i for i in range(5000)]  # enough to grow the set many times
    for e in events:
        loop.own("CUevent_st", e)
    for e in events[::2]:
        loop.disown("CUevent_st", e)
    loop.own("CUstream_st", 0x77)
    data = b"".join(record("cuEventRecord", e, 0x77) for e in events[:10])
    first, fn, count = loop.run(data)
    assert count == 10 and first == INVALID_HANDLE and generated.RECORDS[fn][0] == "cuEventRecord"
    assert [c[1] for c in driver.calls] == events[1:10:2]  # only the ones still owned
    driver.calls.clear()
    # NULL and the special streams always pass; a stream the session did not make does not
    assert loop.run(record("cuEventRecord", events[1], 1) + record("cuEventRecord", events[1], 2))[0] == 0
    assert loop.run(record("cuEventRecord", events[1], 0x78))[0] == INVALID_HANDLE
    assert [c[2] for c in driver.calls] == [1, 2]


def test_a_destroy_takes_its_handle_out_of_the_sessions(loop, driver):
    """A queued destroy (annotation queued_when: cuEventDestroy, cuStreamDestroy) runs in the loop, which
    keeps the session's handles of the kinds it checks: the destroyed handle is no longer the session's,
    for the loop and for the Python session alike (Session.owned asks the loop), and its second destroy
    never reaches the driver."""
    for e in (0x10, 0x20, 0x30):
        loop.own("CUevent_st", e)
    loop.own("CUstream_st", 0x77)
    assert loop.count("CUevent_st") == 3 and sorted(loop.handles("CUevent_st")) == [0x10, 0x20, 0x30]
    assert loop.run(record("cuEventDestroy_v2", 0x20) + record("cuStreamDestroy_v2", 0x77)) == (0, 0, 2)
    assert driver.calls == [("cuEventDestroy_v2", 0x20), ("cuStreamDestroy_v2", 0x77)]
    assert not loop.owns("CUevent_st", 0x20) and loop.owns("CUevent_st", 0x10) and not loop.owns("CUstream_st", 0x77)
    assert loop.count("CUevent_st") == 2 and sorted(loop.handles("CUevent_st")) == [0x10, 0x30]
    first, fn, _ = loop.run(record("cuEventDestroy_v2", 0x20))
    assert first == INVALID_HANDLE and generated.RECORDS[fn][0] == "cuEventDestroy_v2" and len(driver.calls) == 2
    assert loop.run(record("cuEventRecord", 0x20, 0))[0] == INVALID_HANDLE  # nor does any use of it


def test_a_failed_destroy_leaves_its_handle_the_sessions():
    """The driver refused: the handle stays the session's (as the Python handler's `disowns` only on success)."""
    class Refusing(FakeDriver):
        def cuEventDestroy_v2(self, event):
            return 700

    loop = RecordLoop(function_table(ffi, Refusing()), RECORD_IDS)
    loop.own("CUevent_st", 0x10)
    assert loop.run(record("cuEventDestroy_v2", 0x10))[0] == 700
    assert loop.owns("CUevent_st", 0x10)


def test_a_kernel_node_set_reaches_the_driver_as_a_nodes_parameters():
    """Record KernelNodeSet (client/kernel_nodes.c queues it): the executable graph's node gets the kernel as a
    CUkernel (`kern`) where it was looked up as one, the grid, block and shared memory, and the parameters
    at the kernel's offsets; an executable graph or node not the session's never reaches the driver."""
    seen = []

    class Nodes(FakeDriver):
        def cuGraphExecKernelNodeSetParams_v2(self, exec_, node, p):
            seen.append((int(ffi.cast("uintptr_t", exec_)), int(ffi.cast("uintptr_t", node)),
                         int(ffi.cast("uintptr_t", p.kern)), int(ffi.cast("uintptr_t", p.func)), p.gridDimX,
                         p.blockDimX, p.sharedMemBytes, ffi.cast("int *", p.kernelParams[1])[0]))
            return 0

    loop = RecordLoop(function_table(ffi, Nodes()), RECORD_IDS)
    loop.kernel(0xabc, 0xabc, [0, 8], [8, 4], is_kernel=True)
    loop.own("CUgraphExec_st", 0xe0)
    loop.own("CUgraphNode_st", 0x10)
    head = layouts.layout("cw_node_set_head")

    def node_set(exec_: int, node: int, params: bytes = struct.pack("<Qi", 0xdead0000, 7)) -> bytes:
        body = head.pack(exec_, node, 0xabc, 3, 1, 1, 256, 1, 1, 0) + params
        return RECORD_HEADER.pack(NODE_SET, len(body)) + body

    assert loop.run(node_set(0xe0, 0x10)) == (0, 0, 1)
    assert seen == [(0xe0, 0x10, 0xabc, 0, 3, 256, 0, 7)]
    assert loop.run(node_set(0xe1, 0x10))[0] == INVALID_HANDLE and loop.run(node_set(0xe0, 0x11))[0] == INVALID_HANDLE
    assert len(seen) == 1
    with pytest.raises(WireError, match="the kernel takes 12"):
        loop.run(node_set(0xe0, 0x10, b"\0" * 8))


def test_values_arrive_as_packed(loop, driver):
    loop.own("CUstream_st", 0x55)
    loop.add_memory(0xdead0000, 4096)
    assert loop.run(record("cuMemsetD8Async", 0xdead0000, 0xab, 4096, 0x55)) == (0, 0, 1)
    assert driver.calls == [("cuMemsetD8Async", 0xdead0000, 0xab, 4096, 0x55)]
    # a range past the session's memory (annotations: `range`) never reaches the driver
    assert loop.run(record("cuMemsetD8Async", 0xdead0000, 0xab, 4097, 0x55))[0] == 1
    assert len(driver.calls) == 1


def test_launch_lays_parameters_out_and_checks_its_kernel(loop, driver):
    seen = []

    def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        seen.append((int(ffi.cast("uintptr_t", f)), gx, bx, ffi.cast("uint64_t *", params[0])[0],
                     ffi.cast("uint32_t *", params[1])[0]))
        return 0

    driver.cuLaunchKernel = cuLaunchKernel
    loop = RecordLoop(function_table(ffi, driver), RECORD_IDS)
    loop.kernel(0xabc, 0xf00, [0, 8], [8, 4])
    params = struct.pack("<QI", 0x1122334455667788, 7)
    assert loop.run(launch(0xabc, params)) == (0, 0, 1)
    assert seen == [(0xf00, 2, 32, 0x1122334455667788, 7)]
    assert loop.run(launch(0xabd, params))[0] == INVALID_HANDLE  # never looked up
    assert loop.run(launch(0xabc, params, stream=0x99))[0] == INVALID_HANDLE  # a stream it did not make
    with pytest.raises(WireError, match="sent 4 bytes, the kernel takes 12"):
        loop.run(launch(0xabc, params[:4]))
    assert loop.launch(0xabc, (1, 1, 1), (1, 1, 1), 0, 0, params) == 0  # the synchronous path


@pytest.mark.parametrize("data, why", [
    (b"\x01\x02", "truncated"),
    (RECORD_HEADER.pack(7, 0), "unknown queued function id"),
    (RECORD_HEADER.pack(LAUNCH, 100) + b"x", "runs past the batch"),
    (RECORD_HEADER.pack(LAUNCH, 8) + bytes(8), "shorter than its"),
    (RECORD_HEADER.pack(LAUNCH_EX, LAUNCH_HEAD.size + 8) + LAUNCH_HEAD.pack(1, 1, 1, 1, 1, 1, 1, 0, 0)
     + struct.pack("<II", 1000, 0), "launch attributes run past the record"),
    (RECORD_HEADER.pack(SET_CONTEXT, 4) + bytes(4), "expected 8"),
    (RECORD_HEADER.pack(COPY, 8) + bytes(8), "queued copy of 8 bytes"),
])
def test_malformed_records_are_refused(loop, data, why):
    with pytest.raises(WireError, match=why):
        loop.run(data)


def test_context_switch_needs_a_context_of_the_session(loop, driver):
    ctx = struct.pack("<Q", 0x5000)
    assert loop.run(RECORD_HEADER.pack(SET_CONTEXT, 8) + ctx)[0] == INVALID_HANDLE
    loop.own("CUctx_st", 0x5000)
    assert loop.run(RECORD_HEADER.pack(SET_CONTEXT, 8) + ctx) == (0, 0, 1)
    assert driver.calls == [("cuCtxSetCurrent", 0x5000)]


def copy(dst: int, data: bytes, stream: int = 0, sync: bool = False) -> bytes:
    body = COPY_HEAD.pack(dst, stream, int(sync), 0) + data
    return RECORD_HEADER.pack(COPY, len(body)) + body


def test_copies_reach_only_the_sessions_memory(driver):
    got = []

    def cuMemcpyHtoDAsync_v2(dst, src, n, stream):
        got.append(("async", dst, bytes(ffi.buffer(src, n)), int(ffi.cast("uintptr_t", stream))))
        return 0

    def cuMemcpyHtoD_v2(dst, src, n):
        got.append(("sync", dst, bytes(ffi.buffer(src, n))))
        return 0

    driver.cuMemcpyHtoDAsync_v2, driver.cuMemcpyHtoD_v2 = cuMemcpyHtoDAsync_v2, cuMemcpyHtoD_v2
    loop = RecordLoop(function_table(ffi, driver), RECORD_IDS)
    for base in (0x30000, 0x10000, 0x20000):  # out of order: the map keeps them sorted
        loop.add_memory(base, 0x1000)
    loop.own("CUstream_st", 0x44)
    assert loop.run(copy(0x20ffc, b"abcd", 0x44) + copy(0x10000, b"xy", sync=True)) == (0, 0, 2)
    assert got == [("async", 0x20ffc, b"abcd", 0x44), ("sync", 0x10000, b"xy")]
    got.clear()
    assert loop.run(copy(0x20ffd, b"abcd"))[0] == INVALID_VALUE  # one byte past the end
    assert loop.run(copy(0x40000, b"abcd"))[0] == INVALID_VALUE  # memory the session does not have
    assert loop.run(copy(0x20000, b"abcd", 0x45))[0] == INVALID_HANDLE  # a stream it did not make
    loop.remove_memory(0x20000)
    assert loop.run(copy(0x20000, b"abcd"))[0] == INVALID_VALUE  # freed
    assert got == []
    assert loop.in_memory(0x10000, 0x1000) and loop.in_memory(0x30fff, 1) and not loop.in_memory(0x30fff, 2)


def copy_from(src: int, n: int, stream: int = 0, sync: bool = True) -> bytes:
    return RECORD_HEADER.pack(COPY_FROM, COPY_FROM_HEAD.size) + COPY_FROM_HEAD.pack(src, stream, int(sync), n)


def test_a_records_frame_runs_its_queued_calls_then_its_call(driver):
    def cuMemcpyDtoH_v2(dst, src, n):
        ffi.memmove(dst, bytes(range(n)), n)
        return 0

    driver.cuMemcpyDtoH_v2 = cuMemcpyDtoH_v2
    loop = RecordLoop(function_table(ffi, driver), RECORD_IDS)
    loop.add_memory(0x10000, 0x1000)
    loop.own("CUstream_st", 0x44)
    bad_event = record("cuEventRecord", 0x999, 0)
    status, first, fn, count, result = loop.call(bad_event + copy_from(0x10000, 8))
    assert (status, first, generated.RECORDS[fn][0], count, result) == (0, INVALID_HANDLE, "cuEventRecord", 2,
                                                                        bytes(range(8)))
    # a call that fails brings no bytes; its status is the call's own
    assert loop.call(copy_from(0x10ffc, 8))[:1] + loop.call(copy_from(0x10ffc, 8))[4:] == (INVALID_VALUE, b"")
    status, first, _, _, _ = loop.call(record("cuStreamSynchronize", 0x44))
    assert (status, first) == (0, 0) and driver.calls[-1] == ("cuStreamSynchronize", 0x44)
    assert loop.call(record("cuStreamSynchronize", 0x45))[0] == INVALID_HANDLE
    with pytest.raises(WireError, match="larger than"):
        loop.call(copy_from(0x10000, 1 << 20))
    with pytest.raises(WireError, match="outside a call"):
        loop.run(copy_from(0x10000, 8))  # queued: no result to put it in
    with pytest.raises(WireError, match="without its call"):
        loop.call(b"")


@pytest.mark.parametrize("spin_us", [0, 200])
def test_serve_answers_records_frames_and_hands_back_other_frames(driver, spin_us):
    """The session's wait for its next frame (records.c serve), with and without polling first: a records
    frame is answered on the socket; a frame of another kind comes back whole, and a deferred error that
    no answer took comes back with it."""
    import socket
    import threading

    from cuwire.server.records import CALL_REPLY, Served
    from cuwire.wire.transport import HEADER, MAGIC, MAGIC_QUEUED, MAGIC_RECORDS

    loop = RecordLoop(function_table(ffi, driver), RECORD_IDS)
    loop.spin(spin_us)
    loop.own("CUstream_st", 0x44)
    here, there = socket.socketpair()
    sync = record("cuStreamSynchronize", 0x44)
    out: list = []
    server = threading.Thread(target=lambda: out.append(loop.serve(there.fileno(), b"", 0)))
    server.start()
    here.sendall(HEADER.pack(MAGIC_RECORDS, len(sync), 0) + sync)
    answer = here.recv(4096)
    magic, size, _ = HEADER.unpack(answer[:HEADER.size])
    assert (magic, size) == (MAGIC_RECORDS, CALL_REPLY.size)
    assert CALL_REPLY.unpack(answer[HEADER.size:]) == (0, 0, 0, 0, 0, 0)
    other = HEADER.pack(MAGIC, 3, 0)
    here.sendall(other)
    server.join(10)
    assert out == [Served(other, 0, 1, 0, 0, "")] and driver.calls[-1] == ("cuStreamSynchronize", 0x44)
    # a deferred error that nothing answered is handed back; one that an answer carried is not
    assert loop.serve(there.fileno(), other, 7) == Served(other, len(other), 0, 7, 0, "")
    here.sendall(HEADER.pack(MAGIC_RECORDS, len(sync), 0) + sync + other)
    assert loop.serve(there.fileno(), b"", 7) == Served(other, 0, 1, 0, 0, "")
    assert CALL_REPLY.unpack(here.recv(4096)[HEADER.size:])[:2] == (0, 7)
    # queued calls sent early get no answer; their first error goes with the next answer, with its function
    bad_event = record("cuEventRecord", 0x999, 0x44)
    here.sendall(HEADER.pack(MAGIC_QUEUED, len(bad_event), 0) + bad_event)
    here.sendall(HEADER.pack(MAGIC_QUEUED, len(sync), 0) + sync)
    here.sendall(HEADER.pack(MAGIC_RECORDS, len(sync), 0) + sync + other)
    assert loop.serve(there.fileno(), b"", 0) == Served(other, 0, 3, 0, 0, "")
    status, first, fn, _, _, _ = CALL_REPLY.unpack(here.recv(4096)[HEADER.size:])
    assert (status, first, generated.RECORDS[fn][0]) == (0, INVALID_HANDLE, "cuEventRecord")
    # ...or, when no answer came before a frame of another kind, with Python's next reply
    here.sendall(HEADER.pack(MAGIC_QUEUED, len(bad_event), 0) + bad_event + other)
    done = loop.serve(there.fileno(), b"", 0)
    assert (done.deferred_error, generated.RECORDS[done.deferred_fn][0]) == (INVALID_HANDLE, "cuEventRecord")
    # a malformed frame of queued calls: refused, and the next answer says why
    here.sendall(HEADER.pack(MAGIC_QUEUED, 2, 0) + b"\x01\x02")
    here.sendall(HEADER.pack(MAGIC_RECORDS, len(sync), 0) + sync + other)
    assert loop.serve(there.fileno(), b"", 0).header == other
    answer = here.recv(4096)[HEADER.size:]
    status, first, fn, n_result, n_error, _ = CALL_REPLY.unpack_from(answer)
    assert (first, fn, n_result) == (999, 0, 0) and b"queued calls refused" in answer[CALL_REPLY.size:]
    here.close()
    assert loop.serve(there.fileno(), b"", 0) == Served(None, 0, 0, 0, 0, "")  # the end of the stream
    there.close()


def test_service_times_fall_in_their_buckets(loop):
    """The metrics' histogram (records.c counts, metrics.LATENCY_BOUNDS_US names the bounds: the same)."""
    for us in (5, 10, 11, 20_000, 20_000_000):
        loop.observe(us * 1000, 1, 2)
    f = loop.figures()
    assert f["latency"] == [2, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1]
    assert (f["bytes_in"], f["bytes_out"], f["latency_ns"]) == (5, 10, (5 + 10 + 11 + 20_000 + 20_000_000) * 1000)


def test_every_handle_kind_the_generated_records_check_is_known_to_the_loop():
    """A call made in C whose parameters name a handle kind the loop does not list (records.c's CW_KINDS)
    would not build: listed here by name, before a compiler meets it."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "cuwire"
    used = set(re.findall(r"CW_KIND_(\w+)", (root / "generated" / "server_records.c").read_text()))
    listed = re.search(r"#define CW_KINDS\(X\)(.*?)\nenum", (root / "server" / "records.c").read_text(), re.S)
    assert listed, "records.c no longer defines CW_KINDS"
    assert used <= set(re.findall(r"X\((\w+)\)", listed.group(1))), "add these to CW_KINDS in records.c"


def test_a_large_frame_arrives_whole_and_an_announced_one_costs_what_came(driver):
    """records.c reads a frame into a buffer that grows as its bytes arrive (64 KiB, then twice as much):
    a frame of 20,000 queued calls (320 KiB) runs whole, through the buffer's growth; a header that
    announces 60 MiB and sends 1 KiB before the connection closes is refused by name."""
    import socket
    import threading

    from cuwire.wire.transport import HEADER, MAGIC, MAGIC_QUEUED, MAGIC_RECORDS, TransportError

    loop = RecordLoop(function_table(ffi, driver), RECORD_IDS)
    loop.own("CUstream_st", 0x44)
    sync = record("cuStreamSynchronize", 0x44)
    many = sync * 20_000
    here, there = socket.socketpair()
    out: list = []
    server = threading.Thread(target=lambda: out.append(loop.serve(there.fileno(), b"", 0)))
    server.start()
    other = HEADER.pack(MAGIC, 3, 0)
    here.sendall(HEADER.pack(MAGIC_QUEUED, len(many), 0) + many + HEADER.pack(MAGIC_RECORDS, len(sync), 0) + sync
                 + other)
    server.join(30)
    assert out and out[0].header == other and out[0].count == 20_001
    assert sum(1 for c in driver.calls if c == ("cuStreamSynchronize", 0x44)) == 20_001
    here.sendall(HEADER.pack(MAGIC_QUEUED, 60 << 20, 0) + bytes(1024))
    here.close()
    with pytest.raises(TransportError, match="closed in the middle of a frame"):
        loop.serve(there.fileno(), b"", 0)
    there.close()


HOST_COPY_HEAD = layouts.layout("cw_host_copy")
HOST_WRITE, HOST_WRITE_RUNS = (layouts.constant(n) for n in ("CW_HOST_WRITE", "CW_HOST_WRITE_RUNS"))


def host_copy(address: int, n: int, kind: int, tail: bytes = b"") -> bytes:
    body = HOST_COPY_HEAD.pack(address, n, kind) + tail
    return RECORD_HEADER.pack(HOST_COPY, len(body)) + body


def runs(*pieces: tuple[int, bytes]) -> bytes:
    return (struct.pack("<I", len(pieces)) + b"".join(struct.pack("<II", at, len(b)) for at, b in pieces)
            + b"".join(b for _, b in pieces))


def test_host_copies_reach_only_the_sessions_mapped_host_memory(loop):
    """Page-locked memory of a client over TCP that the session mapped at the client's address (session.py,
    map_host): the client's writes, whole or in runs, made by the loop's CPU in no stream."""
    memory = ffi.new("char[]", 4096)
    base = int(ffi.cast("uintptr_t", memory))
    loop.add_host(HOST_COPY, base, 4096)
    assert loop.run(host_copy(base + 10, 4, HOST_WRITE, b"abcd")) == (0, 0, 1)
    assert loop.run(host_copy(base, 64, HOST_WRITE_RUNS, runs((0, b"xy"), (20, b"Z")))) == (0, 0, 1)
    assert ffi.buffer(memory, 24)[:] == b"xy" + bytes(8) + b"abcd" + bytes(6) + b"Z" + bytes(3)
    assert loop.run(host_copy(base + 4094, 4, HOST_WRITE, b"abcd"))[0] == INVALID_VALUE  # past the end
    assert loop.run(host_copy(base + 8192, 2, HOST_WRITE, b"ab"))[0] == INVALID_VALUE  # not the session's
    loop.remove_host(base)
    assert loop.run(host_copy(base, 4, HOST_WRITE, b"abcd"))[0] == INVALID_VALUE  # unmapped
    assert ffi.buffer(memory, 2)[:] == b"xy"


@pytest.mark.parametrize("data, why", [
    (host_copy(0x1000, 4, HOST_WRITE, b"abc"), "host copy of"),
    (host_copy(0x1000, 4, 7), "host copy of"),
    (host_copy(0x1000, 4, 0), "host copy of"),
    (host_copy(0x1000, 64, HOST_WRITE_RUNS, b"\x01"), "without their count"),
    (host_copy(0x1000, 64, HOST_WRITE_RUNS, struct.pack("<I", 1000)), "runs in"),
    (host_copy(0x1000, 64, HOST_WRITE_RUNS, runs((60, b"abcdefgh"))), "outside 64 bytes"),
    (host_copy(0x1000, 64, HOST_WRITE_RUNS, runs((0, b"ab")) + b"c"), "runs of 2 bytes with 3"),
])
def test_malformed_host_copies_are_refused(loop, data, why):
    with pytest.raises(WireError, match="unknown queued function id"):
        loop.run(data)  # a session that mapped no host memory takes no host copy at all
    loop.add_host(HOST_COPY, 0x1000, 64)  # (never written: each record is refused before it is run)
    with pytest.raises(WireError, match=why):
        loop.run(data)
