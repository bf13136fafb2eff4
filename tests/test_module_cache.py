"""The server's module cache on disk (server/module_cache.py): bounded by CUWIRE_MODULE_CACHE_SIZE, the
modules used least recently removed first, so that a client uploading image after image (issue 36) costs
the disk nothing past the limit. Session processes share the folder: one removed under another is asked
of the client again, never an error."""

from __future__ import annotations

import hashlib
import os

from cuwire.server.module_cache import ModuleCache


def image(n: int, size: int = 10_000) -> tuple[bytes, bytes]:
    """An ELF-looking image of `size` bytes, distinct for each n, and its digest."""
    data = b"\x7fELF" + n.to_bytes(4, "little") + bytes(size - 8)
    return hashlib.sha256(data).digest(), data


def on_disk(cache: ModuleCache) -> int:
    return sum(p.stat().st_size for p in cache.directory.glob("*.fatbin"))


def test_image_after_image_stays_within_the_limit(tmp_path):
    cache = ModuleCache(tmp_path, limit=64_000)
    for n in range(50):
        cache.store(*image(n))
        assert on_disk(cache) <= 64_000
    assert len(list(tmp_path.glob("*.fatbin"))) == 6  # 6 of 10,000 bytes fit in 64,000
    assert not list(tmp_path.glob("*.tmp*"))


def test_the_least_recently_used_goes_first(tmp_path):
    cache = ModuleCache(tmp_path, limit=30_000)
    digests = []
    for n in range(3):
        digest, data = image(n)
        cache.store(digest, data)
        os.utime(cache.path(digest), (1000 + n, 1000 + n))  # stored at distinct times, oldest first
        digests.append(digest)
    assert cache.read(digests[0]) is not None  # the oldest is used now
    cache.store(*image(3))
    assert cache.read(digests[1]) is None  # the least recently used went
    assert cache.read(digests[0]) is not None and cache.read(digests[2]) is not None


def test_an_image_larger_than_the_cache_is_not_kept(tmp_path):
    cache = ModuleCache(tmp_path, limit=5_000)
    digest, data = image(0)
    cache.store(digest, data)
    assert cache.read(digest) is None and on_disk(cache) == 0


def test_no_limit_keeps_everything(tmp_path):
    cache = ModuleCache(tmp_path, limit=0)
    for n in range(5):
        cache.store(*image(n))
    assert on_disk(cache) == 50_000
