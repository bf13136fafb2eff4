"""The program's page-locked allocations in the host memory a session shares with a server on this host
(cuwire/wire/ring.py): which ranges are taken. Plain Python, so tests drive it without the client library."""

from __future__ import annotations


class SharedHost:
    """Host memory shared with the server, which the program's page-locked allocations are carved from
    (client/host_memory.c, host_alloc): first fit over page-aligned ranges. The server registers each range with
    the driver, so copies between it and the GPU need no bytes on the wire (CopyShared)."""

    PAGE = 4096

    def __init__(self, base: int, size: int, server_base: int, fd: int = -1):
        self.base, self.size = base, size
        self.fd = fd  # its descriptor (client/host_memory.c maps parts of it over memory the program registers)
        self.server_base = server_base  # where the server has it: the same address, when it could
        self.free: list[tuple[int, int]] = [(0, size)]  # (offset, size), sorted by offset
        self.used: dict[int, int] = {}  # offset -> size

    def alloc(self, size: int) -> int | None:
        size = -(-size // self.PAGE) * self.PAGE
        for i, (offset, n) in enumerate(self.free):
            if n >= size:
                self.free[i:i + 1] = [(offset + size, n - size)] if n > size else []
                self.used[offset] = size
                return offset
        return None

    def release(self, offset: int) -> int:
        size = self.used.pop(offset)
        self.free.append((offset, size))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for o, n in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((o, n))
        self.free = merged
        return size
