// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * The control block: BOOT and RESET commands and their
 * acknowledgment interrupt.
 */
#include <linux/err.h>
#include <linux/interrupt.h>
#include <linux/jiffies.h>

#include <drm/drm_print.h>

#include "vnpu_io.h"

/*
 * Time the device model gets to acknowledge a RESET. A reset it does not
 * acknowledge wedges the device (vnpu_reset.c): long enough for a device
 * model on a loaded host, whose threads may stall for seconds.
 */
#define VNPU_RESET_TIMEOUT_MS	5000

/*
 * The device reports 0 or a negative errno. Anything else would reach the
 * callers as a positive value, which probe() would return as success: it
 * is the device's fault, -EIO.
 */
static int vnpu_io_status(struct vnpu_device *vdev, u32 cmd, u32 reg)
{
	s32 status = (s32)reg;

	if (status == 0 || (status < 0 && status >= -MAX_ERRNO))
		return status;
	drm_err(&vdev->drm, "command %u: the device answered status %#x, not an errno\n", cmd, reg);
	return -EIO;
}

/**
 * vnpu_io_command() - run one control-block command
 * @vdev: the device
 * @cmd: VNPU_CMD_*
 * @arg0: value for REG_CMD_ARG0
 * @arg1: value for REG_CMD_ARG1
 * @timeout_ms: how long to wait for the acknowledgment
 *
 * Writes the arguments and the command, bumps CMD_SEQ, rings VEC_CONTROL and
 * waits until CMD_ACK equals the new sequence number. The control interrupt
 * wakes the waiter; the register is also polled in short slices so that a
 * coalesced or lost interrupt costs latency, not correctness.
 *
 * Return: the device's CMD_STATUS (0 or a negative errno, anything else
 * counts as -EIO), or -ETIMEDOUT.
 */
int vnpu_io_command(struct vnpu_device *vdev, u32 cmd, u64 arg0, u64 arg1,
		    unsigned int timeout_ms)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(timeout_ms);
	u32 seq;
	int ret;

	mutex_lock(&vdev->ctrl_lock);
	seq = vnpu_rd32(vdev, VNPU_REG_CMD_SEQ) + 1;
	vnpu_wr64(vdev, VNPU_REG_CMD_ARG0, arg0);
	vnpu_wr64(vdev, VNPU_REG_CMD_ARG1, arg1);
	vnpu_wr32(vdev, VNPU_REG_CMD, cmd);
	vnpu_wr32(vdev, VNPU_REG_CMD_SEQ, seq);
	vdev->ctrl_seq = seq;
	vnpu_ring(vdev, VNPU_VEC_CONTROL);

	for (;;) {
		if (vnpu_rd32(vdev, VNPU_REG_CMD_ACK) == seq) {
			ret = vnpu_io_status(vdev, cmd, vnpu_rd32(vdev, VNPU_REG_CMD_STATUS));
			break;
		}
		if (time_after(jiffies, deadline)) {
			ret = -ETIMEDOUT;
			break;
		}
		wait_event_timeout(vdev->ctrl_wq,
				   vnpu_rd32(vdev, VNPU_REG_CMD_ACK) == seq,
				   msecs_to_jiffies(10));
	}
	mutex_unlock(&vdev->ctrl_lock);
	if (ret == -ETIMEDOUT)
		drm_err(&vdev->drm, "command %u not acknowledged in %u ms\n", cmd, timeout_ms);
	return ret;
}

/**
 * vnpu_io_reset() - reset NPU cores
 * @vdev: the device
 * @cores: mask of the cores to reset
 *
 * The device takes every submission-queue entry, then aborts the running
 * job of each core in @cores and drops the entries queued on it; the other
 * cores go on, and the firmware stays loaded.
 *
 * Return: 0 or a negative errno.
 */
int vnpu_io_reset(struct vnpu_device *vdev, u32 cores)
{
	return vnpu_io_command(vdev, VNPU_CMD_RESET, cores, 0, VNPU_RESET_TIMEOUT_MS);
}

/**
 * vnpu_io_control_irq() - the control vector's interrupt handler
 * @irq: the Linux IRQ number
 * @arg: the device
 *
 * Return: IRQ_HANDLED.
 */
irqreturn_t vnpu_io_control_irq(int irq, void *arg)
{
	struct vnpu_device *vdev = arg;

	wake_up_all(&vdev->ctrl_wq);
	return IRQ_HANDLED;
}
