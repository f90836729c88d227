"""Process mode (device_model.core_worker): the workers' lifetime, their errors, the shared abort.

test_npu.py runs its firmware, IRQ, reset and cores tests in both modes; here is what only
process mode has.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from device_model.core_worker import CoreWorkerError, SharedAbort
from device_model.memory import AnonymousMemory, FileMemory
from device_model.npu import Npu
from device_model.qemu_server import READY_MARK, create_ram_file
from firmware_tools.image import default_image, dev_private_key
from uapi import hw_layout as hw
from uapi import isa
from uapi.firmware_format import build_image

from .helpers import Machine, program, tensor
from .test_npu import NOP_JOB, Completion, Driver

REPO = Path(__file__).resolve().parents[2]
RAM_SIZE = 16 << 20


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid``, from every one of its threads."""
    kids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids.update(int(k) for k in (task / "children").read_text().split())
    return kids


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (exited, or a zombie nobody has reaped yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _worker_pids(npu: Npu) -> list[int]:
    pids = [c.worker.pid for c in npu.cores if c.worker is not None]
    assert len(pids) == npu.num_cores and None not in pids
    return pids  # type: ignore[return-value]


def test_workers_run_on_guest_ram_files_and_stop_with_close(tmp_path: Path) -> None:
    """The QEMU case: a FileMemory the workers map by path; close() stops and reaps them."""
    create_ram_file(tmp_path / "ram", RAM_SIZE)
    d = Driver(Machine(memory=FileMemory(tmp_path / "ram")), core_processes=True)
    try:
        pids = _worker_pids(d.npu)
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert d.boot(build_image(default_image(), dev_private_key())) == 0
        dst = d.m.buffer(64)
        seqnos = [
            d.enqueue(program(tensor(0, "INT8", dst, (64,)), isa.encode("FILL", dst=0, value=-5)), core=c)
            for c in (0, 1)
        ]
        d.wait_cq(2)
        assert sorted((c.seqno, c.status, c.core) for c in d.drain()) == [
            (seqnos[0], 0, 0),
            (seqnos[1], 0, 1),
        ]
        assert d.m.read(dst, 64).view("i1").tolist() == [-5] * 64
    finally:
        d.npu.close()
    assert all(_gone(p) for p in pids)


def test_a_worker_that_dies_fails_its_job_and_is_replaced() -> None:
    d = Driver(Machine(shared=True), core_processes=True)
    try:
        assert d.boot(build_image(default_image(), dev_private_key())) == 0
        sem = d.m.buffer(4)
        hung = d.enqueue(program(tensor(0, "INT32", sem, (1,)), isa.encode("WAIT", sem=0, value=1)))
        time.sleep(0.2)
        first = d.npu.cores[0].worker.pid
        os.kill(first, signal.SIGKILL)  # a crash in C, an OOM kill
        d.wait_cq(1)
        assert d.drain() == [Completion(hung, -errno.EIO, 0, 0)]
        assert "worker process died" in d.npu.last_result.error
        s = d.enqueue(NOP_JOB)  # the core starts a new worker for its next job
        d.wait_cq(1)
        assert d.drain() == [Completion(s, 0, 0, 2)]
        assert d.npu.cores[0].worker.pid != first and d.npu.cores[0].worker.starts == 2
    finally:
        d.npu.close()


def test_process_mode_needs_memory_a_child_can_map() -> None:
    import numpy as np

    bar2 = memoryview(np.zeros(hw.BAR2_SIZE, np.uint8))
    with pytest.raises(ValueError, match="FileMemory or MemfdMemory"):
        Npu(bar2, AnonymousMemory(RAM_SIZE), lambda v: None, core_processes=True)


def test_a_worker_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    create_ram_file(tmp_path / "ram", RAM_SIZE)
    memory = FileMemory(tmp_path / "ram")
    (tmp_path / "ram").unlink()  # the workers cannot map it: the device must not come up half-made
    with pytest.raises(CoreWorkerError, match=r"core \d: its worker exited"):
        Driver(Machine(memory=memory), core_processes=True)


def test_shared_abort_is_an_event() -> None:
    abort = SharedAbort()
    try:
        assert not abort.is_set() and abort.wait(0.01) is False
        abort.set()
        assert abort.is_set() and abort.wait() is True
        abort.clear()
        assert not abort.is_set() and abort.wait(0.01) is False
    finally:
        abort.close()


def test_a_killed_device_model_leaves_no_worker(tmp_path: Path) -> None:
    """SIGKILL of the device model (its fault injector's "kill") takes its workers with it."""
    cmd = [sys.executable, "-m", "device_model.qemu_server", "--socket", str(tmp_path / "s")]
    cmd += ["--ram", str(tmp_path / "ram"), "--ram-size", "16M", "--cores", "2", "--core-processes"]
    server = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith(READY_MARK)
        workers = _children(server.pid)
        assert len(workers) == 2
        for pid in workers:
            assert b"device_model.core_worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        server.kill()
        server.wait()
    assert all(_gone(pid) for pid in workers)


def test_the_cores_conformance_tests_pass_with_core_processes() -> None:
    """tests/conformance/test_cores.py on a shim whose device model runs its cores as processes."""
    env = dict(os.environ, VNPU_SHIM_CORE_PROCESSES="1")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance/test_cores.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout


def test_an_embedded_python_starts_workers_with_its_prefix_interpreter(monkeypatch) -> None:
    from device_model import core_worker

    monkeypatch.setattr(sys, "executable", "/usr/bin/a-c-application")  # libteflon.so in a C host
    python = Path(core_worker._interpreter())
    assert python.name.startswith("python") and python.parent == Path(sys.prefix) / "bin"
    monkeypatch.setattr(sys, "prefix", "/nonexistent")
    with pytest.raises(CoreWorkerError, match="no Python interpreter"):
        core_worker._interpreter()
