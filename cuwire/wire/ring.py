"""Shared memory for payloads between a client and a server on the same host (the C is cuwire/wire/shm_ring.h).

Over a Unix socket the client offers to take a ring (Hello.ring_size); the session's server makes it (a
memfd, which it registers with the driver, so the GPU copies straight from and into it) and sends its
descriptor with the welcome (Welcome.ring). From then on every frame's payload goes through the ring
instead of the socket (transport.Connection): a large copy to the GPU costs the client one memcpy into
the ring, as the driver's own staging of pageable memory does, and no socket copies on either side.

Beside the ring, the server makes a second memfd, of CUWIRE_HOST_MEMORY bytes, that the client's
page-locked allocations (cuMemHostAlloc, cudaMallocHost) are carved from (client/runtime.py, SharedHost);
the server registers each allocated range with the driver (RegisterHost), and copies between such memory
and the GPU name an offset in it (CopyShared, server/records.c): the GPU reads and writes the program's
buffer itself, and an asynchronous copy is queued, as natively. Both processes map that memory at the
same address when they can (the client reserves address space and names it in its hello), so a pointer
to it is also the GPU's pointer to it, as page-locked memory is natively with unified addressing:
kernels may read and write it directly (mapped memory, cuMemHostGetDevicePointer).

Both sides call the same C, each from its own compiled module (the client library's, the server's
records module): `Ring` takes that module's (ffi, lib).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from cuwire import address_space

SLOT = 4 << 20  # bytes per slot: a large copy moves a slot at a time, the GPU copying one while the next fills
SIZE = 8 * SLOT + 4096  # what a client offers: eight slots and the header page
MAX_SIZE = 64 * SLOT + 4096  # the most a server makes for one session

HEADER = Path(__file__).resolve().parent / "shm_ring.h"


def _transport_error(why: str) -> Exception:
    """The wire's error (transport.TransportError), imported when needed: the client library's build reads
    this module's C definitions where the wire's own dependencies (protobuf) are not installed."""
    from cuwire.wire.transport import TransportError

    return TransportError(why)


def cdef(header: Path = HEADER) -> str:
    """The C both sides call, as cffi declarations: those between a header's cdef markers (this module's
    header, or stream.h's; the client library's build; the server's records module reads the same lines
    itself, server/records_build.py, as pip's build cannot import cuwire)."""
    text = header.read_text()
    return text[text.index("/* cffi cdef: from here"):text.index("/* cffi cdef: to here")].split("\n", 1)[1]


class Ring:
    """One side's view of a session's ring. Not thread-safe: the connection's lock covers it.

    Its memory is mapped by C (cw_map_shared) and unmapped only by close: no garbage collection takes it
    from threads of C still using it (the client's host-function thread, in a Python program's
    interpreter finalizing while its libraries' teardown still calls CUDA)."""

    def __init__(self, ffi: Any, lib: Any, address: int, size: int, sock_fd: int, create: bool,
                 spin_us: int = 50, slot: int = SLOT):
        self.ffi, self.lib, self.size = ffi, lib, size
        self.base = ffi.cast("char *", address)
        self.c = lib.cw_ring_open(self.base, size, sock_fd, int(create), slot, spin_us * 1000)
        if self.c == ffi.NULL:
            lib.cw_unmap(address, size)
            raise _transport_error("the shared memory offered for payloads is not a ring cuwire can use")
        self.slots = lib.cw_ring_slots(self.c)
        self.slot_size = lib.cw_ring_slot_size(self.c)
        self.ptr = ffi.new("char **")
        self.length = ffi.new("uint64_t *")
        self.held = 0  # slots acquired and not released (acquire)

    @property
    def address(self) -> int:
        return int(self.ffi.cast("uintptr_t", self.base))

    def _check(self, rc: int) -> None:
        if rc == -1:
            raise _transport_error("the peer closed the connection while a payload was in shared memory")
        if rc != 0:
            raise _transport_error("the peer put something in shared memory that is not a payload")

    # writing a payload
    def write(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        if len(view):
            self._check(self.lib.cw_ring_write(self.c, self.ffi.from_buffer(view), len(view)))

    def flush(self) -> None:
        self._check(self.lib.cw_ring_flush(self.c))

    def claim(self) -> int:
        """A free slot to fill in place: its address (slot_size bytes)."""
        self._check(self.lib.cw_ring_claim(self.c, self.ptr))
        return int(self.ffi.cast("uintptr_t", self.ptr[0]))

    def publish(self, n: int) -> None:
        self._check(self.lib.cw_ring_publish(self.c, n))

    # reading a payload
    def begin_read(self) -> None:
        self.lib.cw_ring_begin_read(self.c)

    def read_into(self, view: memoryview) -> None:
        if len(view):
            self._check(self.lib.cw_ring_read(self.c, self.ffi.from_buffer(view, require_writable=True), len(view)))

    def acquire(self) -> tuple[int, int]:
        """The next slot of the payload, to use in place until release: (address, bytes)."""
        self._check(self.lib.cw_ring_acquire(self.c, self.ptr, self.length))
        self.held += 1
        return int(self.ffi.cast("uintptr_t", self.ptr[0])), self.length[0]

    def release(self, count: int = 1) -> None:
        count = min(count, self.held)
        if count:
            self.lib.cw_ring_release(self.c, count)
            self.held -= count

    def release_all(self) -> None:
        self.release(self.held)

    def close(self) -> None:
        if self.c != self.ffi.NULL:
            self.lib.cw_ring_close(self.c)
            self.c = self.ffi.NULL
        if self.size:
            self.lib.cw_unmap(self.address, self.size)
            self.size = 0


def create(ffi: Any, lib: Any, size: int, sock_fd: int, spin_us: int = 50, slot: int = SLOT) -> tuple[Ring, int]:
    """The server's side: new shared memory of `size` bytes (bounded by MAX_SIZE) laid out as a ring of
    `slot`-byte slots, and its descriptor, to send to the client (then close it)."""
    slot = max(min(slot, MAX_SIZE // 4), 64 << 10)
    size = max(min(size, MAX_SIZE), 2 * slot + 4096)
    fd = os.memfd_create("cuwire-ring", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        return Ring(ffi, lib, _map(lib, fd, size), size, sock_fd, create=True, spin_us=spin_us, slot=slot), fd
    except BaseException:
        os.close(fd)
        raise


def _map(lib: Any, fd: int, size: int) -> int:
    address = lib.cw_map_shared(fd, size, 0, 0)
    if not address:
        raise OSError("cannot map the shared memory of a ring")
    return address


HOST_SPAN = 64 << 30  # address space a client reserves for shared page-locked memory (no memory is taken)


def hold_host_range(lib: Any, address: int, size: int) -> int:
    """The server's side, before anything else takes address space in its process (a session process
    does this before CUDA starts, which reserves much of it): keep the client's reserved range free here
    (no access, no memory) so that host_memory can map at the client's own address. The address, or 0."""
    if not address or size <= 0:
        return 0
    return lib.cw_reserve_at(address, size)


def host_memory(lib: Any, size: int, address: int, held: int = 0) -> tuple[int, int]:
    """The server's side of the host memory a client on this host gets for its page-locked allocations:
    `size` bytes of a new memfd (no page is taken until one is written), mapped at the client's reserved
    `address` when that range is free here (or `held` there by hold_host_range), else anywhere; (its
    address here, its descriptor, to send to the client and then close). The server registers the ranges
    the client allocates (RegisterHost)."""
    fd = os.memfd_create("cuwire-host", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        ours = bool(address) and held == address
        mapped = (address and lib.cw_map_shared(fd, size, address, int(ours))) or lib.cw_map_shared(fd, size, 0, 0)
        if not mapped:
            raise OSError("cannot map the shared host memory")
        return mapped, fd
    except BaseException:
        os.close(fd)
        raise


# Where a client reserves that space: address space no process's own mappings take (programs load near
# 0x55..., libraries and mmap come down from 0x7f...), so that its session's process, whose own layout is
# as random as the client's, finds the same range free. Reserved next to the client's own mappings, it
# overlapped the session's in about one session in sixty on the H100: the memory then lay at two
# addresses, and device memory the server gave could fall on the client's copy.
# Above the windows a device list's servers keep their memory in (address_space.windows: up to 72 TiB),
# below where programs load.
HOST_REGION = (address_space.WINDOWS_END, address_space.WINDOWS_END + (12 << 40))  # 72 to 84 TiB
HOST_ALIGN = 1 << 30


def reserve_host(lib: Any) -> int:
    """The client's side, before its hello: address space where the host memory may go (0: none), at a
    random place of HOST_REGION (anywhere, where the kernel's address space is smaller)."""
    slots = (HOST_REGION[1] - HOST_REGION[0] - HOST_SPAN) // HOST_ALIGN
    for _ in range(8):
        address = HOST_REGION[0] + secrets.randbelow(slots) * HOST_ALIGN
        if lib.cw_reserve_at(address, HOST_SPAN):
            return address
    return lib.cw_reserve(HOST_SPAN)


def map_host_memory(lib: Any, fd: int, size: int, server_address: int, reserved: int) -> int:
    """The client's side: map what the server made (its descriptor came with the welcome) at the address
    the server has it at, over the reservation, when the server could take that address; else anywhere.
    Returns the address; the descriptor is closed and what is left of the reservation given back."""
    same = bool(reserved) and server_address == reserved and size <= HOST_SPAN
    try:
        if os.fstat(fd).st_size != size:
            raise _transport_error("the server's host memory is not the size its welcome says")
        address = lib.cw_map_shared(fd, size, reserved, 1) if same else lib.cw_map_shared(fd, size, 0, 0)
        if not address:
            raise _transport_error("cannot map the host memory the server shares")
    finally:
        os.close(fd)
        if same:
            lib.cw_unmap(reserved + size, HOST_SPAN - size)
        elif reserved:
            lib.cw_unmap(reserved, HOST_SPAN)
    return address


def attach(ffi: Any, lib: Any, fd: int, sock_fd: int, spin_us: int = 50) -> Ring:
    """The client's side: map the ring the server made (its descriptor came with the welcome); the
    descriptor is closed here."""
    try:
        size = os.fstat(fd).st_size
        if size > MAX_SIZE:
            raise _transport_error(f"the server offered {size} bytes of shared memory, more than {MAX_SIZE}")
        address = _map(lib, fd, size)
    finally:
        os.close(fd)
    return Ring(ffi, lib, address, size, sock_fd, create=False, spin_us=spin_us)
