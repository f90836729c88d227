/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Jobs: SUBMIT (vnpu_submit.c), the scheduler back end and completion
 * (vnpu_job.c), timeout, reset and cancellation (vnpu_reset.c).
 */
#ifndef __VNPU_JOB_H__
#define __VNPU_JOB_H__

#include <linux/dma-fence.h>
#include <linux/interrupt.h>

#include <drm/drm_syncobj.h>
#include <drm/gpu_scheduler.h>

#include "vnpu_cmdbuf.h"
#include "vnpu_drv.h"
#include "vnpu_gem.h"

/* How often an unbind that waits for jobs says so. */
#define VNPU_TEARDOWN_WARN_MS	10000

/**
 * struct vnpu_job_bo - one BO a job uses
 * @bo: the BO, with a reference held
 * @flags: DRM_VNPU_JOB_BO_READ and/or DRM_VNPU_JOB_BO_WRITE
 */
struct vnpu_job_bo {
	struct vnpu_bo *bo;
	u32 flags;
};

/**
 * struct vnpu_job - one command stream on its way to the device
 * @base: the scheduler job
 * @vdev: the device
 * @ctx: the submitting file's context (keeps its page tables alive)
 * @queue: the submitting file's queue (keeps the device, the schedulers
 *	and the module until the job is freed)
 * @core: the core that runs it (its scheduler's), set by run_job
 * @node: entry in its core's &vnpu_core.active while the device owns the job
 * @fence_mem: preallocated storage for @done, so run_job never allocates
 * @done: the hardware fence, signalled from the completion queue
 * @seqno: the device-visible job id (SQE_SEQNO)
 * @start_ns: when the job reached the head of its core's queue (a core
 *	runs one job at a time, in order), 0 before; for fdinfo
 * @cmdbuf: the kernel's copy of the command stream, which the device runs
 * @cmd_size: the stream's size in bytes
 * @bo_count: entries in @bos
 * @bos: the BOs listed in the submission
 * @out_syncobj: syncobj to receive the finished fence, or NULL
 * @initialised: drm_sched_job_init() succeeded
 * @pm_ref: the job holds a runtime PM reference (vnpu_pm_get())
 * @dump_status: -EFAULT or -ETIMEDOUT when the job failed so: a coredump
 *	is taken when it is freed (vnpu_coredump.c); else 0
 * @dump_fault_va: the faulting VA of an -EFAULT
 * @dump_cycles: the instructions the device had started, from the fault's
 *	completion entry or the reset that stopped the hung job
 * @end_status: the status the job ended with, for its fence's signal
 */
struct vnpu_job {
	struct drm_sched_job base;
	struct vnpu_device *vdev;
	struct vnpu_ctx *ctx;
	struct vnpu_queue *queue;
	struct vnpu_core *core;
	struct list_head node;
	struct dma_fence *fence_mem;
	struct dma_fence *done;
	u64 seqno;
	u64 start_ns;
	struct vnpu_cmdbuf *cmdbuf;
	u32 cmd_size;
	u32 bo_count;
	struct vnpu_job_bo *bos;
	struct drm_syncobj *out_syncobj;
	bool initialised;
	bool pm_ref;
	int dump_status;
	u64 dump_fault_va;
	u64 dump_cycles;
	int end_status;
};

int vnpu_job_init(struct vnpu_device *vdev);
void vnpu_job_stop_device(struct vnpu_device *vdev);
void vnpu_job_fini(struct vnpu_device *vdev);
struct vnpu_queue *vnpu_queue_create(struct vnpu_device *vdev);
void vnpu_queue_close(struct vnpu_queue *queue);
irqreturn_t vnpu_job_irq(int irq, void *arg);
irqreturn_t vnpu_job_irq_thread(int irq, void *arg);
void vnpu_job_file_closed(struct vnpu_device *vdev);
void vnpu_job_pause(struct vnpu_device *vdev);
void vnpu_job_resume(struct vnpu_device *vdev);
void vnpu_job_quiesce(struct vnpu_device *vdev);
void vnpu_job_unquiesce(struct vnpu_device *vdev);
void vnpu_job_rings_init(struct vnpu_device *vdev);
u64 vnpu_job_busy_ns(struct vnpu_ctx *ctx);
unsigned int vnpu_job_count_active(struct vnpu_device *vdev);
int vnpu_ioctl_submit(struct drm_device *drm, void *data, struct drm_file *file);

/* Shared by the job files: vnpu_job.c (the back end), vnpu_reset.c and vnpu_submit.c. */
void vnpu_job_free(struct vnpu_job *job);
void vnpu_job_write_sqe(struct vnpu_device *vdev, struct vnpu_job *job);
void vnpu_job_head_started(struct vnpu_core *core);
void vnpu_job_stop_clock(struct vnpu_job *job);
void vnpu_job_complete(struct vnpu_device *vdev, struct vnpu_job *job, int status,
		       u64 fault_va, u64 cycles, struct list_head *ended);
struct list_head *vnpu_job_end_begin(struct vnpu_device *vdev, struct list_head *ended);
void vnpu_job_end_finish(struct vnpu_device *vdev, struct list_head *ended);
u32 vnpu_job_heads_closed(struct vnpu_device *vdev);
void vnpu_job_drain_cq(struct vnpu_device *vdev, struct list_head *ended);
u32 vnpu_all_cores(struct vnpu_device *vdev);
void vnpu_job_reset_hw(struct vnpu_device *vdev, u32 mask, u64 guilty, int guilty_status,
		       bool requeue);
void vnpu_job_watchdog(struct work_struct *work);
void vnpu_job_cancel_work(struct work_struct *work);

/* vnpu_validate.c */
int vnpu_validate_stream(struct vnpu_device *vdev, const u8 *stream, u32 size,
			 const struct vnpu_job_bo *bos, u32 bo_count);

#endif /* __VNPU_JOB_H__ */
