"""Bad input from the wire gets a clear error reply; the session and the server go on.

make gpu-test runs this file against the real GPU too (CUWIRE_TEST_BACKEND=cuda)."""

from __future__ import annotations

import functools
import os
import re
import socket
import struct
import time

import pytest
from conftest import BACKEND, ServerProcess

from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import server_handlers as generated
from cuwire.settings import host_port
from cuwire.wire import ring
from cuwire.wire.transport import HEADER, MAGIC, SocketTransport, TransportError, open_session

HELLO = pb.Hello(client_version="test", cuda_version=generated.CUDA_VERSION, api_digest=generated.API_DIGEST)


def fn_id(name: str) -> int:
    return next(i for i, (n, _, _) in generated.HANDLERS.items() if n == name)


class RingOnly:
    """The client's side of shared memory for payloads, through the server's build of the same C (no host
    memory for page-locked allocations: none is reserved)."""

    def offer(self, hello: pb.Hello) -> None:
        hello.ring_size = ring.SIZE

    def attach(self, fds: list[int], welcome, sock_fd: int):
        from cuwire.server._records import ffi, lib

        for fd in fds[1:]:
            os.close(fd)
        return ring.attach(ffi, lib, fds[0], sock_fd)


@pytest.fixture(params=["tcp", "unix"])
def session(server, request):
    """A session over TCP, and one over the server's Unix socket with payloads in shared memory."""
    shared = request.param == "unix"
    t, reply = open_session(server.address, HELLO, mode=request.param, shared=RingOnly() if shared else None)
    assert not reply.error and reply.welcome.backend == BACKEND
    assert reply.welcome.ring == shared and (t.connection.ring is not None) == shared
    t.welcome = reply.welcome  # (its devices' primary contexts, for calls that need one named)
    yield t
    t.close()


def test_transport_choices_fail_clearly(server):
    port = host_port(server.address)[1]
    with pytest.raises(TransportError, match="not a loopback address"):
        SocketTransport(f"192.0.2.1:{port}", mode="unix")
    with pytest.raises(TransportError, match="over its Unix socket"):
        SocketTransport("127.0.0.1:1", mode="unix")  # nothing listens there
    with pytest.raises(TransportError, match="unknown transport 'shm'"):
        SocketTransport(server.address, mode="shm")
    t = SocketTransport(server.address, mode="auto")  # a local server: its Unix socket
    assert t.connection.kind == "Unix socket"
    t.close()


def test_a_client_that_breaks_the_shared_memory_loses_only_its_session(server):
    """A client that publishes a slot longer than a slot ends its own session; the server goes on."""
    t, reply = open_session(server.address, HELLO, mode="unix", shared=RingOnly())
    shared = t.connection.ring
    assert shared is not None
    device = allocate(t, 1 << 20)
    args = pb.cuMemcpyHtoD_v2_Args(dstDevice=device, ByteCount=1 << 20)
    head = pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=args.SerializeToString()).SerializeToString()
    t.connection.sock.sendall(HEADER.pack(MAGIC, len(head), 1 << 20) + head)
    from cuwire.server._records import ffi, lib

    lengths = ffi.cast("uint64_t *", ffi.cast("char *", shared.address) + lib.cw_ring_lengths_offset())
    counters = ffi.cast("uint32_t *", ffi.cast("char *", shared.address) + 64)
    lengths[counters[0] % shared.slots] = 10 * shared.slot_size
    counters[0] += 1  # published, with a length no slot has
    with pytest.raises(TransportError):
        t.connection.sock.settimeout(10)
        t.exchange_with_payload(None)
    t.close()
    t2, reply = open_session(server.address, HELLO, mode="unix", shared=RingOnly())
    assert serving(t2)
    t2.close()


def serving(t) -> bool:
    """Whether the session still answers a call (cuMemGetInfo_v2: the device's memory)."""
    reply = t.exchange(pb.Batch(fn=fn_id("cuMemGetInfo_v2"), args=pb.cuMemGetInfo_v2_Args().SerializeToString()))
    res = pb.cuMemGetInfo_v2_Result.FromString(reply.result)
    return not reply.error and res.status == 0 and res.total > 0


def allocate(t, size: int) -> int:
    res = pb.cuMemAlloc_v2_Result.FromString(t.exchange(pb.Batch(
        fn=fn_id("cuMemAlloc_v2"), args=pb.cuMemAlloc_v2_Args(bytesize=size).SerializeToString())).result)
    assert res.status == 0 and res.dptr
    return res.dptr


def test_session_must_start_with_hello(server):
    t = SocketTransport(server.address)
    reply = t.exchange(pb.Batch(fn=fn_id("cuMemGetInfo_v2")))
    assert "starts with a hello" in reply.error
    t.close()


def test_version_mismatch_is_one_clear_message(server):
    t = SocketTransport(server.address)
    bad = pb.Hello(client_version="0.0.1", cuda_version="12.4", api_digest="0123456789abcdef")
    reply = t.exchange(pb.Batch(hello=bad))
    assert reply.error.startswith("version mismatch") and "CUDA 12.4" in reply.error
    t.close()


def test_unknown_function_id(session):
    reply = session.exchange(pb.Batch(fn=0xDEADBEEF))
    assert "unknown function id 0xdeadbeef" in reply.error
    assert serving(session)  # the session goes on


def test_malformed_arguments(session):
    reply = session.exchange(pb.Batch(fn=fn_id("cuMemAlloc_v2"), args=b"\xff\xff\xff\xff"))
    assert "malformed arguments for cuMemAlloc_v2" in reply.error
    assert serving(session)


def test_wrong_buffer_size(session):
    device = allocate(session, 64)
    args = pb.cuMemcpy_Args(dst=device, src_host=b"x" * 10, ByteCount=64)
    reply = session.exchange(pb.Batch(fn=fn_id("cuMemcpy"), args=args.SerializeToString()))
    assert "sent 10 bytes for a 64-byte buffer" in reply.error
    args = pb.cuMemcpyHtoD_v2_Args(dstDevice=device, srcHost=b"x" * 10, ByteCount=64)
    reply = session.exchange(pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=args.SerializeToString()))
    assert "sent 10 bytes for a 64-byte buffer" in reply.error
    huge = pb.cuMemcpy_Args(dst_host=b"", src=device, ByteCount=1 << 62)
    reply = session.exchange(pb.Batch(fn=fn_id("cuMemcpy"), args=huge.SerializeToString()))
    assert "outside 0.." in reply.error
    assert serving(session)


def test_large_buffers_travel_beside_the_message(session):
    """A large buffer's field stays empty and its bytes come in the frame's payload, both ways; a payload
    shorter than the buffers it stands for is refused, and the session goes on."""
    size = 1 << 20
    device = allocate(session, size)
    data = bytes(range(256)) * (size // 256)
    args = pb.cuMemcpyHtoD_v2_Args(dstDevice=device, ByteCount=size)
    reply, back, _ = session.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=args.SerializeToString()),
                                                [memoryview(data)[:size // 2], memoryview(data)[size // 2:]])
    assert not reply.error and pb.cuMemcpyHtoD_v2_Result.FromString(reply.result).status == 0 and not back
    args = pb.cuMemcpyDtoH_v2_Args(srcDevice=device, ByteCount=size)
    reply, back, _ = session.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyDtoH_v2"), args=args.SerializeToString()))
    res = pb.cuMemcpyDtoH_v2_Result.FromString(reply.result)
    assert res.status == 0 and res.dstHost == b"" and back == data
    halves = [bytearray(size // 2), bytearray(size // 2)]  # received straight into the caller's buffers
    reply, back, direct = session.exchange_with_payload(
        pb.Batch(fn=fn_id("cuMemcpyDtoH_v2"), args=args.SerializeToString()), into=halves)
    assert direct == size and not back and b"".join(halves) == data
    args = pb.cuMemcpyHtoD_v2_Args(dstDevice=device, ByteCount=size)
    reply, _, _ = session.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=args.SerializeToString()),
                                             [data[:100]])
    assert "a 1048576-byte copy came with a payload of 100 bytes" in reply.error
    reply, _, _ = session.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=args.SerializeToString(),
                                                      payload_codec=pb.ZSTD), [b"not zstd at all"])
    assert "does not decompress" in reply.error
    assert serving(session)


def test_large_copies_stream_in_chunks(session):
    """Copies larger than the server's streaming buffer (bulk.CHUNK) arrive and leave in pieces: the
    bytes are the same both ways, through cuMemcpyHtoD/DtoH and through cuMemcpy; a range the session
    does not own is refused without losing the stream's step."""
    from cuwire.server.bulk import CHUNK

    size = 2 * CHUNK + 12345
    device = allocate(session, size)
    data = (bytes(range(251)) * (size // 251 + 1))[:size]

    def call(name, payload=(), **fields):
        args = getattr(pb, f"{name}_Args")(**fields).SerializeToString()
        reply, back, _ = session.exchange_with_payload(pb.Batch(fn=fn_id(name), args=args), payload)
        assert not reply.error, reply.error
        return getattr(pb, f"{name}_Result").FromString(reply.result), back

    assert call("cuMemcpyHtoD_v2", [data], dstDevice=device, ByteCount=size)[0].status == 0
    res, back = call("cuMemcpyDtoH_v2", srcDevice=device, ByteCount=size)
    assert res.status == 0 and back == data
    flipped = data[::-1]
    assert call("cuMemcpy", [flipped], dst=device, src_host=b"", ByteCount=size)[0].status == 0
    res, back = call("cuMemcpy", dst_host=b"", src=device, ByteCount=size)
    assert res.status == 0 and back == flipped
    res, back = call("cuMemcpy", [data], dst=device + 4096, src_host=b"", ByteCount=size)
    assert res.status == 1 and not back  # CUDA_ERROR_INVALID_VALUE: past the end of the allocation
    # the streamed paths of cuMemcpyHtoD and DtoH check the range as their generated handlers do (a session
    # sharing a process with others once wrote and read theirs through them)
    assert call("cuMemcpyHtoD_v2", [data], dstDevice=device + 4096, ByteCount=size)[0].status == 1
    res, back = call("cuMemcpyDtoH_v2", srcDevice=device + 4096, ByteCount=size)
    assert res.status == 1 and not back
    res, back = call("cuMemcpyDtoH_v2", srcDevice=0x7F00_0000_1000, ByteCount=size)
    assert res.status == 1 and not back
    assert call("cuMemcpyDtoH_v2", srcDevice=device, ByteCount=size)[1] == flipped  # nothing was touched
    assert serving(session)


def test_truncated_and_unknown_records(session):
    assert "truncated" in session.exchange(pb.Batch(records=b"\x01\x02")).error
    assert "unknown queued function id" in session.exchange(pb.Batch(records=struct.pack("<II", 7, 0))).error
    rec_id = next(i for i, (n, _) in generated.RECORDS.items() if n == "cuEventRecord")
    reply = session.exchange(pb.Batch(records=struct.pack("<II", rec_id, 3) + b"abc"))
    assert "expected 16" in reply.error
    assert serving(session)


def test_queued_calls_sent_without_waiting_report_at_the_next_reply(session):
    """Batches sent early (no_reply) get no answer: their first error, or a refusal of the batch, comes
    with the next reply, once; a batch without reply may not carry a call."""
    rec_id = next(i for i, (n, _) in generated.RECORDS.items() if n == "cuEventRecord")
    bad_event = struct.pack("<II", rec_id, 16) + struct.pack("<QQ", 0x1234_5678, 0)
    session.send_only(pb.Batch(records=bad_event, no_reply=True))
    sync = pb.Batch(fn=fn_id("cuCtxSynchronize"), args=pb.cuCtxSynchronize_Args().SerializeToString())
    reply = session.exchange(sync)
    assert (reply.queued_error, reply.queued_error_fn) == (400, "cuEventRecord")  # CUDA_ERROR_INVALID_HANDLE
    assert session.exchange(sync).queued_error == 0
    session.send_only(pb.Batch(records=b"\x01\x02", no_reply=True))
    reply = session.exchange(sync)
    assert reply.queued_error == 999 and "truncated" in reply.queued_error_fn
    session.send_only(pb.Batch(fn=fn_id("cuCtxSynchronize"), no_reply=True))
    reply = session.exchange(sync)
    assert reply.queued_error == 999 and "queued calls only" in reply.queued_error_fn
    assert serving(session)


def test_unknown_handles_get_cuda_errors(session):
    args = pb.cuStreamSynchronize_Args(hStream=0x1234_5678)
    reply = session.exchange(pb.Batch(fn=fn_id("cuStreamSynchronize"), args=args.SerializeToString()))
    assert not reply.error
    assert pb.cuStreamSynchronize_Result.FromString(reply.result).status == 400  # CUDA_ERROR_INVALID_HANDLE


def test_bad_module_and_kernel_handles(session):
    from cuwire.server.custom import op_id

    reply = session.exchange(pb.Batch(fn=op_id("GetKernel"),
                                      args=pb.GetKernel_Args(module=42, name="k").SerializeToString()))
    assert "was not loaded by this session" in reply.error
    reply = session.exchange(pb.Batch(fn=op_id("LoadModule"),
                                      args=pb.LoadModule_Args(digest=b"short").SerializeToString()))
    assert "digest must be 32 bytes" in reply.error
    reply = session.exchange(pb.Batch(fn=op_id("LoadModule"),
                                      args=pb.LoadModule_Args(digest=b"\0" * 32, image=b"abc").SerializeToString()))
    assert "does not match its digest" in reply.error
    # a preload of the program's last run's modules (client/load_lists.py): bounded, digests checked; a digest
    # the cache lacks is left out, not refused
    reply = session.exchange(pb.Batch(fn=op_id("Preload"), args=pb.Preload_Args(
        modules=[pb.PreloadModule(digest=b"\1" * 32)] * 1025).SerializeToString()))
    assert "1025 modules (at most 1024)" in reply.error
    reply = session.exchange(pb.Batch(fn=op_id("Preload"), args=pb.Preload_Args(
        modules=[pb.PreloadModule(digest=b"short")]).SerializeToString()))
    assert "a digest of 32 bytes" in reply.error
    reply = session.exchange(pb.Batch(fn=op_id("Preload"), args=pb.Preload_Args(
        modules=[pb.PreloadModule(digest=b"\2" * 32, kernels=["k"])]).SerializeToString()))
    assert not reply.error and not pb.Preload_Result.FromString(reply.result).modules
    # ...and so are its questions, and the streams and events it makes (each kind checked as a MakeHandles)
    reply = session.exchange(pb.Batch(fn=op_id("Preload"), args=pb.Preload_Args(
        modules=[pb.PreloadModule(digest=b"\1" * 32, questions=[pb.Question(ask=1, name="k")] * 257)]
    ).SerializeToString()))
    assert "256 questions" in reply.error
    made = pb.MakeHandles_Args(kind=0, count=1)
    reply = session.exchange(pb.Batch(fn=op_id("Preload"), args=pb.Preload_Args(handles=[made] * 65)
                                      .SerializeToString()))
    assert "65 kinds of streams and events (at most 64)" in reply.error
    reply = session.exchange(pb.Batch(fn=op_id("Preload"), args=pb.Preload_Args(
        handles=[pb.MakeHandles_Args(kind=0, count=65)]).SerializeToString()))
    assert "at most 64" in reply.error
    assert serving(session)


def test_a_module_upload_reaches_the_disk_only_once_loaded(session, server):
    """Junk with its right digest is never written to the module cache, whether the driver refuses it (the
    emulated device) or loads it lazily and says success (the real driver)."""
    import hashlib

    from cuwire.server.custom import op_id

    junk = bytes(range(1, 256)) * 64  # neither a fatbin, nor an ELF, nor PTX text
    digest = hashlib.sha256(junk).digest()
    reply = session.exchange(pb.Batch(fn=op_id("LoadModule"),
                                      args=pb.LoadModule_Args(digest=digest, image=junk).SerializeToString()))
    assert not reply.error
    assert not [p for p in server.cache.rglob("*") if digest.hex() in p.name], "junk reached the disk"
    assert serving(session)


@pytest.mark.parametrize("garbage", [
    b"\xff\xfe garbage that is no frame",
    HEADER.pack(MAGIC, 2**31, 0),  # a message over the limit
    HEADER.pack(MAGIC, 5, 0) + b"\xff\xff\xff\xff\xff",  # a message that does not parse
    HEADER.pack(MAGIC, 100, 0) + b"cut short",  # then the connection closes mid-frame
], ids=["no-frame", "too-large", "no-protobuf", "cut-short"])
def test_raw_garbage_does_not_kill_the_server(server, garbage):
    """Bytes that are no cuwire frame end that connection (with a reply where one can be read); the
    server goes on serving others."""
    with socket.create_connection(host_port(server.address), timeout=10) as raw:
        raw.sendall(garbage)
        raw.shutdown(socket.SHUT_WR)
        answer = b""
        try:
            while chunk := raw.recv(4096):
                answer += chunk
        except ConnectionResetError:  # closed with our unread bytes still queued: the kernel resets
            pass
    if garbage.startswith(HEADER.pack(MAGIC, 5, 0)):
        assert b"does not parse" in answer
    else:
        assert answer == b""
    t = SocketTransport(server.address)
    assert not t.exchange(pb.Batch(hello=HELLO)).error
    t.close()


def test_device_ranges_the_session_does_not_own(session):
    """cuMemcpy's device sides (it takes device or host addresses alike) must lie in the session's own
    allocations: the server's own memory is never a copy's source or target."""
    device = allocate(session, 64)
    for dst, count in ((device + 32, 64), (0x7F00_0000_1000, 8), (device - 8, 8)):
        args = pb.cuMemcpy_Args(dst=dst, src_host=b"y" * count, ByteCount=count)
        reply = session.exchange(pb.Batch(fn=fn_id("cuMemcpy"), args=args.SerializeToString()))
        assert not reply.error
        assert pb.cuMemcpy_Result.FromString(reply.result).status == 1  # CUDA_ERROR_INVALID_VALUE, CUDA untouched
    args = pb.cuMemcpy_Args(dst=device + 32, src_host=b"y" * 32, ByteCount=32)
    reply = session.exchange(pb.Batch(fn=fn_id("cuMemcpy"), args=args.SerializeToString()))
    assert pb.cuMemcpy_Result.FromString(reply.result).status == 0  # inside the allocation: fine


def test_handles_are_per_session(server, session):
    created = pb.cuStreamCreate_Result.FromString(session.exchange(pb.Batch(
        fn=fn_id("cuStreamCreate"), args=pb.cuStreamCreate_Args().SerializeToString())).result)
    assert created.status == 0 and created.phStream
    other, reply = open_session(server.address, HELLO)
    assert not reply.error
    args = pb.cuStreamSynchronize_Args(hStream=created.phStream).SerializeToString()
    theirs = other.exchange(pb.Batch(fn=fn_id("cuStreamSynchronize"), args=args))
    assert pb.cuStreamSynchronize_Result.FromString(theirs.result).status == 400  # not the other's stream
    other.close()
    mine = session.exchange(pb.Batch(fn=fn_id("cuStreamSynchronize"), args=args))
    assert pb.cuStreamSynchronize_Result.FromString(mine.result).status == 0
    destroy = pb.cuStreamDestroy_v2_Args(hStream=created.phStream).SerializeToString()
    assert pb.cuStreamDestroy_v2_Result.FromString(session.exchange(pb.Batch(
        fn=fn_id("cuStreamDestroy_v2"), args=destroy)).result).status == 0
    again = session.exchange(pb.Batch(fn=fn_id("cuStreamDestroy_v2"), args=destroy))
    assert pb.cuStreamDestroy_v2_Result.FromString(again.result).status == 400  # destroyed: no longer valid


def test_link_inputs_from_the_wire_are_checked(session):
    """cuLinkComplete's inputs: a type that is no CUjitInputType is refused before the linker sees it;
    PTX the JIT refuses comes back as its error, with the JIT's log."""
    from cuwire.server.custom import op_id

    def link(*inputs):
        reply = session.exchange(pb.Batch(fn=op_id("Link"), args=pb.Link_Args(inputs=inputs).SerializeToString()))
        assert not reply.error
        return pb.Link_Result.FromString(reply.result)

    assert link(pb.LinkInput(type=99, data=b"x", name="bad")).status == 1  # CUDA_ERROR_INVALID_VALUE
    broken = link(pb.LinkInput(type=1, name="broken.ptx",
                               data=b".version 9.0\n.target sm_75\n.address_size 64\n"
                                    b".visible .entry broken_kernel()\n{\n    not_an_instruction;\n}\n\0"))
    assert broken.status != 0 and not broken.cubin and broken.error_log  # the JIT says why
    assert serving(session)


AXPY = "_Z4axpyIfEvT_PKS0_PS0_i"  # templated.cu's axpy<float>(float a, const float *x, float *y, int n)
AXPY_PTX = (b".version 9.0\n.target sm_75\n.address_size 64\n"
            b".visible .entry " + AXPY.encode() + b"(\n.param .f32 a, .param .u64 x, .param .u64 y, .param .u32 n)\n"
            b"{\n    ret;\n}\n\0")


def test_a_module_load_names_its_kernels(session):
    """The reply to a module's load carries its kernels with their parameter layouts, and each is then the
    session's to launch (no lookup first); a launch with the wrong parameter size is refused."""
    import hashlib

    from cuwire.server.custom import op_id

    def call(op, args, result):
        reply = session.exchange(pb.Batch(fn=op_id(op), args=args.SerializeToString()))
        assert not reply.error, reply.error
        return result.FromString(reply.result)

    loaded = call("LoadModule", pb.LoadModule_Args(digest=hashlib.sha256(AXPY_PTX).digest(), image=AXPY_PTX),
                  pb.LoadModule_Result)
    assert loaded.status == 0 and loaded.module
    assert [(k.name, list(k.param_offsets), list(k.param_sizes)) for k in loaded.kernels] == \
        [(AXPY, [0, 8, 16, 24], [4, 8, 8, 4])]
    kernel = loaded.kernels[0].kernel
    looked_up = call("GetKernel", pb.GetKernel_Args(module=loaded.module, name=AXPY), pb.GetKernel_Result)
    assert looked_up.status == 0 and looked_up.kernel == kernel
    params = struct.pack("<f4xQQi", 2.0, 0, 0, 0)  # n = 0: nothing to touch
    launched = call("LaunchKernel", pb.LaunchKernel_Args(kernel=kernel, grid=[1, 1, 1], block=[32, 1, 1],
                                                         params=params), pb.LaunchKernel_Result)
    assert launched.status == 0
    reply = session.exchange(pb.Batch(fn=op_id("LaunchKernel"), args=pb.LaunchKernel_Args(
        kernel=kernel, grid=[1, 1, 1], block=[32, 1, 1], params=params[:8]).SerializeToString()))
    assert "kernel parameters" in reply.error
    sync = session.exchange(pb.Batch(fn=fn_id("cuCtxSynchronize"), args=pb.cuCtxSynchronize_Args().SerializeToString()))
    assert pb.cuCtxSynchronize_Result.FromString(sync.result).status == 0
    listed = call("Enumerate", pb.Enumerate_Args(module=loaded.module, count=1), pb.Enumerate_Result)
    assert listed.status == 0 and [(k.name, k.kernel) for k in listed.kernels] == [(AXPY, kernel)]
    too_many = call("Enumerate", pb.Enumerate_Args(module=loaded.module, count=1 << 20), pb.Enumerate_Result)
    assert too_many.status == 1 and not too_many.kernels
    reply = session.exchange(pb.Batch(fn=op_id("Enumerate"), args=pb.Enumerate_Args(module=42, count=1)
                                      .SerializeToString()))
    assert "was not loaded by this session" in reply.error


def test_a_hello_cannot_forge_log_lines(server):
    """The client's host name goes into the server's log as one line, whatever it holds."""
    hello = pb.Hello()
    hello.CopyFrom(HELLO)
    hello.host = "laptop\ncuwire server: session 999 forged by the client\r"
    t, reply = open_session(server.address, hello)
    assert not reply.error
    t.close()
    lines = server.text().splitlines()
    assert any("laptop cuwire server: session 999 forged" in line for line in lines)
    assert not any(line.startswith("cuwire server: session 999 forged") for line in lines)


def test_a_server_that_never_answers_the_hello_is_given_up(monkeypatch):
    """A port that accepts and stays silent: the client's wait for its welcome ends with a clear error."""
    from cuwire.wire import transport

    monkeypatch.setattr(transport, "WELCOME_TIMEOUT", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(transport.TransportError, match="lost the cuwire server"):
            open_session(address, HELLO)


def test_device_memory_per_session_is_bounded(tmp_path):
    """CUWIRE_SESSION_MEMORY: an allocation past the session's budget fails with CUDA_ERROR_OUT_OF_MEMORY
    before it reaches CUDA (or, for a pitched one whose size only the call knows, is freed again at once);
    freeing makes room again."""
    from conftest import ServerProcess

    s = ServerProcess(tmp_path, env={"CUWIRE_SESSION_MEMORY": str(1 << 20)})
    try:
        t, reply = open_session(s.address, HELLO)
        assert not reply.error

        call = functools.partial(vmm_call, t)

        first = call("cuMemAlloc_v2", bytesize=600 << 10)
        assert first.status == 0
        assert call("cuMemAlloc_v2", bytesize=600 << 10).status == 2
        assert call("cuMemAllocPitch_v2", WidthInBytes=1000, Height=500, ElementSizeBytes=4).status == 2
        assert call("cuMemFree_v2", dptr=first.dptr).status == 0
        assert call("cuMemAlloc_v2", bytesize=900 << 10).status == 0
        t.close()
        assert "past its budget" in s.text()
    finally:
        s.stop()


def test_host_memory_backs_what_the_gpu_has_no_room_for(tmp_path):
    """CUWIRE_HOST_OVERFLOW: an allocation the session's budget (as the GPU's memory would) has no room for
    is served from host memory instead, up to the overflow's limit; the GPU reads and writes it (a memset,
    copies both ways); freeing it makes room again; past the limit, CUDA_ERROR_OUT_OF_MEMORY, saying why."""
    from conftest import ServerProcess

    s = ServerProcess(tmp_path, env={"CUWIRE_SESSION_MEMORY": str(1 << 20), "CUWIRE_HOST_OVERFLOW": str(2 << 20)})
    try:
        t, reply = open_session(s.address, HELLO)
        assert not reply.error

        call = functools.partial(vmm_call, t)

        on_gpu = call("cuMemAlloc_v2", bytesize=600 << 10)
        spilled = call("cuMemAlloc_v2", bytesize=600 << 10)  # past the budget: host memory
        more = call("cuMemAlloc_v2", bytesize=1 << 20)
        assert (on_gpu.status, spilled.status, more.status) == (0, 0, 0)
        assert len({on_gpu.dptr, spilled.dptr, more.dptr}) == 3
        assert call("cuMemAlloc_v2", bytesize=600 << 10).status == 2  # 2.2 MiB past the 2 MiB overflow
        assert call("cuMemsetD8_v2", dstDevice=spilled.dptr, uc=0x5A, N=4096).status == 0
        assert call("cuMemcpyDtoH_v2", srcDevice=spilled.dptr, ByteCount=4096).dstHost == b"\x5a" * 4096
        data = bytes(range(256)) * 16
        assert call("cuMemcpyHtoD_v2", dstDevice=more.dptr + 4096, srcHost=data, ByteCount=len(data)).status == 0
        assert call("cuMemcpyDtoD_v2", dstDevice=on_gpu.dptr, srcDevice=more.dptr + 4096, ByteCount=4096).status == 0
        assert call("cuMemcpyDtoH_v2", srcDevice=on_gpu.dptr, ByteCount=4096).dstHost == data
        assert call("cuMemFree_v2", dptr=spilled.dptr).status == 0
        assert call("cuMemAlloc_v2", bytesize=600 << 10).status == 0  # room again
        assert call("cuMemFree_v2", dptr=on_gpu.dptr).status == 0
        assert call("cuMemAlloc_v2", bytesize=900 << 10).status == 0  # the GPU's budget, freed, serves again
        t.close()
        log = s.text()
        assert "allocations go to host memory" in log and "past its overflow" in log
    finally:
        s.stop()


def test_arrays_count_against_the_session_memory(tmp_path):
    """CUDA arrays and mipmapped arrays are device memory: their size (elements times element bytes, every
    mipmap level) counts against CUWIRE_SESSION_MEMORY before CUDA makes them; destroying one makes room."""
    from conftest import ServerProcess

    def desc3d(width: int, height: int, depth: int = 0) -> bytes:
        return struct.pack("<QQQiII4x", width, height, depth, 0x20, 1, 0)  # float, one channel

    s = ServerProcess(tmp_path, env={"CUWIRE_SESSION_MEMORY": str(1 << 20)})
    try:
        t, reply = open_session(s.address, HELLO)
        assert not reply.error
        first = vmm_call(t, "cuArrayCreate_v2", pAllocateArray=struct.pack("<QQiI", 512, 256, 0x20, 1))
        assert first.status == 0  # 512 KiB
        assert vmm_call(t, "cuArray3DCreate_v2", pAllocateArray=desc3d(64, 64, 64)).status == 2  # 1 MiB more
        assert vmm_call(t, "cuMipmappedArrayCreate", pMipmappedArrayDesc=desc3d(512, 256),
                        numMipmapLevels=10).status == 2  # 512 KiB + 128 KiB + ...: past 1 MiB with the first
        small = vmm_call(t, "cuArray3DCreate_v2", pAllocateArray=desc3d(64, 64, 16))  # 256 KiB
        assert small.status == 0
        assert vmm_call(t, "cuArrayDestroy", hArray=first.pHandle).status == 0
        mipmap = vmm_call(t, "cuMipmappedArrayCreate", pMipmappedArrayDesc=desc3d(512, 256), numMipmapLevels=10)
        assert mipmap.status == 0
        assert vmm_call(t, "cuMemAlloc_v2", bytesize=200 << 10).status == 2  # 256 + 682 KiB held
        assert vmm_call(t, "cuMipmappedArrayDestroy", hMipmappedArray=mipmap.pHandle).status == 0
        assert vmm_call(t, "cuMemAlloc_v2", bytesize=600 << 10).status == 0
        t.close()
        assert "past its budget" in s.text()
    finally:
        s.stop()


def records_frame(t, records: bytes) -> tuple[int, int, str, bytes, str]:
    """Send a records frame (client/wire.c) on the session; (status, queued error, its function, result,
    refusal)."""
    from cuwire.server.records import CALL_REPLY
    from cuwire.wire.transport import MAGIC_RECORDS

    conn = t.connection
    conn.send(records, magic=MAGIC_RECORDS)
    message, payload = conn.receive()
    assert conn.magic == MAGIC_RECORDS and not payload
    status, first, fn, n_result, n_error, n_output = CALL_REPLY.unpack_from(message)
    rest = message[CALL_REPLY.size:]
    assert len(rest) == n_result + n_error + n_output
    name = generated.RECORDS[fn][0] if fn in generated.RECORDS else ""
    return status, first, name, rest[:n_result], rest[n_result:].decode()


def test_records_frames_answer_the_call_and_the_queued_errors(session):
    ids = {n: i for i, (n, _) in generated.RECORDS.items()}
    event = struct.pack("<II", ids["cuEventRecord"], 16) + struct.pack("<QQ", 0x1234_5678, 0)
    sync = struct.pack("<II", ids["cuCtxSynchronize"], 0)
    assert records_frame(session, event + sync) == (0, 400, "cuEventRecord", b"", "")
    assert records_frame(session, sync) == (0, 0, "", b"", "")
    status, first, _, _, refusal = records_frame(session, struct.pack("<II", 7, 0))
    assert "unknown queued function id" in refusal
    assert serving(session)


def test_a_records_frame_before_the_hello_is_refused(server):
    from cuwire.wire.transport import MAGIC_RECORDS

    t = SocketTransport(server.address)
    t.connection.send(b"\0" * 8, magic=MAGIC_RECORDS)
    message, _ = t.connection.receive()
    assert "starts with a hello" in pb.Reply.FromString(message).error
    t.close()


# CUmemAllocationProp: pinned device memory on device 0 (type, handle types, location, Windows metadata, flags)
VMM_PROP = struct.pack("<iiiiQ8x", 1, 0, 1, 0, 0)


def vmm_call(t, name: str, **fields):
    """One call on the session `t`, its Result (the reply carries no error); any call, not only VMM's."""
    reply = t.exchange(pb.Batch(fn=fn_id(name), args=getattr(pb, f"{name}_Args")(**fields).SerializeToString()))
    assert not reply.error, reply.error
    return getattr(pb, f"{name}_Result").FromString(reply.result)


def vmm_range(t) -> tuple[int, int, int]:
    """A reservation of two granules with one allocation of one granule mapped at its start: (address,
    handle, granularity)."""
    g = vmm_call(t, "cuMemGetAllocationGranularity", prop=VMM_PROP, option=0).granularity
    va = vmm_call(t, "cuMemAddressReserve", size=2 * g, alignment=0, addr=0, flags=0)
    made = vmm_call(t, "cuMemCreate", size=g, prop=VMM_PROP, flags=0)
    assert va.status == 0 and made.status == 0, (va, made)
    assert vmm_call(t, "cuMemMap", ptr=va.ptr, size=g, offset=0, handle=made.handle, flags=0).status == 0
    access = struct.pack("<iii", 1, 0, 3)  # device 0, read and write
    assert vmm_call(t, "cuMemSetAccess", ptr=va.ptr, size=g, desc=access, count=1).status == 0
    return va.ptr, made.handle, g


def test_virtual_memory_is_checked(session):
    """Copies reach a mapped range; a mapping must put an allocation of the session's into a range it
    reserved, and a malformed access list is refused."""
    va, handle, g = vmm_range(session)
    data = bytes(range(256)) * 16
    copied = vmm_call(session, "cuMemcpyHtoD_v2", dstDevice=va + g - len(data), srcHost=data, ByteCount=len(data))
    assert copied.status == 0
    back = vmm_call(session, "cuMemcpyDtoH_v2", srcDevice=va + g - len(data), ByteCount=len(data))
    assert back.status == 0 and back.dstHost == data
    assert vmm_call(session, "cuMemSetAccess", ptr=va, size=g, desc=b"\0" * 7, count=1).status == 1
    made = vmm_call(session, "cuMemCreate", size=g, prop=VMM_PROP, flags=0)
    assert vmm_call(session, "cuMemMap", ptr=va + 2 * g, size=g, offset=0, handle=made.handle, flags=0).status == 1
    assert vmm_call(session, "cuMemMap", ptr=va + g, size=g, offset=0, handle=made.handle + 16, flags=0).status == 1
    assert vmm_call(session, "cuMemMap", ptr=va + g, size=g, offset=g, handle=made.handle, flags=0).status == 1
    assert vmm_call(session, "cuMemRelease", handle=made.handle + 16).status == 1
    assert vmm_call(session, "cuMemAddressFree", ptr=va, size=g).status == 1  # not the whole reservation
    props = vmm_call(session, "cuMemGetAllocationPropertiesFromHandle", handle=handle)
    assert props.status == 0 and props.prop[:16] == VMM_PROP[:16]
    assert vmm_call(session, "cuMemUnmap", ptr=va, size=g).status == 0
    for h in (handle, made.handle):
        assert vmm_call(session, "cuMemRelease", handle=h).status == 0
    assert vmm_call(session, "cuMemAddressFree", ptr=va, size=2 * g).status == 0


def test_virtual_memory_is_per_session_and_freed_when_it_ends(tmp_path):
    """Sessions in threads share one device: another session can neither map into a session's
    reservation nor map, query or release its allocations. A session that ends with memory still
    reserved, created and mapped gives it all back; physical allocations count against its budget."""
    from conftest import ServerProcess

    s = ServerProcess(tmp_path, "--isolation", "thread", env={"CUWIRE_SESSION_MEMORY": str(5 << 20)})
    try:
        t, reply = open_session(s.address, HELLO)
        assert not reply.error
        before = vmm_call(t, "cuMemGetInfo_v2").free
        va, handle, g = vmm_range(t)
        assert vmm_call(t, "cuMemCreate", size=2 * g, prop=VMM_PROP, flags=0).status == 2  # past the budget
        assert vmm_call(t, "cuMemGetInfo_v2").free <= before - g
        other, reply = open_session(s.address, HELLO)
        assert not reply.error
        mine, own_handle, _ = vmm_range(other)
        assert mine != va and own_handle != handle
        assert vmm_call(other, "cuMemMap", ptr=va + g, size=g, offset=0, handle=own_handle, flags=0).status == 1
        assert vmm_call(other, "cuMemMap", ptr=mine + g, size=g, offset=0, handle=handle, flags=0).status == 1
        assert vmm_call(other, "cuMemRelease", handle=handle).status == 1
        assert vmm_call(other, "cuMemGetAllocationPropertiesFromHandle", handle=handle).status == 1
        assert vmm_call(other, "cuMemUnmap", ptr=va, size=g).status == 1
        assert vmm_call(other, "cuMemAddressFree", ptr=va, size=2 * g).status == 1
        other.close()
        t.close()
        deadline = time.monotonic() + 10
        while s.text().count("destroyed") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        t, reply = open_session(s.address, HELLO)
        assert vmm_call(t, "cuMemGetInfo_v2").free == before
        t.close()
    finally:
        s.stop()


TEXTURE_DESC = struct.pack("<3iiI", 1, 1, 1, 0, 0) + bytes(104 - 20)  # CUDA_TEXTURE_DESC: clamped, point


def resource(array: int = 0, linear: tuple[int, int] | None = None) -> bytes:
    """A CUDA_RESOURCE_DESC: an array's, or linear device memory's (address, bytes: one float channel)."""
    if linear:
        body = struct.pack("<QiIQ", linear[0], 0x20, 1, linear[1])
        return struct.pack("<i4x", 2) + body + bytes(128 - len(body)) + bytes(8)
    return struct.pack("<i4xQ", 0, array) + bytes(120) + bytes(8)


def test_a_texture_may_read_past_its_allocation_only_in_a_process_of_its_own(session, tmp_path):
    """CUDA lets a linear texture run past the allocation it starts in (convolutionFFT2D, a CUDA sample, makes
    one so): a session in a process of its own may too, since a texture only reads and that process holds
    no other session's memory; a texture must still start in the session's memory. Sessions that share a
    process (isolation=thread) keep every byte of the range checked."""
    from conftest import ServerProcess

    device = allocate(session, 4096)
    past = vmm_call(session, "cuTexObjectCreate", pResDesc=resource(linear=(device, 8192)), pTexDesc=TEXTURE_DESC)
    assert past.status == 0 and past.pTexObject
    assert vmm_call(session, "cuTexObjectDestroy", texObject=past.pTexObject).status == 0
    assert vmm_call(session, "cuTexObjectCreate", pResDesc=resource(linear=(device + (1 << 30), 256)),
                    pTexDesc=TEXTURE_DESC).status == 1
    s = ServerProcess(tmp_path, "--isolation", "thread")
    try:
        t, reply = open_session(s.address, HELLO)
        assert not reply.error
        mine = allocate(t, 4096)
        assert vmm_call(t, "cuTexObjectCreate", pResDesc=resource(linear=(mine, 4096)),
                        pTexDesc=TEXTURE_DESC).status == 0
        assert vmm_call(t, "cuTexObjectCreate", pResDesc=resource(linear=(mine, 8192)),
                        pTexDesc=TEXTURE_DESC).status == 1
        t.close()
    finally:
        s.stop()


def test_texture_objects_and_arrays_are_per_session(tmp_path):
    """Sessions in threads share one device: another session can neither make a texture or surface object
    over a session's array or device memory, nor copy into its array, nor query or destroy its objects;
    what a session leaves is destroyed when it ends."""
    from conftest import ServerProcess

    array_desc = struct.pack("<QQiI", 16, 8, 0x20, 1)  # 16 x 8 floats
    texture_desc = TEXTURE_DESC

    s = ServerProcess(tmp_path, "--isolation", "thread")
    try:
        t, reply = open_session(s.address, HELLO)
        assert not reply.error
        made = vmm_call(t, "cuArrayCreate_v2", pAllocateArray=array_desc)
        assert made.status == 0 and made.pHandle
        tex = vmm_call(t, "cuTexObjectCreate", pResDesc=resource(made.pHandle), pTexDesc=texture_desc)
        assert tex.status == 0 and tex.pTexObject
        device = allocate(t, 4096)
        other, reply = open_session(s.address, HELLO)
        assert not reply.error
        theirs = resource(made.pHandle)
        assert vmm_call(other, "cuTexObjectCreate", pResDesc=theirs, pTexDesc=texture_desc).status == 400
        assert vmm_call(other, "cuTexObjectCreate", pResDesc=resource(linear=(device, 4096)),
                        pTexDesc=texture_desc).status == 1
        assert vmm_call(other, "cuSurfObjectCreate", pResDesc=resource(made.pHandle)).status == 400
        assert vmm_call(other, "cuTexObjectDestroy", texObject=tex.pTexObject).status == 1
        assert vmm_call(other, "cuTexObjectGetResourceDesc", texObject=tex.pTexObject).status == 1
        assert vmm_call(other, "cuArrayDestroy", hArray=made.pHandle).status == 400  # CUDA_ERROR_INVALID_HANDLE
        assert vmm_call(other, "cuMemcpyHtoA_v2", dstArray=made.pHandle, dstOffset=0, srcHost=b"x" * 64,
                        ByteCount=64).status == 400
        other.close()
        asked = vmm_call(t, "cuTexObjectGetResourceDesc", texObject=tex.pTexObject)
        assert asked.status == 0 and struct.unpack_from("<Q", asked.pResDesc, 8)[0] == made.pHandle
        assert vmm_call(t, "cuMemcpyHtoA_v2", dstArray=made.pHandle, dstOffset=0, srcHost=b"x" * 64,
                        ByteCount=64).status == 0
        t.close()  # the texture object and the array are left: the server destroys them
        deadline = time.monotonic() + 10
        while "destroyed 2 objects" not in s.text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "destroyed 2 objects" in s.text(), s.text()
    finally:
        s.stop()


def test_graph_nodes_name_only_the_sessions_own(session):
    """A node's graph, dependencies and memory must be the session's; a memcpy node may not name host
    memory (it would copy the server's); a kernel node's kernel must have been looked up."""
    graph = vmm_call(session, "cuGraphCreate", flags=0)
    assert graph.status == 0
    empty = vmm_call(session, "cuGraphAddEmptyNode", hGraph=graph.phGraph, dependencies=b"", numDependencies=0)
    assert empty.status == 0 and empty.phGraphNode
    foreign = struct.pack("<Q", empty.phGraphNode + 0x1000)
    assert vmm_call(session, "cuGraphAddEmptyNode", hGraph=graph.phGraph, dependencies=foreign,
                    numDependencies=1).status == 400
    assert vmm_call(session, "cuGraphAddEmptyNode", hGraph=graph.phGraph + 0x1000, dependencies=b"",
                    numDependencies=0).status == 400
    device = allocate(session, 4096)
    # CUDA_MEMSET_NODE_PARAMS: dst, pitch, value, elementSize, width, height
    inside = struct.pack("<QQIIQQ", device, 0, 1, 1, 4096, 1)
    outside = struct.pack("<QQIIQQ", device, 0, 1, 1, 8192, 1)
    assert vmm_call(session, "cuGraphAddMemsetNode", hGraph=graph.phGraph, dependencies=b"", numDependencies=0,
                    memsetParams=inside, ctx=0).status == 0
    assert vmm_call(session, "cuGraphAddMemsetNode", hGraph=graph.phGraph, dependencies=b"", numDependencies=0,
                    memsetParams=outside, ctx=0).status == 1
    # CUDA_MEMCPY3D from host memory (type 1) to the device: refused by name
    side = struct.Struct("<QQQQI4xQQQQQQ")
    src = side.pack(0, 0, 0, 0, 1, 0x7F00_0000_0000, 0, 0, 0, 4096, 1)
    dst = side.pack(0, 0, 0, 0, 2, 0, device, 0, 0, 4096, 1)
    copy = src + dst + struct.pack("<QQQ", 4096, 1, 1)
    assert vmm_call(session, "cuGraphAddMemcpyNode", hGraph=graph.phGraph, dependencies=b"", numDependencies=0,
                    copyParams=copy, ctx=0).status == 801
    assert vmm_call(session, "cuGraphMemcpyNodeSetParams", hNode=0x1234, nodeParams=copy).status == 400
    # a batch memory operation node writing 4 bytes inside the session's memory, then outside it
    write = struct.pack("<IIQIIQ", 2, 0, device, 7, 0, 0) + bytes(16)  # CU_STREAM_MEM_OP_WRITE_VALUE_32
    far = struct.pack("<IIQIIQ", 2, 0, device + (1 << 30), 7, 0, 0) + bytes(16)

    def batch_reply(**fields):
        return session.exchange(pb.Batch(fn=generated.OP_IDS["BatchMemOpNode"],
                                         args=pb.BatchMemOpNode_Args(**fields).SerializeToString()))

    def batch(**fields) -> pb.BatchMemOpNode_Result:
        return pb.BatchMemOpNode_Result.FromString(batch_reply(**fields).result)

    ctx = session.welcome.devices[0].primary_context  # (a batch node needs its context named)
    added = batch(action=0, graph=graph.phGraph, count=1, ops=write, ctx=ctx)
    assert added.status == 0 and added.node
    assert batch(action=0, graph=graph.phGraph, count=1, ops=far, ctx=ctx).status == 1
    assert batch(action=1, node=added.node, count=1, ops=far, ctx=ctx).status == 1
    read = batch(action=3, node=added.node)
    assert read.status == 0 and read.count == 1 and read.ops == write
    assert batch(action=3, node=0x1234).status == 400
    for graph_value, status in ((graph.phGraph, 0), (0x1234, 400)):  # the session's graph drawn, no other
        drawn = pb.GraphDot_Result.FromString(session.exchange(pb.Batch(
            fn=generated.OP_IDS["GraphDot"], args=pb.GraphDot_Args(graph=graph_value).SerializeToString())).result)
        assert drawn.status == status and drawn.dot.startswith(b"digraph") == (status == 0)
    assert "48 bytes for 2 memory operations" in batch_reply(action=0, graph=graph.phGraph, count=2, ops=write).error
    assert vmm_call(session, "cuGraphMemcpyNodeSetParams", hNode=empty.phGraphNode, nodeParams=copy).status == 801
    args = pb.KernelNode_Args(action=0, graph=graph.phGraph, kernel=0x1234, grid=[1, 1, 1], block=[1, 1, 1])
    reply = session.exchange(pb.Batch(fn=generated.OP_IDS["KernelNode"], args=args.SerializeToString()))
    assert pb.KernelNode_Result.FromString(reply.result).status == 400
    args = pb.HostNode_Args(graph=graph.phGraph, id=1)  # over TCP there is no shared memory to post it through
    reply = session.exchange(pb.Batch(fn=generated.OP_IDS["HostNode"], args=args.SerializeToString()))
    assert pb.HostNode_Result.FromString(reply.result).status == (801 if session.connection.ring is None else 0)
    listed = pb.GraphNodes_Result.FromString(session.exchange(pb.Batch(
        fn=generated.OP_IDS["GraphNodes"], args=pb.GraphNodes_Args(graph=graph.phGraph, capacity=8)
        .SerializeToString())).result)
    assert listed.status == 0 and listed.total == len(listed.nodes) // 8 >= 2
    for node in (0x1234, empty.phGraphNode):  # no node of the session's; one that allocates nothing
        reply = session.exchange(pb.Batch(fn=generated.OP_IDS["AllocNodeParams"],
                                          args=pb.AllocNodeParams_Args(node=node).SerializeToString()))
        assert pb.AllocNodeParams_Result.FromString(reply.result).status in ((400,) if node == 0x1234 else (1, 400))
        reply = session.exchange(pb.Batch(fn=generated.OP_IDS["KernelNodeParams"],
                                          args=pb.KernelNodeParams_Args(node=node).SerializeToString()))
        assert pb.KernelNodeParams_Result.FromString(reply.result).status in ((400,) if node == 0x1234 else (1, 400))
        assert vmm_call(session, "cuGraphMemcpyNodeGetParams", hNode=node).status in \
            ((400,) if node == 0x1234 else (1, 400))

    def query(**fields) -> pb.GraphNodes_Result:
        reply = session.exchange(pb.Batch(fn=generated.OP_IDS["GraphNodes"],
                                          args=pb.GraphNodes_Args(**fields).SerializeToString()))
        return pb.GraphNodes_Result.FromString(reply.result)

    later = vmm_call(session, "cuGraphAddEmptyNode", hGraph=graph.phGraph,
                     dependencies=struct.pack("<Q", empty.phGraphNode), numDependencies=1)
    edges = query(graph=graph.phGraph, what=pb.EDGES, capacity=8, edge_data=True)
    assert edges.status == 0 and edges.total == 1 and edges.edge_data == bytes(8)
    assert (edges.nodes, edges.to) == (struct.pack("<Q", empty.phGraphNode), struct.pack("<Q", later.phGraphNode))
    assert query(node=later.phGraphNode, what=pb.DEPENDENCIES, capacity=8).nodes == edges.nodes
    assert query(node=empty.phGraphNode + 0x1000, what=pb.DEPENDENTS, capacity=8).status == 400  # not its own
    assert query(graph=graph.phGraph + 0x1000, what=pb.ROOTS).status == 400
    assert vmm_call(session, "cuGraphDestroyNode", hNode=later.phGraphNode).status == 0
    assert vmm_call(session, "cuGraphDestroyNode", hNode=later.phGraphNode).status == 400  # gone
    assert vmm_call(session, "cuGraphDestroy", hGraph=graph.phGraph).status == 0


def test_graph_add_node_checks_what_its_parameters_name(session):
    """cuGraphAddNode (cuwire.GraphNode): a conditional node needs the session's own handle; a free node the
    session's memory; the kinds with functions of their own are refused by name; sizes are checked."""
    graph = vmm_call(session, "cuGraphCreate", flags=0)

    def add(params: bytes, **fields) -> pb.GraphNode_Result:
        args = pb.GraphNode_Args(graph=graph.phGraph, params=params.ljust(256, b"\0"), **fields)
        reply = session.exchange(pb.Batch(fn=generated.OP_IDS["GraphNode"], args=args.SerializeToString()))
        assert not reply.error, reply.error
        return pb.GraphNode_Result.FromString(reply.result)

    ctx = session.welcome.devices[0].primary_context  # (the driver wants the context named)
    handle = vmm_call(session, "cuGraphConditionalHandleCreate", hGraph=graph.phGraph, ctx=ctx, defaultLaunchValue=1,
                      flags=1)
    assert handle.status == 0 and handle.pHandle_out
    conditional = struct.pack("<i12xQiI8xQ", 13, handle.pHandle_out, 1, 1, ctx)  # a while node, one body
    made = add(conditional)
    assert made.status == 0 and made.node and len(made.bodies) == 8
    body = struct.unpack("<Q", made.bodies)[0]
    assert vmm_call(session, "cuGraphAddEmptyNode", hGraph=body, dependencies=b"", numDependencies=0).status == 0
    assert add(struct.pack("<i12xQiI8xQ", 13, handle.pHandle_out + 1, 1, 1, ctx)).status == 1  # not its handle
    assert add(struct.pack("<i12xQ", 11, 0x7000_0000)).status == 1  # a free node for memory not the session's
    assert add(struct.pack("<i", 0)).status == 801  # a kernel node: through cuGraphAddKernelNode
    reply = session.exchange(pb.Batch(fn=generated.OP_IDS["GraphNode"], args=pb.GraphNode_Args(
        graph=graph.phGraph, params=b"short").SerializeToString()))
    assert "node parameters of 5 bytes" in reply.error
    assert add(struct.pack("<i", 5), dependencies=struct.pack("<Q", made.node)).status == 0  # an empty node
    assert vmm_call(session, "cuGraphDestroy", hGraph=graph.phGraph).status == 0


def test_a_captures_graph_and_dependencies_are_the_sessions(session):
    """cuwire.CaptureInfo: a stream that does not capture has no graph; one that does names its graph and
    last nodes, which the session may then build on (a node added to the capture's graph, the capture's
    dependencies set to it); nodes not the session's are refused; the capture ends in that graph."""
    def info(stream: int) -> pb.CaptureInfo_Result:
        reply = session.exchange(pb.Batch(fn=generated.OP_IDS["CaptureInfo"],
                                          args=pb.CaptureInfo_Args(stream=stream).SerializeToString()))
        assert not reply.error, reply.error
        return pb.CaptureInfo_Result.FromString(reply.result)

    stream = vmm_call(session, "cuStreamCreate", Flags=1).phStream
    idle = info(stream)
    assert idle.status == 0 and idle.capture_status == 0 and not idle.graph
    assert info(stream + 0x1000).status == 400  # not the session's stream
    assert vmm_call(session, "cuStreamBeginCapture_v2", hStream=stream, mode=0).status == 0
    active = info(stream)
    assert active.status == 0 and active.capture_status == 1 and active.graph and active.dependencies == b""
    added = vmm_call(session, "cuGraphAddEmptyNode", hGraph=active.graph, dependencies=b"", numDependencies=0)
    assert added.status == 0
    mine = struct.pack("<Q", added.phGraphNode)
    assert vmm_call(session, "cuStreamUpdateCaptureDependencies_v2", hStream=stream, dependencies=mine,
                    numDependencies=1, flags=1).status == 0
    assert info(stream).dependencies == mine
    foreign = struct.pack("<Q", added.phGraphNode + 0x1000)
    assert vmm_call(session, "cuStreamUpdateCaptureDependencies_v2", hStream=stream, dependencies=foreign,
                    numDependencies=1, flags=1).status == 400
    ended = vmm_call(session, "cuStreamEndCapture", hStream=stream)
    assert ended.status == 0 and ended.phGraph == active.graph
    assert vmm_call(session, "cuGraphDestroy", hGraph=ended.phGraph).status == 0
    assert vmm_call(session, "cuStreamDestroy_v2", hStream=stream).status == 0


def test_device_ranges_of_memsets_and_copies_are_the_sessions(session):
    """Every device address a memset or copy takes by value (annotations: `range`) must lie, with the
    bytes it touches, in the session's memory: checked in the Python handlers and in the C loop's
    queued records alike, before CUDA sees it; nothing is touched when it does not."""
    device = allocate(session, 4096)
    assert vmm_call(session, "cuMemsetD8_v2", dstDevice=device, uc=7, N=4096).status == 0
    assert vmm_call(session, "cuMemsetD8_v2", dstDevice=device, uc=7, N=4097).status == 1
    assert vmm_call(session, "cuMemsetD32_v2", dstDevice=device + 4, ui=7, N=1023).status == 0
    assert vmm_call(session, "cuMemsetD32_v2", dstDevice=device + 4, ui=7, N=1024).status == 1
    assert vmm_call(session, "cuMemsetD32_v2", dstDevice=device, ui=7, N=1 << 62).status == 1  # (N * 4 wraps)
    assert vmm_call(session, "cuMemcpyDtoD_v2", dstDevice=device, srcDevice=0x7F00_0000_1000, ByteCount=8).status == 1
    assert vmm_call(session, "cuMemcpyDtoD_v2", dstDevice=device, srcDevice=device + 2048, ByteCount=2048).status == 0
    ids = {n: i for i, (n, _) in generated.RECORDS.items()}
    sync = struct.pack("<II", ids["cuCtxSynchronize"], 0)
    outside = struct.pack("<QBQQ", device + 4000, 1, 200, 0)  # cuMemsetD8Async: dst, value, N, stream
    queued = struct.pack("<II", ids["cuMemsetD8Async"], len(outside)) + outside
    assert records_frame(session, queued + sync) == (0, 1, "cuMemsetD8Async", b"", "")
    wrapped = struct.pack("<QIQQ", device, 7, 1 << 62, 0)  # cuMemsetD32Async: N * 4 past 2^64
    queued = struct.pack("<II", ids["cuMemsetD32Async"], len(wrapped)) + wrapped
    assert records_frame(session, queued + sync) == (0, 1, "cuMemsetD32Async", b"", "")
    inside = struct.pack("<QBQQ", device, 1, 4096, 0)
    queued = struct.pack("<II", ids["cuMemsetD8Async"], len(inside)) + inside
    assert records_frame(session, queued + sync) == (0, 0, "", b"", "")
    for name, at, ok in (("cuStreamWriteValue32_v2", device + 4092, 0), ("cuStreamWriteValue32_v2", device + 4094, 1),
                         ("cuStreamWriteValue64_v2", device + 4092, 1)):  # a value's bytes must all be the session's
        value = struct.pack("<QQQI" if "64" in name else "<QQII", 0, at, 5, 0)  # stream, addr, value, flags
        queued = struct.pack("<II", ids[name], len(value)) + value
        assert records_frame(session, queued + sync)[1] == ok, name
    assert serving(session)


def test_attributes_whose_values_hold_handles_are_refused(session):
    """Stream and kernel-node attributes travel as the 64-byte value they are; a kind whose value holds an
    event handle or an address to write to would reach the driver unchecked: refused by name, as is a
    value of another size."""
    stream = vmm_call(session, "cuStreamCreate", Flags=0).phStream
    value = struct.pack("<i", 3).ljust(64, b"\0")  # CU_SYNC_POLICY_YIELD
    assert vmm_call(session, "cuStreamSetAttribute", hStream=stream, attr=3, value=value).status == 0
    got = vmm_call(session, "cuStreamGetAttribute", hStream=stream, attr=3)
    assert got.status == 0 and got.value_out == value
    event = struct.pack("<QI", 0x1234_5678, 0).ljust(64, b"\0")  # CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT
    assert vmm_call(session, "cuStreamSetAttribute", hStream=stream, attr=12, value=event).status == 801
    assert vmm_call(session, "cuStreamGetAttribute", hStream=stream, attr=7).status == 801
    reply = session.exchange(pb.Batch(fn=fn_id("cuStreamSetAttribute"), args=pb.cuStreamSetAttribute_Args(
        hStream=stream, attr=3, value=b"\0" * 8).SerializeToString()))
    assert "sent 8 bytes, expected 64" in reply.error
    assert vmm_call(session, "cuStreamCopyAttributes", dst=0x1234_5678, src=stream).status == 400
    assert vmm_call(session, "cuGraphKernelNodeGetAttribute", hNode=0x1234_5678, attr=1).status == 400
    assert serving(session)


def test_tensor_maps_sized_by_a_hostile_rank_are_refused(session):
    """cuTensorMapEncodeTiled's arrays are as long as its rank says: a rank that does not match the bytes
    sent, or makes a negative length, is refused; the session goes on."""
    device = allocate(session, 4096)
    for rank, dims in ((0, b""), (3, b"\0" * 16), (1 << 31, b"")):
        reply = session.exchange(pb.Batch(fn=fn_id("cuTensorMapEncodeTiled"), args=pb.cuTensorMapEncodeTiled_Args(
            tensorDataType=7, tensorRank=rank, globalAddress=device, globalDim=dims).SerializeToString()))
        assert reply.error or pb.cuTensorMapEncodeTiled_Result.FromString(reply.result).status != 0, rank
    # a tensor map is host memory the driver writes: one named by a device address is refused, not written
    replaced = vmm_call(session, "cuTensorMapReplaceAddress", tensorMap=device, globalAddress=device)
    assert replaced.status == 1 and not replaced.tensorMap
    assert serving(session)


def test_ipc_handles_open_only_what_a_session_exported(server):
    """CUDA IPC between two sessions (server/ipc.py): the program gets random bytes that stand for the
    driver's handle, the same each time; another session opens them (on the GPU; the emulated device,
    whose memory is its own process's, refuses another process's memory with NOT_SUPPORTED, after the
    server found the handle), a forged handle or one whose exporter ended is CUDA_ERROR_INVALID_VALUE,
    and only memory a session opened may be closed by it."""

    a, reply = open_session(server.address, HELLO)
    b, reply = open_session(server.address, HELLO)
    try:
        export, other = functools.partial(vmm_call, a), functools.partial(vmm_call, b)
        device = allocate(a, 1 << 20)
        handle = export("cuIpcGetMemHandle", dptr=device + 4096)  # inside the allocation: the allocation's
        assert handle.status == 0 and len(handle.pHandle) == 64
        assert int.from_bytes(handle.pHandle[:8], "little") >= 1 << 20  # its size leads (the client keeps it)
        assert export("cuIpcGetMemHandle", dptr=device).pHandle == handle.pHandle
        assert export("cuIpcGetMemHandle", dptr=0x1234).status == 1  # not the session's memory
        assert other("cuIpcOpenMemHandle_v2", handle=bytes(64), Flags=1).status == 1  # forged
        forged = bytearray(handle.pHandle)
        forged[-1] ^= 1
        assert other("cuIpcOpenMemHandle_v2", handle=bytes(forged), Flags=1).status == 1
        opened = other("cuIpcOpenMemHandle_v2", handle=handle.pHandle, Flags=1)
        assert opened.status == (0 if BACKEND == "cuda" else 801), opened
        assert other("cuIpcCloseMemHandle", dptr=device).status == 1  # not memory this session opened
        if opened.status == 0:
            assert other("cuIpcCloseMemHandle", dptr=opened.pdptr).status == 0
        event = export("cuEventCreate", Flags=0x6)  # CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS
        event_handle = export("cuIpcGetEventHandle", event=event.phEvent)
        assert event_handle.status == 0
        assert other("cuIpcOpenEventHandle", handle=handle.pHandle).status == 1  # a memory handle, not an event's
        a.close()
        a = None
        deadline = time.monotonic() + 10  # the exporter's notes go when its session has ended
        while other("cuIpcOpenMemHandle_v2", handle=handle.pHandle, Flags=1).status != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert other("cuIpcOpenEventHandle", handle=event_handle.pHandle).status == 1
    finally:
        for t in (a, b):
            if t is not None:
                t.close()


def test_shareable_handles_refuse_what_no_session_exported(session):
    """Shareable handles (server/ipc.py): only POSIX file descriptors; a physical allocation or pool the
    session does not hold is not exported; bytes no session exported import nothing."""

    def call(name, **fields):
        args = getattr(pb, f"{name}_Args")(**fields).SerializeToString()
        reply = session.exchange(pb.Batch(fn=fn_id(name), args=args))
        assert not reply.error, reply.error
        return getattr(pb, f"{name}_Result").FromString(reply.result)

    assert call("cuMemImportFromShareableHandle", osHandle=bytes(64), shHandleType=1).status == 1
    assert call("cuMemImportFromShareableHandle", osHandle=bytes(64), shHandleType=8).status == 801  # fabric
    assert call("cuMemExportToShareableHandle", handle=0x1234, handleType=1).status == 1  # not the session's
    assert call("cuMemPoolExportToShareableHandle", pool=0x1234, handleType=1).status == 400  # not its pool
    assert call("cuMemPoolImportFromShareableHandle", handle=bytes(64), handleType=1).status == 1
    assert call("cuMemPoolImportPointer", pool=0, shareData=bytes(64)).status == 1
    assert call("cuMemPoolExportPointer", ptr=0x1234).status == 1  # not the session's memory
    assert serving(session)


def test_context_ids_events_pool_access_and_atomic_capabilities(session):
    """cuCtxGetId (stable, and the same for NULL, the current context), cuCtxRecordEvent and cuCtxWaitEvent,
    cuMemPoolGetAccess (a device's own pool: read and write) and cuMemPoolSetAccess, and the atomic
    capabilities of a device (one answer per operation asked)."""

    def call(name, **fields):
        args = getattr(pb, f"{name}_Args")(**fields).SerializeToString()
        reply = session.exchange(pb.Batch(fn=fn_id(name), args=args))
        assert not reply.error, reply.error
        return getattr(pb, f"{name}_Result").FromString(reply.result)

    ctx = session.welcome.devices[0].primary_context
    first = call("cuCtxGetId", ctx=ctx)
    assert first.status == 0 and first.ctxId and call("cuCtxGetId", ctx=ctx).ctxId == first.ctxId
    assert call("cuCtxGetId", ctx=0).ctxId == first.ctxId
    assert call("cuCtxGetId", ctx=0x1234).status == 400  # no context of the session's: refused before CUDA
    event = call("cuEventCreate", Flags=0)
    assert call("cuCtxRecordEvent", hCtx=ctx, hEvent=event.phEvent).status == 0
    assert call("cuCtxWaitEvent", hCtx=ctx, hEvent=event.phEvent).status == 0
    assert call("cuEventSynchronize", hEvent=event.phEvent).status == 0
    pool = call("cuDeviceGetDefaultMemPool", dev=0).pool_out
    device0 = struct.pack("<ii", 1, 0)  # CUmemLocation: CU_MEM_LOCATION_TYPE_DEVICE, device 0
    access = call("cuMemPoolGetAccess", memPool=pool, location=device0)
    assert access.status == 0 and access.flags == 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    assert call("cuMemPoolSetAccess", pool=pool, map=device0 + struct.pack("<i", 3), count=1).status == 0
    short = session.exchange(pb.Batch(fn=fn_id("cuMemPoolSetAccess"), args=pb.cuMemPoolSetAccess_Args(
        pool=pool, map=b"", count=1).SerializeToString()))  # fewer bytes than the count says: refused by name
    assert "the payload has 0 bytes left for a 12-byte buffer" in short.error
    caps = call("cuDeviceGetHostAtomicCapabilities", operations=struct.pack("<3i", 0, 1, 2), count=3, dev=0)
    assert caps.status == 0 and len(caps.capabilities) == 12
    assert call("cuDeviceGetP2PAtomicCapabilities", operations=struct.pack("<i", 0), count=1, srcDevice=0,
                dstDevice=0).status in (0, 101)  # one device: the driver may say CUDA_ERROR_INVALID_DEVICE


def test_array_copies_between_arrays_device_memory_and_the_host(session):
    """cuMemcpyAtoA, cuMemcpyAtoD, cuMemcpyDtoA and the asynchronous host copies (cuMemcpyHtoAAsync,
    cuMemcpyAtoHAsync): bytes go through two 1D arrays and device memory and come back as they went; a
    2D array takes them in its first row only; a device range beyond the session's allocation is refused
    before CUDA sees it."""
    array_desc = struct.pack("<QQiI", 128, 0, 0x20, 1)  # 128 floats (1D): 512 bytes
    first = vmm_call(session, "cuArrayCreate_v2", pAllocateArray=array_desc).pHandle
    second = vmm_call(session, "cuArrayCreate_v2", pAllocateArray=array_desc).pHandle
    assert first and second
    device = allocate(session, 4096)
    data = bytes(range(256)) * 2
    assert vmm_call(session, "cuMemcpyHtoAAsync_v2", dstArray=first, dstOffset=0, srcHost=data, ByteCount=512,
                    hStream=0).status == 0
    assert vmm_call(session, "cuMemcpyAtoA_v2", dstArray=second, dstOffset=0, srcArray=first, srcOffset=0,
                    ByteCount=512).status == 0
    assert vmm_call(session, "cuMemcpyAtoD_v2", dstDevice=device + 1024, srcArray=second, srcOffset=0,
                    ByteCount=512).status == 0
    back = vmm_call(session, "cuMemcpyDtoH_v2", srcDevice=device + 1024, ByteCount=512)
    assert back.status == 0 and back.dstHost == data
    assert vmm_call(session, "cuMemsetD8_v2", dstDevice=device, uc=0xAB, N=64).status == 0
    assert vmm_call(session, "cuMemcpyDtoA_v2", dstArray=first, dstOffset=64, srcDevice=device,
                    ByteCount=64).status == 0
    out = vmm_call(session, "cuMemcpyAtoHAsync_v2", srcArray=first, srcOffset=0, ByteCount=512, hStream=0)
    assert out.status == 0 and out.dstHost == data[:64] + b"\xab" * 64 + data[128:]
    assert vmm_call(session, "cuMemcpyAtoD_v2", dstDevice=device + 3840, srcArray=second, srcOffset=0,
                    ByteCount=512).status == 1  # 256 bytes past the allocation: CUDA_ERROR_INVALID_VALUE
    assert vmm_call(session, "cuMemcpyDtoA_v2", dstArray=first, dstOffset=0, srcDevice=0x7F00_0000_1000,
                    ByteCount=8).status == 1
    rows = vmm_call(session, "cuArrayCreate_v2", pAllocateArray=struct.pack("<QQiI", 16, 8, 0x20, 1)).pHandle
    assert vmm_call(session, "cuMemcpyHtoA_v2", dstArray=rows, dstOffset=0, srcHost=data[:64], ByteCount=64).status == 0
    assert vmm_call(session, "cuMemcpyHtoA_v2", dstArray=rows, dstOffset=0, srcHost=data[:128],
                    ByteCount=128).status == 1  # past its first row (16 floats)
    for array in (first, second, rows):
        assert vmm_call(session, "cuArrayDestroy", hArray=array).status == 0
    assert serving(session)


def test_small_device_and_context_queries(session):
    """Queries and settings answered by the server's driver as they are: the deprecated device properties
    (a Hopper's 1024 threads a block, warps of 32), the 1D linear texture limit, execution affinity (the
    context's SMs), shared memory bank configuration, a device's LUID (Windows only), and the one
    pointer attribute a program sets (synchronous memory operations), for the session's memory only."""
    props = vmm_call(session, "cuDeviceGetProperties", dev=0)
    assert props.status == 0 and struct.unpack_from("<i", props.prop, 0)[0] == 1024  # maxThreadsPerBlock
    assert struct.unpack_from("<i", props.prop, 36)[0] == 32  # SIMDWidth (the tenth int)
    width = vmm_call(session, "cuDeviceGetTexture1DLinearMaxWidth", format=0x20, numChannels=1, dev=0)
    assert width.status == 0 and width.maxWidthInElements >= 1 << 20
    support = vmm_call(session, "cuDeviceGetExecAffinitySupport", type=0, dev=0)
    assert support.status == 0 and support.pi in (0, 1)
    affinity = vmm_call(session, "cuCtxGetExecAffinity", type=0)
    assert affinity.status == 0 and struct.unpack_from("<I", affinity.pExecAffinity, 4)[0] > 0  # SMs
    config = vmm_call(session, "cuCtxGetSharedMemConfig")
    assert config.status == 0 and config.pConfig in (0, 1, 2)
    assert vmm_call(session, "cuCtxSetSharedMemConfig", config=config.pConfig).status == 0
    assert vmm_call(session, "cuDeviceGetLuid", dev=0).status in (0, 801)  # CUDA_ERROR_NOT_SUPPORTED off Windows
    device = allocate(session, 4096)
    sync_memops = 6  # CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
    on = struct.pack("<I", 1)
    assert vmm_call(session, "cuPointerSetAttribute", value=on, attribute=sync_memops, ptr=device + 64).status == 0
    assert vmm_call(session, "cuPointerSetAttribute", value=on, attribute=sync_memops,
                    ptr=0x7F00_0000_1000).status == 1  # not the session's: refused before CUDA
    assert serving(session)


def test_a_batch_of_memory_operations_names_only_the_sessions_memory(session):
    """cuStreamBatchMemOp: the batch runs when every wait and write in it names the session's memory, all
    the bytes of it; one address that is not, or an operation of no known type, refuses the whole batch
    before CUDA sees it (nothing written)."""
    device = allocate(session, 4096)

    def op(kind: int, address: int = 0, value: int = 0, flags: int = 0) -> bytes:
        return struct.pack("<iIQQIIQ", kind, 0, address, value, flags, 0, 0).ljust(48, b"\0")

    def batch(*ops: bytes) -> int:
        return vmm_call(session, "cuStreamBatchMemOp_v2", stream=0, count=len(ops), paramArray=b"".join(ops),
                        flags=0).status

    write32, wait32, write64, barrier = 2, 1, 5, 6
    assert batch(op(write32, device, 7), op(wait32, device, 7, 1), op(write64, device + 8, 9), op(barrier)) == 0
    back = vmm_call(session, "cuMemcpyDtoH_v2", srcDevice=device, ByteCount=16)
    assert back.status == 0 and struct.unpack("<IIQ", back.dstHost) == (7, 0, 9)
    assert batch(op(write32, device, 8), op(write64, device + 4092, 1)) == 1  # 8 bytes from 4 before the end
    assert batch(op(write32, device, 8), op(write32, 0x7F00_0000_1000, 1)) == 1
    assert batch(op(write32, device, 8), op(99)) == 1
    back = vmm_call(session, "cuMemcpyDtoH_v2", srcDevice=device, ByteCount=4)
    assert back.dstHost == struct.pack("<I", 7)  # the refused batches wrote nothing
    assert serving(session)


def test_retained_allocation_handles_are_the_sessions_own(session):
    """cuMemRetainAllocationHandle: an address of the session's mappings gives the handle mapped there, one
    more reference to release; an address the session did not map (in its reservation, or nowhere) is
    refused before the driver sees it."""
    va, handle, g = vmm_range(session)
    got = vmm_call(session, "cuMemRetainAllocationHandle", addr=va + 4096)
    assert got.status == 0 and got.handle == handle
    assert vmm_call(session, "cuMemRelease", handle=handle).status == 0  # the retained reference
    assert vmm_call(session, "cuMemGetAllocationPropertiesFromHandle", handle=handle).status == 0  # still held
    assert vmm_call(session, "cuMemRetainAllocationHandle", addr=va + g).status == 1  # reserved, not mapped
    assert vmm_call(session, "cuMemRetainAllocationHandle", addr=0x7F00_0000_1000).status == 1
    assert vmm_call(session, "cuMemRelease", handle=handle).status == 0  # the session's own
    again = vmm_call(session, "cuMemRetainAllocationHandle", addr=va)  # released, still mapped: held again
    assert again.status == 0 and again.handle == handle
    assert vmm_call(session, "cuMemUnmap", ptr=va, size=g).status == 0
    assert vmm_call(session, "cuMemRelease", handle=handle).status == 0
    assert vmm_call(session, "cuMemRelease", handle=handle).status == 1  # no reference left: not the session's
    assert vmm_call(session, "cuMemAddressFree", ptr=va, size=2 * g).status == 0


def server_resident_mib(server) -> float:
    """The resident memory of the server's processes (the listener and its session processes, as its log
    names them: not the one waiting for the next client, which may still be starting), MiB."""
    named = {int(p) for p in re.findall(r"session \d+ for pid \d+ .*: process (\d+)", server.text())}
    pids, total = {server.proc.pid}, 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) in named:
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == server.proc.pid:  # (its parent)
                pids.add(int(entry))
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def test_a_payload_announced_large_costs_only_what_arrives(server):
    """A frame that announces a 2 GiB payload and sends 1 KiB of it: the session's buffer grows as bytes
    arrive (transport.read_payload), it does not allocate the announced size (was: 2 GiB, zeroed)."""
    t, reply = open_session(server.address, HELLO, mode="tcp")
    assert not reply.error
    before = server_resident_mib(server)
    head = pb.Batch(fn=fn_id("cuMemGetInfo_v2"), args=pb.cuMemGetInfo_v2_Args().SerializeToString()).SerializeToString()
    t.connection.sock.sendall(HEADER.pack(MAGIC, len(head), 2 << 30) + head + bytes(1024))
    time.sleep(1.5)
    grown = server_resident_mib(server) - before
    t.close()
    assert grown < 64, f"the server's processes grew by {grown:.0f} MiB for 1 KiB of a 2 GiB payload"


def session_peak_mib(server) -> float:
    """The highest resident memory any of the server's session processes reached so far (VmHWM), MiB."""
    peak = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1]) != server.proc.pid:
                    continue
                peak = max([peak] + [int(line.split()[1]) for line in open(f"/proc/{entry}/status")
                                     if line.startswith("VmHWM:")])
            except OSError:
                continue
    return peak / 1024


def test_a_compressed_payload_costs_only_what_the_call_takes(server):
    """A compressed payload is decompressed as the call's buffers take it (compression.Inflow), through a
    window of 8 MiB at most: a 1 MiB copy whose payload is a few-KiB zstd frame of 1 GiB costs the session
    its 1 MiB (was: the whole frame inflated first, bounded only by CUWIRE_MAX_BUFFER); a frame that asks
    for a 64 MiB window is refused; a large compressed copy goes to the GPU in chunks, bytes intact."""
    import zstandard

    from cuwire.server.bulk import CHUNK

    t, reply = open_session(server.address, HELLO, mode="tcp")
    assert not reply.error
    size = 1 << 20
    device = allocate(t, 2 * CHUNK + 12345)

    def copy(payload: bytes, n: int = size) -> pb.Reply:
        args = pb.cuMemcpyHtoD_v2_Args(dstDevice=device, ByteCount=n).SerializeToString()
        return t.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyHtoD_v2"), args=args, payload_codec=pb.ZSTD),
                                       [payload])[0]

    def read(n: int = size) -> bytes:
        args = pb.cuMemcpyDtoH_v2_Args(srcDevice=device, ByteCount=n).SerializeToString()
        return t.exchange_with_payload(pb.Batch(fn=fn_id("cuMemcpyDtoH_v2"), args=args))[1]

    squeeze = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    bomb = b"".join(squeeze.compress(bytes(16 << 20)) for _ in range(64)) + squeeze.flush()
    assert len(bomb) < 256 << 10
    assert not copy(zstandard.ZstdCompressor().compress(b"\xff" * size)).error  # (its chunk buffers made)
    before = session_peak_mib(server)
    reply = copy(bomb)
    assert not reply.error and pb.cuMemcpyHtoD_v2_Result.FromString(reply.result).status == 0
    assert read() == bytes(size)
    grown = session_peak_mib(server) - before
    assert grown < 48, f"a session process grew by {grown:.0f} MiB for a 1 MiB copy of a compressed payload"

    wide = zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters.from_level(
        3, window_log=26, write_content_size=False)).compressobj()  # (streamed: its size unknown to zstd)
    wide = wide.compress(os.urandom(size)) + wide.flush()
    reply = copy(wide)
    assert "does not decompress" in reply.error and "memory" in reply.error, reply.error
    short = zstandard.ZstdCompressor().compress(bytes(size // 2))
    assert "short of what the call's buffers take" in copy(short).error

    data = (bytes(range(251)) * (2 * CHUNK // 251 + 100))[:2 * CHUNK + 12345]
    reply = copy(zstandard.ZstdCompressor().compress(data), len(data))
    assert not reply.error and pb.cuMemcpyHtoD_v2_Result.FromString(reply.result).status == 0
    assert read(len(data)) == data
    assert serving(t)
    t.close()


def test_a_session_holds_at_most_max_handles_of_a_kind(tmp_path):
    """CUWIRE_MAX_HANDLES: the call that would make one handle more of a kind fails with
    CUDA_ERROR_OUT_OF_MEMORY (a program that makes events in a loop is bounded); one destroyed makes room."""
    server = ServerProcess(tmp_path, env={"CUWIRE_MAX_HANDLES": "8"})
    try:
        t, reply = open_session(server.address, HELLO, mode="tcp")
        assert not reply.error

        def create() -> pb.cuEventCreate_Result:
            return pb.cuEventCreate_Result.FromString(t.exchange(pb.Batch(
                fn=fn_id("cuEventCreate"), args=pb.cuEventCreate_Args(Flags=0).SerializeToString())).result)

        events = [create() for _ in range(8)]
        assert all(e.status == 0 for e in events)
        assert create().status == 2  # CUDA_ERROR_OUT_OF_MEMORY
        destroyed = t.exchange(pb.Batch(fn=fn_id("cuEventDestroy_v2"), args=pb.cuEventDestroy_v2_Args(
            hEvent=events[0].phEvent).SerializeToString()))
        assert pb.cuEventDestroy_v2_Result.FromString(destroyed.result).status == 0
        assert create().status == 0
        assert serving(t)
        t.close()
        assert "CUWIRE_MAX_HANDLES" in server.text()
    finally:
        server.stop()


def test_a_reply_is_never_larger_than_the_call_writes(session):
    """cuDeviceGetPCIBusId writes a 13-byte string: a request for 2 GiB of it is refused before anything is
    allocated (was: a 2 GiB reply to a 40-byte request); cuwire's client passes at most 64 (at_most)."""
    ask = pb.cuDeviceGetPCIBusId_Args(len=(1 << 31) - 1, dev=0).SerializeToString()
    reply = session.exchange(pb.Batch(fn=fn_id("cuDeviceGetPCIBusId"), args=ask))
    assert "writes at most 64 bytes" in reply.error and len(reply.SerializeToString()) < 4096
    reply = session.exchange(pb.Batch(fn=fn_id("cuDeviceGetPCIBusId"),
                                      args=pb.cuDeviceGetPCIBusId_Args(len=64, dev=0).SerializeToString()))
    res = pb.cuDeviceGetPCIBusId_Result.FromString(reply.result)
    assert res.status == 0 and len(res.pciBusId) == 64 and res.pciBusId.rstrip(b"\0")
    assert serving(session)


def test_an_idle_session_ends_after_the_idle_timeout(tmp_path):
    """CUWIRE_IDLE_TIMEOUT: a client that sends nothing for that long loses its session, which frees what it
    held; one that keeps calling keeps it."""
    server = ServerProcess(tmp_path, env={"CUWIRE_IDLE_TIMEOUT": "1.5"})
    try:
        busy, reply = open_session(server.address, HELLO, mode="tcp")
        idle, reply2 = open_session(server.address, HELLO, mode="tcp")
        assert not reply.error and not reply2.error
        assert serving(idle) and allocate(idle, 1 << 20)
        for _ in range(6):  # 3 s of calls, every half second
            assert serving(busy)
            time.sleep(0.5)
        with pytest.raises(TransportError):
            idle.connection.sock.settimeout(10)
            serving(idle)
        assert serving(busy)
        busy.close()
        idle.close()
        log = server.text()
        assert "CUWIRE_IDLE_TIMEOUT" in log and "freed 1 allocation" in log, log
    finally:
        server.stop()


def test_a_session_frees_only_its_own_memory(tmp_path):
    """With --isolation thread, sessions share a process and a context: session B's cuMemFree of session
    A's allocation is refused (CUDA_ERROR_INVALID_VALUE), and A's memory stays A's (was: freed)."""
    server = ServerProcess(tmp_path, "--isolation", "thread")
    try:
        a, ra = open_session(server.address, HELLO, mode="tcp")
        b, rb = open_session(server.address, HELLO, mode="tcp")
        assert not ra.error and not rb.error
        mine = allocate(a, 1 << 20)

        def free(t, address: int) -> int:
            return pb.cuMemFree_v2_Result.FromString(t.exchange(pb.Batch(
                fn=fn_id("cuMemFree_v2"), args=pb.cuMemFree_v2_Args(dptr=address).SerializeToString())).result).status

        assert free(b, mine) == 1  # CUDA_ERROR_INVALID_VALUE
        assert free(a, mine) == 0  # still A's to free
        assert free(a, mine) == 1  # and only once
        assert serving(a) and serving(b)
        a.close()
        b.close()
    finally:
        server.stop()


@pytest.mark.parametrize("isolation", ["thread", "process"])
@pytest.mark.parametrize("mode", ["tcp", "unix"])
def test_two_sessions_reach_only_their_own_memory(mode, isolation, tmp_path):
    """Issue 36: session B names session A's allocation in every family of call that takes device memory,
    in small and large sizes (a large copy streams in chunks beside the message, or through shared memory
    over the Unix socket): each is refused with CUDA_ERROR_INVALID_VALUE, B's own memory works the same
    way, and A's bytes are untouched. In both isolations: with --isolation thread the two share a process
    and a device; with a process each, A's address is one B's process never had (the emulated device
    numbers each process's allocations from the same start: A's lies past B's)."""
    from conftest import ServerProcess

    from cuwire.server.bulk import CHUNK

    s = ServerProcess(tmp_path, "--isolation", isolation)
    try:
        sessions = []
        for _ in range(2):
            t, reply = open_session(s.address, HELLO, mode=mode, shared=RingOnly() if mode == "unix" else None)
            assert not reply.error
            sessions.append(t)
        a, b = sessions
        large = 2 * CHUNK + 4096
        if isolation == "process":
            allocate(a, 4 * large)  # (so that A's address lies past all B allocates in its own process)
        theirs, mine = allocate(a, large), allocate(b, large)
        assert mine != theirs
        pattern = (bytes(range(251)) * (large // 251 + 1))[:large]

        def call(t, name, payload=(), **fields):
            args = getattr(pb, f"{name}_Args")(**fields).SerializeToString()
            reply, back, _ = t.exchange_with_payload(pb.Batch(fn=fn_id(name), args=args), payload)
            assert not reply.error, (name, reply.error)
            return getattr(pb, f"{name}_Result").FromString(reply.result).status, back

        assert call(a, "cuMemcpyHtoD_v2", [pattern], dstDevice=theirs, ByteCount=large)[0] == 0
        ids = {n: i for i, (n, _) in generated.RECORDS.items()}
        sync = struct.pack("<II", ids["cuCtxSynchronize"], 0)
        for size in (4096, large):
            families = {
                "cuMemcpyHtoD_v2": lambda d, n: call(b, "cuMemcpyHtoD_v2", [bytes(n)], dstDevice=d, ByteCount=n),
                "cuMemcpyDtoH_v2": lambda d, n: call(b, "cuMemcpyDtoH_v2", srcDevice=d, ByteCount=n),
                "cuMemcpy to": lambda d, n: call(b, "cuMemcpy", [bytes(n)], dst=d, src_host=b"", ByteCount=n),
                "cuMemcpy from": lambda d, n: call(b, "cuMemcpy", dst_host=b"", src=d, ByteCount=n),
                "cuMemcpyDtoD_v2 to": lambda d, n: call(b, "cuMemcpyDtoD_v2", dstDevice=d, srcDevice=mine,
                                                         ByteCount=n),
                "cuMemcpyDtoD_v2 from": lambda d, n: call(b, "cuMemcpyDtoD_v2", dstDevice=mine, srcDevice=d,
                                                           ByteCount=n),
                "cuMemsetD8_v2": lambda d, n: call(b, "cuMemsetD8_v2", dstDevice=d, uc=0, N=n),
                "cuMemsetD8Async (queued)": lambda d, n: (records_frame(b, struct.pack(
                    "<II", ids["cuMemsetD8Async"], 25) + struct.pack("<QBQQ", d, 0, n, 0) + sync)[1], b""),
            }
            for family, run in families.items():
                refused, back = run(theirs, size)
                assert refused == 1 and not back, (family, size, refused)  # CUDA_ERROR_INVALID_VALUE
                assert run(mine, size)[0] == 0, (family, size)  # the same on its own memory: served
        assert call(b, "cuMemFree_v2", dptr=theirs)[0] == 1
        status, back = call(a, "cuMemcpyDtoH_v2", srcDevice=theirs, ByteCount=large)
        assert status == 0 and back == pattern  # A's bytes, untouched by all of the above
        assert call(a, "cuMemFree_v2", dptr=theirs)[0] == 0 and call(b, "cuMemFree_v2", dptr=mine)[0] == 0
        for t in sessions:
            t.close()
    finally:
        s.stop()


def test_two_sessions_in_one_process_share_by_ipc_only_their_own(tmp_path):
    """Issue 36, IPC in the two-session matrix: with --isolation thread (one process, one device), session B
    cannot export session A's memory or event (CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE), nor
    close A's memory as memory it opened; B exports its own. A handle A exported is opened by another
    session only as IPC lets it (as across processes: the driver does not open it in its own process)."""
    from conftest import ServerProcess

    s = ServerProcess(tmp_path, "--isolation", "thread")
    try:
        (a, ra), (b, rb) = (open_session(s.address, HELLO, mode="tcp") for _ in range(2))
        assert not ra.error and not rb.error
        theirs, mine = allocate(a, 1 << 20), allocate(b, 1 << 20)
        their_event, my_event = (vmm_call(t, "cuEventCreate", Flags=0x6).phEvent for t in (a, b))
        assert vmm_call(b, "cuIpcGetMemHandle", dptr=theirs).status == 1
        assert vmm_call(b, "cuIpcGetMemHandle", dptr=theirs + 4096).status == 1
        assert vmm_call(b, "cuIpcGetEventHandle", event=their_event).status == 400
        assert vmm_call(b, "cuIpcCloseMemHandle", dptr=theirs).status == 1
        assert vmm_call(b, "cuIpcGetMemHandle", dptr=mine).status == 0  # its own: served
        assert vmm_call(b, "cuIpcGetEventHandle", event=my_event).status == 0
        exported = vmm_call(a, "cuIpcGetMemHandle", dptr=theirs)
        assert exported.status == 0
        opened = vmm_call(b, "cuIpcOpenMemHandle_v2", handle=exported.pHandle, Flags=1)
        assert opened.status != 0 or opened.pdptr != theirs, opened  # never A's own pointer handed over
        assert vmm_call(a, "cuMemFree_v2", dptr=theirs).status == 0  # A's memory stayed A's
        assert serving(a) and serving(b)
        a.close()
        b.close()
    finally:
        s.stop()


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_two_sessions_build_graphs_only_of_their_own(isolation, tmp_path):
    """Issue 36: the graph calls that name device memory or another graph, from session B against session A's
    memory and graphs: each is refused (memory not the session's: CUDA_ERROR_INVALID_VALUE; a graph or node
    not the session's: CUDA_ERROR_INVALID_HANDLE), and the same call on B's own is served. The memory
    families in both isolations (A's address past all of B's, as in the test above); the handles with
    --isolation thread (one process, one device), where the two sessions' handles are numbered apart (with
    a process each, another's handle may bear the number of one of B's own: it names B's own)."""
    from conftest import ServerProcess

    s = ServerProcess(tmp_path, "--isolation", isolation)
    try:
        (a, ra), (b, rb) = (open_session(s.address, HELLO, mode="tcp") for _ in range(2))
        assert not ra.error and not rb.error
        if isolation == "process":
            allocate(a, 4 << 16)
        theirs, mine = allocate(a, 1 << 16), allocate(b, 1 << 16)
        their_graph, my_graph, my_child = (vmm_call(t, "cuGraphCreate", flags=0).phGraph for t in (a, b, b))
        ctx = rb.welcome.devices[0].primary_context

        def memset(dst: int) -> bytes:  # CUDA_MEMSET_NODE_PARAMS: dst, pitch, value, elementSize, width, height
            return struct.pack("<QQIIQQ", dst, 0, 1, 1, 4096, 1)

        def device_copy(dst: int, src: int) -> bytes:  # CUDA_MEMCPY3D, device to device
            side = struct.Struct("<QQQQI4xQQQQQQ")
            return (side.pack(0, 0, 0, 0, 2, 0, src, 0, 0, 4096, 1) + side.pack(0, 0, 0, 0, 2, 0, dst, 0, 0, 4096, 1)
                    + struct.pack("<QQQ", 4096, 1, 1))

        def batch(address: int) -> int:  # a batch memory operation node writing 4 bytes at address
            op = struct.pack("<IIQIIQ", 2, 0, address, 7, 0, 0) + bytes(16)  # CU_STREAM_MEM_OP_WRITE_VALUE_32
            reply = b.exchange(pb.Batch(fn=generated.OP_IDS["BatchMemOpNode"], args=pb.BatchMemOpNode_Args(
                action=0, graph=my_graph, ctx=ctx, count=1, ops=op).SerializeToString()))
            assert not reply.error, reply.error
            return pb.BatchMemOpNode_Result.FromString(reply.result).status

        node = vmm_call(b, "cuGraphAddMemsetNode", hGraph=my_graph, dependencies=b"", numDependencies=0,
                        memsetParams=memset(mine), ctx=ctx).phGraphNode
        families = {  # (call on A's, the same call on B's own): statuses
            "memset node": lambda d: vmm_call(b, "cuGraphAddMemsetNode", hGraph=my_graph, dependencies=b"",
                                              numDependencies=0, memsetParams=memset(d), ctx=ctx).status,
            "memcpy node to": lambda d: vmm_call(b, "cuGraphAddMemcpyNode", hGraph=my_graph, dependencies=b"",
                                                 numDependencies=0, copyParams=device_copy(d, mine), ctx=ctx).status,
            "memcpy node from": lambda d: vmm_call(b, "cuGraphAddMemcpyNode", hGraph=my_graph, dependencies=b"",
                                                   numDependencies=0, copyParams=device_copy(mine, d),
                                                   ctx=ctx).status,
            "memset node set": lambda d: vmm_call(b, "cuGraphMemsetNodeSetParams", hNode=node,
                                                  nodeParams=memset(d)).status,
            "batch memory operation node": batch,
        }
        for family, run in families.items():
            assert run(theirs) == 1, family  # CUDA_ERROR_INVALID_VALUE
            assert run(mine) == 0, family
        if isolation == "process":
            assert serving(a) and serving(b)
            a.close()
            b.close()
            return
        graphs = {  # (the call on A's graph; on B's own)
            "a node in another's graph": (lambda g: vmm_call(b, "cuGraphAddEmptyNode", hGraph=g, dependencies=b"",
                                                             numDependencies=0).status, my_graph),
            "another's graph as a child": (lambda g: vmm_call(b, "cuGraphAddChildGraphNode", hGraph=my_graph,
                                                              dependencies=b"", numDependencies=0,
                                                              childGraph=g).status, my_child),
            "another's graph instantiated": (lambda g: vmm_call(b, "cuGraphInstantiateWithFlags", hGraph=g,
                                                                flags=0).status, my_graph),
        }
        for family, (run, own) in graphs.items():
            assert run(their_graph) == 400, family  # CUDA_ERROR_INVALID_HANDLE
            assert run(own) == 0, family
        their_node = vmm_call(a, "cuGraphAddEmptyNode", hGraph=their_graph, dependencies=b"",
                              numDependencies=0).phGraphNode
        other = vmm_call(b, "cuGraphAddEmptyNode", hGraph=my_graph, dependencies=b"", numDependencies=0).phGraphNode
        nodes = {  # arrays of nodes (the generated handlers check each element: annotations, element_kind)
            "another's node as a dependency": lambda n: vmm_call(
                b, "cuGraphAddEmptyNode", hGraph=my_graph, dependencies=n.to_bytes(8, "little"),
                numDependencies=1).status,
            "an edge from another's node": lambda n: vmm_call(
                b, "cuGraphAddDependencies_v2", hGraph=my_graph, from_=n.to_bytes(8, "little"),
                to=other.to_bytes(8, "little"), edgeData=b"", numDependencies=1).status,
            "an edge to another's node removed": lambda n: vmm_call(
                b, "cuGraphRemoveDependencies_v2", hGraph=my_graph, from_=node.to_bytes(8, "little"),
                to=n.to_bytes(8, "little"), edgeData=b"", numDependencies=1).status,
        }
        for family, run in nodes.items():
            assert run(their_node) == 400, family  # CUDA_ERROR_INVALID_HANDLE
        assert nodes["an edge from another's node"](node) == 0  # B's own: served
        assert nodes["an edge to another's node removed"](other) == 0
        # a graph as its own child: refused (the driver ended the session process, and with it every session
        # of a process shared in threads)
        assert vmm_call(b, "cuGraphAddChildGraphNode", hGraph=my_graph, dependencies=b"", numDependencies=0,
                        childGraph=my_graph).status == 1
        assert serving(a) and serving(b)
        a.close()
        b.close()
    finally:
        s.stop()


def test_compressed_arguments_inflate_only_to_what_a_message_may_be(session):
    """A call's arguments (and queued records) are at most MAX_MESSAGE bytes uncompressed: a small zstd
    frame without a content size that inflates past that is refused there (was: up to CUWIRE_MAX_BUFFER,
    8 GiB), and the session goes on."""
    import zstandard

    from cuwire.wire.transport import MAX_MESSAGE

    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(MAX_MESSAGE + (1 << 20)))
    assert len(bomb) < 64 << 10
    reply = session.exchange(pb.Batch(fn=fn_id("cuMemGetInfo_v2"), args=bomb, args_codec=pb.ZSTD))
    assert f"does not decompress to {MAX_MESSAGE} bytes at most" in reply.error, reply.error
    reply = session.exchange(pb.Batch(records=bomb, records_codec=pb.ZSTD))
    assert f"does not decompress to {MAX_MESSAGE} bytes at most" in reply.error, reply.error
    assert serving(session)
