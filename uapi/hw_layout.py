"""The vnpu hardware interface: what the driver and the device share.

This module is the source of the register, ring, page-table and firmware
layouts, beside the ABI (``drm/vnpu_accel.h``) and the ISA (``vnpu_isa.toml``):
the device model, the firmware tools and libaccel's shim read it, and
``tools/generate_headers.py`` writes the kernel driver's hardware header
(``vnpu_hw.h``) from it. docs/hardware.md explains it.

The PCI device is QEMU's ivshmem-doorbell (1af4:1110). Its BAR0 holds only
ivshmem's fixed registers (IntrMask 0, IntrStatus 4, IVPosition 8,
Doorbell 12). The NPU's own registers and rings live in BAR2, the shared
memory, at the offsets below. The driver kicks the device by writing
``(device_peer << 16) | vector`` to the Doorbell; the device interrupts the
driver with MSI-X vector ``IRQ_*``. Device DMA goes to guest-physical
addresses (there is no IOMMU in between).

All multi-byte values are little-endian.
"""

# --- BAR2 size and identification ------------------------------------------
BAR2_SIZE = 1 << 20  # the shared-memory size the device model creates
MAGIC = 0x55504E56  # "VNPU" at REG_MAGIC once the device model is up
DEVICE_ID = 0x0001
DEVICE_REVISION = 1
PCI_VENDOR_ID = 0x1AF4
PCI_DEVICE_ID = 0x1110

# --- Identification and status block: the device writes, the driver reads ---
REG_MAGIC = 0x000  # u32 MAGIC
REG_DEVICE_ID = 0x004  # u32
REG_REVISION = 0x008  # u32
REG_ISA_VERSION = 0x00C  # u32 (major << 16) | minor
REG_FW_VERSION = 0x010  # u32, 0 until firmware has booted
REG_STATUS = 0x014  # u32 STATUS_* bits
REG_RESET_COUNT = 0x018  # u32, incremented when a reset completes
REG_DEVICE_PEER = 0x01C  # u32 ivshmem peer id to ring
REG_VA_BITS = 0x020  # u32, device VA space is 1 << VA_BITS bytes
REG_CAPS = 0x024  # u32 capability bits (uapi DRM_VNPU_CAP_*)
REG_JOBS_DONE = 0x028  # u32 jobs completed since power-on
REG_IRQ_COUNT = 0x02C  # u32 IRQ instructions executed
REG_IRQ_VALUE = 0x030  # u32 value of the last IRQ instruction
REG_FW_REJECT = 0x034  # u32 FW_REJECT_* reason of the last failed BOOT, 0 after a good one
REG_FW_BUILD_ID = 0x038  # u64 build id of the booted firmware (digest bytes 0..7, big-endian), else 0
REG_ABORT_CYCLES = 0x040  # u32 instructions the job the last RESET aborted had started, 0 if none ran
REG_NUM_CORES = 0x044  # u32 NPU cores, 1..MAX_CORES: each runs its own jobs, in its own order
REG_POWER_STATE = 0x048  # u32 POWER_ON or POWER_OFF
REG_POWER_UPS = 0x04C  # u32 power-ups since the device started (its first power-on counts)
REG_POWERED_US = 0x050  # u64 microseconds powered on, as of the last completion or control command

# The device's cores share one submission and one completion queue: a submission
# names its core (SQE_CORE), a completion says which core ran it (CQE_CORE).
MAX_CORES = 8

STATUS_READY = 1 << 0  # firmware booted, the queue is served
STATUS_FW_ERROR = 1 << 1  # the last BOOT failed: the firmware was rejected (REG_FW_REJECT says why)

# Why the boot ROM rejected an image (REG_FW_REJECT), in the order it checks.
FW_REJECT_NONE = 0
FW_REJECT_SIZE = 1  # shorter than header + signature, or larger than FW_MAX_SIZE
FW_REJECT_MAGIC = 2
FW_REJECT_VERSION = 3  # format version other than FW_FORMAT_VERSION
FW_REJECT_HEADER = 4  # header size other than FW_HEADER_SIZE, or a reserved byte not zero
FW_REJECT_LENGTH = 5  # the header's payload size does not match the image size
FW_REJECT_DIGEST = 6  # SHA-256 of header and payload differs from the header's
FW_REJECT_SIGNATURE = 7  # Ed25519 signature missing or not made by the device's key
FW_REJECT_ISA = 8  # the firmware's ISA major version is not the device's
FW_REJECT_PAYLOAD = 9  # a malformed, missing or repeated section
FW_REJECT_UNREADABLE = 10  # the image's address is not in system memory
FW_REJECT_NAMES = {
    FW_REJECT_NONE: "none",
    FW_REJECT_SIZE: "bad size",
    FW_REJECT_MAGIC: "bad magic",
    FW_REJECT_VERSION: "bad format version",
    FW_REJECT_HEADER: "bad header",
    FW_REJECT_LENGTH: "bad length",
    FW_REJECT_DIGEST: "bad digest",
    FW_REJECT_SIGNATURE: "bad signature",
    FW_REJECT_ISA: "wrong ISA",
    FW_REJECT_PAYLOAD: "bad payload",
    FW_REJECT_UNREADABLE: "unreadable",
}

# --- Control block: the driver writes a command, the device acknowledges ---
# The driver writes ARG0/ARG1, then CMD, then increments CMD_SEQ, then rings
# VEC_CONTROL. The device performs it, writes CMD_STATUS, sets CMD_ACK to
# CMD_SEQ and raises IRQ_CONTROL.
REG_CMD = 0x100  # u32 CMD_*
REG_CMD_SEQ = 0x104  # u32
REG_CMD_ACK = 0x108  # u32
REG_CMD_STATUS = 0x10C  # s32, 0 or a negative errno
REG_CMD_ARG0 = 0x110  # u64
REG_CMD_ARG1 = 0x118  # u64

CMD_BOOT = 1  # ARG0 = guest-physical address of the firmware image, ARG1 = its size
CMD_RESET = 2  # ARG0 = mask of cores (0: all): abort their running jobs, drop their queued ones
CMD_NOP = 3  # acknowledged at once, from the doorbell's own thread: the bare round-trip floor
CMD_POWER = 4  # ARG0 = POWER_ON or POWER_OFF (below)

# --- Power --------------------------------------------------------------------
# The device starts powered on. The identification block, the control block
# and the power registers are always on; the cores, the queues and the
# firmware are not. POWER_OFF needs every core idle and both queues empty
# (else -EBUSY) and loses the volatile state: the firmware (STATUS,
# FW_VERSION and FW_BUILD_ID read 0; jobs fail with -EIO until a BOOT) and
# the queue positions: POWER_ON resets SQ_HEAD, SQ_TAIL, CQ_HEAD, CQ_TAIL and
# JOBS_DONE to 0. (The device model's caches, checked against memory at every
# use, are kept for a BOOT with the same firmware limits.) Powered off,
# the device ignores queue doorbells and a BOOT fails with -EPERM. Powering
# on or off what already is succeeds and changes nothing.
POWER_OFF = 0
POWER_ON = 1
# The drivers' (vnpu.ko's and the shim's) default runtime-PM policy: power the
# device off once it has been idle this long.
AUTOSUSPEND_DELAY_MS = 100

# --- Submission queue: the driver produces, the device consumes ------------
# HEAD and TAIL are free-running u32 counters; entry i is at
# SQ_BASE + (i % SQ_ENTRIES) * SQ_ENTRY_SIZE. The driver fills an entry,
# then advances SQ_TAIL, then rings the entry's core's doorbell (VEC_QUEUE +
# core). The device moves every entry to its core's own queue (SQ_HEAD
# advances then); each core runs its entries one at a time, in queue order;
# different cores run at once.
SQ_HEAD = 0x1000  # u32, written by the device
SQ_TAIL = 0x1004  # u32, written by the driver
SQ_BASE = 0x1100
SQ_ENTRIES = 64
SQ_ENTRY_SIZE = 64
SQE_SEQNO = 0x00  # u64 driver's job id, echoed in the completion
SQE_PT_ROOT = 0x08  # u64 guest-physical address of the job's L1 page table
SQE_CMD_VA = 0x10  # u64 device VA of the command stream
SQE_CMD_SIZE = 0x18  # u32 bytes
SQE_FLAGS = 0x1C  # u32, 0
SQE_CONTEXT = 0x20  # u32 the submitting file's id (for debug)
SQE_CORE = 0x24  # u32 the core that runs the job, below REG_NUM_CORES (else the job fails with -EIO)

# --- Completion queue: the device produces, the driver consumes ------------
# The device writes an entry, advances CQ_TAIL, then raises IRQ_COMPLETION.
# Interrupts coalesce: the driver drains every entry up to CQ_TAIL.
CQ_HEAD = 0x3000  # u32, written by the driver (the SQ entries end at 0x2100)
CQ_TAIL = 0x3004  # u32, written by the device
CQ_BASE = 0x3100
CQ_ENTRIES = 64
CQ_ENTRY_SIZE = 32
CQE_SEQNO = 0x00  # u64
CQE_STATUS = 0x08  # s32: 0, -EFAULT (MMU fault), -EIO (bad instruction/operand)
CQE_CORE = 0x0C  # u32 the core that ran the job (its SQE_CORE)
CQE_FAULT_VA = 0x10  # u64 faulting VA when STATUS is -EFAULT
CQE_CYCLES = 0x18  # u64 modelled cycles (instructions executed)

# --- Doorbell vectors (driver -> device) and MSI-X vectors (device -> driver)
# Each core has its own queue doorbell, VEC_QUEUE + core: the driver rings the
# one of the core whose entry it wrote, so only that core wakes up. Any queue
# doorbell moves every new entry to its core's queue.
VEC_CONTROL = 0
VEC_QUEUE = 1  # core 0's queue doorbell; core i's is VEC_QUEUE + i
IRQ_COMPLETION = 0
IRQ_CONTROL = 1
NUM_IRQS = 2  # the MSI-X vectors the driver requests
NUM_VECTORS = VEC_QUEUE + MAX_CORES  # ivshmem's vectors: doorbells (and MSI-X table entries)
QUEUE_VECTORS = range(VEC_QUEUE, VEC_QUEUE + MAX_CORES)  # the queue doorbells, core by core

# --- Device MMU: two-level page tables in guest RAM -------------------------
# VA bits [29:21] index the L1 table, [20:12] the L2 table, [11:0] the page.
# Tables are 4 KiB pages of 512 little-endian u64 entries.
# L1 entry: physical address of an L2 table | PTE_VALID.
# L2 entry: physical address of a 4 KiB page | PTE_VALID | PTE_READ [| PTE_WRITE].
VA_BITS = 30
PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
PT_ENTRIES = 512
L1_SHIFT = 21
PTE_VALID = 1 << 0
PTE_READ = 1 << 1
PTE_WRITE = 1 << 2
PTE_ADDR_MASK = 0x000F_FFFF_FFFF_F000

# --- Firmware image ---------------------------------------------------------
# A 64-byte header, the payload, then a 64-byte Ed25519 signature of header
# and payload. The device's boot ROM checks size, magic, format version,
# header, length, the SHA-256 digest, the signature (against the public key
# the device holds), the ISA major version and the payload's sections, in
# that order, before it reports STATUS_READY (docs/firmware.md).
FW_MAGIC = 0x57464E56  # "VNFW"
FW_FORMAT_VERSION = 2
FW_HEADER_SIZE = 64
FW_DIGEST_SIZE = 32  # SHA-256
FW_SIGNATURE_SIZE = 64  # Ed25519
FWH_MAGIC = 0x00  # u32
FWH_FORMAT_VERSION = 0x04  # u32
FWH_FW_VERSION = 0x08  # u32 (major << 16) | (minor << 8) | patch
FWH_ISA_VERSION = 0x0C  # u32 (major << 16) | minor the firmware implements
FWH_HEADER_SIZE = 0x10  # u32 FW_HEADER_SIZE
FWH_PAYLOAD_SIZE = 0x14  # u32
# bytes 0x18..0x1F are reserved and must be zero
FWH_DIGEST = 0x20  # 32 bytes: SHA-256 of header bytes 0x00..0x1F, then the payload
FW_MAX_SIZE = 1 << 20
# The device's ceilings; the image's limits section may lower them, never raise them.
MAX_CMD_SIZE = 1 << 24  # bytes of one job's command stream
MAX_TENSOR_ELEMENTS = 1 << 28  # elements of one TENSOR (broadcast tensors could claim exabytes)
