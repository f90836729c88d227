"""The command-stream check the kernel does before it queues a job.

Every instruction must decode (``uapi.isa.decode``: known opcode, right size,
reserved bits zero, slots in range, one END at the end), and every tensor an
instruction reads or writes must lie, whole, inside one BO the job lists in
that direction. A malformed stream is -ENOEXEC; an access outside the listed
BOs, or a write to a BO listed read-only, is -EACCES.
"""

from __future__ import annotations

import errno
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from uapi import isa
from uapi.bindings import DRM_VNPU_JOB_BO_READ, DRM_VNPU_JOB_BO_WRITE


class StreamRejected(Exception):
    """The stream is refused; ``errno`` is ENOEXEC or EACCES."""

    def __init__(self, err: int, message: str) -> None:
        self.errno = err
        super().__init__(message)


@dataclass(frozen=True)
class BoRange:
    """A listed BO as the checker sees it: [va, va + size) and the job's DRM_VNPU_JOB_BO_* flags."""

    va: int
    size: int
    flags: int

    def contains(self, start: int, end: int) -> bool:
        return self.va <= start and end <= self.va + self.size


def _find_bo(bos: Sequence[BoRange], start: int, end: int) -> BoRange | None:
    for bo in bos:
        if bo.contains(start, end):
            return bo
    return None


CHECK_CACHE_ENTRIES = 64  # accepted (stream, BO layout) pairs remembered: a model submits the same job

_accepted: OrderedDict[tuple[bytes, tuple[BoRange, ...]], list[isa.Instruction]] = OrderedDict()
_accepted_lock = threading.Lock()


def check_stream(stream: bytes, bos: Sequence[BoRange]) -> list[isa.Instruction]:
    """Decode and check ``stream`` against the job's BOs; return the instructions or raise StreamRejected.

    The check is a pure function of the stream's bytes and the listed BOs' ranges and flags, so an
    accepted pair is remembered (keyed by the full bytes, which the caller copied before the
    check) and the same job submitted again is not decoded again. Rejections are not cached.
    """
    key = (bytes(stream), tuple(bos))
    with _accepted_lock:
        hit = _accepted.get(key)
        if hit is not None:
            _accepted.move_to_end(key)
            return hit
    instructions = _check(stream, bos)
    with _accepted_lock:
        _accepted[key] = instructions
        while len(_accepted) > CHECK_CACHE_ENTRIES:
            _accepted.popitem(last=False)
    return instructions


def _check(stream: bytes, bos: Sequence[BoRange]) -> list[isa.Instruction]:
    try:
        instructions = isa.decode(stream)
    except isa.IsaError as e:
        raise StreamRejected(errno.ENOEXEC, f"malformed command stream: {e}") from None
    slots: dict[int, tuple[int, int]] = {}
    for ins in instructions:
        if ins.op == "TENSOR":
            try:
                slots[ins["slot"]] = isa.tensor_extent(ins.fields)
            except isa.IsaError as e:
                raise StreamRejected(errno.ENOEXEC, f"at byte {ins.offset}: {e}") from None
            continue
        flags = ins.fields.get("flags", 0)
        for f in ins.spec.operands:
            if f.when is not None and not flags & isa.SPEC.flags[f.when]:
                continue  # operand unused without its flag (the decoder checked it is 0)
            slot = ins[f.name]
            if slot not in slots:
                raise StreamRejected(
                    errno.ENOEXEC,
                    f"at byte {ins.offset}: {ins.op}.{f.name} uses slot {slot} before any TENSOR",
                )
            start, end = slots[slot]
            write = f.type == "out"
            bo = _find_bo(bos, start, end)
            where = f"at byte {ins.offset}: {ins.op}.{f.name} (slot {slot}, VA [{start:#x}, {end:#x}))"
            if bo is None:
                raise StreamRejected(errno.EACCES, f"{where} is not inside any BO the job lists")
            needed = DRM_VNPU_JOB_BO_WRITE if write else DRM_VNPU_JOB_BO_READ
            if not bo.flags & needed:
                raise StreamRejected(
                    errno.EACCES,
                    f"{where} {'writes' if write else 'reads'} a BO the job lists without "
                    f"{'DRM_VNPU_JOB_BO_WRITE' if write else 'DRM_VNPU_JOB_BO_READ'}",
                )
    return instructions
