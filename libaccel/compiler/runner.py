"""PartitionRunner: a compiled partition loaded on a device, run once per invoke."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from libaccel.bo import BufferObject
from libaccel.compiler.compiled import CompiledPartition, IoBinding, WeightsFile
from libaccel.compiler.relocation import Region, relocate
from libaccel.device import Device
from libaccel.job import Job, JobBo, PreparedSubmit
from vnpu_common import probe


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
        # The invoke: the job's SUBMIT and a BO_WAIT on the arena (replayed on the shim).
        self._prepared = device.backend.prepare_submit(self._job, self.arena.handle, timeout)

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
        return self._prepared.submit_arg

    @property
    def wait_arg(self) -> object:
        """The struct drm_vnpu_bo_wait on the arena that :meth:`submit_and_wait` reuses."""
        return self._prepared.wait_arg

    @property
    def prepared(self) -> PreparedSubmit:
        """The job's prepared SUBMIT and BO_WAIT (how its runs went: full submits, replays)."""
        return self._prepared

    def submit_and_wait(self) -> None:
        """Run the job on what the input views hold; raises JobFault if the device fails it.

        One caller at a time: the SUBMIT and BO_WAIT arguments are built once and reused
        (:class:`~libaccel.job.PreparedSubmit`), so an invoke is two ioctls and no allocation, or
        on the shim a replay of the job it validated."""
        probe.mark("delegate.submit")
        self._prepared.run()
        probe.mark("delegate.waited")

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
        prepared = getattr(self, "_prepared", None)
        if prepared is not None:
            prepared.close()
        self._views.clear()
        for bo in reversed(self._bos):
            bo.close()
        self._bos.clear()

    def __enter__(self) -> PartitionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
