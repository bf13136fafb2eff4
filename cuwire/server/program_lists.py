"""The programs' lists of what they load (client/load_lists.py), kept by the server too: a program's first
run on a fresh client machine (a CI runner, a pod), which has no list of its own, gets the one its last run
anywhere left, and loads its modules ahead in one round trip as a next run does (issue 35: a PyTorch start
waited for 117-135 round trips on a fresh machine, 46-56 with a list).

A list is kept under a digest of the client's token, the program's list name (Hello.program) and the GPU's
architecture, so one token's programs never see another's. The server never reads a list: it keeps the
client's bytes (zstd-compressed) and gives them back; the client parses them as it does its own file, where a
wrong list costs wasted loads, never a wrong result. The folder holds at most LIMIT bytes, least recently used
first out, as the module cache does."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from cuwire.server.module_cache import least_used
from cuwire.wire.hello import MOST_LIST_KEPT as MOST

log = logging.getLogger("cuwire.server")

LIMIT = 256 << 20  # bytes of all lists together
MAX_NAME = 64  # bytes of Hello.program (the client sends a SHA-256: 32)


def key(token: str, program: bytes, arch: str) -> str:
    return hashlib.sha256(b"\0".join((token.encode(), program, arch.encode()))).hexdigest()


class ProgramLists:
    def __init__(self, directory: Path, limit: int = LIMIT) -> None:
        self.directory = directory
        self.limit = limit

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.list"

    def get(self, name: str) -> bytes:
        """The list kept under `name`, noted as used now; b"" when there is none (or it cannot be read)."""
        try:
            data = self.path(name).read_bytes()
            os.utime(self.path(name))
        except OSError:
            return b""
        return data if len(data) <= MOST else b""

    def keep(self, name: str, data: bytes) -> str:
        """Keep `data` under `name` (replacing the last run's), then make room: "" or why not kept (the
        caller logs it; a list is only a hint, so the program's call does not fail)."""
        if not data or len(data) > MOST:
            return f"a list of {len(data)} bytes (at most {MOST})"
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.path(name).with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(self.path(name))
        except OSError as e:
            return f"the folder {self.directory} refused it ({e})"
        least_used(self.directory, "*.list", self.limit, self.path(name))
        return ""
