/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Access to the NPU registers in BAR2 and to the ivshmem
 * doorbell in BAR0. The register map itself is generated into vnpu_hw.h.
 */
#ifndef __VNPU_IO_H__
#define __VNPU_IO_H__

#include <linux/io.h>
#include <linux/io-64-nonatomic-lo-hi.h>

#include "vnpu_drv.h"

/* ivshmem's fixed BAR0 registers (QEMU docs/specs/ivshmem-spec.rst). */
#define IVSHMEM_REG_INTR_MASK	0x00
#define IVSHMEM_REG_INTR_STATUS	0x04
#define IVSHMEM_REG_IV_POSITION	0x08
#define IVSHMEM_REG_DOORBELL	0x0c

static inline u32 vnpu_rd32(struct vnpu_device *vdev, u32 off)
{
	return readl(vdev->bar2 + off);
}

static inline void vnpu_wr32(struct vnpu_device *vdev, u32 off, u32 val)
{
	writel(val, vdev->bar2 + off);
}

static inline u64 vnpu_rd64(struct vnpu_device *vdev, u32 off)
{
	return lo_hi_readq(vdev->bar2 + off);
}

static inline void vnpu_wr64(struct vnpu_device *vdev, u32 off, u64 val)
{
	lo_hi_writeq(val, vdev->bar2 + off);
}

/**
 * vnpu_ring() - ring the device model's doorbell
 * @vdev: the device
 * @vector: VNPU_VEC_CONTROL, or a core's queue doorbell VNPU_VEC_QUEUE + core
 *
 * One aligned 32-bit write: QEMU forwards it to the peer's eventfd for
 * @vector. writel() orders it after every earlier write to BAR2 and to
 * coherent memory, so the device sees the data the kick announces.
 */
static inline void vnpu_ring(struct vnpu_device *vdev, u32 vector)
{
	writel((vdev->peer << 16) | vector, vdev->bar0 + IVSHMEM_REG_DOORBELL);
}

int vnpu_io_command(struct vnpu_device *vdev, u32 cmd, u64 arg0, u64 arg1,
		    unsigned int timeout_ms);
int vnpu_io_reset(struct vnpu_device *vdev, u32 cores);
irqreturn_t vnpu_io_control_irq(int irq, void *arg);

#endif /* __VNPU_IO_H__ */
