"""The vnpu device model as QEMU sees it: an ivshmem server and the NPU peer in one process.

QEMU's ``ivshmem-doorbell`` device connects to a unix socket and expects the
ivshmem server protocol (QEMU ``docs/specs/ivshmem-spec.rst``). Debian ships
no ``ivshmem-server``, so this process is the server, and it is also the one
other peer on the "bus": the NPU.

On the socket, for its single client (QEMU), the server sends

1. int64 protocol version 0,
2. int64 the client's own peer id,
3. int64 -1 with the shared-memory fd (SCM_RIGHTS): BAR2 of the device,
4. for each peer (the NPU, then the guest itself) and each of
   ``NUM_VECTORS`` vectors: int64 peer id with one eventfd.

QEMU turns a guest write of ``(peer << 16) | vector`` to BAR0's Doorbell
into a write to that peer's eventfd for ``vector``. Each NPU core's thread
waits on its own queue vector's eventfd itself (a job doorbell wakes the
thread that runs the job, with no hand-off); the server's event loop reads
the other vectors' eventfds and calls ``Npu.kick(vector)``. The NPU
interrupts the guest by writing the guest's eventfd for a vector, which QEMU
delivers as MSI-X.

QEMU reads the first three messages while it starts, so the socket must be
listening before QEMU is launched, and QEMU cannot reconnect: when the
client goes away, the server exits.

Guest RAM is a ``memory-backend-file`` that QEMU maps shared; this process
maps the same file, so a guest-physical address P is at file offset P (true
below 2.75 GiB on q35). The server creates the file (sparse) before QEMU
starts, so both processes map the same inode whatever the start-up order.
"""

from __future__ import annotations

import argparse
import logging
import mmap
import os
import selectors
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from uapi import hw_layout
from vnpu_common.cli import CliError, ExitCode, OneLineArgumentParser, add_version, cli_main, os_error_words

log = logging.getLogger("vnpu.qemu_server")

PROTOCOL_VERSION = 0
# Peer ids. ivshmem accepts any id below 65536; a non-zero NPU id makes a
# driver that rings an unread (zero) DEVICE_PEER register fail visibly.
DEVICE_PEER = 1
GUEST_PEER = 2
READY_MARK = "vnpu-device-model: ready"


def pack_msg(value: int) -> bytes:
    """One ivshmem protocol message: a little-endian int64."""
    return struct.pack("<q", value)


def parse_size(text: str) -> int:
    """Parse a size such as ``1G``, ``512M``, ``4096`` into bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B")
    if not t:
        raise ValueError(f"empty size {text!r}")
    mult = units.get(t[-1], 1)
    digits = t[:-1] if t[-1] in units else t
    if not digits.isdigit():
        raise ValueError(f"bad size {text!r}: expected a number with an optional K/M/G suffix")
    return int(digits) * mult


def create_ram_file(path: Path, size: int) -> None:
    """Create (or grow) the sparse guest-RAM file QEMU's memory-backend-file will share."""
    if size <= 0 or size % hw_layout.PAGE_SIZE:
        raise ValueError(f"guest RAM size {size} must be a positive multiple of {hw_layout.PAGE_SIZE}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


@dataclass
class PeerVectors:
    """The eventfds of one ivshmem peer, one per interrupt vector."""

    peer_id: int
    fds: list[int] = field(default_factory=list)

    @classmethod
    def create(cls, peer_id: int, count: int) -> PeerVectors:
        # Non-blocking so draining a coalesced counter never stalls the loop.
        return cls(peer_id, [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(count)])

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def send_setup(conn: socket.socket, client_id: int, shm_fd: int, peers: list[PeerVectors]) -> None:
    """Send QEMU the whole ivshmem handshake: version, its id, the shm fd, every peer's eventfds."""
    conn.sendall(pack_msg(PROTOCOL_VERSION))
    conn.sendall(pack_msg(client_id))
    socket.send_fds(conn, [pack_msg(-1)], [shm_fd])
    for peer in peers:
        # QEMU numbers a peer's vectors by the order its eventfds arrive.
        for fd in peer.fds:
            socket.send_fds(conn, [pack_msg(peer.peer_id)], [fd])


class IrqLine:
    """``raise_irq(vector)`` for the NPU: signal the guest's eventfd for that MSI-X vector.

    Thread-safe (an eventfd write is atomic); a closed line drops the interrupt
    instead of raising, because the guest is gone.
    """

    def __init__(self, guest: PeerVectors) -> None:
        self._guest = guest
        self._lock = threading.Lock()
        self._closed = False
        self.raised = [0] * len(guest.fds)

    def __call__(self, vector: int) -> None:
        if not 0 <= vector < len(self._guest.fds):
            raise ValueError(f"MSI-X vector {vector} out of range 0..{len(self._guest.fds) - 1}")
        with self._lock:
            if self._closed:
                return
            # Count first: whoever the eventfd wakes may read the count at once.
            self.raised[vector] += 1
            os.eventfd_write(self._guest.fds[vector], 1)

    def close(self) -> None:
        with self._lock:
            self._closed = True


class DeviceServer:
    """The ivshmem server plus the NPU: owns the socket, BAR2, guest RAM and the event loop."""

    def __init__(
        self,
        socket_path: Path,
        ram_path: Path,
        ram_size: int,
        npu_factory: Callable[..., object] | None = None,
        fw_pubkey: object | None = None,
        num_cores: int | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.num_cores = num_cores  # the NPU's cores; None: the device model's default
        self.fw_pubkey = fw_pubkey  # the boot ROM's Ed25519 public key; None: the development key
        self.ram_path = ram_path
        self.ram_size = ram_size
        self._npu_factory = npu_factory
        self._stop_r, self._stop_w = socket.socketpair()
        self._stop_w.setblocking(False)
        self.kicks = [0] * hw_layout.NUM_VECTORS

        # BAR2: an anonymous shared memory file QEMU maps as the device's BAR.
        self.shm_fd = os.memfd_create("vnpu-bar2", os.MFD_CLOEXEC)
        os.ftruncate(self.shm_fd, hw_layout.BAR2_SIZE)
        self.bar2 = mmap.mmap(self.shm_fd, hw_layout.BAR2_SIZE)

        create_ram_file(ram_path, ram_size)

        self.device = PeerVectors.create(DEVICE_PEER, hw_layout.NUM_VECTORS)
        self.guest = PeerVectors.create(GUEST_PEER, hw_layout.NUM_VECTORS)
        self.irq = IrqLine(self.guest)

        if socket_path.exists():
            # A stale socket from a killed run; connecting to it would fail anyway.
            socket_path.unlink()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(socket_path))
        self.listener.listen(1)

        self.memory = None
        self.npu = None
        self.fault_control: Path | None = None  # device_model.faults control file (--fault-control)
        self.core_processes = False  # each core's jobs in a worker process (device_model.core_worker)

    def _make_npu(self) -> object:
        from device_model.memory import FileMemory

        factory = self._npu_factory
        extra = {}
        if factory is None:
            from device_model.npu import Npu

            factory = Npu
            extra["fw_pubkey"] = self.fw_pubkey
            extra["core_processes"] = self.core_processes
        if self.num_cores is not None:
            extra["num_cores"] = self.num_cores
        self.memory = FileMemory(self.ram_path, self.ram_size)
        # The queue vectors' eventfds go to the NPU's core threads (see the module doc).
        return factory(
            self.bar2,
            self.memory,
            self.irq,
            DEVICE_PEER,
            queue_fds=[self.device.fds[v] for v in hw_layout.QUEUE_VECTORS],
            **extra,
        )

    def request_stop(self) -> None:
        """Ask the loop to end (safe from a signal handler or another thread)."""
        try:
            self._stop_w.send(b"x")
        except (BlockingIOError, OSError):
            pass

    def serve(self, on_ready: Callable[[], None] | None = None) -> int:
        """Bring the NPU up, accept QEMU, then serve doorbells until QEMU disconnects or stop is requested."""
        self.npu = self._make_npu()
        if self.fault_control is not None and hasattr(self.npu, "faults"):
            from device_model.faults import FaultInjector

            self.npu.faults = FaultInjector(self.fault_control)
        if on_ready:
            on_ready()
        sel = selectors.DefaultSelector()
        sel.register(self._stop_r, selectors.EVENT_READ, ("stop", None))
        sel.register(self.listener, selectors.EVENT_READ, ("accept", None))
        client: socket.socket | None = None
        try:
            while True:
                for key, _ in sel.select():
                    kind, arg = key.data
                    if kind == "stop":
                        log.info("stop requested")
                        return 0
                    if kind == "accept":
                        conn, _ = self.listener.accept()
                        if client is not None:
                            # One guest per device: a second QEMU would share BAR2 and confuse the NPU.
                            log.warning("refusing a second ivshmem client")
                            conn.close()
                            continue
                        client = conn
                        send_setup(client, GUEST_PEER, self.shm_fd, [self.device, self.guest])
                        sel.register(client, selectors.EVENT_READ, ("client", None))
                        for vector, fd in enumerate(self.device.fds):
                            if vector not in hw_layout.QUEUE_VECTORS:
                                sel.register(fd, selectors.EVENT_READ, ("doorbell", vector))
                        log.info("QEMU connected as peer %d", GUEST_PEER)
                    elif kind == "client":
                        # QEMU never sends anything: readable means EOF (QEMU exited).
                        try:
                            data = client.recv(64)
                        except ConnectionResetError:
                            data = b""
                        if not data:
                            log.info("QEMU disconnected")
                            return 0
                    elif kind == "doorbell":
                        self._doorbell(arg)
        finally:
            sel.close()
            if client is not None:
                client.close()

    def _doorbell(self, vector: int) -> None:
        try:
            os.eventfd_read(self.device.fds[vector])
        except BlockingIOError:
            return
        # Counts coalesce: one kick serves every ring since the last read.
        self.kicks[vector] += 1
        self.npu.kick(vector)

    def close(self) -> None:
        self.irq.close()
        stop = getattr(self.npu, "close", None)
        if callable(stop):
            stop()
        self.npu = None
        close_mem = getattr(self.memory, "close", None)
        if callable(close_mem):
            try:
                close_mem()
            except BufferError:
                pass  # the NPU's numpy views still reference guest RAM; freed at exit
        self.memory = None
        self.listener.close()
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        self.device.close()
        self.guest.close()
        try:
            self.bar2.close()
        except BufferError:
            # The NPU still holds views of BAR2; the process is exiting anyway.
            pass
        os.close(self.shm_fd)
        self._stop_r.close()
        self._stop_w.close()


def _default_cores() -> int:
    from device_model.npu import DEFAULT_CORES

    return DEFAULT_CORES


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="vnpu-device-model",
        description="Run the vnpu NPU device model as the ivshmem server of one QEMU ivshmem-doorbell.",
    )
    add_version(p)
    p.add_argument("--socket", required=True, type=Path, help="unix socket path for QEMU's -chardev socket")
    p.add_argument(
        "--ram",
        required=True,
        type=Path,
        help="guest RAM file, QEMU's memory-backend-file mem-path (e.g. /dev/shm/vnpu-ram)",
    )
    p.add_argument("--ram-size", default="1G", help="guest RAM size (must match QEMU's), default 1G")
    p.add_argument("--keep-ram", action="store_true", help="do not delete the RAM file on exit")
    p.add_argument(
        "--fw-pubkey",
        type=Path,
        help="Ed25519 public key (PEM) the boot ROM checks firmware signatures with "
        "(default: the development key, firmware/keys/dev-ed25519.pub)",
    )
    p.add_argument(
        "--fault-control",
        type=Path,
        help="a JSON fault spec file re-read before every job (device_model.faults; docs/reliability.md)",
    )
    p.add_argument(
        "--cores",
        type=int,
        default=None,
        help=f"NPU cores, 1..{hw_layout.MAX_CORES} (default: {_default_cores()})",
    )
    p.add_argument(
        "--core-processes",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="run each NPU core's jobs in a worker process of its own (its own GIL, so cores use "
        "separate host CPUs) instead of a thread of this process (default: threads)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log device model activity to stderr")
    return p


@cli_main("vnpu-device-model")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        ram_size = parse_size(args.ram_size)
    except ValueError as e:
        raise CliError(str(e)) from None
    if args.cores is not None and not 1 <= args.cores <= hw_layout.MAX_CORES:
        raise CliError(f"--cores {args.cores} is not 1..{hw_layout.MAX_CORES}")
    fw_pubkey = None
    if args.fw_pubkey is not None:
        from uapi.firmware_format import FirmwareError, load_public_key

        try:
            fw_pubkey = load_public_key(args.fw_pubkey)
        except FirmwareError as e:
            raise CliError(f"--fw-pubkey: {e}", ExitCode.BAD_FILE) from None
    try:
        server = DeviceServer(args.socket, args.ram, ram_size, fw_pubkey=fw_pubkey, num_cores=args.cores)
        server.fault_control = args.fault_control
        server.core_processes = args.core_processes
    except OSError as e:  # the socket or the RAM file
        where = f"{e.filename}: " if e.filename else ""
        raise CliError(f"cannot set up: {where}{os_error_words(e)}", ExitCode.BAD_FILE) from None

    def on_signal(signum: int, _frame: object) -> None:
        server.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from device_model.core_worker import CoreWorkerError  # with the Npu: numpy, not for importers

    def ready() -> None:
        print(f"{READY_MARK} socket={args.socket} ram={args.ram} pid={os.getpid()}", flush=True)

    try:
        return server.serve(on_ready=ready)
    except CoreWorkerError as e:
        raise CliError(str(e), ExitCode.DEVICE) from None
    finally:
        server.close()
        if not args.keep_ram:
            try:
                args.ram.unlink()
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    sys.exit(main())
