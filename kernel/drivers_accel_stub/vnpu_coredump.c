// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Device coredumps of failed jobs, through the kernel's devcoredump
 * framework (as etnaviv, panfrost and msm do).
 *
 * When a job fails with -EFAULT (MMU fault) or -ETIMEDOUT (hang), the path
 * that ends it (the completion interrupt, or recovery after the reset)
 * records only the status, the faulting VA and the instruction count, in
 * the job. The dump itself is taken when the scheduler frees the job, in
 * process context: vnpu_coredump_capture() reads the device's registers
 * and queue positions, the job's identity, its BO list and its command
 * stream (the kernel's copy, which the device ran), and hands the dump to
 * dev_coredumpv(). The registers are therefore those of just after the
 * failure (the queue positions may have moved on by the jobs that ran
 * meanwhile). It allocates as panfrost's dump does from its scheduler
 * callback: without retrying hard or warning, since the scheduler's queue
 * must make progress under memory pressure; no memory means no dump.
 *
 * The format is the uapi's (struct drm_vnpu_coredump_*, vnpu_accel.h): a
 * header, then sections of registers, the job, its stream and its BOs.
 * devcoredump keeps one dump per device until it is read and discarded or
 * five minutes pass; a later failure meanwhile is not dumped.
 */
#include <linux/devcoredump.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/vmalloc.h>

#include <drm/drm_drv.h>
#include <drm/drm_print.h>

#include "vnpu_coredump.h"
#include "vnpu_io.h"
#include "vnpu_job.h"

/* What the dump's register section holds, in this order. */
static const u32 vnpu_coredump_reg_offsets[] = {
	VNPU_REG_MAGIC, VNPU_REG_DEVICE_ID, VNPU_REG_REVISION, VNPU_REG_ISA_VERSION,
	VNPU_REG_FW_VERSION, VNPU_REG_STATUS, VNPU_REG_RESET_COUNT, VNPU_REG_DEVICE_PEER,
	VNPU_REG_VA_BITS, VNPU_REG_CAPS, VNPU_REG_JOBS_DONE, VNPU_REG_IRQ_COUNT,
	VNPU_REG_IRQ_VALUE, VNPU_REG_FW_REJECT, VNPU_REG_FW_BUILD_ID, VNPU_REG_FW_BUILD_ID + 4,
	VNPU_REG_ABORT_CYCLES, VNPU_REG_CMD, VNPU_REG_CMD_SEQ, VNPU_REG_CMD_ACK,
	VNPU_REG_CMD_STATUS, VNPU_SQ_HEAD, VNPU_SQ_TAIL, VNPU_CQ_HEAD, VNPU_CQ_TAIL,
};

#define VNPU_COREDUMP_REGS	ARRAY_SIZE(vnpu_coredump_reg_offsets)

/**
 * struct vnpu_coredump - the fixed-size parts of a failed job's dump
 * @timestamp_ns: CLOCK_REALTIME of the snapshot
 * @job: the job's section
 * @regs: the register section
 * @bos: the BO section, @job.bo_count entries
 */
struct vnpu_coredump {
	u64 timestamp_ns;
	struct drm_vnpu_coredump_job job;
	struct drm_vnpu_coredump_reg regs[VNPU_COREDUMP_REGS];
	struct drm_vnpu_coredump_bo bos[VNPU_MAX_JOB_BOS];
};

/* Fill @cd from the job and the device's registers now. */
static void vnpu_coredump_snapshot(struct vnpu_device *vdev, struct vnpu_job *job,
				   struct vnpu_coredump *cd)
{
	u32 i;

	cd->timestamp_ns = ktime_get_real_ns();
	for (i = 0; i < VNPU_COREDUMP_REGS; i++) {
		cd->regs[i].offset = vnpu_coredump_reg_offsets[i];
		cd->regs[i].value = vnpu_rd32(vdev, vnpu_coredump_reg_offsets[i]);
	}
	cd->job.seqno = job->seqno;
	cd->job.fault_va = job->dump_status == -EFAULT ? job->dump_fault_va : 0;
	cd->job.cmd_va = vnpu_cmdbuf_va(job->cmdbuf);
	cd->job.cycles = job->dump_cycles;
	cd->job.status = job->dump_status;
	cd->job.context = job->ctx->id;
	cd->job.pid = job->ctx->pid;
	cd->job.cmd_size = job->cmd_size;
	cd->job.bo_count = min(job->bo_count, VNPU_MAX_JOB_BOS);
	for (i = 0; i < cd->job.bo_count; i++) {
		struct vnpu_bo *bo = job->bos[i].bo;

		cd->bos[i].va = vnpu_bo_va(bo);
		cd->bos[i].size = vnpu_bo_size(bo);
		cd->bos[i].job_flags = job->bos[i].flags;
		cd->bos[i].bo_flags = bo->flags;
	}
}

static void *vnpu_coredump_section(void *p, u32 type, const void *data, u32 size)
{
	struct drm_vnpu_coredump_section *s = p;

	s->type = type;
	s->size = size;
	memcpy(s + 1, data, size);
	return (u8 *)(s + 1) + ALIGN(size, 8);
}

static size_t vnpu_coredump_section_size(size_t size)
{
	return sizeof(struct drm_vnpu_coredump_section) + ALIGN(size, 8);
}

/**
 * vnpu_coredump_capture() - dump a failed job being freed
 * @job: the job, failed with @job->dump_status, still holding its command
 *	buffer and BOs; process context
 */
void vnpu_coredump_capture(struct vnpu_job *job)
{
	struct vnpu_device *vdev = job->vdev;
	struct drm_vnpu_coredump_header *h;
	struct vnpu_coredump *cd;
	size_t regs, bos, size;
	void *p;
	int idx;

	/* After an unplug the device the dump would hang under is going away. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return;
	cd = kzalloc_obj(*cd, GFP_KERNEL | __GFP_NOWARN | __GFP_NORETRY);
	if (!cd)
		goto out;
	vnpu_coredump_snapshot(vdev, job, cd);
	regs = sizeof(cd->regs);
	bos = cd->job.bo_count * sizeof(cd->bos[0]);
	size = sizeof(*h) + vnpu_coredump_section_size(sizeof(cd->job)) +
	       vnpu_coredump_section_size(regs) + vnpu_coredump_section_size(cd->job.cmd_size) +
	       vnpu_coredump_section_size(bos);
	/* dev_coredumpv() owns the buffer and vfree()s it; zeroed for the padding. */
	h = __vmalloc(size, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN | __GFP_NORETRY);
	if (!h)
		goto out;
	h->magic = DRM_VNPU_COREDUMP_MAGIC;
	h->version = DRM_VNPU_COREDUMP_VERSION;
	h->header_size = sizeof(*h);
	h->section_count = 4;
	h->timestamp_ns = cd->timestamp_ns;
	p = vnpu_coredump_section(h + 1, DRM_VNPU_COREDUMP_JOB, &cd->job, sizeof(cd->job));
	p = vnpu_coredump_section(p, DRM_VNPU_COREDUMP_REGS, cd->regs, regs);
	p = vnpu_coredump_section(p, DRM_VNPU_COREDUMP_STREAM, job->cmdbuf->vaddr,
				  cd->job.cmd_size);
	vnpu_coredump_section(p, DRM_VNPU_COREDUMP_BOS, cd->bos, bos);
	dev_coredumpv(&vdev->pdev->dev, h, size, GFP_KERNEL | __GFP_NOWARN | __GFP_NORETRY);
	/* Any user can make a job fault: the log line is rate-limited. */
	dev_info_ratelimited(vdev->drm.dev,
			     "job %llu of context %u: device coredump captured (%zu bytes)\n",
			     cd->job.seqno, cd->job.context, size);
out:
	kfree(cd);
	drm_dev_exit(idx);
}
