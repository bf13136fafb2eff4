"""The program's page-locked allocations in the host memory a session shares with a server on this host
(cuwire/wire/ring.py): which ranges are taken. Plain Python, so tests drive it without the client library."""

from __future__ import annotations


class SharedHost:
    """Host memory shared with the server, which the program's page-locked allocations are carved from
    (client/host_memory.c, host_alloc): first fit over page-aligned ranges. The server registers each range with
    the driver, so copies between it and the GPU need no bytes on the wire (CopyShared)."""

    PAGE = 4096
    KEEP_MOST = 32  # freed allocations kept registered for the next of their size (keep), at most...
    KEEP_MOST_BYTES = 64 << 20  # ...and their bytes

    def __init__(self, base: int, size: int, server_base: int, fd: int = -1):
        self.base, self.size = base, size
        self.fd = fd  # its descriptor (client/host_memory.c maps parts of it over memory the program registers)
        self.server_base = server_base  # where the server has it: the same address, when it could
        self.free: list[tuple[int, int]] = [(0, size)]  # (offset, size), sorted by offset
        self.used: dict[int, int] = {}  # offset -> size
        # allocations the program freed, still registered by the server, oldest first (keep, take_kept)
        self.kept: list[int] = []

    def pages(self, size: int) -> int:
        """The bytes an allocation of `size` takes: whole pages."""
        return -(-size // self.PAGE) * self.PAGE

    def alloc(self, size: int) -> int | None:
        size = self.pages(size)
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

    def keep(self, offset: int) -> list[int]:
        """The program freed the allocation at `offset`: it stays taken and registered, for the next allocation
        of its size (XLA allocates and frees a page-locked buffer at each transfer: two round trips each, to
        register and unregister, where the next takes the same again). The offsets to let go now, the oldest
        past KEEP_MOST or KEEP_MOST_BYTES (the caller unregisters and releases them)."""
        self.kept.append(offset)
        gone = []
        while len(self.kept) > self.KEEP_MOST or sum(self.used[o] for o in self.kept) > self.KEEP_MOST_BYTES:
            gone.append(self.kept.pop(0))
        return gone

    def take_kept(self, size: int) -> int | None:
        """A kept allocation of the size an allocation of `size` bytes takes, the last kept first (as a heap gives
        back what was freed last), or None."""
        size = self.pages(size)
        for i in range(len(self.kept) - 1, -1, -1):
            if self.used[self.kept[i]] == size:
                return self.kept.pop(i)
        return None

    def oldest_kept(self) -> int | None:
        """The kept allocation kept longest, taken off the kept (None: none): the caller lets it go."""
        return self.kept.pop(0) if self.kept else None
