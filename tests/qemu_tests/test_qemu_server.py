"""The device model server end to end, with this test as QEMU and as the guest's driver.

The test speaks the client side of the ivshmem protocol over the real unix
socket, maps BAR2 from the fd it receives and the guest RAM file, boots the
real firmware image, and runs a job through the rings: doorbells go through
the NPU's eventfds, interrupts come back on the guest's.
"""

from __future__ import annotations

import mmap
import os
import select
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from device_model.memory import FileMemory
from device_model.page_tables import AddressSpace, PageAllocator
from device_model.qemu_server import DEVICE_PEER, GUEST_PEER, DeviceServer
from firmware_tools.image import default_image, dev_private_key
from uapi import hw_layout as hw
from uapi.firmware_format import build_image
from uapi.isa import SPEC, encode

RAM_SIZE = 16 << 20


@dataclass
class Client:
    """What QEMU holds after the handshake."""

    sock: socket.socket
    own_id: int
    bar2: mmap.mmap
    peers: list[tuple[int, int]]  # (peer id, eventfd) in arrival order

    def eventfds(self, peer: int) -> list[int]:
        return [fd for p, fd in self.peers if p == peer]


def recv_msg(sock: socket.socket) -> tuple[int, int | None]:
    data, fds, _, _ = socket.recv_fds(sock, 8, 1)
    assert len(data) == 8
    return struct.unpack("<q", data)[0], (fds[0] if fds else None)


def handshake(path: Path) -> Client:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    assert recv_msg(sock) == (0, None)  # protocol version
    own_id, fd = recv_msg(sock)
    assert fd is None
    value, shm = recv_msg(sock)
    assert value == -1 and shm is not None
    assert os.fstat(shm).st_size == hw.BAR2_SIZE
    bar2 = mmap.mmap(shm, hw.BAR2_SIZE)
    os.close(shm)
    peers = []
    for _ in range(2 * hw.NUM_VECTORS):
        peer, efd = recv_msg(sock)
        assert efd is not None
        peers.append((peer, efd))
    return Client(sock, own_id, bar2, peers)


@pytest.fixture
def served(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[DeviceServer, Client, threading.Thread, list[int]]]:
    """The server; parametrized (indirect) with "processes", its cores run in worker processes."""
    server = DeviceServer(tmp_path / "ivshmem.sock", tmp_path / "ram", RAM_SIZE)
    server.core_processes = getattr(request, "param", "threads") == "processes"
    result: list[int] = []
    ready = threading.Event()
    t = threading.Thread(target=lambda: result.append(server.serve(on_ready=ready.set)), daemon=True)
    t.start()
    assert ready.wait(10)
    client = handshake(tmp_path / "ivshmem.sock")
    try:
        yield server, client, t, result
    finally:
        server.request_stop()
        t.join(10)
        client.sock.close()
        server.close()


def r32(bar2: mmap.mmap, off: int) -> int:
    return struct.unpack_from("<I", bar2, off)[0]


def w32(bar2: mmap.mmap, off: int, v: int) -> None:
    struct.pack_into("<I", bar2, off, v)


def w64(bar2: mmap.mmap, off: int, v: int) -> None:
    struct.pack_into("<Q", bar2, off, v)


def wait_irq(efd: int, timeout: float = 10.0) -> None:
    r, _, _ = select.select([efd], [], [], timeout)
    assert r, "no interrupt"
    os.eventfd_read(efd)


def test_handshake_and_identification(served) -> None:
    server, client, _, _ = served
    assert client.own_id == GUEST_PEER
    # NPU's vectors first, then the guest's own, in vector order.
    assert [p for p, _ in client.peers] == [DEVICE_PEER] * hw.NUM_VECTORS + [GUEST_PEER] * hw.NUM_VECTORS
    assert r32(client.bar2, hw.REG_MAGIC) == hw.MAGIC
    assert r32(client.bar2, hw.REG_DEVICE_PEER) == DEVICE_PEER
    assert r32(client.bar2, hw.REG_ISA_VERSION) == SPEC.version


def test_second_client_is_refused(served, tmp_path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(tmp_path / "ivshmem.sock"))
    s.settimeout(10)
    assert s.recv(8) == b""  # closed without a handshake
    s.close()


def control(client: Client, cmd: int, arg0: int = 0, arg1: int = 0) -> int:
    bar2 = client.bar2
    w64(bar2, hw.REG_CMD_ARG0, arg0)
    w64(bar2, hw.REG_CMD_ARG1, arg1)
    w32(bar2, hw.REG_CMD, cmd)
    seq = r32(bar2, hw.REG_CMD_SEQ) + 1
    w32(bar2, hw.REG_CMD_SEQ, seq)
    os.eventfd_write(client.eventfds(DEVICE_PEER)[hw.VEC_CONTROL], 1)
    wait_irq(client.eventfds(GUEST_PEER)[hw.IRQ_CONTROL])
    assert r32(bar2, hw.REG_CMD_ACK) == seq
    return struct.unpack_from("<i", bar2, hw.REG_CMD_STATUS)[0]


@pytest.mark.parametrize("served", ["threads", "processes"], indirect=True)
def test_boot_and_run_a_job_through_doorbells_and_interrupts(served, tmp_path: Path) -> None:
    server, client, _, _ = served
    ram = FileMemory(tmp_path / "ram", RAM_SIZE)  # the guest's view of its RAM
    try:
        image = build_image(default_image(), dev_private_key())
        fw_pa = 0x10000
        ram.view(fw_pa, len(image))[:] = image
        assert control(client, hw.CMD_BOOT, fw_pa, len(image)) == 0
        assert r32(client.bar2, hw.REG_STATUS) & hw.STATUS_READY

        space = AddressSpace(ram, PageAllocator(ram, base=0x100000))
        cmd_page, out_page = space.allocator.alloc_pages(2)
        space.map(0x100000, [cmd_page], writable=False)
        space.map(0x200000, [out_page])
        stream = (
            encode("TENSOR", slot=0, dtype=0, va=0x200000, n=1, h=1, w=1, c=64, stride_c=1)
            + encode("FILL", dst=0, value=-3)
            + encode("END")
        )
        ram.view(cmd_page, len(stream))[:] = stream

        bar2 = client.bar2
        tail = r32(bar2, hw.SQ_TAIL)
        sqe = hw.SQ_BASE + (tail % hw.SQ_ENTRIES) * hw.SQ_ENTRY_SIZE
        w64(bar2, sqe + hw.SQE_SEQNO, 77)
        w64(bar2, sqe + hw.SQE_PT_ROOT, space.root)
        w64(bar2, sqe + hw.SQE_CMD_VA, 0x100000)
        w32(bar2, sqe + hw.SQE_CMD_SIZE, len(stream))
        w32(bar2, sqe + hw.SQE_FLAGS, 0)
        w32(bar2, hw.SQ_TAIL, tail + 1)
        os.eventfd_write(client.eventfds(DEVICE_PEER)[hw.VEC_QUEUE], 1)
        wait_irq(client.eventfds(GUEST_PEER)[hw.IRQ_COMPLETION])

        cq_head = r32(bar2, hw.CQ_HEAD)
        assert r32(bar2, hw.CQ_TAIL) == cq_head + 1
        cqe = hw.CQ_BASE + (cq_head % hw.CQ_ENTRIES) * hw.CQ_ENTRY_SIZE
        assert struct.unpack_from("<Q", bar2, cqe + hw.CQE_SEQNO)[0] == 77
        assert struct.unpack_from("<i", bar2, cqe + hw.CQE_STATUS)[0] == 0
        out = np.frombuffer(ram.view(out_page, 128), dtype=np.int8)
        assert (out[:64] == -3).all() and (out[64:] == 0).all()
        # The job doorbell woke the NPU's execution thread itself, not the server loop.
        assert server.npu.queue_kicks >= 1 and server.kicks[hw.VEC_QUEUE] == 0
        assert [c.worker is not None for c in server.npu.cores] == [server.core_processes] * 2
        assert server.irq.raised[hw.IRQ_COMPLETION] >= 1
        del out
    finally:
        try:
            ram.close()
        except BufferError:
            pass


def test_server_exits_when_qemu_disconnects(served) -> None:
    _, client, thread, result = served
    client.sock.close()
    thread.join(10)
    assert not thread.is_alive() and result == [0]
