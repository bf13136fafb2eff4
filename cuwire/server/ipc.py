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

The client and the messages are generated (annotations: `server = "server/ipc.py"`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import INVALID_VALUE, CudaFail

log = logging.getLogger("cuwire.server")
HANDLE_SIZE = 64  # CU_IPC_HANDLE_SIZE
EVENT_KIND = "CUevent_st"
MEMORY, EVENT = b"m", b"e"  # what a noted handle stands for


@dataclass
class Ipc:
    """One session's IPC: what it exported (driver handle -> the program's bytes, and the notes it wrote)
    and the memory it opened (address -> size)."""

    exported: dict[bytes, bytes] = field(default_factory=dict)
    notes: list[Path] = field(default_factory=list)
    opened: dict[int, int] = field(default_factory=dict)


def _ipc(s) -> Ipc:
    if s.ipc is None:
        s.ipc = Ipc()
    return s.ipc


def _note(s, handle: bytes) -> Path:
    folder = s.server.settings.ipc_dir
    if not folder:
        raise CudaFail(INVALID_VALUE, "this server shares no memory between sessions (it has no IPC folder)")
    return Path(folder) / hashlib.sha256(handle).hexdigest()


def _export(s, kind: bytes, driver_handle: bytes, size: int = 0) -> bytes:
    """The program's bytes for a driver handle of this session's (the same ones each time it asks): the
    size of the memory first (the opening client keeps it in its map of device memory,
    client/device_memory.c), then random bytes."""
    ipc = _ipc(s)
    key = kind + driver_handle
    if key not in ipc.exported:
        handle = size.to_bytes(8, "little") + secrets.token_bytes(HANDLE_SIZE - 8)
        note = _note(s, handle)
        partial = note.with_suffix(".new")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        partial.rename(note)  # (whole or absent, for another session reading it)
        ipc.exported[key] = handle
        ipc.notes.append(note)
    return ipc.exported[key]


def _driver_handle(s, kind: bytes, handle: bytes, ctype: str):
    """The driver's handle a program's bytes stand for, as a pointer to the C struct (the call takes the
    struct itself: `[0]`, while the pointer keeps its memory); refused when none does."""
    if len(handle) != HANDLE_SIZE:
        raise CudaFail(INVALID_VALUE, f"an IPC handle of {len(handle)} bytes, not {HANDLE_SIZE}")
    try:
        noted = _note(s, handle).read_bytes()
    except OSError:
        noted = b""
    if noted[:1] != kind or len(noted) != 1 + HANDLE_SIZE:
        what = "memory" if kind == MEMORY else "event"
        raise CudaFail(INVALID_VALUE, f"an IPC {what} handle that no session of this server exported "
                                      "(or whose exporter has ended)")
    c = s.ffi.new(ctype + " *")
    s.ffi.memmove(c, noted[1:], HANDLE_SIZE)
    return c


def cuIpcGetMemHandle(s, a: pb.cuIpcGetMemHandle_Args) -> pb.cuIpcGetMemHandle_Result:
    """A handle of this session's device memory, for another process of the program's."""
    r = pb.cuIpcGetMemHandle_Result()
    handle = s.ffi.new("CUipcMemHandle *")
    s.device(a.dptr, 1)  # (this session's memory)
    r.status = s.lib.cuIpcGetMemHandle(handle, a.dptr)
    if r.status == 0:
        base, size = s.ffi.new("CUdeviceptr *"), s.ffi.new("size_t *")
        known = s.lib.cuMemGetAddressRange_v2(base, size, a.dptr) == 0
        r.pHandle = _export(s, MEMORY, bytes(s.ffi.buffer(handle)), size[0] if known else 0)
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
    base, size = s.ffi.new("CUdeviceptr *"), s.ffi.new("size_t *")
    if s.lib.cuMemGetAddressRange_v2(base, size, dptr[0]) != 0 or base[0] != dptr[0]:
        size[0] = 1  # (the driver always knows an opened range; at worst its first byte is the session's)
    _ipc(s).opened[dptr[0]] = size[0]
    s.records.add_memory(dptr[0], size[0])
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


def close(s) -> int:
    """At the session's end: close what it opened, forget what it exported. How many it closed."""
    if s.ipc is None:
        return 0
    for address in s.ipc.opened:
        s.lib.cuIpcCloseMemHandle(address)
        s.records.remove_memory(address)
    for note in s.ipc.notes:
        note.unlink(missing_ok=True)
    closed = len(s.ipc.opened)
    s.ipc = None
    return closed


HANDLERS = {f.__name__: f for f in (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle,
                                    cuIpcGetEventHandle, cuIpcOpenEventHandle)}
