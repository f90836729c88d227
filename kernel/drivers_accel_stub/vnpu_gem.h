/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Buffer objects: GEM shmem objects mapped into the owning
 * file's device address space.
 */
#ifndef __VNPU_GEM_H__
#define __VNPU_GEM_H__

#include <drm/drm_gem_shmem_helper.h>
#include <drm/drm_mm.h>

#include "vnpu_drv.h"

/**
 * struct vnpu_bo - a vnpu buffer object
 * @base: the shmem GEM object
 * @ctx: the owning file's context: the creating one, or for an imported
 *	dma-buf the importing one (NULL until its handle is made)
 * @ctx_link: entry in &vnpu_ctx.bos
 * @node: its device VA range (plus one unmapped guard page)
 * @sgt: its pages, DMA-mapped while @dma_mapped; NULL for an import, whose
 *	attachment's table is &drm_gem_shmem_object.sgt
 * @flags: DRM_VNPU_BO_* flags
 * @pinned: the pages are pinned (for the BO's whole life)
 * @dma_mapped: @sgt is DMA-mapped (until the BO or the device goes)
 * @mapped: the pages are in @ctx's page tables
 * @needs_sync: the DMA mapping bounces (swiotlb) or the device is not
 *	coherent: jobs sync it (vnpu_bo_sync_for_device(), _for_cpu())
 * @device_writers: jobs on the device that write the BO
 * @status_lock: protects @job_status and @fault_va
 * @job_status: outcome of the last job that wrote the BO
 * @fault_va: faulting VA of that job, if it faulted
 * @detached: an import whose attachment went at unbind
 *	(vnpu_gem_release_dma()): the dma-buf, referenced until the BO goes
 */
struct vnpu_bo {
	struct drm_gem_shmem_object base;
	struct vnpu_ctx *ctx;
	struct list_head ctx_link;
	struct drm_mm_node node;
	struct sg_table *sgt;
	u32 flags;
	bool pinned;
	bool dma_mapped;
	bool mapped;
	bool needs_sync;
	atomic_t device_writers;
	spinlock_t status_lock; /* protects @job_status and @fault_va */
	s32 job_status;
	u64 fault_va;
	struct dma_buf *detached;
};

static inline struct vnpu_bo *to_vnpu_bo(struct drm_gem_object *obj)
{
	return container_of(to_drm_gem_shmem_obj(obj), struct vnpu_bo, base);
}

static inline u64 vnpu_bo_va(struct vnpu_bo *bo)
{
	return bo->node.start;
}

static inline size_t vnpu_bo_size(struct vnpu_bo *bo)
{
	return bo->base.base.size;
}

struct drm_gem_object *vnpu_gem_create_object(struct drm_device *drm, size_t size);
struct drm_gem_object *vnpu_gem_prime_import(struct drm_device *drm, struct dma_buf *dma_buf);
void vnpu_bo_sync_for_device(struct vnpu_bo *bo);
void vnpu_bo_sync_for_cpu(struct vnpu_bo *bo);
void vnpu_gem_release_dma(struct vnpu_ctx *ctx);
struct vnpu_bo *vnpu_bo_lookup(struct drm_file *file, u32 handle);
void vnpu_bo_set_status(struct vnpu_bo *bo, int status, u64 fault_va);

int vnpu_ioctl_bo_create(struct drm_device *drm, void *data, struct drm_file *file);
int vnpu_ioctl_bo_info(struct drm_device *drm, void *data, struct drm_file *file);
int vnpu_ioctl_bo_wait(struct drm_device *drm, void *data, struct drm_file *file);
int vnpu_ioctl_bo_sync(struct drm_device *drm, void *data, struct drm_file *file);

#endif /* __VNPU_GEM_H__ */
