// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * DRM_IOCTL_VNPU_SUBMIT: copy and check the jobs, collect their
 * dependencies, and push them to the file's queue.
 *
 * SUBMIT copies each stream from the command BO's pinned pages into a
 * command buffer (vnpu_cmdbuf.c), once the jobs that write the command BO
 * have ended, and validates that copy, the one the device runs; command
 * buffers are pooled per file, so a repeated submission maps nothing.
 * Every fallible step is done for all jobs of a submission before the
 * first is armed: all or nothing.
 */
#include <linux/dma-resv.h>
#include <linux/overflow.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/uaccess.h>

#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_print.h>

#include "vnpu_job.h"
#include "vnpu_pm.h"

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
		drm_dbg_driver(drm, "job cmd_offset %u cmd_size %u: not 1..%u, 8-aligned\n",
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
	/*
	 * Always: a file's page tables map every BO of the file, so only the
	 * check keeps a job to the BOs it lists and the directions it lists them in.
	 */
	ret = vnpu_validate_stream(job->vdev, job->cmdbuf->vaddr, job->cmd_size, job->bos,
				   job->bo_count);
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

	job = kzalloc_obj(*job, GFP_KERNEL);
	if (!job)
		return -ENOMEM;
	job->vdev = vdev;
	INIT_LIST_HEAD(&job->node);
	atomic_inc(&vdev->stats.jobs);
	kref_get(&fpriv->queue->ref);
	job->queue = fpriv->queue;
	job->ctx = vnpu_ctx_get(fpriv->ctx);
	atomic_inc(&job->ctx->jobs_in_flight);
	job->fence_mem = kzalloc_obj(*job->fence_mem, GFP_KERNEL);
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
	 * resume. Runtime PM is off while the system suspends or resumes; any
	 * other failure is a device that did not power up (logged).
	 */
	ret = vnpu_pm_get(vdev);
	if (ret) {
		ret = ret == -EACCES ? -EBUSY : -EIO;
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
