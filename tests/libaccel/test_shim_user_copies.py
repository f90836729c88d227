"""The shim's copies from user memory: a bad pointer is EFAULT, and SUBMIT's one read of the job
array with what follows it stops where readable memory ends."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Iterator

import pytest

from libaccel.backends.shim.device import Errno
from libaccel.backends.shim.file import copy_from_user, copy_from_user_ahead, read_user

PAGE = mmap.PAGESIZE


@pytest.fixture
def hole() -> Iterator[int]:
    """The address of a readable page followed by an unreadable one: a one-page memfd mapped over
    two pages, so the second is past the file's end and stays this mapping's (an unmapped page
    could be taken by another mapping while the test runs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    c_int = ctypes.c_int
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, c_int, c_int, c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.memfd_create("vnpu-test-hole")
    try:
        os.ftruncate(fd, PAGE)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        addr = libc.mmap(None, 2 * PAGE, prot, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    assert addr not in (None, ctypes.c_void_p(-1).value)
    ctypes.memmove(addr, bytes(range(256)) * (PAGE // 256), PAGE)
    yield addr
    libc.munmap(addr, 2 * PAGE)


def test_read_ahead_stops_at_the_unmapped_page(hole: int) -> None:
    data = copy_from_user_ahead(hole + PAGE - 64, 32, 4096, "jobs")
    assert len(data) == 64 and data == bytes(range(192, 256))
    assert len(copy_from_user_ahead(hole, 32, 100, "jobs")) == 132


def test_what_must_be_read_faults_as_efault(hole: int) -> None:
    for read in (
        lambda: copy_from_user_ahead(hole + PAGE - 16, 32, 4096, "jobs"),
        lambda: copy_from_user_ahead(hole + PAGE, 8, 0, "jobs"),
        lambda: copy_from_user(hole + PAGE - 4, 8, "bos"),
        lambda: copy_from_user_ahead(16, 8, 64, "jobs"),
    ):
        with pytest.raises(Errno) as excinfo:
            read()
        assert excinfo.value.errno == errno.EFAULT


def test_read_user_takes_from_the_earlier_read_or_reads_again(hole: int) -> None:
    earlier = (hole, copy_from_user_ahead(hole, 16, 48, "jobs"))
    assert read_user(earlier, hole + 16, 48, "bos") == bytes(range(16, 64))
    assert read_user(earlier, hole + 60, 8, "bos") == bytes(range(60, 68))  # past it: a new read
    with pytest.raises(Errno) as excinfo:
        read_user(earlier, hole + PAGE - 4, 8, "bos")
    assert excinfo.value.errno == errno.EFAULT
