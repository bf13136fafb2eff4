"""Modules by content hash: on disk so a second run (or a second client with the same binary) uploads
nothing, and loaded once per server process. The folder holds at most `limit` bytes (CUWIRE_MODULE_CACHE_SIZE):
past it, the modules used least recently go (a file's modification time is its last use), so a client that
uploads image after image can cost others an upload again, never the server's disk. Session processes share
the folder: a module another one removed is asked of the client again. A session may pin images (`pin`: hard
links in pins/<pid>-<session>/, which an eviction leaves; gone with the session, or at the next start after a
crash): those the welcome listed for loads the client names by digest alone, which nobody waits for."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
from pathlib import Path

from cuwire import fatbin
from cuwire.server.resume import alive

log = logging.getLogger("cuwire.server")


def recognized(image: bytes) -> bool:
    """A fatbin, an ELF cubin or PTX text: the formats the driver reads (by the fatbin reader's first bytes;
    text must look like PTX). The real driver loads lazily and says success even for junk, so only a
    recognized image is kept on disk."""
    if fatbin.image_kind(image) != "ptx":
        return True
    head = image[:65536]
    return b".version" in head and b"\0" not in head.rstrip(b"\0")


class ModuleCache:
    def __init__(self, directory: Path, limit: int = 0):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit = limit  # bytes on disk at most; 0: no limit
        self.loaded: dict[bytes, int] = {}  # digest -> CUlibrary handle
        self.lock = threading.Lock()
        self.uploads = 0
        self.hits = 0
        self.pins = directory / "pins"
        self._drop_dead_pins()

    def path(self, digest: bytes) -> Path:
        return self.directory / f"{digest.hex()}.fatbin"

    @staticmethod
    def check(digest: bytes, image: bytes) -> None:
        if hashlib.sha256(image).digest() != digest:
            raise ValueError("module image does not match its digest")

    def store(self, digest: bytes, image: bytes) -> None:
        """Keep an image the driver loaded (only such images reach the disk), if it is one the driver reads
        and fits the limit; then make room, the least recently used first."""
        self.check(digest, image)
        if not recognized(image):
            log.info("module %s is no fatbin, cubin or PTX: not cached", digest.hex()[:12])
            return
        if self.limit and len(image) > self.limit:
            log.info("module %s (%d bytes) is larger than the module cache (%d bytes, CUWIRE_MODULE_CACHE_SIZE): "
                     "not cached", digest.hex()[:12], len(image), self.limit)
            return
        tmp = self.path(digest).with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(image)
        tmp.replace(self.path(digest))
        self.uploads += 1
        log.info("module %s uploaded (%d bytes), cached in %s", digest.hex()[:12], len(image), self.directory)
        self.make_room(keep=self.path(digest))

    def read(self, digest: bytes, pinned: Path | None = None) -> bytes | None:
        """The image, noted as used now; None when the folder has it no more (or never had it), but for one
        pinned in `pinned` (a session's, `pin`)."""
        try:
            image = self.path(digest).read_bytes()
        except FileNotFoundError:
            try:
                return (pinned / f"{digest.hex()}.fatbin").read_bytes() if pinned else None
            except FileNotFoundError:
                return None
        self.used(digest)
        return image

    def large_images(self, least: int, most: int) -> list[bytes]:
        """Digests of the cached images larger than `least` bytes, the most recently used first, `most` at most."""
        found = []
        with os.scandir(self.directory) as entries:
            for e in entries:
                if not e.name.endswith(".fatbin") or len(e.name) != 64 + len(".fatbin"):
                    continue
                try:
                    st = e.stat()
                except FileNotFoundError:  # (another session's eviction)
                    continue
                if st.st_size > least:
                    found.append((st.st_mtime, e.name[:64]))
        found.sort(reverse=True)
        return [bytes.fromhex(name) for _, name in found[:most]]

    def pin(self, digests: list[bytes], session: str) -> tuple[Path, list[bytes]]:
        """Hard links to these images in a folder of the session's, which no eviction removes (an image a
        load names by digest alone must be there when the load comes): the folder, and the digests pinned
        (one evicted meanwhile is not)."""
        folder = self.pins / f"{os.getpid()}-{session}"
        folder.mkdir(parents=True, exist_ok=True)
        pinned = []
        for d in digests:
            try:
                os.link(self.path(d), folder / f"{d.hex()}.fatbin")
            except FileExistsError:
                pass
            except FileNotFoundError:
                continue
            pinned.append(d)
        return folder, pinned

    @staticmethod
    def unpin(folder: Path) -> None:
        """The session's pins, gone (the images stay where the cache keeps them)."""
        shutil.rmtree(folder, ignore_errors=True)

    def _drop_dead_pins(self) -> None:
        """Pins of sessions whose process is gone (a crash left them)."""
        if not self.pins.is_dir():
            return
        for folder in self.pins.iterdir():
            pid = folder.name.split("-", 1)[0]
            if not pid.isdigit() or alive(int(pid)):
                continue
            self.unpin(folder)

    def used(self, digest: bytes) -> None:
        """A module loaded already was asked for again: it is in use (the eviction goes by last use)."""
        try:
            os.utime(self.path(digest))
        except FileNotFoundError:
            pass

    def make_room(self, keep: Path) -> None:
        """Remove the least recently used modules until the folder holds at most `limit` bytes."""
        for p in least_used(self.directory, "*.fatbin", self.limit, keep):
            log.info("module %s removed from the cache (least recently used; CUWIRE_MODULE_CACHE_SIZE)", p.stem[:12])


def least_used(directory: Path, pattern: str, limit: int, keep: Path) -> list[Path]:
    """Remove the files of `pattern` used least recently (by modification time) until those left hold at most
    `limit` bytes (0: no limit), never `keep`; the ones removed. Another process may remove some first."""
    if not limit:
        return []
    files = []
    for p in directory.glob(pattern):
        try:
            st = p.stat()
        except FileNotFoundError:  # another session process removed it
            continue
        files.append((st.st_mtime, st.st_size, p))
    total, removed = sum(size for _, size, _ in files), []
    for _, size, p in sorted(files):
        if total <= limit:
            break
        if p == keep:
            continue
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
        total -= size
    return removed
