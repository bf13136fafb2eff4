"""The emulated device's IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcGetEventHandle...).

The emulated device's memory is this process's: a handle opens only in the process that made it (sessions
of a server run with --isolation thread), where the opened memory is a second address for the same bytes
and an opened event the same event under a second handle. A handle from another process is refused with
CUDA_ERROR_NOT_SUPPORTED (a GPU's driver opens it; the tests of that run on the H100).
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


class EmulatedIpc:
    """The driver's IPC functions, mixed into EmulatedLib."""

    ffi: Any
    drv: Any
    _memory: Any
    _events: dict
    _opened: dict[int, int]  # opened address -> the allocation it is a second address of

    def _ipc_handle(self, out: CData, kind: bytes, value: int) -> int:
        if self._is_null(out):
            return self.drv.CUDA_ERROR_INVALID_VALUE
        data = _LAYOUT.pack(MAGIC, os.getpid(), kind, value)
        self.ffi.memmove(out, data.ljust(HANDLE_SIZE, b"\0"), HANDLE_SIZE)
        return 0

    def _ipc_value(self, handle: CData, kind: bytes) -> int | None:
        """What a handle of this process names (None: not one of this process's); raises for another's."""
        magic, pid, got, value = _LAYOUT.unpack(bytes(self.ffi.buffer(self.ffi.addressof(handle)))[:_LAYOUT.size])
        if magic != MAGIC or got != kind:
            return None
        if pid != os.getpid():
            raise _OtherProcess()
        return value

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
