"""The foreign ivshmem server (the guest's second, non-NPU ivshmem-doorbell) speaks QEMU's protocol."""

from __future__ import annotations

import mmap
import socket
import struct
from pathlib import Path

import numpy as np

from qemu_tests import foreign_ivshmem, harness
from uapi import hw_layout as hw


def _recv_msg(conn: socket.socket) -> tuple[int, list[int]]:
    """One ivshmem message as QEMU reads it: an int64 and maybe one fd."""
    data, fds, _, _ = socket.recv_fds(conn, 8, 1)
    assert len(data) == 8
    return struct.unpack("<q", data)[0], fds


def test_handshake_hands_over_the_patterned_memory(tmp_path: Path) -> None:
    server = foreign_ivshmem.ForeignIvshmemProcess(tmp_path)
    server.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(server.socket))
            assert _recv_msg(conn) == (0, [])  # protocol version
            assert _recv_msg(conn) == (foreign_ivshmem.PEER_ID, [])  # our own peer id
            marker, (shm_fd,) = _recv_msg(conn)
            assert marker == -1
            vectors = [_recv_msg(conn) for _ in range(foreign_ivshmem.VECTORS)]
            assert all(peer == foreign_ivshmem.PEER_ID and len(fds) == 1 for peer, fds in vectors)
            with mmap.mmap(shm_fd, foreign_ivshmem.SIZE, prot=mmap.PROT_READ) as m:
                assert m[:] == foreign_ivshmem.pattern()
    finally:
        server.stop()
    assert server.proc is not None and server.proc.returncode == 0  # it exits when its client goes
    assert not server.socket.exists()


def test_pattern_has_no_zero_word_and_no_npu_magic() -> None:
    from uapi import hw_layout

    words = np.frombuffer(foreign_ivshmem.pattern(), "<u4")
    assert words.size * 4 == foreign_ivshmem.SIZE == hw_layout.BAR2_SIZE
    assert not (words == 0).any() and not (words == hw_layout.MAGIC).any()
    assert len(np.unique(words)) == words.size


def test_the_foreign_device_comes_after_the_npu() -> None:
    kernel = Path("/boot/vmlinuz-6.12.117+deb12-amd64")
    cmd = harness.vng_command(
        ["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, kernel, Path("/tmp/f.sock")
    )
    (opts,) = [c for c in cmd if c.startswith("--qemu-opts=")]
    npu = opts.index(f"-device ivshmem-doorbell,chardev=vnpu-ivs,vectors={hw.NUM_VECTORS}")
    foreign = opts.index(f"-device ivshmem-doorbell,chardev={foreign_ivshmem.CHARDEV_ID},vectors=1")
    assert "-chardev socket,path=/tmp/f.sock,id=foreign-ivs" in opts
    assert npu < foreign  # the NPU keeps its PCI slot
