"""The files a session maps for a client that registered a shared mapping of one (server/host_files.py):
only the very memory file the program mapped, of the program's own user, whole pages within it. Anything
else is refused by name, before the server maps a byte."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server import host_files
from cuwire.server.errors import INVALID_VALUE, NOT_SUPPORTED, CudaFail

PAGE = host_files.PAGE


@pytest.fixture
def memory_file():
    fd, path = tempfile.mkstemp(prefix="cuwire-test-", dir="/dev/shm")
    os.ftruncate(fd, 4 * PAGE)
    os.close(fd)
    yield Path(path)
    os.unlink(path)


def asked(path: Path, offset: int = 0) -> pb.FileRange:
    st = os.stat(path)
    return pb.FileRange(path=str(path), offset=offset, device=st.st_dev, inode=st.st_ino)


def refusal(f: pb.FileRange, size: int, uid: int | None) -> tuple[int, str]:
    with pytest.raises(CudaFail) as e:
        os.close(host_files.open_checked(f, size, uid))
    return e.value.code, str(e.value)


def test_the_programs_own_memory_file_opens(memory_file):
    fd = host_files.open_checked(asked(memory_file, PAGE), 3 * PAGE, os.getuid())
    try:
        assert os.fstat(fd).st_ino == os.stat(memory_file).st_ino
    finally:
        os.close(fd)


def test_what_the_server_will_not_map(memory_file, tmp_path):
    uid = os.getuid()
    assert refusal(asked(memory_file), PAGE, None)[0] == NOT_SUPPORTED  # not a client on this host
    assert "of the program's own user" in refusal(asked(memory_file), PAGE, uid + 1)[1]
    other = asked(memory_file)
    other.inode += 1
    assert "not the file the program mapped" in refusal(other, PAGE, uid)[1]
    assert "cannot open" in refusal(pb.FileRange(path=str(memory_file) + "-gone"), PAGE, uid)[1]
    link = Path("/dev/shm") / (memory_file.name + "-link")
    link.symlink_to(memory_file)
    try:  # (a link is not followed: what is checked is what is opened)
        same = asked(memory_file)
        assert "cannot open" in refusal(pb.FileRange(path=str(link), device=same.device, inode=same.inode), PAGE,
                                        uid)[1]
    finally:
        link.unlink()
    on_disk = tmp_path / "file"
    on_disk.write_bytes(b"\0" * PAGE)
    fd = os.open(on_disk, os.O_RDONLY)
    disk_is_tmpfs = host_files.in_memory(fd)
    os.close(fd)
    if not disk_is_tmpfs:  # (where tmp_path is no tmpfs)
        assert "memory files (tmpfs" in refusal(asked(on_disk), PAGE, uid)[1]
    assert refusal(asked(memory_file), 5 * PAGE, uid)[0] == INVALID_VALUE  # past the file's end
    assert refusal(asked(memory_file, 100), PAGE, uid)[0] == INVALID_VALUE  # not a whole page
    assert refusal(asked(memory_file), 100, uid)[0] == INVALID_VALUE


def test_a_removed_file_is_reached_while_a_registration_holds_it(memory_file):
    kept, f = host_files.Kept(), asked(memory_file)
    fd = kept.take(f, PAGE, os.getuid())
    memory_file.unlink()
    memory_file.touch()  # (so that the fixture's unlink finds a file)
    assert kept.take(f, 2 * PAGE, os.getuid()) == fd  # by device and inode, not by its path
    with pytest.raises(CudaFail):
        kept.take(f, 8 * PAGE, os.getuid())  # still whole pages within it
    kept.give_back((f.device, f.inode))
    kept.give_back((f.device, f.inode))
    assert (f.device, f.inode) not in kept.files
    with pytest.raises(OSError):
        os.fstat(fd)  # closed with its last registration
    assert "cannot open" in refusal(f, PAGE, os.getuid())[1] or "not the file" in refusal(f, PAGE, os.getuid())[1]
