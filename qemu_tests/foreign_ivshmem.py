"""A plain ivshmem server that is not the NPU: the second ivshmem-doorbell device of every guest.

vnpu.ko matches every ivshmem-doorbell PCI function (1af4:1110) and tells the NPU's from
others by the identity registers in BAR2 (docs/hardware.md, "Identity check"). To prove it,
the harness gives every guest a second ivshmem-doorbell whose server is this one: it speaks
the same ivshmem-server protocol as the device model (version, peer id, shared-memory fd,
the client's eventfds) but serves a shared memory filled with :func:`pattern`, which is
not the NPU's layout, and never rings anybody. The in-guest test
``tests/kernel/test_foreign_ivshmem.py`` checks that probe refused the device with
``-ENODEV`` and one kernel-log line, and that the pattern is intact: probe wrote nothing
into foreign shared memory.

It is always present (not an option): probe refuses it at once (its first word is not
zero, so the driver does not wait for a device model to come up), so it costs the boot
nothing measurable, and every run proves again that the driver leaves foreign devices alone.
"""

from __future__ import annotations

import mmap
import os
import selectors
import signal
import socket
import subprocess
import sys
from pathlib import Path

from device_model.qemu_server import PeerVectors, send_setup
from vnpu_common.cli import OneLineArgumentParser, cli_main

SIZE = 1 << 20  # as large as the NPU's BAR2, so the size check alone does not refuse it
VECTORS = 1
PEER_ID = 7  # the guest's id on this "bus"; nobody else is on it
READY_MARK = "foreign-ivshmem: ready"
# QEMU's -chardev/-device ids and the PCI identity the guest sees.
CHARDEV_ID = "foreign-ivs"


def pattern(size: int = SIZE) -> bytes:
    """The shared memory's contents: word i (little-endian u32) is ``i * 0x9E3779B1 ^ 0xF0E1D2C3``.

    Every word differs from its neighbours and none is zero or the NPU's magic, so a
    write of any value anywhere shows.
    """
    import numpy as np

    i = np.arange(size // 4, dtype=np.uint32)
    return ((i * np.uint32(0x9E3779B1)) ^ np.uint32(0xF0E1D2C3)).astype("<u4").tobytes()


def qemu_opts(sock: Path) -> list[str]:
    """The QEMU options of the foreign device (after the NPU's, so the NPU keeps its PCI slot)."""
    return [
        f"-chardev socket,path={sock},id={CHARDEV_ID}",
        f"-device ivshmem-doorbell,chardev={CHARDEV_ID},vectors={VECTORS}",
    ]


def serve(sock: Path) -> int:
    """Listen on ``sock``, hand QEMU the patterned memory, wait until QEMU disconnects."""
    shm_fd = os.memfd_create("foreign-ivshmem", os.MFD_CLOEXEC)
    os.ftruncate(shm_fd, SIZE)
    with mmap.mmap(shm_fd, SIZE) as m:
        m[:] = pattern()
    me = PeerVectors.create(PEER_ID, VECTORS)
    sock.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(1)
    print(READY_MARK, flush=True)
    conn, _ = listener.accept()
    send_setup(conn, PEER_ID, shm_fd, [me])
    sel = selectors.DefaultSelector()
    sel.register(conn, selectors.EVENT_READ)
    try:
        while True:
            sel.select()
            # QEMU never sends anything: readable means it exited.
            try:
                if not conn.recv(64):
                    return 0
            except ConnectionResetError:
                return 0
    finally:
        sel.close()
        conn.close()
        listener.close()
        sock.unlink(missing_ok=True)
        me.close()
        os.close(shm_fd)


class ForeignIvshmemProcess:
    """This server as a child process of the harness: started before QEMU, stopped after it."""

    def __init__(self, workdir: Path) -> None:
        self.socket = workdir / "foreign-ivshmem.sock"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "qemu_tests.foreign_ivshmem", "--socket", str(self.socket)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self.proc.stdout is not None
        # Its one line, once the socket listens (QEMU reads the handshake while it starts); EOF if it failed.
        if not self.proc.stdout.readline().startswith(READY_MARK):
            self.stop()
            raise RuntimeError(f"foreign ivshmem server did not start (exit code {self.proc.poll()})")

    def stop(self, timeout: float = 10.0) -> None:
        """Wait for the server to exit (it does when QEMU disconnects), else terminate it."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.socket.unlink(missing_ok=True)


@cli_main("python -m qemu_tests.foreign_ivshmem")
def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(
        prog="python -m qemu_tests.foreign_ivshmem",
        description="Serve one QEMU ivshmem-doorbell with patterned memory: a device that is not the NPU.",
    )
    p.add_argument("--socket", required=True, type=Path, help="unix socket for QEMU's -chardev socket")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return serve(args.socket)
    except OSError as e:
        print(f"foreign-ivshmem: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
