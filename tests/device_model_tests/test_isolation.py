"""The device MMU isolates address spaces by itself.

vnpu.ko and the shim check every stream at SUBMIT, and no build of either can skip that check, so
a job never reaches the MMU with an access outside its BOs. These tests feed the device streams
nobody checked, each in an address space of its own (one per file, as vnpu.ko and the shim give),
to show that the page tables alone hold: a job reaches what its own tables map, nothing else.
"""

from __future__ import annotations

import errno

import numpy as np

from firmware_tools.image import default_image, dev_private_key
from uapi import isa
from uapi.firmware_format import build_image

from .helpers import program, tensor
from .test_npu import Driver, drv  # noqa: F401 (drv is the fixture)

SECRET = 0x5A
PAGE = 4096


def _boot(d: Driver) -> None:
    assert d.boot(build_image(default_image(), dev_private_key())) == 0


def _copy(src: int, dst: int, count: int) -> bytes:
    return program(
        tensor(0, "INT8", src, (count,)), tensor(1, "INT8", dst, (count,)), isa.encode("COPY", src=0, dst=1)
    )


def test_a_job_reaches_only_its_own_address_space(drv: Driver) -> None:  # noqa: F811
    _boot(drv)
    secret = drv.m.buffer(PAGE, bytes([SECRET]) * PAGE)  # file A's
    other = drv.m.new_space()  # file B's
    out = drv.m.buffer(PAGE, space=other)
    seqno = drv.enqueue(_copy(secret, out, PAGE), space=other)
    drv.wait_cq(1)
    assert [(c.seqno, c.status, c.fault_va) for c in drv.drain()] == [(seqno, -errno.EFAULT, secret)]
    assert not drv.m.read(out, PAGE, other).any()
    # The same job in A's space reads the secret: the VA is fine, only B's tables lack it.
    mine = drv.m.buffer(PAGE)
    seqno = drv.enqueue(_copy(secret, mine, PAGE))
    drv.wait_cq(1)
    assert [c.status for c in drv.drain()] == [0]
    assert (drv.m.read(mine, PAGE) == SECRET).all()


def test_a_read_only_page_is_never_written(drv: Driver) -> None:  # noqa: F811
    _boot(drv)
    weights = drv.m.buffer(PAGE, bytes([3]) * PAGE, writable=False)
    seqno = drv.enqueue(program(tensor(0, "INT8", weights, (64,)), isa.encode("FILL", dst=0, value=9)))
    drv.wait_cq(1)
    assert [(c.seqno, c.status, c.fault_va) for c in drv.drain()] == [(seqno, -errno.EFAULT, weights)]
    assert (drv.m.read(weights, PAGE) == 3).all()


def test_the_page_after_a_buffer_faults(drv: Driver) -> None:  # noqa: F811
    """Each buffer is followed by an unmapped page (vnpu.ko and the shim leave one after every BO): an
    access that runs past the buffer's end faults at the first byte past it."""
    _boot(drv)
    src = drv.m.buffer(2 * PAGE, np.arange(2 * PAGE, dtype=np.uint8).astype(np.int8))
    dst = drv.m.buffer(PAGE)
    seqno = drv.enqueue(_copy(src, dst, PAGE + 16))
    drv.wait_cq(1)
    assert [(c.seqno, c.status, c.fault_va) for c in drv.drain()] == [(seqno, -errno.EFAULT, dst + PAGE)]
