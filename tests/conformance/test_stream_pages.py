"""Command streams wherever they sit in the command BO: in one page, across pages, pages long.

The kernel checks a stream straight from the command BO's pages (in place
when it fits in one page, else copied page by page), so these place streams
at every kind of offset and put the instruction that matters on a later page.
"""

from __future__ import annotations

import errno

import numpy as np
import pytest

from libaccel import Device, Job, JobBo
from libaccel.errors import AccessDenied
from uapi.isa import encode

PAGE = 4096
NOP = encode("NOP")


def copy_tail(src_va: int, dst_va: int, n: int) -> bytes:
    """TENSOR src, TENSOR dst, COPY, END."""
    return (
        encode("TENSOR", slot=0, dtype=0, va=src_va, n=1, h=1, w=1, c=n, stride_c=1)
        + encode("TENSOR", slot=1, dtype=0, va=dst_va, n=1, h=1, w=1, c=n, stride_c=1)
        + encode("COPY", src=0, dst=1)
        + encode("END")
    )


def run_at(device: Device, stream: bytes, offset: int, bos: list[JobBo]) -> None:
    cmd = device.create_bo(offset + len(stream) + PAGE, read_only=True)
    cmd.write(stream, offset)
    fence = device.create_syncobj()
    device.submit(Job(cmd, len(stream), bos, cmd_offset=offset, out_syncobj=fence))
    device.wait_syncobjs([fence], timeout=60)


@pytest.mark.parametrize(
    "offset, pad",
    [
        (0, 0),  # the first page
        (PAGE + 64, 0),  # inside the second page
        (PAGE - 40, 0),  # straddles the first page boundary
        (8, 2 * PAGE // 8),  # NOPs push the COPY two pages on
        (PAGE - 8, PAGE // 8 + 3),  # starts at a page's last instruction, ends two pages on
    ],
)
def test_stream_runs_wherever_it_sits(device: Device, offset: int, pad: int) -> None:
    src, dst = device.create_bo(PAGE), device.create_bo(PAGE)
    src.array(np.int8, 64)[:] = np.arange(64)
    stream = NOP * pad + copy_tail(src.va, dst.va, 64)
    run_at(device, stream, offset, [JobBo(src), JobBo(dst, read=False, write=True)])
    assert (dst.array(np.int8, 64) == np.arange(64)).all()


@pytest.mark.parametrize("offset, pad", [(PAGE - 40, 0), (8, 2 * PAGE // 8), (PAGE - 8, PAGE // 8 + 3)])
def test_unlisted_write_on_a_later_page_is_refused(device: Device, offset: int, pad: int) -> None:
    src, dst, unlisted = device.create_bo(PAGE), device.create_bo(PAGE), device.create_bo(PAGE)
    stream = NOP * pad + copy_tail(src.va, unlisted.va, 64)
    with pytest.raises(AccessDenied) as info:
        run_at(device, stream, offset, [JobBo(src), JobBo(dst, read=False, write=True)])
    assert info.value.errno == errno.EACCES
    assert not unlisted.array(np.int8, 64).any()
