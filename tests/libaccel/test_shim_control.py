"""The shim's control commands (ShimDevice.control): each waits for its acknowledgment, woken by
the control interrupt, whichever way the device acknowledges it."""

from __future__ import annotations

import errno
import threading

from libaccel.backends.shim import shared_device
from uapi import hw_layout as hw


def test_a_nop_acknowledged_inside_the_doorbell_call_returns() -> None:
    """The device acknowledges CMD_NOP, and raises the control interrupt, inside the doorbell call
    itself: the caller must not hold what that interrupt needs."""
    device = shared_device()
    acks = device.r32(hw.REG_CMD_ACK)
    statuses: list[int] = []
    # In a thread of its own: a deadlock fails the test instead of hanging it.
    caller = threading.Thread(target=lambda: statuses.extend(device.control(hw.CMD_NOP) for _ in range(3)))
    caller.daemon = True
    caller.start()
    caller.join(10)
    assert not caller.is_alive(), "a NOP control command never returned"
    assert statuses == [0, 0, 0]
    assert device.r32(hw.REG_CMD_ACK) == (acks + 3) & 0xFFFFFFFF


def test_commands_from_several_threads_each_get_their_own_status() -> None:
    """Commands acknowledged by the device's control thread (a bad CMD_POWER state: -EINVAL) and
    in the doorbell call (NOP), from four threads at once: one at a time, each its own status."""
    device = shared_device()
    statuses: list[tuple[int, int]] = []
    lock = threading.Lock()

    def issue(cmd: int, arg: int) -> None:
        for _ in range(5):
            status = device.control(cmd, arg)
            with lock:
                statuses.append((cmd, status))

    threads = [threading.Thread(target=issue, args=c) for c in [(hw.CMD_NOP, 0), (hw.CMD_POWER, 7)] * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert sorted(statuses) == sorted([(hw.CMD_NOP, 0)] * 10 + [(hw.CMD_POWER, -errno.EINVAL)] * 10)
