"""PartitionRunner: a compiled partition loaded on a device, run once per invoke."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from libaccel.backends import Backend
from libaccel.bo import BufferObject, JobStatus
from libaccel.compiler.compiled import CompiledPartition, IoBinding, WeightsFile
from libaccel.compiler.relocation import Region, relocate
from libaccel.device import Device
from libaccel.errors import Interrupted
from libaccel.job import Job, JobBo, deadline_after
from uapi.bindings import IOCTLS, ffi
from vnpu_common import probe

_SUBMIT = IOCTLS["DRM_IOCTL_VNPU_SUBMIT"]
_BO_WAIT = IOCTLS["DRM_IOCTL_VNPU_BO_WAIT"]


def _restarted(backend: Backend, request: int, arg: object) -> None:
    """The ioctl, made again when a signal interrupted it (libdrm's rule, and libteflon.so's C:
    SUBMIT queues nothing before it can be interrupted and BO_WAIT's deadline is absolute). Between
    the tries Python runs the signal's handler, which may raise (KeyboardInterrupt)."""
    while True:
        try:
            backend.ioctl(request, arg)
            return
        except Interrupted:
            continue


def _upload_weights(device: Device, weights: bytes | bytearray | memoryview | WeightsFile) -> BufferObject:
    """The device-read-only weights BO, filled from memory or straight from the cache file."""
    if not isinstance(weights, WeightsFile):
        return device.create_bo_with(weights or b"\0", read_only=True)
    bo = device.create_bo(max(len(weights), 1), read_only=True)
    try:
        if len(weights):
            weights.readinto(bo.map()[: len(weights)])
    except BaseException:
        bo.close()
        raise
    finally:
        weights.close()
    return bo


class PartitionRunner:
    """Loads ``compiled`` on ``device`` (weights uploaded once) and runs it: one job per :meth:`run`.

    Three BOs: weights (device read-only), the activation arena, and the
    command stream with the BOs' VAs patched in. ``input_view``/``output_view``
    are numpy views of the arena, so a caller can fill inputs and read outputs
    in place (the delegate copies TFLite's buffers straight in and out).
    Close it (or use it as a context manager) to free the BOs.
    """

    def __init__(self, device: Device, compiled: CompiledPartition, timeout: float = 30.0) -> None:
        if device.params.isa_version != compiled.isa_version:
            raise ValueError(
                f"partition compiled for ISA {compiled.isa_version:#x}, "
                f"the device has {device.params.isa_version:#x}"
            )
        self.device = device
        # Kept for its bindings and stats; the weights (MBs) live in their BO once uploaded, so the
        # runner does not hold the host copy.
        self.compiled = dataclasses.replace(compiled, weights=b"")
        self.timeout = timeout
        self._bos: list[BufferObject] = []
        self._views: dict[int, np.ndarray] = {}  # by id() of the IoBinding in _inputs/_outputs
        try:
            self.weights = self._bo(_upload_weights(device, compiled.weights))
            self.arena = self._bo(device.create_bo(compiled.arena_size))
            bases = {Region.WEIGHTS: self.weights.va, Region.ARENA: self.arena.va}
            stream = relocate(compiled.stream, compiled.relocations, bases)
            self.cmd = self._bo(device.create_bo_with(stream, read_only=True))
        except BaseException:
            self.close()
            raise
        self._job = Job(
            self.cmd,
            len(stream),
            [JobBo(self.cmd), JobBo(self.weights), JobBo(self.arena, read=True, write=True)],
        )
        self._inputs = {b.index: b for b in compiled.inputs}
        self._outputs = {b.index: b for b in compiled.outputs}
        self._wait = ffi.new("struct drm_vnpu_bo_wait *")
        self._wait.handle = self.arena.handle

    def _bo(self, bo: BufferObject) -> BufferObject:
        self._bos.append(bo)
        return bo

    def _view(self, b: IoBinding) -> np.ndarray:
        # Made once: the arena's mapping lives as long as the runner, and a fresh view per input
        # and output cost every invoke a few microseconds each (dtype, size check, reshape).
        view = self._views.get(id(b))
        if view is None:
            view = self._views[id(b)] = self.arena.array(b.dtype, b.shape, b.offset)
        return view

    def input_view(self, index: int) -> np.ndarray:
        """The arena bytes of partition input ``index`` as a writable array."""
        return self._view(self._inputs[index])

    def output_view(self, index: int) -> np.ndarray:
        """The arena bytes of partition output ``index`` (valid after :meth:`submit_and_wait`)."""
        return self._view(self._outputs[index])

    def io_span(self, index: int) -> tuple[int, int]:
        """(arena offset, bytes) of partition input or output ``index``."""
        b = self._inputs.get(index) or self._outputs[index]
        return b.offset, b.nbytes

    @property
    def submit_arg(self) -> object:
        """The job's struct drm_vnpu_submit, reused by every :meth:`submit_and_wait`."""
        return self._job.submit_args.submit

    @property
    def wait_arg(self) -> object:
        """The struct drm_vnpu_bo_wait on the arena that :meth:`submit_and_wait` reuses."""
        return self._wait

    def submit_and_wait(self) -> None:
        """Run the job on what the input views hold; raises JobFault if the device fails it.

        One caller at a time: the SUBMIT and BO_WAIT arguments are built once and reused (the
        job's structs by :class:`~libaccel.job.Job`, the wait's here), so an invoke is two ioctls
        and no allocation."""
        probe.mark("delegate.submit")
        backend = self.device.backend
        _restarted(backend, _SUBMIT, self._job.submit_args.submit)
        probe.mark("libaccel.wait")
        wait = self._wait
        wait.timeout_ns = deadline_after(self.timeout)
        wait.job_status = 0
        wait.fault_va = 0
        _restarted(backend, _BO_WAIT, wait)
        probe.mark("delegate.waited")
        if wait.job_status:
            JobStatus(wait.job_status, wait.fault_va).raise_for_status()

    def run(self, inputs: Mapping[int, np.ndarray], copy: bool = True) -> dict[int, np.ndarray]:
        """Copy ``inputs`` (tensor index -> array) in, run, return the outputs (views if not ``copy``)."""
        missing = set(self._inputs) - set(inputs)
        if missing:
            raise ValueError(f"missing partition inputs {sorted(missing)}")
        for index, value in inputs.items():
            if index not in self._inputs:
                raise ValueError(f"tensor {index} is not an input of this partition")
            b = self._inputs[index]
            arr = np.asarray(value)
            if arr.dtype != np.dtype(b.dtype) or arr.size != int(np.prod(b.shape, dtype=np.int64)):
                raise ValueError(
                    f"input {index}: got {arr.dtype} {list(arr.shape)}, expected {b.dtype} {list(b.shape)}"
                )
            self._view(b)[...] = arr.reshape(b.shape)
        self.submit_and_wait()
        return {i: (self._view(b).copy() if copy else self._view(b)) for i, b in self._outputs.items()}

    def close(self) -> None:
        self._views.clear()
        for bo in reversed(self._bos):
            bo.close()
        self._bos.clear()

    def __enter__(self) -> PartitionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
