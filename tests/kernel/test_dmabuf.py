"""dma-buf import and export: buffers of other exporters (the system dma-heap, udmabuf) and of another
vnpu file used by jobs in place, with no copy; what cannot be imported says why."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from dmabuf_sources import DMA_HEAP_SYSTEM, UDMABUF, heap_buffer, udmabuf_buffer
from kernel_helpers import REPO, copy_stream, debugfs_counters, fill_stream

PAGE = 4096
N = 3 * PAGE  # several pages: the import's page-table mapping, not just its first page


def _copy(dev, src, dst, count: int) -> None:
    from libaccel import Job, JobBo

    s = copy_stream(src.va, dst.va, count)
    dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(src), JobBo(dst, write=True)]))
    assert dst.wait(timeout=30).status == 0


@pytest.mark.skipif(not DMA_HEAP_SYSTEM.exists(), reason="no /dev/dma_heap/system in this kernel")
def test_dma_heap_buffer_is_a_job_input(dev) -> None:
    buf = heap_buffer(N)
    try:
        pattern = (np.arange(N) * 7 % 251).astype(np.uint8)
        buf.cpu_access(start=True)
        buf.view[:] = pattern.tobytes()
        buf.cpu_access(start=False)
        src = dev.import_dmabuf(buf.fd)
        assert src.size == N and src.va and not src.read_only
        dst = dev.create_bo(N)
        _copy(dev, src, dst, N)
        assert (dst.array(np.uint8, N) == pattern).all()
    finally:
        buf.close()


@pytest.mark.skipif(not UDMABUF.exists(), reason="no /dev/udmabuf in this kernel")
def test_udmabuf_is_a_job_input_and_output(dev) -> None:
    a, b = udmabuf_buffer(N), udmabuf_buffer(N)
    try:
        pattern = (np.arange(N) % 253).astype(np.uint8)
        a.view[:] = pattern.tobytes()
        src, dst = dev.import_dmabuf(a.fd), dev.import_dmabuf(b.fd)
        assert src.va != dst.va
        _copy(dev, src, dst, N)  # memfd -> memfd through the NPU, each in place
        assert np.frombuffer(b.view, np.uint8).tolist() == pattern.tolist()
        # The accel fd's own mapping of an import (BO_INFO's mmap offset) sees the same pages.
        assert (dst.array(np.uint8, N) == pattern).all()
    finally:
        a.close()
        b.close()


def test_a_vnpu_bo_exported_to_another_process_is_used_by_both(dev) -> None:
    """Zero copy across processes: the exporter fills the first half of a BO; a second process imports
    the dma-buf and its job copies that half into the second half, in place; the exporter's own job then
    reads what the other process's job wrote."""
    bo = dev.create_bo(2 * PAGE)
    bo.array(np.int8, PAGE)[:] = np.arange(PAGE) % 100
    fd = bo.export_dmabuf()
    child = textwrap.dedent(
        f"""
        import numpy as np
        from kernel_helpers import copy_stream
        from libaccel import Device, Job, JobBo
        with Device.open("kernel") as d:
            imp = d.import_dmabuf({fd})
            assert imp.size == {2 * PAGE}
            s = copy_stream(imp.va, imp.va + {PAGE}, {PAGE})  # first half -> second half, in place
            d.submit(Job(d.create_bo_with(s, read_only=True), len(s), [JobBo(imp, write=True)]))
            assert imp.wait(timeout=30).status == 0
            print("imported at", hex(imp.va))
        """
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests' / 'kernel'}:{REPO}"}
    r = subprocess.run([sys.executable, "-c", child], pass_fds=[fd], env=env, capture_output=True, text=True)
    os.close(fd)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "imported at" in r.stdout
    assert (bo.array(np.int8, PAGE, offset=PAGE) == np.arange(PAGE) % 100).all()
    # And the exporter's own jobs still use it.
    from libaccel import Job, JobBo

    out = dev.create_bo(PAGE)

    s = copy_stream(bo.va + PAGE, out.va, PAGE)
    dev.submit(Job(dev.create_bo_with(s, read_only=True), len(s), [JobBo(bo), JobBo(out, write=True)]))
    assert out.wait(timeout=30).status == 0
    assert (out.array(np.int8, PAGE) == np.arange(PAGE) % 100).all()


def test_an_import_follows_the_rules_of_the_files_own_bos(dev) -> None:
    """Isolation as for the file's own BOs: a stream that reaches past the import is refused at SUBMIT;
    the exporter's BO is untouched."""
    from libaccel import Device, Job, JobBo
    from libaccel.errors import AccelError

    bo = dev.create_bo(PAGE)
    fd = bo.export_dmabuf()
    try:
        with Device.open("kernel") as other:
            imp = other.import_dmabuf(fd)
            # Importing the same fd again in the same file gives the same handle (DRM's per-file cache).
            assert other.import_dmabuf(fd).handle == imp.handle
            s = fill_stream(imp.va, PAGE + 16, 1)  # 16 bytes past the import's end
            cmd = other.create_bo_with(s, read_only=True)
            with pytest.raises(AccelError) as exc:
                other.submit(Job(cmd, len(s), [JobBo(imp, write=True)]))
            assert exc.value.errno == errno.EACCES
    finally:
        os.close(fd)


def test_what_cannot_be_imported_says_why(dev) -> None:
    from libaccel.errors import AccelError

    r, w = os.pipe()
    try:
        with pytest.raises(AccelError) as exc:
            dev.import_dmabuf(r)  # not a dma-buf
        assert exc.value.errno == errno.EINVAL
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(AccelError) as exc:
        dev.import_dmabuf(1 << 20)  # no such fd
    assert exc.value.errno == errno.EBADF


def test_imports_leave_nothing_behind(dev) -> None:
    before = debugfs_counters()
    if not before:
        pytest.skip("debugfs is not mounted")
    bo = dev.create_bo(PAGE)
    for _ in range(3):
        fd = bo.export_dmabuf()
        from libaccel import Device

        with Device.open("kernel") as other:
            imp = other.import_dmabuf(fd)
            assert imp.va
        os.close(fd)
    bo.close()
    after = debugfs_counters()
    assert after["bos"] == before["bos"] and after["bo_bytes"] == before["bo_bytes"]


def test_accel_state_shows_imported_bos(dev, capsys: pytest.CaptureFixture[str]) -> None:
    """The importing file's row in `accel state` counts its imported BO, the counters the device's."""
    import json

    from libaccel import Device
    from libaccel.tools import cli

    if not debugfs_counters():
        pytest.skip("debugfs is not mounted")
    bo = dev.create_bo(PAGE)
    fd = bo.export_dmabuf()
    try:
        with Device.open("kernel") as other:
            other.import_dmabuf(fd)
            assert cli.main(["state", "--json"]) == 0
            state = json.loads(capsys.readouterr().out)
            if isinstance(state, list):
                state = state[0]
            mine = [row for row in state["files"] if row["pid"] == os.getpid()]
            assert sorted(row["imported"] for row in mine) == [0, 1], mine
            assert state["counters"]["bos_imported"] >= 1
            assert cli.main(["state"]) == 0
            assert "imported" in capsys.readouterr().out
    finally:
        os.close(fd)


def test_an_import_cannot_hold_a_command_stream(dev) -> None:
    """SUBMIT copies a stream from the command BO's own pages; an import has none: EINVAL."""
    from libaccel import Device, Job, JobBo
    from libaccel.errors import InvalidArgument

    fd = dev.create_bo(PAGE).export_dmabuf()
    try:
        with Device.open("kernel") as other:
            cmd = other.import_dmabuf(fd)
            dst = other.create_bo(PAGE)
            stream = fill_stream(dst.va, PAGE, 5)
            cmd.write(stream)  # the import's CPU mapping (dma_buf_mmap) reaches the exporter's pages
            with pytest.raises(InvalidArgument):
                other.submit(Job(cmd, len(stream), [JobBo(dst, write=True)]))
    finally:
        os.close(fd)
