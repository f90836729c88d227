"""The shim backend: the vnpu kernel driver's uapi semantics, in-process.

Like Mesa's drm-shim, this plays the kernel's part on top of the real device
model (``device_model.npu.Npu``), so libaccel, the compiler and the
conformance suite run without a VM. It does what vnpu.ko does:

* one :class:`ShimDevice` per process (the "PCI device"): system memory
  (``AnonymousMemory``), BAR2 (a bytearray), the Npu; firmware boot through
  CMD_BOOT when the device is first opened;
* one :class:`ShimBackend` per open "file": GEM handle table, syncobj table,
  a private device address space with its own page tables in system memory,
  BO VAs from DRM_VNPU_VA_START;
* full argument checking with the errnos the header documents, and the
  command-stream check (:mod:`libaccel.backends.stream_check`);
* submission through the SQ ring in BAR2 and a doorbell kick, completion
  through the CQ ring and the Npu's interrupt, a job timeout that resets the
  hung job's core (CMD_RESET) and fails the job with -ETIMEDOUT;
* the scheduling of vnpu.ko's per-core drm_sched schedulers: a job waits for
  its in-syncobjs, for earlier jobs that write a BO it uses (or use a BO it
  writes) and for its file's earlier jobs; a file stays on one core while it
  has a job on the device, and an idle file gets the least loaded core. The
  device's core count is ``VNPU_SHIM_CORES`` (default: the device model's);
  ``VNPU_SHIM_CORE_PROCESSES=1`` runs each core's jobs in a worker process
  (``device_model.core_worker``) instead of a thread.

Threads mirror the real system: the doorbell is ``Npu.kick`` (the core threads
wait on it, as on QEMU's eventfd), and an interrupt thread handles the Npu's
``raise_irq`` (as the kernel's IRQ handler does) and runs the job watchdog.
One shortcut: a lone job for an idle core, with no WAIT, runs in the
submitting thread under the core's lock (``Npu.run_here``), so the round trip
wakes no thread. Where the shim and the
kernel differ, the kernel is right.

The device side (rings, schedulers, watchdog, reset) is :mod:`.device`; the files and their ioctl
handlers are :mod:`.file`.
"""

from libaccel.backends.shim.device import ShimDevice, shared_device
from libaccel.backends.shim.file import ShimBackend, copy_from_user, copy_to_user

__all__ = ["ShimBackend", "ShimDevice", "copy_from_user", "copy_to_user", "shared_device"]
