"""libaccel: the userspace driver of the vnpu NPU.

Open a device, create buffer objects, submit command streams, wait::

    from libaccel import Device
    with Device.open() as dev:          # the kernel device, or Device.open("shim")
        bo = dev.create_bo(4096)
        ...

Both backends (the kernel's /dev/accel/accelN and the in-process shim) are
driven through the same ioctl-level interface, so everything above it is
shared. docs/uapi.md describes the ABI underneath.
"""

from libaccel.bo import BufferObject
from libaccel.device import Device, DeviceParams
from libaccel.errors import AccelError, JobFault
from libaccel.job import Job, JobBo, deadline_after, monotonic_ns

__all__ = [
    "AccelError",
    "BufferObject",
    "Device",
    "DeviceParams",
    "Job",
    "JobBo",
    "JobFault",
    "deadline_after",
    "monotonic_ns",
]
