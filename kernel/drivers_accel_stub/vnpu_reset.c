// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Recovery: job timeouts, core resets, cancellation of a closed file's
 * jobs, and the pauses of firmware reload and system sleep.
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
 * A reset the device does not answer takes it off the bus (no more DMA)
 * before any fence signals, and wedges it: SUBMIT answers -ENODEV.
 *
 * Closing a file cancels its jobs (-ECANCELED) and waits for none: those
 * the scheduler has not handed over yet end in run_job() without reaching
 * the device; one that is running (the oldest on the device) is stopped by
 * a reset as above, with the other files' jobs on that core queued again;
 * one queued behind another file's job is stopped the same way when it
 * reaches the head of its core's queue, so an innocent job that has
 * started is never aborted. Jobs that are still on the device when the
 * driver unbinds fail with -ECANCELED.
 */
#include <linux/iopoll.h>
#include <linux/pci.h>

#include <drm/drm_drv.h>
#include <drm/drm_print.h>

#include "vnpu_io.h"
#include "vnpu_job.h"

u32 vnpu_all_cores(struct vnpu_device *vdev)
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
void vnpu_job_reset_hw(struct vnpu_device *vdev, u32 mask, u64 guilty,
		       int guilty_status, bool requeue)
{
	struct vnpu_job *job, *tmp;
	struct list_head *ended;
	struct vnpu_core *core;
	u64 abort_cycles;
	bool requeued;
	LIST_HEAD(owned);
	LIST_HEAD(jobs);
	u32 i;
	int ret;

	mutex_lock(&vdev->hw_lock);
	ended = vnpu_job_end_begin(vdev, &jobs);
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
	vnpu_job_drain_cq(vdev, ended);
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
				vnpu_job_complete(vdev, job, guilty_status, 0, abort_cycles,
						  ended);
			else if (!requeue || (!requeued && READ_ONCE(job->ctx->closed)))
				vnpu_job_complete(vdev, job, -ECANCELED, 0, 0, ended);
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
	vnpu_job_end_finish(vdev, ended);
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
	struct list_head *ended;
	struct vnpu_job *head;
	LIST_HEAD(jobs);
	bool hung;

	mutex_lock(&vdev->reset_lock);
	ended = vnpu_job_end_begin(vdev, &jobs);
	spin_lock_irq(&vdev->job_lock);
	vnpu_job_drain_cq(vdev, ended);
	head = list_first_entry_or_null(&core->active, struct vnpu_job, node);
	hung = head && head->seqno == seqno;
	/* Any user can make a job hang: the log line is rate-limited. */
	if (hung)
		dev_warn_ratelimited(vdev->drm.dev,
				     "job %llu of context %u timed out after %u ms on core %u, resetting it\n",
				     seqno, head->ctx->id, READ_ONCE(vdev->job_timeout_ms),
				     core->index);
	spin_unlock_irq(&vdev->job_lock);
	vnpu_job_end_finish(vdev, ended);
	if (hung)
		vnpu_job_reset_hw(vdev, BIT(core->index), seqno, -ETIMEDOUT, true);
	mutex_unlock(&vdev->reset_lock);
}

/*
 * The job timeout, per core: fires the job timeout after the core's
 * head job started (vnpu_job_head_started()). A head that started later
 * than that re-arms it for the rest of its time.
 */
void vnpu_job_watchdog(struct work_struct *work)
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
	struct list_head *ended;
	LIST_HEAD(jobs);
	bool cookie;
	u32 mask;
	int idx;

	/* Unplugged: remove() has reset the device and settled its jobs. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return;
	cookie = dma_fence_begin_signalling();
	mutex_lock(&vdev->reset_lock);
	ended = vnpu_job_end_begin(vdev, &jobs);
	spin_lock_irq(&vdev->job_lock);
	/* The jobs may have completed meanwhile; then there is nothing to stop. */
	vnpu_job_drain_cq(vdev, ended);
	mask = vnpu_job_heads_closed(vdev);
	spin_unlock_irq(&vdev->job_lock);
	vnpu_job_end_finish(vdev, ended);
	if (mask)
		vnpu_job_reset_hw(vdev, mask, 0, 0, true);
	mutex_unlock(&vdev->reset_lock);
	dma_fence_end_signalling(cookie);
	drm_dev_exit(idx);
}

void vnpu_job_cancel_work(struct work_struct *work)
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

/*
 * Cancel every job on the device with a reset of every core. Like the
 * watchdog and the cancellation of closed files' jobs, it signals fences
 * under reset_lock: reset_lock is taken inside the signalling section.
 */
static void vnpu_job_reset_all(struct vnpu_device *vdev)
{
	bool cookie = dma_fence_begin_signalling();

	mutex_lock(&vdev->reset_lock);
	vnpu_job_reset_hw(vdev, vnpu_all_cores(vdev), 0, 0, false);
	mutex_unlock(&vdev->reset_lock);
	dma_fence_end_signalling(cookie);
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
	vnpu_job_reset_all(vdev);
}

/**
 * vnpu_job_unquiesce() - feed the device again after vnpu_job_quiesce()
 * @vdev: the device
 */
void vnpu_job_unquiesce(struct vnpu_device *vdev)
{
	vnpu_job_wqueues_start(vdev);
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
	vnpu_job_reset_all(vdev);
}
