// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Jobs on the device: the scheduler back end, completion and the queues.
 *
 * Life of a job: SUBMIT (vnpu_submit.c) checks it and pushes it to the
 * file's scheduler entity, its queue. When its dependencies have signalled,
 * run_job() writes a submission-queue entry into BAR2 and rings the
 * doorbell; the device executes entries in order and writes one
 * completion-queue entry per job.
 *
 * Cores: the device has several (REG_NUM_CORES), sharing the one queue
 * pair; each runs the entries that name it (SQE_CORE) in order, one at a
 * time, and the cores run at once. Each core has its own scheduler, and a
 * file's entity may run on any of them: drm_sched moves an entity only when
 * its queue is empty and its last job has finished, to the least loaded
 * core. So a file's jobs run one at a time, in submission order, on one
 * core, as the uapi promises; different files' jobs run in parallel. The
 * completion interrupt drains the whole completion queue (interrupts
 * coalesce) and signals each job's hardware fence with the job's status;
 * the scheduler then signals the finished fence that userspace sees through
 * the out-syncobj and the BOs' reservations. Timeouts, resets and
 * cancellation are in vnpu_reset.c.
 *
 * A file's queue (struct vnpu_queue) outlives the file while its jobs do:
 * each job holds it, and it holds the device, the schedulers and the
 * module, so a job freed after its file closed (or after an unbind) finds
 * all of them. The scheduler's work runs on a per-CPU workqueue, so
 * run_job() runs on the CPU that submitted, and a submitter about to sleep
 * in a fence wait hands that CPU to it instead of waking an idle one.
 */
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include <drm/drm_drv.h>
#include <drm/drm_managed.h>
#include <drm/drm_print.h>

#include "vnpu_coredump.h"
#include "vnpu_io.h"
#include "vnpu_job.h"
#include "vnpu_pm.h"

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
#ifdef VNPU_DMA_FENCE_SPINLOCK
	spinlock_t *lock = dma_fence_spinlock(fence);
#else
	spinlock_t *lock = fence->lock;
#endif
	struct vnpu_device *vdev = container_of(lock, struct vnpu_device, fence_lock);
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
void vnpu_job_free(struct vnpu_job *job)
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
void vnpu_job_write_sqe(struct vnpu_device *vdev, struct vnpu_job *job)
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
void vnpu_job_head_started(struct vnpu_core *core)
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
void vnpu_job_stop_clock(struct vnpu_job *job)
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

/* Copy back what an ended job wrote, then signal its hardware fence with its status. */
static void vnpu_job_signal(struct vnpu_job *job)
{
	vnpu_job_sync_for_cpu(job);
	if (job->end_status)
		dma_fence_set_error(job->done, job->end_status);
	dma_fence_signal(job->done);
}

/*
 * End a job the device no longer owns: record its status, then signal its
 * hardware fence, at once or, with @ended, once the caller has dropped
 * job_lock (vnpu_job_end_finish()): with bounce buffering the signal copies
 * what the job wrote back to the CPU's pages, which is no work for a
 * spinlock with interrupts off. A core's jobs end in the order they were
 * written to the queue, so its fences signal in seqno order. A fault or a
 * hang is remembered for the coredump, which is taken when the job is
 * freed, in process context. Called with job_lock held.
 */
void vnpu_job_complete(struct vnpu_device *vdev, struct vnpu_job *job, int status,
		       u64 fault_va, u64 cycles, struct list_head *ended)
{
	lockdep_assert_held(&vdev->job_lock);
	list_del_init(&job->node);
	if (status == -EFAULT || status == -ETIMEDOUT) {
		job->dump_status = status;
		job->dump_fault_va = fault_va;
		job->dump_cycles = cycles;
	}
	vnpu_job_stop_clock(job);
	vnpu_job_head_started(job->core);
	vnpu_job_account(vdev, job, status, fault_va);
	job->end_status = status;
	if (ended)
		list_add_tail(&job->node, ended);
	else
		vnpu_job_signal(job);
}

/**
 * vnpu_job_end_begin() - start a process-context path that may end jobs
 * @vdev: the device
 * @ended: an empty list the path passes to vnpu_job_complete() and
 *	vnpu_job_drain_cq()
 *
 * With bounce buffering (&vnpu_device.complete_in_thread) the jobs the path
 * ends are signalled by vnpu_job_end_finish(), after job_lock, and one such
 * path runs at a time (&vnpu_device.complete_lock), so a core's fences still
 * signal in order; without it they are signalled at once, as the hard
 * interrupt handler signals them.
 *
 * Return: @ended, or NULL for "signal at once".
 */
struct list_head *vnpu_job_end_begin(struct vnpu_device *vdev, struct list_head *ended)
{
	bool cookie;

	if (!vdev->complete_in_thread)
		return NULL;
	/*
	 * The path signals fences while it holds complete_lock: the lock is
	 * taken inside a fence-signalling section on every path (the
	 * completion thread's included), so lockdep sees one order.
	 */
	cookie = dma_fence_begin_signalling();
	mutex_lock(&vdev->complete_lock);
	vdev->complete_cookie = cookie;
	return ended;
}

/**
 * vnpu_job_end_finish() - signal the jobs a path ended, job_lock dropped
 * @vdev: the device
 * @ended: what vnpu_job_end_begin() returned
 */
void vnpu_job_end_finish(struct vnpu_device *vdev, struct list_head *ended)
{
	struct vnpu_job *job, *tmp;
	bool cookie;

	if (!ended)
		return;
	/* A signalled job may be freed at once: unlink it first, touch it no more. */
	list_for_each_entry_safe(job, tmp, ended, node) {
		list_del_init(&job->node);
		vnpu_job_signal(job);
	}
	cookie = vdev->complete_cookie;
	mutex_unlock(&vdev->complete_lock);
	dma_fence_end_signalling(cookie);
}

/* The cores running a closed file's job, as a CMD_RESET mask. Called with job_lock held. */
u32 vnpu_job_heads_closed(struct vnpu_device *vdev)
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
void vnpu_job_drain_cq(struct vnpu_device *vdev, struct list_head *ended)
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
					  status ? vnpu_rd64(vdev, cqe + VNPU_CQE_CYCLES) : 0,
					  ended);
		else
			drm_dbg_driver(&vdev->drm, "completion of unknown job %llu on core %u\n",
				       seqno, core);
	}
	vnpu_wr32(vdev, VNPU_CQ_HEAD, vdev->cq_head);
	/* A closed file's job has started: stop it (vnpu_job_cancel_closed()). */
	if (vnpu_job_heads_closed(vdev))
		queue_work(vdev->sched_wq, &vdev->cancel_work);
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

	/*
	 * With bounce buffering, completing a job copies what it wrote back to
	 * the CPU's pages: the interrupt thread does it, outside job_lock.
	 * Without it (a coherent device, the usual case) this handler completes
	 * the jobs itself: a few register reads and no thread wake-up.
	 */
	if (vdev->complete_in_thread)
		return IRQ_WAKE_THREAD;
	/* Unplugged: remove() drains the queue itself before the BARs go. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return IRQ_NONE;
	spin_lock(&vdev->job_lock);
	vnpu_job_drain_cq(vdev, NULL);
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
	struct list_head *ended;
	LIST_HEAD(jobs);
	int idx;

	if (!drm_dev_enter(&vdev->drm, &idx))
		return IRQ_NONE;
	ended = vnpu_job_end_begin(vdev, &jobs);
	spin_lock_irq(&vdev->job_lock);
	vnpu_job_drain_cq(vdev, ended);
	spin_unlock_irq(&vdev->job_lock);
	vnpu_job_end_finish(vdev, ended);
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

/*
 * drm_sched's own timeout is off (MAX_SCHEDULE_TIMEOUT): it restarts
 * whenever a job is pushed, so a file submitting more often than the
 * timeout could keep a hung job running for ever. The core watchdogs time
 * jobs instead (vnpu_job_watchdog()); this is never called.
 */
static enum drm_gpu_sched_stat vnpu_job_timedout(struct drm_sched_job *sched_job)
{
#ifdef VNPU_SCHED_STAT_NO_HANG
	return DRM_GPU_SCHED_STAT_NO_HANG;
#else
	return DRM_GPU_SCHED_STAT_NOMINAL;
#endif
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
	ret = drmm_mutex_init(&vdev->drm, &vdev->complete_lock);
	if (ret)
		return ret;
	/* Bounce buffering (swiotlb) or a non-coherent device: set up by the DMA mask, at probe. */
	vdev->complete_in_thread = dma_dev_need_sync(vdev->drm.dev);
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
#ifdef VNPU_WQ_PERCPU
	vdev->sched_wq = alloc_workqueue("vnpu-sched", WQ_MEM_RECLAIM | WQ_HIGHPRI | WQ_PERCPU, 0);
#else
	vdev->sched_wq = alloc_workqueue("vnpu-sched", WQ_MEM_RECLAIM | WQ_HIGHPRI, 0);
#endif
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

	queue = kzalloc_obj(*queue, GFP_KERNEL);
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
