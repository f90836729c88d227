// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * SUBMIT, the scheduler back end, completion and recovery.
 *
 * Life of a job: SUBMIT copies and checks the job, looks up its BOs,
 * validates the command stream and collects its dependencies (in-syncobjs
 * and the BOs' reservations); then every job of the submission is armed and
 * pushed to the file's scheduler entity. When its dependencies have
 * signalled, run_job() writes a submission-queue entry into BAR2 and rings
 * the doorbell; the device executes entries in order and writes one
 * completion-queue entry per job.
 *
 * Cores: the device has several (REG_NUM_CORES), sharing the one queue
 * pair; each runs the entries that name it (SQE_CORE) in order, one at a
 * time, and the cores run at once. Each core has its own scheduler, and a
 * file's entity may run on any of them: drm_sched moves an entity only when
 * its queue is empty and its last job has finished, to the least loaded
 * core. So a file's jobs run one at a time, in submission order, on one
 * core, as the uapi promises; different files' jobs run in parallel. Each
 * core's scheduler has its own job timeout, and recovery resets only the
 * hung job's core: jobs on the others keep running. The completion interrupt drains the whole
 * completion queue (interrupts coalesce) and signals each job's hardware
 * fence with the job's status; the scheduler then signals the finished fence
 * that userspace sees through the out-syncobj and the BOs' reservations.
 *
 * Timeout policy: when the job a core runs has run longer than the job
 * timeout (timed by the core's watchdog from when the job started, so
 * nothing submitted later extends it), that core is reset (CMD_RESET with
 * its bit: it aborts the core's running job and drops its queued ones),
 * the guilty job fails with -ETIMEDOUT, and every other job that was on
 * that core is written to the queue again, in its original order, with its
 * original fence: jobs of other files are delayed, not failed. A core runs
 * one job at a time in queue order, so a queued job had not started and
 * running it again is running it once; the other cores are not touched.
 *
 * Closing a file cancels its jobs (-ECANCELED): those the scheduler has not
 * handed over yet end in run_job() without reaching the device; one that is
 * running (the oldest on the device) is stopped by a reset as above, with
 * the other files' jobs on that core queued again; one queued behind another
 * file's job is stopped the same way when it reaches the head of its core's
 * queue, so an
 * innocent job that has started is never aborted. Jobs that are still on
 * the device when the driver unbinds fail with -ECANCELED.
 *
 * Latency: the scheduler's work runs on a per-CPU workqueue, so run_job()
 * runs on the CPU that submitted, and a submitter about to sleep in a
 * fence wait hands that CPU to it instead of waking an idle one (an
 * interprocessor wake-up, which a QEMU guest under TCG pays for with a host
 * thread wake-up). SUBMIT copies each stream from the command BO's pinned
 * pages into a command buffer (vnpu_cmdbuf.c) and validates that copy, the
 * one the device runs; command buffers are pooled per file, so a repeated
 * submission maps nothing.
 */
#include <linux/dma-resv.h>
#include <linux/iopoll.h>
#include <linux/ktime.h>
#include <linux/overflow.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_managed.h>
#include <drm/drm_gem.h>
#include <drm/drm_print.h>

#include "vnpu_coredump.h"
#include "vnpu_io.h"
#include "vnpu_job.h"
#include "vnpu_pm.h"

/*
 * The SUBMIT-time stream check can be turned off only in a debug build
 * (CONFIG_DRM_ACCEL_VNPU_DEBUG), to prove that the device page tables hold
 * by themselves; a production build always checks.
 */
static bool vnpu_validate_streams = true;
#if IS_ENABLED(CONFIG_DRM_ACCEL_VNPU_DEBUG)
module_param_named(validate_streams, vnpu_validate_streams, bool, 0644);
MODULE_PARM_DESC(validate_streams,
		 "Validate command streams before queueing (debug builds only; off leaves isolation to the device MMU)");
#endif

static bool vnpu_job_check_streams(void)
{
	return !IS_ENABLED(CONFIG_DRM_ACCEL_VNPU_DEBUG) || READ_ONCE(vnpu_validate_streams);
}

static inline struct vnpu_job *to_vnpu_job(struct drm_sched_job *sched_job)
{
	return container_of(sched_job, struct vnpu_job, base);
}

static const char *vnpu_fence_driver_name(struct dma_fence *fence)
{
	return VNPU_DRIVER_NAME;
}

static const char * const vnpu_core_names[VNPU_MAX_CORES] = {
	"vnpu-core0", "vnpu-core1", "vnpu-core2", "vnpu-core3",
	"vnpu-core4", "vnpu-core5", "vnpu-core6", "vnpu-core7",
};

/* Each core is a timeline (struct vnpu_core): its fences are named after it. */
static const char *vnpu_fence_timeline_name(struct dma_fence *fence)
{
	struct vnpu_device *vdev = container_of(fence->lock, struct vnpu_device, fence_lock);
	u64 core = fence->context - vdev->cores[0].fence_context;

	return core < vdev->num_cores ? vnpu_core_names[core] : "vnpu-hw";
}

static const struct dma_fence_ops vnpu_fence_ops = {
	.get_driver_name = vnpu_fence_driver_name,
	.get_timeline_name = vnpu_fence_timeline_name,
};

static void vnpu_queue_put_from_job(struct vnpu_queue *queue);
static void vnpu_queue_release_work(struct work_struct *work);

/*
 * Free a job that the scheduler never saw or has finished with. The job's
 * queue reference goes last: it holds the device, the schedulers and the
 * module until the job no longer touches them.
 */
static void vnpu_job_free(struct vnpu_job *job)
{
	struct vnpu_device *vdev = job->vdev;
	struct vnpu_queue *queue = job->queue;
	u32 i;

	if (job->initialised)
		drm_sched_job_cleanup(&job->base);
	if (job->dump_status)
		vnpu_coredump_capture(job);
	for (i = 0; i < job->bo_count; i++)
		if (job->bos[i].bo)
			drm_gem_object_put(&job->bos[i].bo->base.base);
	kvfree(job->bos);
	if (job->cmdbuf)
		vnpu_cmdbuf_put(job->ctx, job->cmdbuf);
	if (job->out_syncobj)
		drm_syncobj_put(job->out_syncobj);
	if (job->done)
		dma_fence_put(job->done);
	else
		kfree(job->fence_mem);
	if (job->ctx) {
		atomic_dec(&job->ctx->jobs_in_flight);
		vnpu_ctx_put(job->ctx);
	}
	if (job->pm_ref)
		vnpu_pm_put(vdev);
	kfree(job);
	atomic_dec(&vdev->stats.jobs);
	wake_up_all(&vdev->idle_wq);
	vnpu_queue_put_from_job(queue);
}

/* Write the job's submission-queue entry and kick the device. */
static void vnpu_job_write_sqe(struct vnpu_device *vdev, struct vnpu_job *job)
{
	u32 sqe = VNPU_SQ_BASE + (vdev->sq_tail % VNPU_SQ_ENTRIES) * VNPU_SQ_ENTRY_SIZE;

	lockdep_assert_held(&vdev->hw_lock);
	vnpu_wr64(vdev, sqe + VNPU_SQE_SEQNO, job->seqno);
	vnpu_wr64(vdev, sqe + VNPU_SQE_PT_ROOT, job->ctx->vm.l1_dma);
	vnpu_wr64(vdev, sqe + VNPU_SQE_CMD_VA, vnpu_cmdbuf_va(job->cmdbuf));
	vnpu_wr32(vdev, sqe + VNPU_SQE_CMD_SIZE, job->cmd_size);
	vnpu_wr32(vdev, sqe + VNPU_SQE_FLAGS, 0);
	vnpu_wr32(vdev, sqe + VNPU_SQE_CONTEXT, job->ctx->id);
	vnpu_wr32(vdev, sqe + VNPU_SQE_CORE, job->core->index);
	vdev->sq_tail++;
	/* writel() orders the entry before the new tail, the tail before the kick. */
	vnpu_wr32(vdev, VNPU_SQ_TAIL, vdev->sq_tail);
	/* The core's own doorbell: only that core wakes up in the device. */
	vnpu_ring(vdev, VNPU_VEC_QUEUE + job->core->index);
}

/*
 * A core runs one job at a time, in queue order, so a job runs from when it
 * reaches the head of its core's active list until its completion. That is
 * when its clock starts, for fdinfo and for the job timeout: the core's
 * watchdog is armed for the head alone, so jobs submitted behind a hung
 * one never extend its time (drm_sched's own timeout, re-armed at every
 * push, would; it is off). Called with job_lock held whenever the head may
 * have changed, from the completion interrupt too.
 */
static void vnpu_job_head_started(struct vnpu_core *core)
{
	struct vnpu_job *head = list_first_entry_or_null(&core->active, struct vnpu_job, node);
	struct vnpu_device *vdev = core->vdev;

	lockdep_assert_held(&vdev->job_lock);
	if (!head) {
		cancel_delayed_work(&core->watchdog);
		return;
	}
	if (!head->start_ns) {
		head->start_ns = ktime_get_ns();
		mod_delayed_work(vdev->sched_wq, &core->watchdog,
				 msecs_to_jiffies(READ_ONCE(vdev->job_timeout_ms)));
	}
}

/* Charge the job's file with its time on the device so far. Called with job_lock held. */
static void vnpu_job_stop_clock(struct vnpu_job *job)
{
	if (job->start_ns) {
		atomic64_add(ktime_get_ns() - job->start_ns, &job->ctx->busy_ns);
		job->start_ns = 0;
	}
}

/**
 * vnpu_job_busy_ns() - time the device has spent on a context's jobs
 * @ctx: the context
 *
 * Includes the running job's time so far, so a monitor sampling twice sees
 * a long job's progress.
 *
 * Return: nanoseconds, never decreasing.
 */
u64 vnpu_job_busy_ns(struct vnpu_ctx *ctx)
{
	struct vnpu_device *vdev = ctx->vdev;
	struct vnpu_job *head;
	u64 busy;
	u32 i;

	spin_lock_irq(&vdev->job_lock);
	busy = atomic64_read(&ctx->busy_ns);
	for (i = 0; i < vdev->num_cores; i++) {
		head = list_first_entry_or_null(&vdev->cores[i].active, struct vnpu_job, node);
		if (head && head->ctx == ctx && head->start_ns)
			busy += ktime_get_ns() - head->start_ns;
	}
	spin_unlock_irq(&vdev->job_lock);
	return busy;
}

/**
 * vnpu_job_count_active() - jobs the device holds, on every core
 * @vdev: the device
 *
 * Return: the number of jobs written to the submission queue and not ended.
 */
unsigned int vnpu_job_count_active(struct vnpu_device *vdev)
{
	struct vnpu_job *job;
	unsigned int n = 0;
	u32 i;

	spin_lock_irq(&vdev->job_lock);
	for (i = 0; i < vdev->num_cores; i++)
		list_for_each_entry(job, &vdev->cores[i].active, node)
			n++;
	spin_unlock_irq(&vdev->job_lock);
	return n;
}

/*
 * Hand a job's BOs to the device: with bounce buffering (swiotlb) or a
 * non-coherent device the CPU's writes are copied to where the device
 * reads. A BO that an earlier job on the device still writes is not copied:
 * the device's side is the newer one (a file's jobs run in order on one
 * core). The sync is a no-op on a coherent device without bouncing.
 */
static void vnpu_job_sync_for_device(struct vnpu_job *job)
{
	u32 i;

	for (i = 0; i < job->bo_count; i++) {
		struct vnpu_bo *bo = job->bos[i].bo;

		if (!atomic_read(&bo->device_writers))
			vnpu_bo_sync_for_device(bo);
	}
	for (i = 0; i < job->bo_count; i++)
		if (job->bos[i].flags & DRM_VNPU_JOB_BO_WRITE)
			atomic_inc(&job->bos[i].bo->device_writers);
}

/* Bring back what the job wrote, before its fence tells anyone to look. */
static void vnpu_job_sync_for_cpu(struct vnpu_job *job)
{
	u32 i;

	for (i = 0; i < job->bo_count; i++) {
		if (!(job->bos[i].flags & DRM_VNPU_JOB_BO_WRITE))
			continue;
		vnpu_bo_sync_for_cpu(job->bos[i].bo);
		atomic_dec(&job->bos[i].bo->device_writers);
	}
}

/*
 * The outcome of a job, on the BOs it writes (BO_WAIT reads it there), the
 * file's counters and the device's. Called with job_lock held.
 */
static void vnpu_job_account(struct vnpu_device *vdev, struct vnpu_job *job, int status,
			     u64 fault_va)
{
	u32 i;

	atomic64_inc(&job->ctx->jobs_ended);
	if (job->core)
		atomic64_inc(&job->ctx->jobs_ended_on[job->core->index]);
	for (i = 0; i < job->bo_count; i++)
		if (job->bos[i].flags & DRM_VNPU_JOB_BO_WRITE)
			vnpu_bo_set_status(job->bos[i].bo, status, fault_va);
	if (status) {
		atomic64_inc(&vdev->stats.jobs_failed);
		if (status == -ETIMEDOUT)
			atomic64_inc(&vdev->stats.jobs_timedout);
		else if (status == -ECANCELED)
			atomic64_inc(&vdev->stats.jobs_cancelled);
	} else {
		atomic64_inc(&vdev->stats.jobs_done);
	}
}

/*
 * End a job the device no longer owns: copy back what it wrote, record its
 * status, then signal its hardware fence. A core's jobs end in the order
 * they were written to the queue, so its fences signal in seqno order.
 * A fault or a hang is remembered for the coredump, which is taken when
 * the job is freed, in process context. Called with job_lock held.
 */
static void vnpu_job_complete(struct vnpu_device *vdev, struct vnpu_job *job, int status,
			      u64 fault_va, u64 cycles)
{
	lockdep_assert_held(&vdev->job_lock);
	list_del_init(&job->node);
	vnpu_job_sync_for_cpu(job);
	if (status == -EFAULT || status == -ETIMEDOUT) {
		job->dump_status = status;
		job->dump_fault_va = fault_va;
		job->dump_cycles = cycles;
	}
	vnpu_job_stop_clock(job);
	vnpu_job_head_started(job->core);
	vnpu_job_account(vdev, job, status, fault_va);
	if (status)
		dma_fence_set_error(job->done, status);
	dma_fence_signal(job->done);
}

/* The cores running a closed file's job, as a CMD_RESET mask. Called with job_lock held. */
static u32 vnpu_job_heads_closed(struct vnpu_device *vdev)
{
	struct vnpu_job *head;
	u32 i, mask = 0;

	lockdep_assert_held(&vdev->job_lock);
	for (i = 0; i < vdev->num_cores; i++) {
		head = list_first_entry_or_null(&vdev->cores[i].active, struct vnpu_job, node);
		if (head && READ_ONCE(head->ctx->closed))
			mask |= BIT(i);
	}
	return mask;
}

/* Only the statuses the device contract allows reach userspace. */
static int vnpu_cqe_status(s32 status)
{
	if (status == 0 || status == -EFAULT || status == -EIO)
		return status;
	return -EIO;
}

/* Consume every completion-queue entry up to CQ_TAIL. Called with job_lock held. */
static void vnpu_job_drain_cq(struct vnpu_device *vdev)
{
	u32 tail = vnpu_rd32(vdev, VNPU_CQ_TAIL);

	lockdep_assert_held(&vdev->job_lock);
	/* A tail more than a ring ahead is garbage; never loop over it. */
	if (tail - vdev->cq_head > VNPU_CQ_ENTRIES) {
		drm_err(&vdev->drm, "CQ tail %u is beyond head %u\n", tail, vdev->cq_head);
		vdev->cq_head = tail;
	}
	while (vdev->cq_head != tail) {
		u32 cqe = VNPU_CQ_BASE + (vdev->cq_head % VNPU_CQ_ENTRIES) * VNPU_CQ_ENTRY_SIZE;
		u64 seqno = vnpu_rd64(vdev, cqe + VNPU_CQE_SEQNO);
		int status = vnpu_cqe_status(vnpu_rd32(vdev, cqe + VNPU_CQE_STATUS));
		u64 fault_va = vnpu_rd64(vdev, cqe + VNPU_CQE_FAULT_VA);
		u32 core = vnpu_rd32(vdev, cqe + VNPU_CQE_CORE);
		struct vnpu_job *job, *found = NULL;

		vdev->cq_head++;
		if (core < vdev->num_cores) {
			list_for_each_entry(job, &vdev->cores[core].active, node) {
				if (job->seqno == seqno) {
					found = job;
					break;
				}
			}
		}
		if (found)
			vnpu_job_complete(vdev, found, status, fault_va,
					  status ? vnpu_rd64(vdev, cqe + VNPU_CQE_CYCLES) : 0);
		else
			drm_dbg_driver(&vdev->drm, "completion of unknown job %llu on core %u\n",
				       seqno, core);
	}
	vnpu_wr32(vdev, VNPU_CQ_HEAD, vdev->cq_head);
	/* A closed file's job has started: stop it (vnpu_job_cancel_closed()). */
	if (vnpu_job_heads_closed(vdev))
		queue_work(vdev->sched_wq, &vdev->cancel_work);
}

/*
 * With bounce buffering, completing a job copies what it wrote back to the
 * CPU's pages: that is done by the interrupt thread, not in hard IRQ
 * context. Without it (a coherent device, the usual case) the hard handler
 * completes the jobs itself: a completion costs a few register reads and
 * no thread wake-up.
 */
static bool vnpu_job_irq_needs_thread(struct vnpu_device *vdev)
{
	return dma_dev_need_sync(vdev->drm.dev);
}

/**
 * vnpu_job_irq() - the completion vector's hard interrupt handler
 * @irq: the Linux IRQ number
 * @arg: the device
 *
 * Return: IRQ_HANDLED once the completion queue is drained,
 * IRQ_WAKE_THREAD when vnpu_job_irq_thread() must drain it, IRQ_NONE
 * after an unplug.
 */
irqreturn_t vnpu_job_irq(int irq, void *arg)
{
	struct vnpu_device *vdev = arg;
	int idx;

	if (vnpu_job_irq_needs_thread(vdev))
		return IRQ_WAKE_THREAD;
	/* Unplugged: remove() drains the queue itself before the BARs go. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return IRQ_NONE;
	spin_lock(&vdev->job_lock);
	vnpu_job_drain_cq(vdev);
	spin_unlock(&vdev->job_lock);
	drm_dev_exit(idx);
	return IRQ_HANDLED;
}

/**
 * vnpu_job_irq_thread() - the completion vector's threaded handler
 * @irq: the Linux IRQ number
 * @arg: the device
 *
 * Return: IRQ_HANDLED, or IRQ_NONE after an unplug.
 */
irqreturn_t vnpu_job_irq_thread(int irq, void *arg)
{
	struct vnpu_device *vdev = arg;
	int idx;

	if (!drm_dev_enter(&vdev->drm, &idx))
		return IRQ_NONE;
	spin_lock_irq(&vdev->job_lock);
	vnpu_job_drain_cq(vdev);
	spin_unlock_irq(&vdev->job_lock);
	drm_dev_exit(idx);
	return IRQ_HANDLED;
}

/*
 * Jobs of closed files and jobs that find the device gone end here,
 * without a hardware fence: the scheduler signals their finished fence
 * with the error. (A hardware fence made now would signal before the
 * earlier, still running fences of its core's timeline.)
 */
static struct dma_fence *vnpu_job_cancel_unrun(struct vnpu_job *job)
{
	struct vnpu_device *vdev = job->vdev;

	spin_lock_irq(&vdev->job_lock);
	vnpu_job_account(vdev, job, -ECANCELED, 0);
	spin_unlock_irq(&vdev->job_lock);
	return ERR_PTR(-ECANCELED);
}

static struct dma_fence *vnpu_job_run(struct drm_sched_job *sched_job)
{
	struct vnpu_job *job = to_vnpu_job(sched_job);
	struct vnpu_device *vdev = job->vdev;
	struct dma_fence *fence;
	bool cookie;
	int idx;

	if (unlikely(sched_job->s_fence->finished.error))
		return NULL;
	if (!drm_dev_enter(&vdev->drm, &idx))
		return vnpu_job_cancel_unrun(job);
	if (READ_ONCE(job->ctx->closed) || READ_ONCE(vdev->wedged)) {
		drm_dev_exit(idx);
		return vnpu_job_cancel_unrun(job);
	}

	cookie = dma_fence_begin_signalling();
	/* The scheduler the entity picked is the core that runs the job. */
	job->core = container_of(sched_job->sched, struct vnpu_core, sched);
	mutex_lock(&vdev->hw_lock);
	job->seqno = ++vdev->next_seqno;
	/* Each core completes its own jobs in order: one fence timeline per core. */
	dma_fence_init(job->fence_mem, &vnpu_fence_ops, &vdev->fence_lock,
		       job->core->fence_context, ++job->core->fence_seqno);
	job->done = job->fence_mem;
	job->fence_mem = NULL;
	fence = dma_fence_get(job->done);
	vnpu_job_sync_for_device(job);
	spin_lock_irq(&vdev->job_lock);
	list_add_tail(&job->node, &job->core->active);
	vnpu_job_head_started(job->core);
	spin_unlock_irq(&vdev->job_lock);
	vnpu_job_write_sqe(vdev, job);
	mutex_unlock(&vdev->hw_lock);
	dma_fence_end_signalling(cookie);
	drm_dev_exit(idx);
	return fence;
}

static u32 vnpu_all_cores(struct vnpu_device *vdev)
{
	return GENMASK(vdev->num_cores - 1, 0);
}

/*
 * Reset the cores of @mask and settle every job they owned, oldest first.
 * The job with seqno @guilty (0: none) fails with @guilty_status; jobs of
 * closed files fail with -ECANCELED; the others are written to the queue
 * again when @requeue, else they fail with -ECANCELED. Once one job is
 * queued again, every later job of its core is too, whatever its file
 * (a closed file's is stopped when it reaches the head): a core's fences
 * signal in order. A core runs one job at a time in queue order, so only
 * the head had started: running the others again runs them once. The other
 * cores go on; their completions may arrive meanwhile and are drained as
 * usual. The schedulers are not stopped: run_job() takes hw_lock, so it
 * writes its entry before or after all of this.
 */
static void vnpu_job_reset_hw(struct vnpu_device *vdev, u32 mask, u64 guilty,
			      int guilty_status, bool requeue)
{
	struct vnpu_job *job, *tmp;
	struct vnpu_core *core;
	u64 abort_cycles;
	bool requeued;
	LIST_HEAD(owned);
	u32 i;
	int ret;

	mutex_lock(&vdev->hw_lock);
	ret = vnpu_io_reset(vdev, mask);
	atomic_inc(&vdev->stats.resets);
	if (ret) {
		/*
		 * The cores may still run and write into the BOs of the jobs
		 * failed below, which are then freed: stop the device's DMA
		 * before any fence signals.
		 */
		pci_clear_master(vdev->pdev);
		WRITE_ONCE(vdev->wedged, true);
		drm_err(&vdev->drm, "reset of cores %#x failed: %d; the device is off the bus until the driver is bound again\n",
			mask, ret);
		requeue = false;
	}
	/* The instructions the hung job had started, as the reset recorded them. */
	abort_cycles = vnpu_rd32(vdev, VNPU_REG_ABORT_CYCLES);

	spin_lock_irq(&vdev->job_lock);
	/* Completions written before the reset still count. */
	vnpu_job_drain_cq(vdev);
	/* The device took every entry; start again from where it stands. */
	vdev->sq_tail = vnpu_rd32(vdev, VNPU_SQ_HEAD);
	vnpu_wr32(vdev, VNPU_SQ_TAIL, vdev->sq_tail);
	for (i = 0; i < vdev->num_cores; i++) {
		if (!(mask & BIT(i)))
			continue;
		core = &vdev->cores[i];
		requeued = false;
		list_splice_init(&core->active, &owned);
		list_for_each_entry_safe(job, tmp, &owned, node) {
			if (!requeued && guilty && job->seqno == guilty)
				vnpu_job_complete(vdev, job, guilty_status, 0, abort_cycles);
			else if (!requeue || (!requeued && READ_ONCE(job->ctx->closed)))
				vnpu_job_complete(vdev, job, -ECANCELED, 0, 0);
			else
				requeued = true;
		}
		/*
		 * What is left goes back on the core, oldest first, each with
		 * its clock stopped: it runs again from the start. Still under
		 * job_lock: the first job may complete before the loop ends,
		 * and the completion interrupt must not unlink it while the
		 * loop walks the list.
		 */
		list_for_each_entry(job, &owned, node)
			vnpu_job_stop_clock(job);
		list_splice_tail_init(&owned, &core->active);
		vnpu_job_head_started(core);
		list_for_each_entry(job, &core->active, node)
			vnpu_job_write_sqe(vdev, job);
	}
	spin_unlock_irq(&vdev->job_lock);
	mutex_unlock(&vdev->hw_lock);
}

/*
 * A core's head job has run for the job timeout: reset the core, fail the
 * job with -ETIMEDOUT and queue the core's other jobs again. @seqno names
 * the job the watchdog saw; if it completed meanwhile, nothing happens.
 */
static void vnpu_job_recover_hang(struct vnpu_core *core, u64 seqno)
{
	struct vnpu_device *vdev = core->vdev;
	struct vnpu_job *head;
	bool hung;

	mutex_lock(&vdev->reset_lock);
	spin_lock_irq(&vdev->job_lock);
	vnpu_job_drain_cq(vdev);
	head = list_first_entry_or_null(&core->active, struct vnpu_job, node);
	hung = head && head->seqno == seqno;
	/* Any user can make a job hang: the log line is rate-limited. */
	if (hung)
		dev_warn_ratelimited(vdev->drm.dev,
				     "job %llu of context %u timed out after %u ms on core %u, resetting it\n",
				     seqno, head->ctx->id, READ_ONCE(vdev->job_timeout_ms),
				     core->index);
	spin_unlock_irq(&vdev->job_lock);
	if (hung)
		vnpu_job_reset_hw(vdev, BIT(core->index), seqno, -ETIMEDOUT, true);
	mutex_unlock(&vdev->reset_lock);
}

/*
 * The job timeout, per core: fires the job timeout after the core's
 * head job started (vnpu_job_head_started()). A head that started later
 * than that re-arms it for the rest of its time.
 */
static void vnpu_job_watchdog(struct work_struct *work)
{
	struct vnpu_core *core = container_of(to_delayed_work(work), struct vnpu_core, watchdog);
	struct vnpu_device *vdev = core->vdev;
	u64 timeout_ns = (u64)READ_ONCE(vdev->job_timeout_ms) * NSEC_PER_MSEC;
	struct vnpu_job *head;
	u64 seqno = 0, ran;
	bool cookie;
	int idx;

	/* Unplugged: remove() has reset the device and settled its jobs. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return;
	cookie = dma_fence_begin_signalling();
	spin_lock_irq(&vdev->job_lock);
	head = list_first_entry_or_null(&core->active, struct vnpu_job, node);
	if (head && head->start_ns) {
		ran = ktime_get_ns() - head->start_ns;
		if (ran >= timeout_ns)
			seqno = head->seqno;
		else
			mod_delayed_work(vdev->sched_wq, &core->watchdog,
					 nsecs_to_jiffies(timeout_ns - ran) + 1);
	}
	spin_unlock_irq(&vdev->job_lock);
	if (seqno)
		vnpu_job_recover_hang(core, seqno);
	dma_fence_end_signalling(cookie);
	drm_dev_exit(idx);
}

/*
 * Stop the closed files' jobs that cores are running: a reset of those
 * cores cancels them and queues the other files' jobs again. Nothing
 * happens on a core whose running job belongs to an open file: a closed
 * file's job queued behind it is stopped when it reaches the head
 * (vnpu_job_drain_cq() queues this again).
 */
static void vnpu_job_cancel_closed(struct vnpu_device *vdev)
{
	bool cookie;
	u32 mask;
	int idx;

	/* Unplugged: remove() has reset the device and settled its jobs. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return;
	cookie = dma_fence_begin_signalling();
	mutex_lock(&vdev->reset_lock);
	spin_lock_irq(&vdev->job_lock);
	/* The jobs may have completed meanwhile; then there is nothing to stop. */
	vnpu_job_drain_cq(vdev);
	mask = vnpu_job_heads_closed(vdev);
	spin_unlock_irq(&vdev->job_lock);
	if (mask)
		vnpu_job_reset_hw(vdev, mask, 0, 0, true);
	mutex_unlock(&vdev->reset_lock);
	dma_fence_end_signalling(cookie);
	drm_dev_exit(idx);
}

static void vnpu_job_cancel_work(struct work_struct *work)
{
	vnpu_job_cancel_closed(container_of(work, struct vnpu_device, cancel_work));
}

/**
 * vnpu_job_file_closed() - stop the running job of a file being closed
 * @vdev: the device; the closing context is already marked closed
 *
 * Called from postclose, so close() returns once the job is stopped.
 */
void vnpu_job_file_closed(struct vnpu_device *vdev)
{
	vnpu_job_cancel_closed(vdev);
}

static bool vnpu_job_device_idle(struct vnpu_device *vdev)
{
	return !vnpu_job_count_active(vdev);
}

static void vnpu_job_wqueues_stop(struct vnpu_device *vdev)
{
	u32 i;

	for (i = 0; i < vdev->num_cores; i++)
		drm_sched_wqueue_stop(&vdev->cores[i].sched);
}

static void vnpu_job_wqueues_start(struct vnpu_device *vdev)
{
	u32 i;

	for (i = 0; i < vdev->num_cores; i++)
		drm_sched_wqueue_start(&vdev->cores[i].sched);
}

/**
 * vnpu_job_pause() - stop feeding the device and wait until it is idle
 * @vdev: the device
 *
 * For a firmware reload, as for system sleep (vnpu_job_quiesce()): the jobs
 * on the device finish, a hung one failed by its watchdog as ever (the
 * pause holds no lock recovery needs while it waits), the others wait.
 * Then the reset lock is taken until vnpu_job_resume(), which must follow:
 * the caller must not allocate memory or wait for fences meanwhile.
 */
void vnpu_job_pause(struct vnpu_device *vdev)
{
	vnpu_job_quiesce(vdev);
	mutex_lock(&vdev->reset_lock);
}

/**
 * vnpu_job_resume() - feed the device again after vnpu_job_pause()
 * @vdev: the device
 */
void vnpu_job_resume(struct vnpu_device *vdev)
{
	mutex_unlock(&vdev->reset_lock);
	vnpu_job_unquiesce(vdev);
}

/**
 * vnpu_job_quiesce() - stop feeding the device and let its jobs finish, for system sleep
 * @vdev: the device
 *
 * Jobs not yet on the device stay queued until vnpu_job_unquiesce(). The
 * jobs on it complete; a hung one is failed by its core's watchdog, which
 * still runs, and the jobs queued behind it run. Only if jobs remain after
 * twice the job timeout (the device stopped answering) are they cancelled.
 */
void vnpu_job_quiesce(struct vnpu_device *vdev)
{
	u64 timeout_us = 2ULL * READ_ONCE(vdev->job_timeout_ms) * USEC_PER_MSEC;
	bool idle;

	vnpu_job_wqueues_stop(vdev);
	if (!read_poll_timeout(vnpu_job_device_idle, idle, idle, 1000, timeout_us, false, vdev))
		return;
	drm_warn(&vdev->drm, "jobs still on the device after %llu ms: cancelled\n",
		 timeout_us / USEC_PER_MSEC);
	mutex_lock(&vdev->reset_lock);
	vnpu_job_reset_hw(vdev, vnpu_all_cores(vdev), 0, 0, false);
	mutex_unlock(&vdev->reset_lock);
}

/**
 * vnpu_job_unquiesce() - feed the device again after vnpu_job_quiesce()
 * @vdev: the device
 */
void vnpu_job_unquiesce(struct vnpu_device *vdev)
{
	vnpu_job_wqueues_start(vdev);
}

/*
 * drm_sched's own timeout is off (MAX_SCHEDULE_TIMEOUT): it restarts
 * whenever a job is pushed, so a file submitting more often than the
 * timeout could keep a hung job running for ever. The core watchdogs time
 * jobs instead (vnpu_job_watchdog()); this is never called.
 */
static enum drm_gpu_sched_stat vnpu_job_timedout(struct drm_sched_job *sched_job)
{
	return DRM_GPU_SCHED_STAT_NOMINAL;
}

static void vnpu_job_free_cb(struct drm_sched_job *sched_job)
{
	vnpu_job_free(to_vnpu_job(sched_job));
}

static const struct drm_sched_backend_ops vnpu_sched_ops = {
	.run_job = vnpu_job_run,
	.timedout_job = vnpu_job_timedout,
	.free_job = vnpu_job_free_cb,
};

/*
 * One credit per job, and the queues' entries shared out between the
 * cores: the submission and completion queues can never overflow.
 * drm_sched_init() takes a struct of arguments from Linux 6.15 on, and
 * Debian's later 6.12 kernels carry that change too; Kbuild tells the two
 * apart (VNPU_SCHED_INIT_ARGS).
 */
static int vnpu_sched_init(struct vnpu_core *core)
{
	struct vnpu_device *vdev = core->vdev;
	u32 credits = min(VNPU_SQ_ENTRIES, VNPU_CQ_ENTRIES) / vdev->num_cores;

#ifdef VNPU_SCHED_INIT_ARGS
	const struct drm_sched_init_args args = {
		.ops = &vnpu_sched_ops,
		.submit_wq = vdev->sched_wq,
		.num_rqs = DRM_SCHED_PRIORITY_COUNT,
		.credit_limit = credits,
		.timeout = MAX_SCHEDULE_TIMEOUT,
		.name = vnpu_core_names[core->index],
		.dev = vdev->drm.dev,
	};

	return drm_sched_init(&core->sched, &args);
#else
	return drm_sched_init(&core->sched, &vnpu_sched_ops, vdev->sched_wq,
			      DRM_SCHED_PRIORITY_COUNT, credits, 0,
			      MAX_SCHEDULE_TIMEOUT, NULL, NULL,
			      vnpu_core_names[core->index], vdev->drm.dev);
#endif
}

static void vnpu_sched_fini(struct vnpu_device *vdev, u32 count)
{
	while (count--)
		drm_sched_fini(&vdev->cores[count].sched);
}

/**
 * vnpu_job_rings_init() - start both queues empty, from the device's positions
 * @vdev: the device, powered, with no job on it
 *
 * The device may have served an earlier instance of the driver, or have
 * been powered off (which sets its positions to 0).
 */
void vnpu_job_rings_init(struct vnpu_device *vdev)
{
	/* The completion interrupt and run_job() use the positions: a resume races both. */
	mutex_lock(&vdev->hw_lock);
	spin_lock_irq(&vdev->job_lock);
	vdev->sq_tail = vnpu_rd32(vdev, VNPU_SQ_HEAD);
	vnpu_wr32(vdev, VNPU_SQ_TAIL, vdev->sq_tail);
	vdev->cq_head = vnpu_rd32(vdev, VNPU_CQ_TAIL);
	vnpu_wr32(vdev, VNPU_CQ_HEAD, vdev->cq_head);
	spin_unlock_irq(&vdev->job_lock);
	mutex_unlock(&vdev->hw_lock);
}

/**
 * vnpu_job_init() - set up the queues and the scheduler
 * @vdev: the device, booted
 *
 * Return: 0 or a negative errno.
 */
int vnpu_job_init(struct vnpu_device *vdev)
{
	u64 fence_context;
	u32 i;
	int ret;

	vdev->job_timeout_ms = clamp(vnpu_job_timeout_ms, VNPU_JOB_TIMEOUT_MIN_MS,
				     VNPU_JOB_TIMEOUT_MAX_MS);
	vdev->num_cores = vnpu_rd32(vdev, VNPU_REG_NUM_CORES);
	if (!vdev->num_cores || vdev->num_cores > VNPU_MAX_CORES) {
		drm_err(&vdev->drm, "the device reports %u cores, not 1..%u\n",
			vdev->num_cores, VNPU_MAX_CORES);
		return -ENODEV;
	}

	ret = drmm_mutex_init(&vdev->drm, &vdev->reset_lock);
	if (ret)
		return ret;
	ret = drmm_mutex_init(&vdev->drm, &vdev->hw_lock);
	if (ret)
		return ret;
	spin_lock_init(&vdev->job_lock);
	spin_lock_init(&vdev->fence_lock);
	fence_context = dma_fence_context_alloc(vdev->num_cores);
	for (i = 0; i < vdev->num_cores; i++) {
		vdev->cores[i].vdev = vdev;
		vdev->cores[i].index = i;
		vdev->cores[i].fence_context = fence_context + i;
		INIT_LIST_HEAD(&vdev->cores[i].active);
		INIT_DELAYED_WORK(&vdev->cores[i].watchdog, vnpu_job_watchdog);
		vdev->scheds[i] = &vdev->cores[i].sched;
	}
	vdev->core_mask = GENMASK(vdev->num_cores - 1, 0);
	init_waitqueue_head(&vdev->idle_wq);
	INIT_WORK(&vdev->cancel_work, vnpu_job_cancel_work);

	vnpu_job_rings_init(vdev);

	/*
	 * Per-CPU, not the scheduler's default ordered (unbound) queue: see
	 * the latency note at the top. The scheduler serialises its run_job
	 * and free_job work itself. Jobs complete through this queue (the
	 * watchdogs and the cancellation of closed files' jobs run on it
	 * too), so it must make progress under memory pressure.
	 */
	vdev->sched_wq = alloc_workqueue("vnpu-sched", WQ_MEM_RECLAIM | WQ_HIGHPRI, 0);
	if (!vdev->sched_wq)
		return -ENOMEM;

	for (i = 0; i < vdev->num_cores; i++) {
		ret = vnpu_sched_init(&vdev->cores[i]);
		if (ret) {
			vnpu_sched_fini(vdev, i);
			destroy_workqueue(vdev->sched_wq);
			vdev->sched_wq = NULL;
			return ret;
		}
	}
	kref_init(&vdev->sched_ref);
	return 0;
}

static void vnpu_job_sched_release(struct kref *ref)
{
	struct vnpu_device *vdev = container_of(ref, struct vnpu_device, sched_ref);

	/* Every job holds its queue, and every queue the schedulers: none is left. */
	drm_WARN_ON(&vdev->drm, atomic_read(&vdev->stats.jobs));
	vnpu_sched_fini(vdev, vdev->num_cores);
	destroy_workqueue(vdev->sched_wq);
	vdev->sched_wq = NULL;
}

static void vnpu_job_sched_put(struct vnpu_device *vdev)
{
	kref_put(&vdev->sched_ref, vnpu_job_sched_release);
}

/**
 * vnpu_queue_create() - the job queue of a file being opened
 * @vdev: the device, registered (the caller is inside drm_dev_enter())
 *
 * The queue holds the schedulers, a DRM device reference and the module
 * until its last job has been freed (struct vnpu_queue).
 *
 * Return: the queue, or an ERR_PTR.
 */
struct vnpu_queue *vnpu_queue_create(struct vnpu_device *vdev)
{
	struct vnpu_queue *queue;
	int ret;

	queue = kzalloc(sizeof(*queue), GFP_KERNEL);
	if (!queue)
		return ERR_PTR(-ENOMEM);
	/* Any core: vnpu_job_pick_core() chooses one for each job. */
	ret = drm_sched_entity_init(&queue->entity, DRM_SCHED_PRIORITY_NORMAL, vdev->scheds,
				    vdev->num_cores, NULL);
	if (ret) {
		kfree(queue);
		return ERR_PTR(ret);
	}
	kref_init(&queue->ref);
	queue->vdev = vdev;
	mutex_init(&queue->push_lock);
	INIT_WORK(&queue->release_work, vnpu_queue_release_work);
	kref_get(&vdev->sched_ref);
	drm_dev_get(&vdev->drm);
	/* An open file pins the module already; the queue may outlive the file. */
	__module_get(THIS_MODULE);
	return queue;
}

/* The entity is empty: no job holds the queue any more. Process context. */
static void vnpu_queue_finish(struct vnpu_queue *queue)
{
	struct vnpu_device *vdev = queue->vdev;

	drm_sched_entity_fini(&queue->entity);
	mutex_destroy(&queue->push_lock);
	kfree(queue);
	vnpu_job_sched_put(vdev);
	drm_dev_put(&vdev->drm);
}

static void vnpu_queue_release_work(struct work_struct *work)
{
	vnpu_queue_finish(container_of(work, struct vnpu_queue, release_work));
	module_put(THIS_MODULE);
}

static void vnpu_queue_release_now(struct kref *ref)
{
	vnpu_queue_finish(container_of(ref, struct vnpu_queue, ref));
	module_put(THIS_MODULE);
}

/*
 * A job's free_job runs on the schedulers' workqueue, which the last
 * scheduler reference destroys: its queue is finished on another one.
 */
static void vnpu_queue_release_later(struct kref *ref)
{
	struct vnpu_queue *queue = container_of(ref, struct vnpu_queue, ref);

	queue_work(system_unbound_wq, &queue->release_work);
}

static void vnpu_queue_put_from_job(struct vnpu_queue *queue)
{
	kref_put(&queue->ref, vnpu_queue_release_later);
}

/**
 * vnpu_queue_close() - drop the file's reference on its queue
 * @queue: the queue of a file being closed, its context marked closed
 *
 * Never waits for a job: the file's jobs that still wait for their
 * dependencies end with -ECANCELED, without running, once those have
 * signalled, and the queue goes with the last of them.
 */
void vnpu_queue_close(struct vnpu_queue *queue)
{
	kref_put(&queue->ref, vnpu_queue_release_now);
}

/**
 * vnpu_job_stop_device() - cancel every job on the device
 * @vdev: the device, unplugged (drm_dev_unplug()) or never registered
 *
 * The jobs on the device are cancelled (-ECANCELED) with a reset of every
 * core rather than awaited: a hung job would otherwise hold rmmod for a
 * timeout per job, and the device must not write into their BOs once they
 * are freed. This is the one path that still touches the hardware after
 * the unplug: the BARs stay mapped until remove() returns, and every other
 * path is fenced by drm_dev_enter(). Jobs that files still open (an
 * unbind) have queued are cancelled in vnpu_job_run() without the device.
 */
void vnpu_job_stop_device(struct vnpu_device *vdev)
{
	u32 i;

	/* Unplugged, the watchdogs and the completion interrupt queue nothing more. */
	for (i = 0; i < vdev->num_cores; i++)
		cancel_delayed_work_sync(&vdev->cores[i].watchdog);
	cancel_work_sync(&vdev->cancel_work);
	if (!vnpu_job_count_active(vdev))
		return;
	mutex_lock(&vdev->reset_lock);
	vnpu_job_reset_hw(vdev, vnpu_all_cores(vdev), 0, 0, false);
	mutex_unlock(&vdev->reset_lock);
}

/**
 * vnpu_job_fini() - wait until no job is left, then let the schedulers go
 * @vdev: the device, stopped (vnpu_job_stop_device())
 *
 * Unplugged, the device gets no new job, and every job left ends without
 * it (vnpu_job_run()) as soon as its dependencies have signalled: only a
 * fence of another driver that does not signal keeps this waiting, and it
 * says so every VNPU_TEARDOWN_WARN_MS. No job outlives the device's
 * binding: its runtime PM reference, its DMA and its coredump need it. The
 * schedulers go with their last user: a file still open keeps its queue's
 * until it closes.
 */
void vnpu_job_fini(struct vnpu_device *vdev)
{
	while (!wait_event_timeout(vdev->idle_wq, !atomic_read(&vdev->stats.jobs),
				   msecs_to_jiffies(VNPU_TEARDOWN_WARN_MS)))
		drm_warn(&vdev->drm, "unbind waits for %d jobs whose dependencies have not signalled\n",
			 atomic_read(&vdev->stats.jobs));
	vnpu_job_sched_put(vdev);
}

/* Copy, check and look up a job's BO list. */
static int vnpu_job_get_bos(struct vnpu_job *job, struct drm_file *file,
			    const struct drm_vnpu_job *args)
{
	struct drm_device *drm = &job->vdev->drm;
	struct drm_vnpu_job_bo *ubos;
	u32 i, j;
	int ret = 0;

	if (!args->bo_count || args->bo_count > VNPU_MAX_JOB_BOS) {
		drm_dbg_driver(drm, "job bo_count %u not 1..%u\n", args->bo_count,
			       VNPU_MAX_JOB_BOS);
		return -EINVAL;
	}
	ubos = kvmalloc_array(args->bo_count, sizeof(*ubos), GFP_KERNEL);
	job->bos = kvcalloc(args->bo_count, sizeof(*job->bos), GFP_KERNEL);
	if (!ubos || !job->bos) {
		ret = -ENOMEM;
		goto out;
	}
	if (copy_from_user(ubos, u64_to_user_ptr(args->bos),
			   array_size(args->bo_count, sizeof(*ubos)))) {
		ret = -EFAULT;
		goto out;
	}
	/* Every -EINVAL before any -ENOENT: shape errors first. */
	for (i = 0; i < args->bo_count; i++) {
		if (!ubos[i].flags || ubos[i].flags & ~DRM_VNPU_JOB_BO_FLAGS_MASK) {
			drm_dbg_driver(drm, "job bo %u: flags %#x\n", i, ubos[i].flags);
			ret = -EINVAL;
			goto out;
		}
		for (j = 0; j < i; j++) {
			if (ubos[j].handle == ubos[i].handle) {
				drm_dbg_driver(drm, "job bo %u: handle %u listed twice\n", i,
					       ubos[i].handle);
				ret = -EINVAL;
				goto out;
			}
		}
	}
	job->bo_count = args->bo_count;
	for (i = 0; i < args->bo_count; i++) {
		job->bos[i].flags = ubos[i].flags;
		job->bos[i].bo = vnpu_bo_lookup(file, ubos[i].handle);
		if (!job->bos[i].bo) {
			drm_dbg_driver(drm, "job bo %u: no BO of this file has handle %u\n", i,
				       ubos[i].handle);
			ret = -ENOENT;
			goto out;
		}
	}
	for (i = 0; i < args->bo_count; i++) {
		if (job->bos[i].flags & DRM_VNPU_JOB_BO_WRITE &&
		    job->bos[i].bo->flags & DRM_VNPU_BO_DEVICE_READ_ONLY) {
			drm_dbg_driver(drm, "job bo %u: WRITE on a device-read-only BO\n", i);
			ret = -EACCES;
			goto out;
		}
	}
out:
	kvfree(ubos);
	return ret;
}

/*
 * Copy the stream into a command buffer and validate the copy: the device
 * runs the copy, so what it runs is what was checked, whatever userspace
 * writes to the command BO afterwards. The command BO is not needed after
 * the copy.
 */
static int vnpu_job_get_cmd(struct vnpu_job *job, struct drm_file *file,
			    const struct drm_vnpu_job *args)
{
	struct drm_device *drm = &job->vdev->drm;
	struct vnpu_bo *cmd_bo;
	int ret = 0;

	if (!args->cmd_size || args->cmd_size > VNPU_MAX_JOB_SIZE ||
	    !IS_ALIGNED(args->cmd_offset, 8) || !IS_ALIGNED(args->cmd_size, 8)) {
		drm_dbg_driver(drm, "job cmd_offset %u cmd_size %u: not 1..%lu, 8-aligned\n",
			       args->cmd_offset, args->cmd_size, VNPU_MAX_JOB_SIZE);
		return -EINVAL;
	}
	cmd_bo = vnpu_bo_lookup(file, args->cmd_bo_handle);
	if (!cmd_bo) {
		drm_dbg_driver(drm, "job cmd_bo_handle %u: no BO of this file\n",
			       args->cmd_bo_handle);
		return -ENOENT;
	}
	/* The stream is copied from the BO's own pinned pages: an import has none. */
	if (!cmd_bo->base.pages) {
		drm_dbg_driver(drm, "job cmd_bo_handle %u: an imported BO cannot hold a stream\n",
			       args->cmd_bo_handle);
		ret = -EINVAL;
		goto out;
	}
	if ((u64)args->cmd_offset + args->cmd_size > vnpu_bo_size(cmd_bo)) {
		drm_dbg_driver(drm, "job command range ends past its BO's %zu bytes\n",
			       vnpu_bo_size(cmd_bo));
		ret = -EINVAL;
		goto out;
	}
	job->cmdbuf = vnpu_cmdbuf_get(job->ctx, args->cmd_size);
	if (IS_ERR(job->cmdbuf)) {
		ret = PTR_ERR(job->cmdbuf);
		job->cmdbuf = NULL;
		goto out;
	}
	job->cmd_size = args->cmd_size;
	/* Its pages are pinned for its lifetime (vnpu_ioctl_bo_create()). */
	vnpu_cmdbuf_fill(job->cmdbuf, cmd_bo->base.pages, args->cmd_offset, args->cmd_size);
	if (vnpu_job_check_streams())
		ret = vnpu_validate_stream(job->vdev, job->cmdbuf->vaddr, job->cmd_size,
					   job->bos, job->bo_count);
	if (!ret)
		vnpu_cmdbuf_sync(job->vdev, job->cmdbuf);
out:
	drm_gem_object_put(&cmd_bo->base.base);
	return ret;
}

/* Add the in-syncobjs' fences as dependencies and look up the out-syncobj. */
static int vnpu_job_get_syncobjs(struct vnpu_job *job, struct drm_file *file,
				 const struct drm_vnpu_job *args)
{
	struct drm_device *drm = &job->vdev->drm;
	u32 *handles;
	u32 i;
	int ret = 0;

	if (args->in_syncobj_count > VNPU_MAX_IN_SYNCOBJS) {
		drm_dbg_driver(drm, "job in_syncobj_count %u above %u\n", args->in_syncobj_count,
			       VNPU_MAX_IN_SYNCOBJS);
		return -EINVAL;
	}
	if (args->in_syncobj_count) {
		handles = kvmalloc_array(args->in_syncobj_count, sizeof(*handles), GFP_KERNEL);
		if (!handles)
			return -ENOMEM;
		if (copy_from_user(handles, u64_to_user_ptr(args->in_syncobjs),
				   array_size(args->in_syncobj_count, sizeof(*handles))))
			ret = -EFAULT;
		for (i = 0; !ret && i < args->in_syncobj_count; i++)
			ret = drm_sched_job_add_syncobj_dependency(&job->base, file, handles[i], 0);
		kvfree(handles);
		if (ret)
			return ret;
	}
	if (args->out_syncobj) {
		job->out_syncobj = drm_syncobj_find(file, args->out_syncobj);
		if (!job->out_syncobj) {
			drm_dbg_driver(drm, "job out_syncobj %u: no such syncobj\n",
				       args->out_syncobj);
			return -ENOENT;
		}
	}
	return 0;
}

/* Build one job from its userspace description; nothing is queued yet. */
static int vnpu_job_create(struct vnpu_device *vdev, struct drm_file *file,
			   const struct drm_vnpu_job *args, struct vnpu_job **out)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	struct vnpu_job *job;
	int ret;

	if (args->flags || args->pad) {
		drm_dbg_driver(&vdev->drm, "job flags %#x pad %#x: must be 0\n", args->flags,
			       args->pad);
		return -EINVAL;
	}

	job = kzalloc(sizeof(*job), GFP_KERNEL);
	if (!job)
		return -ENOMEM;
	job->vdev = vdev;
	INIT_LIST_HEAD(&job->node);
	atomic_inc(&vdev->stats.jobs);
	kref_get(&fpriv->queue->ref);
	job->queue = fpriv->queue;
	job->ctx = vnpu_ctx_get(fpriv->ctx);
	atomic_inc(&job->ctx->jobs_in_flight);
	job->fence_mem = kzalloc(sizeof(*job->fence_mem), GFP_KERNEL);
	if (!job->fence_mem) {
		ret = -ENOMEM;
		goto err;
	}

	ret = vnpu_job_get_bos(job, file, args);
	if (ret)
		goto err;
	ret = vnpu_job_get_cmd(job, file, args);
	if (ret)
		goto err;

	/*
	 * Powered from here until the job is freed: run_job() never waits for a
	 * resume. Runtime PM is off while the system suspends or resumes.
	 */
	ret = vnpu_pm_get(vdev);
	if (ret) {
		ret = ret == -EACCES ? -EBUSY : ret;
		goto err;
	}
	job->pm_ref = true;

	ret = drm_sched_job_init(&job->base, &job->queue->entity, 1, job->queue, file->client_id);
	if (ret)
		goto err;
	job->initialised = true;

	ret = vnpu_job_get_syncobjs(job, file, args);
	if (ret)
		goto err;
	*out = job;
	return 0;
err:
	vnpu_job_free(job);
	return ret;
}

/* Copy job @i of the array, of @size bytes each, into @job. */
static int vnpu_job_copy(struct vnpu_device *vdev, const struct drm_vnpu_submit *args, u32 i,
			 struct drm_vnpu_job *job)
{
	u8 __user *src = u64_to_user_ptr(args->jobs + (u64)i * args->job_struct_size);
	int ret;

	if (copy_from_user(job, src, sizeof(*job)))
		return -EFAULT;
	if (args->job_struct_size > sizeof(*job)) {
		/* A newer userspace: fields this kernel does not know must be zero. */
		ret = check_zeroed_user(src + sizeof(*job), args->job_struct_size - sizeof(*job));
		if (ret < 0)
			return ret;
		if (!ret) {
			drm_dbg_driver(&vdev->drm, "job %u: bytes past drm_vnpu_job not zero\n",
				       i);
			return -EINVAL;
		}
	}
	return 0;
}

static int vnpu_cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

	return x < y ? -1 : x > y;
}

/* Every distinct GEM object the jobs use, sorted, for locking. */
static int vnpu_collect_objs(struct vnpu_job **jobs, u32 count,
			     struct drm_gem_object ***out, u32 *n_out)
{
	struct drm_gem_object **objs;
	u32 i, j, n = 0, total = 0;

	for (i = 0; i < count; i++)
		total += jobs[i]->bo_count;
	objs = kvmalloc_array(total, sizeof(*objs), GFP_KERNEL);
	if (!objs)
		return -ENOMEM;
	for (i = 0; i < count; i++) {
		for (j = 0; j < jobs[i]->bo_count; j++)
			objs[n++] = &jobs[i]->bos[j].bo->base.base;
	}
	sort(objs, n, sizeof(*objs), vnpu_cmp_ptr, NULL);
	for (i = 0, j = 0; i < n; i++)
		if (!j || objs[j - 1] != objs[i])
			objs[j++] = objs[i];
	*out = objs;
	*n_out = j;
	return 0;
}

/*
 * Add the BOs' current fences as dependencies. Jobs of this submission
 * need not wait for each other through the reservations: they share one
 * entity, which stays on one core while a job of it is unfinished, and a
 * core runs its jobs in order.
 */
static int vnpu_job_add_implicit_deps(struct vnpu_job *job)
{
	u32 i;
	int ret;

	for (i = 0; i < job->bo_count; i++) {
		struct drm_gem_object *obj = &job->bos[i].bo->base.base;
		bool write = job->bos[i].flags & DRM_VNPU_JOB_BO_WRITE;

		ret = drm_sched_job_add_implicit_dependencies(&job->base, obj, write);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * The core for the file's next job. While a job of the entity is unfinished
 * the scheduler keeps the entity where it is whatever this says. Otherwise it
 * is the core of core_mask with the lowest scheduler score (entities on it and
 * unfinished jobs), the entity's own core on a tie. drm_sched_pick_best() alone counts
 * an idle entity against the core it is on and so moves a lone file to
 * another core at every job, waking the other core's thread in the device
 * and leaving each core's caches cold; it also spreads one file's jobs over
 * cores whose throughput it does not gain from.
 */
static void vnpu_job_pick_core(struct vnpu_queue *queue)
{
	struct drm_sched_entity *entity = &queue->entity;
	struct vnpu_device *vdev = queue->vdev;
	struct drm_gpu_scheduler *own = NULL;
	u32 mask = READ_ONCE(vdev->core_mask);
	unsigned int i, pick = __ffs(mask), best = UINT_MAX;
	bool on_rq = false;

	lockdep_assert_held(&queue->push_lock);
	if (vdev->num_cores == 1)
		return;
	/* The entity's run queue is the entity's to change, its list entry the run queue's. */
	spin_lock(&entity->lock);
	if (entity->rq) {
		own = entity->rq->sched;
		spin_lock(&entity->rq->lock);
		on_rq = !list_empty(&entity->list);
		spin_unlock(&entity->rq->lock);
	}
	spin_unlock(&entity->lock);
	for (i = 0; i < vdev->num_cores; i++) {
		struct drm_gpu_scheduler *sched = vdev->scheds[i];
		unsigned int score = atomic_read(sched->score);

		if (!(mask & BIT(i)))
			continue;
		if (sched == own) {
			/* Not itself (counted while on the core's run queue); first on a tie. */
			if (score && on_rq)
				score--;
			if (score <= best) {
				best = score;
				pick = i;
			}
		} else if (score < best) {
			best = score;
			pick = i;
		}
	}
	drm_sched_entity_modify_sched(entity, &vdev->scheds[pick], 1);
}

/* Arm and queue a fully prepared job; cannot fail. Reservations and the push lock are held. */
static void vnpu_job_push(struct vnpu_queue *queue, struct vnpu_job *job)
{
	struct dma_fence *finished;
	u32 i;

	vnpu_job_pick_core(queue);
	drm_sched_job_arm(&job->base);
	finished = &job->base.s_fence->finished;
	for (i = 0; i < job->bo_count; i++)
		dma_resv_add_fence(job->bos[i].bo->base.base.resv, finished,
				   job->bos[i].flags & DRM_VNPU_JOB_BO_WRITE ?
				   DMA_RESV_USAGE_WRITE : DMA_RESV_USAGE_READ);
	if (job->out_syncobj)
		drm_syncobj_replace_fence(job->out_syncobj, finished);
	atomic64_inc(&job->vdev->stats.jobs_submitted);
	drm_sched_entity_push_job(&job->base);
}

/*
 * All or nothing: every job is built and every fallible step (copies,
 * lookups, validation, dependency collection, locking and fence-slot
 * reservation) is done for all jobs before the first one is armed.
 */
static int vnpu_submit(struct vnpu_device *vdev, struct drm_file *file,
		       const struct drm_vnpu_submit *args)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	struct ww_acquire_ctx acquire;
	struct drm_gem_object **objs = NULL;
	struct vnpu_job **jobs;
	struct drm_vnpu_job ujob;
	u32 i, n_objs = 0, n_jobs = 0;
	int ret;

	jobs = kcalloc(args->job_count, sizeof(*jobs), GFP_KERNEL);
	if (!jobs)
		return -ENOMEM;
	for (n_jobs = 0; n_jobs < args->job_count; n_jobs++) {
		ret = vnpu_job_copy(vdev, args, n_jobs, &ujob);
		if (ret)
			goto out_free;
		ret = vnpu_job_create(vdev, file, &ujob, &jobs[n_jobs]);
		if (ret)
			goto out_free;
	}

	ret = vnpu_collect_objs(jobs, n_jobs, &objs, &n_objs);
	if (ret)
		goto out_free;
	ret = drm_gem_lock_reservations(objs, n_objs, &acquire);
	if (ret)
		goto out_free;
	for (i = 0; i < n_objs; i++) {
		ret = dma_resv_reserve_fences(objs[i]->resv, n_jobs);
		if (ret)
			goto out_unlock;
	}
	for (i = 0; i < n_jobs; i++) {
		ret = vnpu_job_add_implicit_deps(jobs[i]);
		if (ret)
			goto out_unlock;
	}

	mutex_lock(&fpriv->queue->push_lock);
	for (i = 0; i < n_jobs; i++)
		vnpu_job_push(fpriv->queue, jobs[i]);
	mutex_unlock(&fpriv->queue->push_lock);
	/* The scheduler owns the jobs now. */
	n_jobs = 0;
out_unlock:
	drm_gem_unlock_reservations(objs, n_objs, &acquire);
out_free:
	for (i = 0; i < n_jobs; i++)
		if (jobs[i])
			vnpu_job_free(jobs[i]);
	kvfree(objs);
	kfree(jobs);
	return ret;
}

/*
 * SUBMIT copies each stream from its command BO: first wait for the jobs
 * that write one. Outside drm_dev_enter(): an unbind (drm_dev_unplug())
 * waits for the ioctls inside, and only then stops those jobs. A handle
 * that names no BO is left to vnpu_job_get_cmd() to report.
 */
static int vnpu_submit_wait_cmd_writers(struct vnpu_device *vdev, struct drm_file *file,
					const struct drm_vnpu_submit *args)
{
	struct drm_vnpu_job ujob;
	struct vnpu_bo *cmd_bo;
	long ret;
	u32 i;

	for (i = 0; i < args->job_count; i++) {
		ret = vnpu_job_copy(vdev, args, i, &ujob);
		if (ret)
			return ret;
		cmd_bo = vnpu_bo_lookup(file, ujob.cmd_bo_handle);
		if (!cmd_bo)
			continue;
		ret = dma_resv_wait_timeout(cmd_bo->base.base.resv, DMA_RESV_USAGE_WRITE, true,
					    MAX_SCHEDULE_TIMEOUT);
		drm_gem_object_put(&cmd_bo->base.base);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/**
 * vnpu_ioctl_submit() - DRM_IOCTL_VNPU_SUBMIT
 * @drm: the DRM device
 * @data: struct drm_vnpu_submit
 * @file: the calling file
 *
 * Return: 0 or a negative errno as documented in vnpu_accel.h.
 */
int vnpu_ioctl_submit(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct vnpu_device *vdev = to_vnpu_device(drm);
	struct drm_vnpu_submit *args = data;
	int ret, idx;

	if (args->flags || args->pad || !args->job_count ||
	    args->job_count > DRM_VNPU_MAX_JOBS_PER_SUBMIT ||
	    args->job_struct_size < sizeof(struct drm_vnpu_job) ||
	    args->job_struct_size > DRM_VNPU_MAX_JOB_STRUCT_SIZE ||
	    !IS_ALIGNED(args->job_struct_size, 8)) {
		drm_dbg_driver(drm, "submit flags %#x pad %#x job_count %u job_struct_size %u\n",
			       args->flags, args->pad, args->job_count, args->job_struct_size);
		return -EINVAL;
	}
	ret = vnpu_submit_wait_cmd_writers(vdev, file, args);
	if (ret)
		return ret;
	/* The command buffers' DMA mappings and the device go with an unbind. */
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	ret = READ_ONCE(vdev->wedged) ? -ENODEV : vnpu_submit(vdev, file, args);
	drm_dev_exit(idx);
	return ret;
}
