"""The allocator of page-locked memory in the host memory shared with a local server (client/shared_host.py)."""

from __future__ import annotations

from cuwire.client.shared_host import SharedHost

PAGE = SharedHost.PAGE


def test_first_fit_page_aligned_and_merged_back():
    h = SharedHost(base=1 << 40, size=16 * PAGE, server_base=1 << 40)
    a = h.alloc(1)  # a page, whatever was asked
    b = h.alloc(PAGE + 1)  # two pages
    c = h.alloc(3 * PAGE)
    assert (a, b, c) == (0, PAGE, 3 * PAGE) and h.used == {0: PAGE, PAGE: 2 * PAGE, 3 * PAGE: 3 * PAGE}
    assert h.release(b) == 2 * PAGE
    assert h.alloc(2 * PAGE) == PAGE  # the hole is taken first
    h.release(PAGE)
    h.release(a)
    h.release(c)
    assert h.free == [(0, 16 * PAGE)] and not h.used  # everything merged back into one range


def test_full_gives_none_and_frees_make_room():
    h = SharedHost(base=0, size=4 * PAGE, server_base=0)
    offsets = [h.alloc(PAGE) for _ in range(4)]
    assert offsets == [0, PAGE, 2 * PAGE, 3 * PAGE] and h.alloc(1) is None
    h.release(PAGE)
    h.release(2 * PAGE)
    assert h.alloc(3 * PAGE) is None  # two free pages are not three
    assert h.alloc(2 * PAGE) == PAGE  # neighbours merged


def test_freed_allocations_are_kept_for_the_next_of_their_size_within_bounds():
    """SharedHost.keep: a freed allocation stays taken (the server keeps it registered) for the next of its
    size, the last freed first; past KEEP_MOST allocations or KEEP_MOST_BYTES, the oldest go."""
    h = SharedHost(base=0, size=4096 * PAGE, server_base=0)
    a, b, c = h.alloc(PAGE), h.alloc(2 * PAGE), h.alloc(PAGE)
    assert h.keep(a) == [] and h.keep(b) == [] and h.keep(c) == []
    assert a in h.used and h.alloc(PAGE) not in (a, b, c)  # kept: still taken
    assert h.take_kept(100) == c and h.take_kept(PAGE) == a and h.take_kept(PAGE) is None
    assert h.take_kept(PAGE + 1) == b and h.kept == []
    many = [h.alloc(PAGE) for _ in range(SharedHost.KEEP_MOST + 3)]
    gone = [o for m in many for o in h.keep(m)]
    assert gone == many[:3] and h.kept == many[3:]
    big = SharedHost(base=0, size=2 * SharedHost.KEEP_MOST_BYTES, server_base=0)
    x, y = big.alloc(SharedHost.KEEP_MOST_BYTES // 2 + PAGE), big.alloc(SharedHost.KEEP_MOST_BYTES // 2)
    assert big.keep(x) == [] and big.keep(y) == [x] and big.kept == [y]
