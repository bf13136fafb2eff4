"""Modules by content hash: on disk so a second run (or a second client with the same binary) uploads
nothing, and loaded once per server process."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger("cuwire.server")

FATBIN_MAGIC = (0xBA55ED50).to_bytes(4, "little")
ELF_MAGIC = b"\x7fELF"


def recognized(image: bytes) -> bool:
    """A fatbin, an ELF cubin or PTX text: the formats the driver reads. The real driver loads lazily and
    says success even for junk, so only a recognized image is kept on disk."""
    if image[:4] in (FATBIN_MAGIC, ELF_MAGIC):
        return True
    head = image[:65536]
    return b".version" in head and b"\0" not in head.rstrip(b"\0")


class ModuleCache:
    def __init__(self, directory: Path):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.loaded: dict[bytes, int] = {}  # digest -> CUlibrary handle
        self.lock = threading.Lock()
        self.uploads = 0
        self.hits = 0

    def path(self, digest: bytes) -> Path:
        return self.directory / f"{digest.hex()}.fatbin"

    def has(self, digest: bytes) -> bool:
        return digest in self.loaded or self.path(digest).exists()

    @staticmethod
    def check(digest: bytes, image: bytes) -> None:
        if hashlib.sha256(image).digest() != digest:
            raise ValueError("module image does not match its digest")

    def store(self, digest: bytes, image: bytes) -> None:
        """Keep an image the driver loaded (only such images reach the disk), if it is one the driver reads."""
        self.check(digest, image)
        if not recognized(image):
            log.info("module %s is no fatbin, cubin or PTX: not cached", digest.hex()[:12])
            return
        tmp = self.path(digest).with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(image)
        tmp.replace(self.path(digest))
        self.uploads += 1
        log.info("module %s uploaded (%d bytes), cached in %s", digest.hex()[:12], len(image), self.directory)

    def read(self, digest: bytes) -> bytes:
        return self.path(digest).read_bytes()
