"""Shared memory for payloads (cuwire/wire/ring.py, cuwire/wire/shm_ring.h): two sides of one ring in this process,
as a session's server and client use it, each on its own thread."""

from __future__ import annotations

import os
import random
import socket
import threading

import pytest

from cuwire.server._records import ffi, lib
from cuwire.wire import ring
from cuwire.wire.transport import TransportError

SLOT = ring.SLOT


@pytest.fixture
def pair():
    """(server's ring, client's ring, server's socket, client's socket) over one memfd."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server, fd = ring.create(ffi, lib, ring.SIZE, a.fileno())
    client = ring.attach(ffi, lib, fd, b.fileno())
    yield server, client, a, b
    for r in (server, client):
        r.close()
    a.close()
    b.close()


def background(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # handed to the test's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_payloads_of_any_shape_go_through_both_ways(pair):
    server, client, _, _ = pair
    rng = random.Random(7)
    for turn in range(6):
        writer, reader = (client, server) if turn % 2 == 0 else (server, client)
        parts = [os.urandom(rng.choice([1, 100, 65536, SLOT - 1, SLOT, SLOT + 3, 3 * SLOT + 5])) for _ in range(4)]
        data = b"".join(parts)

        def write(writer=writer, parts=parts):
            for p in parts:
                writer.write(p)
            writer.flush()

        t, out = background(write)
        reader.begin_read()
        got = bytearray(len(data))
        view, pos = memoryview(got), 0
        while pos < len(data):  # read in pieces that do not line up with the writer's slots
            n = min(rng.randint(1, 3 * SLOT), len(data) - pos)
            reader.read_into(view[pos:pos + n])
            pos += n
        t.join(10)
        assert "error" not in out and not t.is_alive()
        assert got == data
    assert client.lib.cw_ring_slots(client.c) == ring.SIZE // SLOT  # one header page beside the slots


def test_slots_used_in_place(pair):
    """The server's copies to and from the GPU: acquire/release on the reading side, claim/publish on the
    writing side; the ring never holds more than it has slots, and everything is given back."""
    server, client, _, _ = pair
    data = os.urandom(20 * SLOT + 11)
    t, out = background(lambda: (client.write(data), client.flush()))
    server.begin_read()
    got, held = bytearray(), []
    while len(got) < len(data):
        address, n = server.acquire()
        got += ffi.buffer(ffi.cast("char *", address), n)
        held.append(n)
        if len(held) > 2:
            server.release(1)
            held.pop(0)
    server.release_all()
    t.join(10)
    assert "error" not in out and bytes(got) == data

    # the other way: the server fills slots in place, the client copies them out
    def fill():
        for offset in range(0, len(data), SLOT):
            address = server.claim()
            chunk = data[offset:offset + SLOT]
            ffi.memmove(ffi.cast("char *", address), chunk, len(chunk))
            server.publish(len(chunk))

    t, out = background(fill)
    client.begin_read()
    back = bytearray(len(data))
    client.read_into(memoryview(back))
    t.join(10)
    assert "error" not in out and bytes(back) == data


def test_a_writer_waiting_on_a_peer_that_dies_gets_an_error(pair):
    """The ring is full and the reader's process is gone (its socket closed): the writer's wait ends
    with an error within moments, never a hang."""
    server, client, _, b = pair
    t, out = background(lambda: client.write(bytes(ring.SIZE + SLOT)))  # more than all the slots hold
    t.join(0.5)
    assert t.is_alive()  # waiting for a slot
    server_socket_peer = pair[2]
    server_socket_peer.close()  # the server's end of the connection goes away
    t.join(5)
    assert not t.is_alive()
    assert isinstance(out.get("error"), TransportError)


def test_a_reader_waiting_on_a_peer_that_dies_gets_an_error(pair):
    server, client, a, _ = pair
    t, out = background(lambda: (server.begin_read(), server.read_into(memoryview(bytearray(10)))))
    t.join(0.3)
    assert t.is_alive()
    pair[3].close()  # the client's end
    t.join(5)
    assert not t.is_alive() and isinstance(out.get("error"), TransportError)


def test_a_slot_length_that_cannot_be_is_refused(pair):
    """The peer is not trusted: a published length past the slot size ends the read with an error."""
    server, client, _, _ = pair
    client.write(b"x" * 10)
    client.flush()
    header = ffi.cast("uint64_t *", ffi.cast("char *", server.address) + lib.cw_ring_lengths_offset())
    header[0] = SLOT + 1
    server.begin_read()
    with pytest.raises(TransportError, match="not a payload"):
        server.read_into(memoryview(bytearray(10)))


def test_memory_that_is_not_a_ring_is_refused():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = os.memfd_create("not-a-ring")
    os.ftruncate(fd, ring.SIZE)
    with a, b, pytest.raises(TransportError, match="not a ring"):
        ring.attach(ffi, lib, fd, b.fileno())


def test_host_memory_lands_at_the_clients_address_when_the_server_held_it():
    """A session process holds the client's range before CUDA starts (hold_host_range): the shared host
    memory then maps at the client's own address even where something else would have taken it, so a
    kernel given a page-locked pointer of the program's finds the same bytes (p2pBandwidthLatencyTest's
    flag). Without the hold, a range taken here means another address (said in the server's log)."""
    size = 1 << 20
    address = lib.cw_reserve(size)  # an address that is free here once given back
    assert address and lib.cw_unmap(address, size) == 0
    held = ring.hold_host_range(lib, address, size)
    assert held == address
    assert ring.hold_host_range(lib, address, size) == 0  # (taken now: no second hold)
    mapped, fd = ring.host_memory(lib, size, address, held)
    os.close(fd)
    assert mapped == address
    lib.cw_unmap(mapped, size)
    taken = lib.cw_reserve_at(address, size)  # something else of this process's at the client's address
    assert taken == address
    elsewhere, fd = ring.host_memory(lib, size, address)
    os.close(fd)
    assert elsewhere and elsewhere != address
    lib.cw_unmap(elsewhere, size)
    lib.cw_unmap(taken, size)


def test_client_reserves_host_span_where_no_process_maps():
    """The client's range for shared host memory lies in HOST_REGION, away from where its session's
    process has its own mappings (a program near 0x55..., libraries from 0x7f... down), so that the
    session process can hold the same range; aligned, and a new place each time."""
    picked = [ring.reserve_host(lib) for _ in range(2)]
    try:
        for address in picked:
            assert ring.HOST_REGION[0] <= address and address + ring.HOST_SPAN <= ring.HOST_REGION[1]
            assert address % ring.HOST_ALIGN == 0
        assert picked[0] != picked[1]
    finally:
        for address in picked:
            lib.cw_unmap(address, ring.HOST_SPAN)
