"""Memory files a client on this host registers (cuMemHostRegister of a shared mapping of a file, as NCCL's
shared-memory transport maps its /dev/shm segments): the session maps the same file at the client's address
(Session.register_file), so the program and the GPU share its pages. This module says which files it may
open for that: a regular file in memory (tmpfs), the very one the program mapped, owned by the program's
user, so that a client reaches only bytes it could reach itself."""

from __future__ import annotations

import ctypes
import os
import stat
import struct

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import INVALID_VALUE, NOT_SUPPORTED, CudaFail

TMPFS_MAGIC = 0x01021994
PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)


def in_memory(fd: int) -> bool:
    """Whether the file lies on a tmpfs (statfs's f_type, the first word of struct statfs)."""
    buf = ctypes.create_string_buffer(256)
    return _libc.fstatfs(fd, buf) == 0 and struct.unpack_from("l", buf)[0] == TMPFS_MAGIC


def open_checked(f: pb.FileRange, size: int, uid: int | None) -> int:
    """A descriptor of the file `f` names, to map `size` bytes of from f.offset; or CudaFail, saying why not.
    `uid`: the client's user (SO_PEERCRED; None: not a client on this host)."""
    if uid is None:
        raise CudaFail(NOT_SUPPORTED, "memory files are mapped for clients on this host only")
    try:
        fd = os.open(f.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        raise CudaFail(NOT_SUPPORTED, f"the server cannot open {f.path!r} ({e.strerror}): the GPU cannot reach "
                                      "this memory (a server in a container needs this host's /dev/shm: "
                                      "docker run --ipc=host; a file the program removed before registering "
                                      "it is reached only while another registration holds it)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (f.device, f.inode):
            raise CudaFail(NOT_SUPPORTED, f"{f.path!r} here is not the file the program mapped (another "
                                          "/dev/shm: a server in a container needs docker run --ipc=host)")
        if st.st_uid != uid or not in_memory(fd):
            raise CudaFail(NOT_SUPPORTED, f"{f.path!r}: the server maps only memory files (tmpfs, /dev/shm) "
                                          "of the program's own user")
        check_within(st.st_size, f, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_within(length: int, f: pb.FileRange, size: int) -> None:
    """`size` bytes from f.offset are whole pages of the file, `length` bytes long (a page past its end would
    fault the server)."""
    if f.offset % PAGE or size <= 0 or size % PAGE or f.offset + size > -(-length // PAGE) * PAGE:
        raise CudaFail(INVALID_VALUE, f"{size} bytes from offset {f.offset} of {f.path!r} ({length} bytes): not "
                                      "whole pages within it")


class Kept:
    """The memory files a session has mapped, by (device, inode), each open while a registration uses it:
    NCCL removes a segment's file as soon as both its ends have mapped it, often before the second end
    registers it; that registration is served from the descriptor the first one opened."""

    def __init__(self) -> None:
        self.files: dict[tuple[int, int], list[int]] = {}  # (device, inode) -> [descriptor, registrations]

    def take(self, f: pb.FileRange, size: int, uid: int | None) -> int:
        """A descriptor for `size` bytes of `f` from f.offset, counted as one more registration."""
        kept = self.files.get((f.device, f.inode))
        if kept is None:
            fd = open_checked(f, size, uid)
            self.files[(f.device, f.inode)] = kept = [fd, 0]
        else:
            check_within(os.fstat(kept[0]).st_size, f, size)
        kept[1] += 1
        return kept[0]

    def give_back(self, key: tuple[int, int]) -> None:
        kept = self.files.get(key)
        if kept is not None:
            kept[1] -= 1
            if kept[1] <= 0:
                os.close(kept[0])
                del self.files[key]

    def close(self) -> None:
        for fd, _ in self.files.values():
            os.close(fd)
        self.files.clear()
