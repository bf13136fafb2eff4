"""One number space for two processes: where the server's driver may put device memory.

With unified addressing a pointer is device memory or host memory by its value alone (cudaMemcpyDefault,
cuPointerGetAttribute, kernels given host pointers). The program's host addresses come from the client's
process and its device addresses from the session's process on the server, and the two are laid out
alike (both grow down from near 0x7fff...), so a device allocation may come back at an address where the
program already has host memory. The client guards each device range it is given (client/device_memory.c),
which keeps its later allocations off them, but cannot move memory it already has.

So the client names, in its hello, the spans of address space it uses, each reaching GROWTH further down
(where its next mappings go: the kernel hands out address space from the top down); the session process
holds what is free of them here (no access, no memory) before CUDA starts, and the driver places device
memory elsewhere. Nothing else of the server's needs those addresses: its own mappings that lie there stay.

Servers of one device list (issue 39, docs/several-servers.md) need more: two session processes lay device
memory out alike, so two servers' pointers could be one value. A session told its place in a list (its
server number, from 1) holds all free address space but its own two windows before CUDA starts:
- a LOW_SLOT below 1 TiB, where the driver must put its first reservation (about 4 GiB at cuInit; with
  nothing free below 1 TiB, cuInit fails with out of memory: measured on an H200 host, 2026-11-27);
- a WINDOW_SIZE window from 8 TiB up, where every later mapping goes: device, managed and page-locked
  memory (`mmap`'s), and the default pool's reservation (first fit upwards, once the low slot is too small).
A session of a program with one server (number 0) holds none of this: its memory lies where its driver
puts it.
"""

from __future__ import annotations

import os
from typing import Any

USER_SPACE_END = (1 << 47) - 4096  # x86-64 (TASK_SIZE) and aarch64 with 48-bit addresses; [vsyscall] lies above
LOWEST = 1 << 16  # below vm.mmap_min_addr nothing may be mapped
GROWTH = 1 << 40  # address space below each of the client's spans kept free for its later mappings
HEAP_GROWTH = 64 << 30  # ...and above each, for its heap (brk) to grow into
LOW_END = 1 << 40  # the driver's first reservation lies below this
LOW_SLOT = 64 << 30  # one server's room for it, the Nth from LOW_END down (a single server's lies from 8 GiB)
WINDOWS_START = 8 << 40  # where the servers' windows begin: above everything a single server's driver places low
WINDOW_SIZE = 8 << 40  # one server's: room for eight GPUs' memory and the driver's reservations for them
MOST_SERVERS = 8  # windows up to 72 TiB: below a program's heap and libraries (~85 TiB and up)
WINDOWS_END = WINDOWS_START + MOST_SERVERS * WINDOW_SIZE
MAX_SPANS = 64  # more than a hello carries (spans closer than GROWTH merge, so real programs have few)


def mapped_ranges(maps: str) -> list[tuple[int, int]]:
    """The [start, end) of each mapping in /proc/<pid>/maps text, in user space."""
    ranges = []
    for line in maps.splitlines():
        start, _, end = line.partition(" ")[0].partition("-")
        try:
            lo, hi = int(start, 16), int(end, 16)
        except ValueError:
            continue
        if lo < hi <= USER_SPACE_END:
            ranges.append((lo, hi))
    return ranges


def spans_to_keep(ranges: list[tuple[int, int]], growth: int = GROWTH) -> list[tuple[int, int]]:
    """The client's side: its mappings, each reaching `growth` further down (mappings come from the top
    down) and HEAP_GROWTH further up (the heap grows up), merged; sorted, at most MAX_SPANS (the lowest
    dropped: the top ones matter most)."""
    spans: list[tuple[int, int]] = []
    up = HEAP_GROWTH if growth else 0
    for lo, hi in sorted((max(lo - growth, LOWEST), min(hi + up, USER_SPACE_END)) for lo, hi in ranges
                         if hi > LOWEST):
        if spans and lo <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
        else:
            spans.append((lo, hi))
    return spans[-MAX_SPANS:]


def own_spans_to_keep() -> list[tuple[int, int]]:
    """The spans this process names in its hello ([] where /proc cannot be read)."""
    try:
        with open("/proc/self/maps") as f:
            return spans_to_keep(mapped_ranges(f.read()))
    except OSError:
        return []


def hold(lib: Any, spans: list[tuple[int, int]], maps: str | None = None) -> list[tuple[int, int]]:
    """The server's side, in a session process before CUDA starts: reserve what is free of `spans` here
    (no access, no memory; `lib.cw_reserve_at`), around this process's own mappings (`maps`: this
    process's /proc/self/maps text, read when not given). Returns the ranges held: this process's to map
    the client's memory into later (memory the program registers, server/session.py register_host)."""
    if maps is None:
        with open("/proc/self/maps") as f:
            maps = f.read()
    taken = sorted(mapped_ranges(maps))
    page = os.sysconf("SC_PAGE_SIZE")
    held: list[tuple[int, int]] = []
    for lo, hi in spans[:MAX_SPANS]:
        lo, hi = max(-(-lo // page) * page, LOWEST), min(hi // page * page, USER_SPACE_END)
        at = lo
        for t_lo, t_hi in taken + [(hi, hi)]:
            if t_hi <= at:
                continue
            gap_end = min(t_lo, hi)
            if gap_end > at and lib.cw_reserve_at(at, gap_end - at):
                held.append((at, gap_end))
            at = max(at, t_hi)
            if at >= hi:
                break
    return held


def windows(number: int) -> list[tuple[int, int]]:
    """The [start, end) of the two windows of address space of the `number`th server of a device list (from
    1): its low slot and its window. [] for 0 (a single server: its memory lies where its driver puts it) and
    past MOST_SERVERS."""
    if not 0 < number <= MOST_SERVERS:
        return []
    start = WINDOWS_START + (number - 1) * WINDOW_SIZE
    return [(LOW_END - number * LOW_SLOT, LOW_END - (number - 1) * LOW_SLOT), (start, start + WINDOW_SIZE)]


def outside(kept: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans of user space around the sorted ranges `kept`: what a session holds to keep its mappings
    in them."""
    spans, at = [], LOWEST
    for lo, hi in kept:
        spans.append((at, lo))
        at = hi
    return [*spans, (at, USER_SPACE_END)]


def keep_in(lib: Any, kept: list[tuple[int, int]]) -> bool:
    """A session process before CUDA starts: hold all free address space around the ranges `kept`, so that
    every mapping made from now on (the driver's, the process's own) lands in them. Whether a mapping does:
    a probe reservation made after the hold must lie in the last, top-down as mappings are placed (a
    thread's mapping that came between this process's reading of its maps and the hold could leave a gap)."""
    hold(lib, outside(kept))
    page = os.sysconf("SC_PAGE_SIZE")
    probe = lib.cw_reserve(page)
    if probe:
        lib.cw_unmap(probe, page)
    return within(kept[-1:], probe, page)


def within(ranges: list[tuple[int, int]], address: int, size: int) -> bool:
    """Whether [address, address + size) lies in one of `ranges`."""
    return size > 0 and any(lo <= address and address + size <= hi for lo, hi in ranges)
