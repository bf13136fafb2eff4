"""The address space a client names in its hello and its session's process holds (cuwire/address_space.py)."""

from __future__ import annotations

import os

from cuwire import address_space
from cuwire.address_space import GROWTH, HEAP_GROWTH, LOWEST, mapped_ranges, spans_to_keep, within
from cuwire.server._records import lib

PAGE = os.sysconf("SC_PAGE_SIZE")
MAPS = """\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/app
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f0000100000-7f0000200000 r-xp 00000000 08:02 1  /lib/libc.so.6
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0   [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0   [vsyscall]
"""


def test_spans_reach_down_and_merge():
    ranges = mapped_ranges(MAPS)
    assert (0xFFFFFFFFFF600000, 0xFFFFFFFFFF601000) not in ranges  # above user space: not named
    assert spans_to_keep(ranges) == [
        (LOWEST, 0x452000 + HEAP_GROWTH),  # the program, reaching down to the lowest address that may be mapped
        (0x7F0000000000 - GROWTH, (1 << 47) - 4096),  # libraries and stack, closer than GROWTH; to the top
    ]
    assert spans_to_keep(ranges, growth=0) == [(0x400000, 0x452000), (0x7F0000000000, 0x7F0000021000),
                                               (0x7F0000100000, 0x7F0000200000), (0x7FFC00000000, 0x7FFC00021000)]


def test_a_hold_takes_what_is_free_around_this_process_own_mappings():
    base = lib.cw_reserve(8 * PAGE)  # an address range that is free here once given back
    assert base and lib.cw_unmap(base, 8 * PAGE) == 0
    mine = lib.cw_reserve_at(base + 3 * PAGE, 2 * PAGE)  # this process's own, in the middle
    assert mine == base + 3 * PAGE
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
        held = address_space.hold(lib, [(base + 100, base + 8 * PAGE)], maps)  # (whole pages)
        assert held == [(base + PAGE, base + 3 * PAGE), (base + 5 * PAGE, base + 8 * PAGE)]
        assert lib.cw_reserve_at(base + PAGE, PAGE) == 0  # held now
        assert lib.cw_reserve_at(base + 6 * PAGE, PAGE) == 0
        assert lib.cw_reserve_at(base, PAGE) == base  # the partial page at the start was not held
    finally:
        lib.cw_unmap(base, 8 * PAGE)


def test_a_hello_spans_beyond_user_space_or_at_zero_hold_nothing():
    assert address_space.hold(lib, [(0, LOWEST), (1 << 48, (1 << 48) + PAGE), (PAGE * 3, PAGE)], "") == []


def test_within_names_only_ranges_wholly_inside_one():
    held = [(0x1000, 0x5000), (0x8000, 0x9000)]
    assert within(held, 0x1000, 0x4000) and within(held, 0x8000, 0x1000)
    assert not within(held, 0x4000, 0x2000) and not within(held, 0x6000, 0x1000) and not within(held, 0x1000, 0)
