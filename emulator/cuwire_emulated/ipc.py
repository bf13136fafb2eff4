"""The emulated device's IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcGetEventHandle...) and shareable
handles (cuMemExportToShareableHandle, cuMemPoolExportToShareableHandle, cuMemPoolExportPointer...).

The emulated device's memory is this process's: a handle opens only in the process that made it (sessions
of a server run with --isolation thread), where the opened memory is a second address for the same bytes
and an opened event the same event under a second handle (a shareable handle is a memory file holding the
same bytes; an imported allocation or pool the same one under a second handle). A handle from another
process is refused with CUDA_ERROR_NOT_SUPPORTED (a GPU's driver opens it; the tests of that run on the
H100).
"""

from __future__ import annotations

import os
import struct
from typing import Any

CData = Any
MAGIC = b"cuwire-emulated-ipc"
_LAYOUT = struct.Struct("<19sIcQ")  # MAGIC, the process, m(emory) or e(vent), the address or handle
HANDLE_SIZE = 64
LAZY_ENABLE_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the one flag
EVENT_INTERPROCESS = 4  # CU_EVENT_INTERPROCESS
POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


class EmulatedIpc:
    """The driver's IPC functions, mixed into EmulatedLib."""

    ffi: Any
    drv: Any
    _memory: Any
    _events: dict
    _opened: dict[int, int]  # opened address -> the allocation it is a second address of
    _physical: dict
    _pools: dict
    _imported: set  # physical allocations imported: a second handle, not more memory

    def _ipc_handle(self, out: CData, kind: bytes, value: int) -> int:
        if self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        data = _LAYOUT.pack(MAGIC, os.getpid(), kind, value)
        self.ffi.memmove(out, data.ljust(HANDLE_SIZE, b"\0"), HANDLE_SIZE)
        return 0

    def _ipc_value(self, handle: CData, kind: bytes) -> int | None:
        """What a handle of this process names (None: not one of this process's); raises for another's."""
        return self._ipc_bytes(bytes(self.ffi.buffer(self.ffi.addressof(handle))), kind)

    def _ipc_bytes(self, data: bytes, kind: bytes) -> int | None:
        magic, pid, got, value = _LAYOUT.unpack(data[:_LAYOUT.size])
        if magic != MAGIC or got != kind:
            return None
        if pid != os.getpid():
            raise _OtherProcess()
        return value

    def _give_fd(self, out: CData, kind: bytes, value: int) -> int:
        if self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        fd = os.memfd_create("cuwire-emulated-shareable", os.MFD_CLOEXEC)
        os.pwrite(fd, _LAYOUT.pack(MAGIC, os.getpid(), kind, value), 0)
        self.ffi.cast("int *", out)[0] = fd
        return 0

    def _fd_value(self, handle: CData, kind: bytes) -> int | None:
        try:
            data = os.pread(self._addr(handle), _LAYOUT.size, 0)
        except OSError:
            return None
        return self._ipc_bytes(data, kind) if len(data) == _LAYOUT.size else None

    def cuMemExportToShareableHandle(self, shareableHandle: CData, handle: int, handleType: int,
                                     flags: int) -> int:
        if handle not in self._physical or flags:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if handleType != POSIX_FD:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        return self._give_fd(shareableHandle, b"a", handle)

    def cuMemImportFromShareableHandle(self, handle: CData, osHandle: CData, shHandleType: int) -> int:
        if shHandleType != POSIX_FD:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        try:
            value = self._fd_value(osHandle, b"a")
        except _OtherProcess:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        if value not in self._physical:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        imported = self._new_handle()
        self._physical[imported] = self._physical[value]
        self._imported.add(imported)
        return self._drv_put((handle, imported))

    def cuMemPoolExportToShareableHandle(self, handle_out: CData, pool: CData, handleType: int, flags: int) -> int:
        if self._addr(pool) not in self._pools or flags:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        if handleType != POSIX_FD:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        return self._give_fd(handle_out, b"p", self._addr(pool))

    def cuMemPoolImportFromShareableHandle(self, pool_out: CData, handle: CData, handleType: int,
                                           flags: int) -> int:
        if handleType != POSIX_FD:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        try:
            value = self._fd_value(handle, b"p")
        except _OtherProcess:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        if value not in self._pools or flags:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        imported = self._new_handle()
        self._pools[imported] = self._pools[value]
        return self._drv_put((pool_out, imported))

    def cuMemPoolExportPointer(self, shareData_out: CData, ptr: int) -> int:
        base = self._memory.allocation_base(self._addr(ptr))
        if base is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._ipc_handle(shareData_out, b"P", base)  # (a NULL output: invalid too)

    def cuMemPoolImportPointer(self, ptr_out: CData, pool: CData, shareData: CData) -> int:
        if self._addr(pool) not in self._pools or self._is_null(ptr_out) or self._is_null(shareData):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        try:
            base = self._ipc_bytes(bytes(self.ffi.buffer(shareData, HANDLE_SIZE)), b"P")
        except _OtherProcess:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        address = None if base is None else self._memory.alias(base)
        if address is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._drv_put((ptr_out, address))

    def cuIpcGetMemHandle(self, pHandle: CData, dptr: int) -> int:
        found = self._memory.allocation_base(self._addr(dptr))
        if found is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._ipc_handle(pHandle, b"m", found)

    def cuIpcOpenMemHandle_v2(self, pdptr: CData, handle: CData, Flags: int) -> int:
        if Flags & ~LAZY_ENABLE_PEER_ACCESS or self._is_null(pdptr):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        try:
            base = self._ipc_value(handle, b"m")
        except _OtherProcess:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        address = None if base is None else self._memory.alias(base)
        if address is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._opened[address] = base
        return self._drv_put((pdptr, address))

    def cuIpcCloseMemHandle(self, dptr: int) -> int:
        address = self._addr(dptr)
        if self._opened.pop(address, None) is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        self._memory.release(address)
        return 0

    def cuIpcGetEventHandle(self, pHandle: CData, event: CData) -> int:
        found = self._event(event)
        if found is None:
            return self.drv.CUDA_ERROR_INVALID_HANDLE
        if not found.flags & EVENT_INTERPROCESS:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        return self._ipc_handle(pHandle, b"e", self._addr(event))

    def cuIpcOpenEventHandle(self, phEvent: CData, handle: CData) -> int:
        try:
            value = self._ipc_value(handle, b"e")
        except _OtherProcess:
            return self.drv.CUDA_ERROR_NOT_SUPPORTED
        event = self._events.get(value) if value is not None else None
        if event is None:
            return self.drv.CUDA_ERROR_INVALID_VALUE
        opened = self._new_handle()
        self._events[opened] = event  # the same event: a record through either handle is seen by both
        return self._drv_put((phEvent, opened))


class _OtherProcess(Exception):
    """An IPC handle of another process's emulated device."""
