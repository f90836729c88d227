"""An NPU core's jobs in a worker process of its own: a second core that is a second host CPU.

In the device model's default thread mode every core is a thread of one Python process: the
C MAC array and numpy release the GIL, but the command processor's per-instruction Python
(decode, translation caches, requantization set-up) holds it, so two cores cannot run a model
faster than about 1.3x one core (docs/performance.md, "Several NPU cores"). In process mode
(``Npu(..., core_processes=True)``, ``vnpu-device-model --core-processes``, the shim's
``VNPU_SHIM_CORE_PROCESSES=1``) each core's jobs execute in a worker process with its own
interpreter and GIL.

Only the execution moves. The Npu's core thread stays the core's owner: it takes entries from
the submission ring, keeps the core's queue, injects faults, writes completions and serves
RESET; for each job it sends (pt_root, cmd_va, cmd_size) to its worker through a
``SOCK_SEQPACKET`` socket pair and waits for the :class:`JobResult`, passing the IRQ
instructions the job executes on to the Npu as they arrive. The worker maps the same system
memory (the guest-RAM file of :class:`FileMemory`, or the memfd of :class:`MemfdMemory`) and
runs the job with its own :class:`CommandProcessor`, built from the booted firmware's
:class:`ProcessorSpec` (sent before the first job after each BOOT).

A RESET aborts a worker's job through a :class:`SharedAbort`: a flag byte in a memfd page both
processes map (the command processor reads it before every instruction, no system call) and an
eventfd that wakes a job sleeping in WAIT.

Lifetime: the worker is started by its core thread (its numpy and MAC array import are paid
once, when the device starts) and asks the kernel for SIGKILL when that thread dies
(PR_SET_PDEATHSIG), so a killed device model leaves no worker behind; it also exits on EOF of
its socket. ``Npu.close()`` ends the core threads, which stop and reap their workers.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import itertools
import logging
import mmap
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from .command_processor import MAX_CMD_SIZE, MAX_TENSOR_ELEMENTS, CommandProcessor, JobResult
from .memory import FileMemory, MemfdMemory, SystemMemory

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # interpreter, numpy and the MAC array (built on first use) on a loaded host
STOP_TIMEOUT_S = 5.0
_MSG_MAX = 1 << 16  # one message: a pickled job, IRQ or result (errors are cut to fit)
_ERROR_MAX = 4096
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The directory holding the project's packages (a checkout, or site-packages): the worker imports from it.
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


class CoreWorkerError(RuntimeError):
    """A core's worker process could not start, or died."""


@dataclass(frozen=True)
class ProcessorSpec:
    """What a booted firmware image sets for each core's command processor."""

    enabled_opcodes: frozenset[int] | None = None  # None: every opcode
    max_cmd_size: int = MAX_CMD_SIZE
    max_tensor_elements: int = MAX_TENSOR_ELEMENTS

    @classmethod
    def of(cls, enabled: Collection[int] | None, max_cmd_size: int, max_elements: int) -> ProcessorSpec:
        return cls(None if enabled is None else frozenset(enabled), max_cmd_size, max_elements)

    def build(self, memory: SystemMemory) -> CommandProcessor:
        return CommandProcessor(memory, self.enabled_opcodes, self.max_cmd_size, self.max_tensor_elements)


class SharedAbort:
    """A ``threading.Event`` look-alike that a core thread and its worker process both see.

    The parent sets and clears it; the worker's command processor calls ``is_set`` before every
    instruction (a read of shared memory) and ``wait(timeout)`` while it polls a WAIT semaphore.
    ``SharedAbort()`` makes a new one; ``SharedAbort(flag_fd, event_fd)`` maps one whose file
    descriptors were passed to this process.
    """

    def __init__(self, flag_fd: int | None = None, event_fd: int | None = None) -> None:
        if flag_fd is None or event_fd is None:
            flag_fd = os.memfd_create("vnpu-abort", os.MFD_CLOEXEC)
            os.ftruncate(flag_fd, mmap.PAGESIZE)
            event_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.flag_fd = flag_fd
        self.event_fd = event_fd
        self._flag = mmap.mmap(flag_fd, mmap.PAGESIZE)

    def is_set(self) -> bool:
        return self._flag[0] != 0

    def set(self) -> None:
        self._flag[0] = 1  # first: whoever the eventfd wakes reads the flag
        os.eventfd_write(self.event_fd, 1)

    def clear(self) -> None:
        self._flag[0] = 0
        self._drain()

    def _drain(self) -> None:
        try:
            os.eventfd_read(self.event_fd)
        except BlockingIOError:
            pass

    def wait(self, timeout: float | None = None) -> bool:
        """True as soon as the flag is set; False when ``timeout`` seconds pass without it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            ready, _, _ = select.select([self.event_fd], [], [], left)
            if ready and not self.is_set():
                self._drain()  # a count a clear() raced with: the flag is what counts
        return True

    def close(self) -> None:
        self._flag.close()
        os.close(self.flag_fd)
        os.close(self.event_fd)


def _memory_args(memory: SystemMemory) -> tuple[list[str], tuple[int, ...]]:
    """How a worker maps ``memory``: its command-line arguments and the fds it inherits."""
    if isinstance(memory, FileMemory):
        return ["--memory-path", memory.path, "--memory-size", str(memory.size)], ()
    if isinstance(memory, MemfdMemory):
        return ["--memory-fd", str(memory.fd), "--memory-size", str(memory.size)], (memory.fd,)
    raise ValueError(
        "core processes need system memory another process can map "
        f"(FileMemory or MemfdMemory), not {memory!r}"
    )


def check_shareable(memory: SystemMemory) -> None:
    """Raise ValueError unless worker processes can map ``memory``."""
    _memory_args(memory)


def _interpreter() -> str:
    """The Python to start a worker with.

    sys.executable, unless Python is embedded in another program (libteflon.so in a C
    application), where it names that program: then the interpreter of this Python's prefix.
    """
    exe = sys.executable
    if exe and Path(exe).name.startswith("python"):
        return exe
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for name in (f"python{version}", "python3"):
        candidate = Path(sys.prefix) / "bin" / name
        if candidate.exists():
            return str(candidate)
    raise CoreWorkerError(f"no Python interpreter to start core workers with (sys.executable is {exe!r})")


_processor_ids = itertools.count(1)


class RemoteProcessor:
    """A command processor in a worker process: ``run`` as :meth:`CommandProcessor.run`.

    One per core and firmware limits (like the thread mode's CommandProcessor): a BOOT of other
    limits starts the worker with fresh caches; one of the same limits keeps it (Npu._set_processors).
    """

    def __init__(self, worker: CoreWorker, spec: ProcessorSpec) -> None:
        self.worker = worker
        self.spec = spec
        self.ident = next(_processor_ids)

    def run(
        self,
        pt_root: int,
        cmd_va: int,
        cmd_size: int,
        abort: object | None = None,
        on_irq: Callable[[int], None] | None = None,
    ) -> JobResult:
        """Run the job in the worker; ``abort`` must be its worker's SharedAbort, the flag it reads."""
        if abort is not None and abort is not self.worker.abort:
            raise ValueError("a worker's jobs are aborted through its own SharedAbort")
        return self.worker.run(self, pt_root, cmd_va, cmd_size, on_irq)


class CoreWorker:
    """The parent's side of one core's worker process."""

    def __init__(self, memory: SystemMemory, core: int, abort: SharedAbort) -> None:
        self._memory_args, self._memory_fds = _memory_args(memory)
        self.core = core
        self.abort = abort
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._loaded = 0  # the RemoteProcessor whose spec the worker runs with
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def processor(self, spec: ProcessorSpec) -> RemoteProcessor:
        return RemoteProcessor(self, spec)

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the worker and wait until it can run jobs; CoreWorkerError if it cannot.

        Call it from the thread that owns the core: the worker dies with that thread.
        """
        python = _interpreter()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [
            python,
            "-m",
            "device_model.core_worker",
            "--socket-fd",
            str(theirs.fileno()),
            "--abort-fds",
            f"{self.abort.flag_fd},{self.abort.event_fd}",
            "--core",
            str(self.core),
            "--parent",
            str(os.getpid()),
            "--log-level",
            str(logging.getLogger().getEffectiveLevel()),
            *self._memory_args,
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
        fds = (theirs.fileno(), self.abort.flag_fd, self.abort.event_fd, *self._memory_fds)
        try:
            # Its stdout goes to the device model's stderr (its log): the device model's stdout
            # carries the ready line the harness waits for, nothing else.
            self.proc = subprocess.Popen(cmd, pass_fds=fds, env=env, stdin=subprocess.DEVNULL, stdout=2)
        except OSError as e:
            ours.close()
            raise CoreWorkerError(f"core {self.core}: cannot start its worker: {e}") from e
        finally:
            theirs.close()
        self._sock = ours
        self._loaded = 0
        self.starts += 1
        ready, _, _ = select.select([ours], [], [], timeout)
        msg = self._recv() if ready else None
        if msg is None or msg[0] != "ready":
            self.close()
            why = "exited" if ready else f"not ready after {timeout:.0f} s"
            raise CoreWorkerError(f"core {self.core}: its worker {why} (see the log above)")
        log.debug("core %d: worker pid %d ready", self.core, self.proc.pid)

    def _send(self, msg: tuple) -> None:
        assert self._sock is not None
        self._sock.send(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def _recv(self) -> tuple | None:
        """The worker's next message; None at EOF (it exited)."""
        assert self._sock is not None
        try:
            data = self._sock.recv(_MSG_MAX)
        except ConnectionResetError:
            return None
        return pickle.loads(data) if data else None  # noqa: S301 - our own child's messages

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self._sock is not None

    def run(
        self,
        processor: RemoteProcessor,
        pt_root: int,
        cmd_va: int,
        cmd_size: int,
        on_irq: Callable[[int], None] | None,
    ) -> JobResult:
        """One job in the worker; its IRQ instructions call ``on_irq`` here as they execute."""
        if not self.alive:
            # A worker that died (an OOM kill, a crash in C) is replaced for the next job.
            self.close()
            log.warning("core %d: restarting its worker", self.core)
            try:
                self.start()
            except CoreWorkerError as e:
                return JobResult(-errno.EIO, 0, 0, str(e))
        try:
            if self._loaded != processor.ident:
                self._send(("firmware", processor.spec))
                self._loaded = processor.ident
            self._send(("job", pt_root, cmd_va, cmd_size))
            while True:
                msg = self._recv()
                if msg is None:
                    break
                if msg[0] == "irq":
                    if on_irq is not None:
                        on_irq(msg[1])
                elif msg[0] == "result":
                    return msg[1]
        except OSError as e:
            log.error("core %d: worker connection: %s", self.core, e)
        self.close()
        return JobResult(-errno.EIO, 0, 0, f"core {self.core}: its worker process died")

    def close(self) -> None:
        """Stop the worker (EOF on its socket; SIGKILL if it does not exit) and reap it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


# --- the worker process ----------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the thread that started it dies (the core thread, or its process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0) != 0:  # 9: SIGKILL
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _serve(sock: socket.socket, memory: SystemMemory, abort: SharedAbort) -> int:
    def send(msg: tuple) -> None:
        sock.send(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def on_irq(value: int) -> None:
        send(("irq", value))

    processor: CommandProcessor | None = None
    send(("ready", os.getpid()))
    while True:
        try:
            data = sock.recv(_MSG_MAX)
        except ConnectionResetError:
            data = b""
        if not data:
            return 0  # the core thread closed its end: the device is going away
        msg = pickle.loads(data)  # noqa: S301 - our own parent's messages
        if msg[0] == "firmware":
            processor = msg[1].build(memory)
        elif msg[0] == "job":
            if processor is None:
                result = JobResult(-errno.EIO, 0, 0, "no firmware limits sent before the job")
            else:
                result = processor.run(msg[1], msg[2], msg[3], abort, on_irq)  # type: ignore[arg-type]
            if len(result.error) > _ERROR_MAX:
                result = JobResult(result.status, result.fault_va, result.cycles, result.error[:_ERROR_MAX])
            send(("result", result))
        else:
            log.error("unknown message %r", msg[0])
            return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m device_model.core_worker",
        description="One NPU core's job executor, started by device_model.npu in process mode (not by hand).",
    )
    p.add_argument("--socket-fd", type=int, required=True)
    p.add_argument("--abort-fds", required=True, help="FLAG_FD,EVENT_FD of the core's SharedAbort")
    p.add_argument("--core", type=int, required=True)
    p.add_argument("--parent", type=int, required=True, help="the device model's pid")
    p.add_argument("--log-level", type=int, default=logging.INFO)
    p.add_argument("--memory-path", type=Path)
    p.add_argument("--memory-fd", type=int)
    p.add_argument("--memory-size", type=int, required=True)
    args = p.parse_args(argv)
    _die_with_parent(args.parent)
    # A terminal's Ctrl-C reaches the whole process group: the device model decides when to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=args.log_level,
        format=f"%(asctime)s core{args.core}-worker %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if (args.memory_path is None) == (args.memory_fd is None):
        p.error("exactly one of --memory-path and --memory-fd")
    memory: SystemMemory
    try:
        if args.memory_path is not None:
            memory = FileMemory(args.memory_path, args.memory_size)
        else:
            memory = MemfdMemory(args.memory_size, args.memory_fd)
    except (OSError, ValueError) as e:
        log.error("core %d: cannot map system memory: %s", args.core, e)
        return 1
    flag_fd, event_fd = (int(x) for x in args.abort_fds.split(","))
    abort = SharedAbort(flag_fd, event_fd)
    # Paid here, once: the first job must not wait for the MAC array's import (or build).
    from . import mac_array

    mac_array.library()
    sock = socket.socket(fileno=args.socket_fd)
    threading.current_thread().name = f"vnpu-core{args.core}-worker"
    return _serve(sock, memory, abort)


if __name__ == "__main__":
    sys.exit(main())
