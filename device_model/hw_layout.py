"""The vnpu hardware interface: what the driver and the device share.

This module is the source of the register, ring, page-table and firmware
layouts; ``tools/generate_headers.py`` writes the kernel driver's
hardware header from it. docs/hardware.md explains it.

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

STATUS_READY = 1 << 0  # firmware booted, the queue is served
STATUS_FW_ERROR = 1 << 1  # the last BOOT failed

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
CMD_RESET = 2  # abort the running job, drop queued ones, clear the queue

# --- Submission queue: the driver produces, the device consumes ------------
# HEAD and TAIL are free-running u32 counters; entry i is at
# SQ_BASE + (i % SQ_ENTRIES) * SQ_ENTRY_SIZE. The driver fills an entry,
# then advances SQ_TAIL, then rings VEC_QUEUE.
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
CQE_FAULT_VA = 0x10  # u64 faulting VA when STATUS is -EFAULT
CQE_CYCLES = 0x18  # u64 modelled cycles (instructions executed)

# --- Doorbell vectors (driver -> device) and MSI-X vectors (device -> driver)
VEC_QUEUE = 0
VEC_CONTROL = 1
IRQ_COMPLETION = 0
IRQ_CONTROL = 1
NUM_VECTORS = 2

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
# A 64-byte header, then the payload. The device checks magic, format
# version, header size, ISA major version, payload size and CRC-32 (zlib's)
# before it reports STATUS_READY.
FW_MAGIC = 0x57464E56  # "VNFW"
FW_FORMAT_VERSION = 1
FW_HEADER_SIZE = 64
FWH_MAGIC = 0x00  # u32
FWH_FORMAT_VERSION = 0x04  # u32
FWH_FW_VERSION = 0x08  # u32 (major << 16) | (minor << 8) | patch
FWH_ISA_VERSION = 0x0C  # u32 (major << 16) | minor the firmware implements
FWH_HEADER_SIZE = 0x10  # u32 FW_HEADER_SIZE
FWH_PAYLOAD_SIZE = 0x14  # u32
FWH_PAYLOAD_CRC32 = 0x18  # u32
# bytes 0x1C..0x3F are reserved and must be zero
FW_MAX_SIZE = 1 << 20
