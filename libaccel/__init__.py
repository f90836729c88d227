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


def run_model(path, inputs=None, device="shim", **kwargs):  # noqa: ANN001, ANN201
    """libaccel.runtime.model.run_model: a .onnx or .tflite file on the NPU (imports onnx when called)."""
    from libaccel.runtime.model import run_model as run

    return run(path, inputs, device=device, **kwargs)


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
    "run_model",
]
