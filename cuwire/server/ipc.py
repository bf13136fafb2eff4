"""Server halves of CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcGetEventHandle...): memory and
events one program's process shares with another's (CUDA's simpleIPC; PyTorch's tensors sent between
processes), each process a session of its own, each session a process of the server's own.

Natively a handle is a capability: whoever holds its 64 bytes may open the memory. Between sessions that
must not reach each other's memory otherwise, the driver's own handle never leaves the server: the program
gets 64 random bytes instead, and the server notes, in a folder only it can read (Settings.ipc_dir, made
when the server starts, shared by its session processes), which driver handle those bytes stand for. A
session opens only what another session exported and the program passed on; a forged handle, or one whose
exporter ended, is CUDA_ERROR_INVALID_VALUE. What a session opened is closed when it ends; what it exported
is forgotten then.

Shareable handles (cuMemExportToShareableHandle, cuMemPoolExportToShareableHandle; CUDA's memMapIPCDrv and
streamOrderedAllocationIPC) are file descriptors that a program passes between its processes over a Unix
socket. The program gets a descriptor of its own process (client/shareable.c: a small memory file holding
the 64 bytes that stand for the handle); the driver's descriptor stays in the exporting session's process,
which hands it to an importing session's process over a socket in the IPC folder (FdBroker). Only
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is served. Pointers exported from a pool (cuMemPoolExportPointer)
travel as IPC handles do.

The client and the messages are generated (annotations: `server = "server/ipc.py"`).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import secrets
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.server import vmm
from cuwire.server.errors import INVALID_VALUE, NOT_SUPPORTED, CudaFail

HANDLE_SIZE = 64  # CU_IPC_HANDLE_SIZE
EVENT_KIND = "CUevent_st"
MEMORY, EVENT, POINTER = b"m", b"e", b"p"  # what a noted handle stands for: the driver's bytes follow
WHAT = {MEMORY: "memory", EVENT: "event", POINTER: "pool pointer"}
DESCRIPTOR = b"f"  # ...or a file descriptor: its size (8 bytes) and the socket of the process holding it
POSIX_FD = cu.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
POOL_KIND = "CUmemPoolHandle_st"


@dataclass
class Ipc:
    """One session's IPC: what it exported (driver handle -> the program's bytes, and the notes it wrote)
    and the memory it opened (address -> size)."""

    exported: dict[bytes, bytes] = field(default_factory=dict)
    notes: list[Path] = field(default_factory=list)
    opened: dict[int, int] = field(default_factory=dict)
    offered: list[bytes] = field(default_factory=list)  # descriptors this session's exports left with FdBroker


def _ipc(s) -> Ipc:
    if s.ipc is None:
        s.ipc = Ipc()
    return s.ipc


class FdBroker:
    """The driver's descriptors this process exported, handed to the session processes that import them:
    a Unix socket in the IPC folder; a peer sends the 64 bytes of a handle and gets the descriptor (a
    byte 1 and the descriptor) or nothing (a byte 0). One per process (sessions of --isolation thread
    share it)."""

    def __init__(self, folder: str) -> None:
        self.path = str(Path(folder) / f"fds-{os.getpid()}-{secrets.token_hex(8)}.sock")
        self.lock = threading.Lock()
        self.offers: dict[bytes, int] = {}
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        atexit.register(Path(self.path).unlink, missing_ok=True)  # (a session process's ends with it)
        threading.Thread(target=self.serve, name="cuwire-ipc-fds", daemon=True).start()

    def offer(self, handle: bytes, fd: int) -> None:
        with self.lock:
            self.offers[handle] = fd

    def withdraw(self, handle: bytes) -> None:
        with self.lock:
            fd = self.offers.pop(handle, None)
        if fd is not None:
            os.close(fd)

    def serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(5)
                try:
                    handle = _receive_exactly(conn, HANDLE_SIZE)
                    with self.lock:
                        fd = self.offers.get(handle)
                    if fd is None:
                        conn.sendall(b"\0")
                    else:
                        socket.send_fds(conn, [b"\1"], [fd])
                except OSError:
                    pass


def _receive_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("the peer closed the connection")
        data += chunk
    return data


_broker: FdBroker | None = None
_broker_lock = threading.Lock()


def _fd_broker(s) -> FdBroker:
    global _broker
    with _broker_lock:
        if _broker is None:
            _broker = FdBroker(str(_note(s, bytes(HANDLE_SIZE)).parent))
        return _broker


def _note(s, handle: bytes) -> Path:
    folder = s.server.settings.ipc_dir
    if not folder:
        raise CudaFail(INVALID_VALUE, "this server shares no memory between sessions (it has no IPC folder)")
    return Path(folder) / hashlib.sha256(handle).hexdigest()


def _new_handle(size: int) -> bytes:
    """The program's 64 bytes for something exported: the memory's size first (the opening client keeps it
    in its map of device memory, client/device_memory.c), then random bytes."""
    return size.to_bytes(8, "little") + secrets.token_bytes(HANDLE_SIZE - 8)


def _write_note(s, handle: bytes, content: bytes) -> None:
    """What `handle` stands for, noted for the server's other sessions (whole or absent while they read),
    and forgotten when this session ends."""
    note = _note(s, handle)
    partial = note.with_suffix(".new")
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(content)
    partial.rename(note)
    _ipc(s).notes.append(note)


def _read_note(s, handle: bytes) -> bytes:
    """What a program's bytes stand for, as a session noted it (b"": nothing, or not 64 bytes)."""
    try:
        return _note(s, handle).read_bytes() if len(handle) == HANDLE_SIZE else b""
    except OSError:
        return b""


def _export(s, kind: bytes, driver_handle: bytes, size: int = 0) -> bytes:
    """The program's bytes for a driver handle of this session's (the same ones each time it asks)."""
    ipc = _ipc(s)
    key = kind + driver_handle
    if key not in ipc.exported:
        ipc.exported[key] = _new_handle(size)
        _write_note(s, ipc.exported[key], key)
    return ipc.exported[key]


def _driver_handle(s, kind: bytes, handle: bytes, ctype: str):
    """The driver's handle a program's bytes stand for, as a pointer to the C struct (the call takes the
    struct itself: `[0]`, while the pointer keeps its memory); refused when none does."""
    if len(handle) != HANDLE_SIZE:
        raise CudaFail(INVALID_VALUE, f"an IPC handle of {len(handle)} bytes, not {HANDLE_SIZE}")
    noted = _read_note(s, handle)
    if noted[:1] != kind or len(noted) != 1 + HANDLE_SIZE:
        raise CudaFail(INVALID_VALUE, f"an IPC {WHAT[kind]} handle that no session of this server exported "
                                      "(or whose exporter has ended)")
    c = s.ffi.new(ctype + " *")
    s.ffi.memmove(c, noted[1:], HANDLE_SIZE)
    return c


def _size_of(s, address: int, base_only: bool = False) -> int:
    """The size of the allocation holding `address` (0 where the driver cannot say; with base_only, also
    where `address` is not its start)."""
    base, size = s.ffi.new("CUdeviceptr *"), s.ffi.new("size_t *")
    if s.lib.cuMemGetAddressRange_v2(base, size, address) != 0 or (base_only and base[0] != address):
        return 0
    return size[0]


def cuIpcGetMemHandle(s, a: pb.cuIpcGetMemHandle_Args) -> pb.cuIpcGetMemHandle_Result:
    """A handle of this session's device memory, for another process of the program's."""
    r = pb.cuIpcGetMemHandle_Result()
    handle = s.ffi.new("CUipcMemHandle *")
    s.device(a.dptr, 1)  # (this session's memory)
    r.status = s.lib.cuIpcGetMemHandle(handle, a.dptr)
    if r.status == 0:
        r.pHandle = _export(s, MEMORY, bytes(s.ffi.buffer(handle)), _size_of(s, a.dptr))
    return r


def cuIpcOpenMemHandle_v2(s, a: pb.cuIpcOpenMemHandle_v2_Args) -> pb.cuIpcOpenMemHandle_v2_Result:
    """Memory another session exported: this session's device memory from now on (copies and kernels may
    use it) until cuIpcCloseMemHandle or the session's end."""
    r = pb.cuIpcOpenMemHandle_v2_Result()
    driver_handle = _driver_handle(s, MEMORY, a.handle, "CUipcMemHandle")
    dptr = s.ffi.new("CUdeviceptr *")
    r.status = s.lib.cuIpcOpenMemHandle_v2(dptr, driver_handle[0], a.Flags)
    if r.status != 0:
        return r
    size = _size_of(s, dptr[0], base_only=True) or 1  # (the driver knows an opened range; at worst: a byte)
    _ipc(s).opened[dptr[0]] = size
    s.records.add_memory(dptr[0], size)
    r.pdptr = dptr[0]
    return r


def cuIpcCloseMemHandle(s, a: pb.cuIpcCloseMemHandle_Args) -> pb.cuIpcCloseMemHandle_Result:
    if a.dptr not in _ipc(s).opened:
        raise CudaFail(INVALID_VALUE, f"{a.dptr:#x} is no memory this session opened with cuIpcOpenMemHandle")
    r = pb.cuIpcCloseMemHandle_Result(status=s.lib.cuIpcCloseMemHandle(a.dptr))
    if r.status == 0:
        del s.ipc.opened[a.dptr]
        s.records.remove_memory(a.dptr)
    return r


def cuIpcGetEventHandle(s, a: pb.cuIpcGetEventHandle_Args) -> pb.cuIpcGetEventHandle_Result:
    r = pb.cuIpcGetEventHandle_Result()
    handle = s.ffi.new("CUipcEventHandle *")
    r.status = s.lib.cuIpcGetEventHandle(handle, s.handle(EVENT_KIND, "CUevent", a.event))
    if r.status == 0:
        r.pHandle = _export(s, EVENT, bytes(s.ffi.buffer(handle)))
    return r


def cuIpcOpenEventHandle(s, a: pb.cuIpcOpenEventHandle_Args) -> pb.cuIpcOpenEventHandle_Result:
    """An event another session exported: this session's (destroyed with it, as its own events are)."""
    r = pb.cuIpcOpenEventHandle_Result()
    driver_handle = _driver_handle(s, EVENT, a.handle, "CUipcEventHandle")
    event = s.ffi.new("CUevent *")
    r.status = s.lib.cuIpcOpenEventHandle(event, driver_handle[0])
    if r.status == 0:
        r.phEvent = s.scalar(event[0])
        s.owns_handle(EVENT_KIND, r.phEvent)
    return r


def _export_descriptor(s, fd: int, size: int) -> bytes:
    """The program's bytes for a descriptor of the driver's (kept, with FdBroker, until the session ends)."""
    broker = _fd_broker(s)
    handle = _new_handle(size)
    broker.offer(handle, fd)
    _ipc(s).offered.append(handle)
    _write_note(s, handle, DESCRIPTOR + size.to_bytes(8, "little") + broker.path.encode())
    return handle


def _import_descriptor(s, handle: bytes) -> tuple[int, int]:
    """(a descriptor of this process's, the memory's size) for a program's bytes of an exported
    descriptor; refused when no session of this server exported them, or its process has ended."""
    noted = _read_note(s, handle)
    if noted[:1] == DESCRIPTOR:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            try:
                conn.connect(noted[9:].decode())
                conn.sendall(handle)
                msg, fds, _, _ = socket.recv_fds(conn, 1, 1)
            except (OSError, UnicodeDecodeError):
                msg, fds = b"", []
        if msg == b"\1" and fds:
            return fds[0], int.from_bytes(noted[1:9], "little")
        for fd in fds:
            os.close(fd)
    raise CudaFail(INVALID_VALUE, "a shareable handle that no session of this server exported (or whose "
                                  "exporter has ended)")


def _posix_only(handle_type: int, call: str) -> None:
    if handle_type != POSIX_FD:
        raise CudaFail(NOT_SUPPORTED, f"{call} of handle type {handle_type}: cuwire shares memory between "
                                      "processes through POSIX file descriptors only")


def cuMemExportToShareableHandle(s, a: pb.cuMemExportToShareableHandle_Args
                                 ) -> pb.cuMemExportToShareableHandle_Result:
    """A physical allocation of this session's (cuMemCreate), for another process of the program's."""
    size = vmm.created_size(s, a.handle)
    _posix_only(a.handleType, "cuMemExportToShareableHandle")
    fd = s.ffi.new("int *")
    r = pb.cuMemExportToShareableHandle_Result()
    r.status = s.lib.cuMemExportToShareableHandle(fd, a.handle, a.handleType, a.flags)
    if r.status == 0:
        r.shareableHandle = _export_descriptor(s, fd[0], size)
    return r


def cuMemImportFromShareableHandle(s, a: pb.cuMemImportFromShareableHandle_Args
                                   ) -> pb.cuMemImportFromShareableHandle_Result:
    """Another session's physical allocation: this session's to map and release (it counts against the
    session's memory budget, as its own would)."""
    _posix_only(a.shHandleType, "cuMemImportFromShareableHandle")
    fd, size = _import_descriptor(s, a.osHandle)
    try:
        handle = s.ffi.new("CUmemGenericAllocationHandle *")
        r = pb.cuMemImportFromShareableHandle_Result()
        r.status = s.lib.cuMemImportFromShareableHandle(handle, s.ffi.cast("void *", fd), a.shHandleType)
    finally:
        os.close(fd)
    if r.status == 0:
        r.handle = handle[0]
        vmm.note_created(s, r.handle, size)
    return r


def cuMemPoolExportToShareableHandle(s, a: pb.cuMemPoolExportToShareableHandle_Args
                                     ) -> pb.cuMemPoolExportToShareableHandle_Result:
    _posix_only(a.handleType, "cuMemPoolExportToShareableHandle")
    fd = s.ffi.new("int *")
    r = pb.cuMemPoolExportToShareableHandle_Result()
    r.status = s.lib.cuMemPoolExportToShareableHandle(fd, s.handle(POOL_KIND, "CUmemoryPool", a.pool),
                                                      a.handleType, a.flags)
    if r.status == 0:
        r.handle_out = _export_descriptor(s, fd[0], 0)
    return r


def cuMemPoolImportFromShareableHandle(s, a: pb.cuMemPoolImportFromShareableHandle_Args
                                       ) -> pb.cuMemPoolImportFromShareableHandle_Result:
    """Another session's pool: this session's (destroyed with it, as its own pools are)."""
    _posix_only(a.handleType, "cuMemPoolImportFromShareableHandle")
    fd, _ = _import_descriptor(s, a.handle)
    try:
        pool = s.ffi.new("CUmemoryPool *")
        r = pb.cuMemPoolImportFromShareableHandle_Result()
        r.status = s.lib.cuMemPoolImportFromShareableHandle(pool, s.ffi.cast("void *", fd), a.handleType, a.flags)
    finally:
        os.close(fd)
    if r.status == 0:
        r.pool_out = s.scalar(pool[0])
        s.owns_handle(POOL_KIND, r.pool_out)
    return r


def cuMemPoolExportPointer(s, a: pb.cuMemPoolExportPointer_Args) -> pb.cuMemPoolExportPointer_Result:
    """An allocation of this session's from a pool it exported, for the process that imported the pool."""
    s.device(a.ptr, 1)  # (this session's memory)
    data = s.ffi.new("CUmemPoolPtrExportData *")
    r = pb.cuMemPoolExportPointer_Result(status=s.lib.cuMemPoolExportPointer(data, a.ptr))
    if r.status == 0:
        r.shareData_out = _export(s, POINTER, bytes(s.ffi.buffer(data)), _size_of(s, a.ptr))
    return r


def cuMemPoolImportPointer(s, a: pb.cuMemPoolImportPointer_Args) -> pb.cuMemPoolImportPointer_Result:
    """Another session's allocation, from a pool this session imported: this session's device memory until
    freed (cuMemFree, cuMemFreeAsync) or the session's end."""
    data = _driver_handle(s, POINTER, a.shareData, "CUmemPoolPtrExportData")
    ptr = s.ffi.new("CUdeviceptr *")
    r = pb.cuMemPoolImportPointer_Result()
    r.status = s.lib.cuMemPoolImportPointer(ptr, s.handle(POOL_KIND, "CUmemoryPool", a.pool), data)
    if r.status == 0:
        s.owns(ptr[0], _size_of(s, ptr[0], base_only=True) or 1)
        r.ptr_out = ptr[0]
    return r


def close(s) -> int:
    """At the session's end: close what it opened, forget what it exported. How many it closed."""
    if s.ipc is None:
        return 0
    for address in s.ipc.opened:
        s.lib.cuIpcCloseMemHandle(address)
        s.records.remove_memory(address)
    for note in s.ipc.notes:
        note.unlink(missing_ok=True)
    if s.ipc.offered:
        broker = _fd_broker(s)
        for handle in s.ipc.offered:
            broker.withdraw(handle)
    closed = len(s.ipc.opened)
    s.ipc = None
    return closed


HANDLERS = {f.__name__: f for f in (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle,
                                    cuIpcGetEventHandle, cuIpcOpenEventHandle, cuMemExportToShareableHandle,
                                    cuMemImportFromShareableHandle, cuMemPoolExportToShareableHandle,
                                    cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer,
                                    cuMemPoolImportPointer)}
