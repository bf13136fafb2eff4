"""Modules by content hash: on disk so a second run (or a second client with the same binary) uploads
nothing, and loaded once per server process."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger("cuwire.server")


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
        """Keep an image the driver loaded (only such images reach the disk)."""
        self.check(digest, image)
        tmp = self.path(digest).with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(image)
        tmp.replace(self.path(digest))
        self.uploads += 1
        log.info("module %s uploaded (%d bytes), cached in %s", digest.hex()[:12], len(image), self.directory)

    def read(self, digest: bytes) -> bytes:
        return self.path(digest).read_bytes()
