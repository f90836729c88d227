// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * BO_CREATE, BO_INFO, BO_WAIT, BO_SYNC and dma-buf import.
 *
 * A BO is a GEM shmem object whose pages are pinned and mapped into the
 * creating file's device address space for the BO's whole life, so a job
 * never waits for a page to be faulted in. The BO belongs to that file only:
 * a handle that reaches another file (GEM flink) names no BO there.
 *
 * dma-buf import (PRIME_FD_TO_HANDLE) makes a new BO of every dma-buf, a
 * vnpu BO's own included, as ivpu does: the buffer is attached to the NPU
 * and mapped for its DMA at import, and the BO is bound to the file that
 * imported it, when that file's handle is made (the GEM open hook): it gets
 * a VA in that file's address space, and from then on it is that file's BO
 * like any other (BO_INFO gives its VA; jobs list it). So a vnpu BO
 * exported by one file and imported by another is two BOs over the same
 * pages, one in each address space. The exporter keeps the pages; the
 * import holds the dma-buf (and so the exporter's BO) until it is closed.
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/slab.h>

#include <drm/drm_drv.h>
#include <drm/drm_gem.h>
#include <drm/drm_print.h>
#include <drm/drm_utils.h>

#include "vnpu_gem.h"

#ifdef VNPU_IMPORT_NS_STRING
MODULE_IMPORT_NS("DMA_BUF");
#else
MODULE_IMPORT_NS(DMA_BUF);
#endif

static bool vnpu_bo_imported(struct vnpu_bo *bo)
{
	return bo->base.base.import_attach;
}

/*
 * The BO's pages as the device reaches them: its own mapping, or the
 * dma-buf attachment's; NULL once unmapped (an unbind with the file open).
 */
static struct sg_table *vnpu_bo_dma_sgt(struct vnpu_bo *bo)
{
	if (vnpu_bo_imported(bo))
		return bo->base.sgt;
	return bo->dma_mapped ? bo->sgt : NULL;
}

/*
 * Whether the CPU's pages and what the device reaches differ: bounce
 * buffers (swiotlb=force, encrypted guests) or a non-coherent device.
 */
static bool vnpu_sgt_needs_sync(struct device *dev, struct sg_table *sgt)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_dma_sg(sgt, sg, i)
		if (dma_need_sync(dev, sg_dma_address(sg)))
			return true;
	return false;
}

static void vnpu_bo_dma_unmap(struct vnpu_bo *bo)
{
	lockdep_assert_held(&bo->ctx->vm.lock);
	if (bo->dma_mapped)
		dma_unmap_sgtable(bo->base.base.dev->dev, bo->sgt, DMA_BIDIRECTIONAL, 0);
	bo->dma_mapped = false;
}

static void vnpu_gem_free(struct drm_gem_object *obj)
{
	struct vnpu_bo *bo = to_vnpu_bo(obj);
	struct vnpu_ctx *ctx = bo->ctx;
	struct dma_buf *detached;

	if (ctx) {
		struct vnpu_device *vdev = ctx->vdev;

		if (bo->mapped)
			vnpu_vm_unmap(&ctx->vm, vnpu_bo_va(bo), vnpu_bo_size(bo));
		mutex_lock(&ctx->vm.lock);
		if (drm_mm_node_allocated(&bo->node))
			drm_mm_remove_node(&bo->node);
		list_del(&bo->ctx_link);
		vnpu_bo_dma_unmap(bo);
		mutex_unlock(&ctx->vm.lock);
		if (vnpu_bo_imported(bo) || bo->detached) {
			atomic_dec(&ctx->bos_imported);
			atomic_dec(&vdev->stats.bos_imported);
		}
		atomic_dec(&ctx->bo_count);
		atomic64_sub(vnpu_bo_size(bo), &ctx->bo_bytes);
		atomic_dec(&vdev->stats.bos);
		atomic64_sub(vnpu_bo_size(bo), &vdev->stats.bo_bytes);
		vnpu_ctx_put(ctx);
	}
	if (bo->sgt) {
		sg_free_table(bo->sgt);
		kfree(bo->sgt);
	}
	if (bo->pinned)
		drm_gem_shmem_unpin(&bo->base);
	/* An import's attachment goes here too (drm_prime_gem_destroy()), unless unbind took it. */
	detached = bo->detached;
	drm_gem_shmem_free(&bo->base);
	if (detached)
		dma_buf_put(detached);
}

/* Count a BO in its file's and the device's totals, taking a reference on @ctx. */
static void vnpu_bo_account(struct vnpu_bo *bo, struct vnpu_ctx *ctx)
{
	struct vnpu_device *vdev = ctx->vdev;

	bo->ctx = vnpu_ctx_get(ctx);
	if (vnpu_bo_imported(bo)) {
		atomic_inc(&ctx->bos_imported);
		atomic_inc(&vdev->stats.bos_imported);
	}
	atomic_inc(&ctx->bo_count);
	atomic64_add(vnpu_bo_size(bo), &ctx->bo_bytes);
	atomic_inc(&vdev->stats.bos);
	atomic64_add(vnpu_bo_size(bo), &vdev->stats.bo_bytes);
}

/*
 * GEM open hook: a handle to @obj is being made in @file. An imported BO
 * not yet bound becomes this file's: a VA range (with its guard page) in
 * the file's address space, mapped with the rights its exporter gave
 * (vnpu_dmabuf_device_read_only()). Every other case is a no-op: a BO
 * belongs to one file.
 */
static int vnpu_gem_open(struct drm_gem_object *obj, struct drm_file *file)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	struct vnpu_bo *bo = to_vnpu_bo(obj);
	struct vnpu_ctx *ctx = fpriv->ctx;
	int ret;

	if (!vnpu_bo_imported(bo) || bo->ctx)
		return 0;
	mutex_lock(&ctx->vm.lock);
	ret = ctx->vm.released ? -ENODEV :
	      drm_mm_insert_node_generic(&ctx->vm.mm, &bo->node, vnpu_bo_size(bo) + PAGE_SIZE,
					 PAGE_SIZE, 0, DRM_MM_INSERT_BEST);
	if (!ret)
		list_add(&bo->ctx_link, &ctx->bos);
	mutex_unlock(&ctx->vm.lock);
	if (ret) {
		drm_dbg_driver(obj->dev, "dma-buf import: no room in the address space: %d\n", ret);
		return ret;
	}
	vnpu_bo_account(bo, ctx);
	ret = vnpu_vm_map_sgt(&ctx->vm, vnpu_bo_va(bo), bo->base.sgt, vnpu_bo_size(bo),
			      !(bo->flags & DRM_VNPU_BO_DEVICE_READ_ONLY));
	if (ret)
		return ret; /* the handle is not made; freeing the object undoes the rest */
	bo->mapped = true;
	/* BO_INFO's mmap offset: a CPU mapping through the accel fd goes to dma_buf_mmap(). */
	return drm_gem_create_mmap_offset(obj);
}

static const struct drm_gem_object_funcs vnpu_gem_funcs;

/*
 * The rights an import carries: the strictest of its exporter's. A dma-buf
 * whose file is not open for writing (exported without DRM_RDWR or
 * O_RDWR) is read-only to the device, and so is a vnpu BO's own export
 * when its creator made it DRM_VNPU_BO_DEVICE_READ_ONLY.
 */
static bool vnpu_dmabuf_device_read_only(struct dma_buf *dma_buf)
{
	struct drm_gem_object *exported = dma_buf->priv;

	if (!(dma_buf->file->f_mode & FMODE_WRITE))
		return true;
	/* drm_gem_prime_export() names the exporting driver's module as the owner. */
	return dma_buf->owner == THIS_MODULE && exported->funcs == &vnpu_gem_funcs &&
	       to_vnpu_bo(exported)->flags & DRM_VNPU_BO_DEVICE_READ_ONLY;
}

/**
 * vnpu_gem_prime_import() - &drm_driver.gem_prime_import: a BO of a dma-buf
 * @drm: the DRM device
 * @dma_buf: the buffer, from any exporter, vnpu.ko included
 *
 * drm_gem_prime_import() would hand a vnpu BO's own object back, which
 * belongs to the exporting file; a new object over the same pages lets the
 * importing file map it in its own address space. The attachment is mapped
 * for the NPU's DMA now; the BO gets its VA when the importing file's
 * handle is made (vnpu_gem_open()).
 *
 * Return: the new GEM object, or an ERR_PTR: -E2BIG above
 * DRM_VNPU_PARAM_MAX_BO_SIZE, -EINVAL if its DMA mapping is not whole
 * pages (the device MMU could not map it exactly), else the exporter's or
 * the DMA API's errno.
 */
struct drm_gem_object *vnpu_gem_prime_import(struct drm_device *drm, struct dma_buf *dma_buf)
{
	struct dma_buf_attachment *attach;
	struct drm_gem_object *obj;
	struct sg_table *sgt;
	int ret;

	if (dma_buf->size > VNPU_MAX_BO_SIZE) {
		drm_dbg_driver(drm, "dma-buf import: %zu bytes, above %u\n", dma_buf->size,
			       VNPU_MAX_BO_SIZE);
		return ERR_PTR(-E2BIG);
	}
	attach = dma_buf_attach(dma_buf, drm->dev);
	if (IS_ERR(attach))
		return ERR_CAST(attach);
	get_dma_buf(dma_buf);
	sgt = dma_buf_map_attachment_unlocked(attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto err_detach;
	}
	if (!vnpu_sgt_whole_pages(sgt)) {
		drm_dbg_driver(drm, "dma-buf import: a segment is not whole pages\n");
		ret = -EINVAL;
		goto err_unmap;
	}
	obj = drm_gem_shmem_prime_import_sg_table(drm, attach, sgt);
	if (IS_ERR(obj)) {
		ret = PTR_ERR(obj);
		goto err_unmap;
	}
	obj->import_attach = attach;
	obj->resv = dma_buf->resv;
	to_vnpu_bo(obj)->needs_sync = vnpu_sgt_needs_sync(drm->dev, sgt);
	if (vnpu_dmabuf_device_read_only(dma_buf))
		to_vnpu_bo(obj)->flags = DRM_VNPU_BO_DEVICE_READ_ONLY;
	return obj;

err_unmap:
	dma_buf_unmap_attachment_unlocked(attach, sgt, DMA_BIDIRECTIONAL);
err_detach:
	dma_buf_detach(dma_buf, attach);
	dma_buf_put(dma_buf);
	return ERR_PTR(ret);
}

/* For fdinfo's drm-resident-memory: BO_CREATE pins the pages for the BO's life. */
static enum drm_gem_object_status vnpu_gem_status(struct drm_gem_object *obj)
{
	struct vnpu_bo *bo = to_vnpu_bo(obj);

	return bo->pinned ? DRM_GEM_OBJECT_RESIDENT : 0;
}

static const struct drm_gem_object_funcs vnpu_gem_funcs = {
	.free = vnpu_gem_free,
	.open = vnpu_gem_open,
	.status = vnpu_gem_status,
	.print_info = drm_gem_shmem_object_print_info,
	.pin = drm_gem_shmem_object_pin,
	.unpin = drm_gem_shmem_object_unpin,
	.get_sg_table = drm_gem_shmem_object_get_sg_table,
	.vmap = drm_gem_shmem_object_vmap,
	.vunmap = drm_gem_shmem_object_vunmap,
	.mmap = drm_gem_shmem_object_mmap,
	.vm_ops = &drm_gem_shmem_vm_ops,
};

/**
 * vnpu_gem_create_object() - &drm_driver.gem_create_object hook
 * @drm: the DRM device
 * @size: object size
 *
 * Return: the embedded GEM object of a new &struct vnpu_bo, or ERR_PTR.
 */
struct drm_gem_object *vnpu_gem_create_object(struct drm_device *drm, size_t size)
{
	struct vnpu_bo *bo = kzalloc_obj(*bo, GFP_KERNEL);

	if (!bo)
		return ERR_PTR(-ENOMEM);
	spin_lock_init(&bo->status_lock);
	INIT_LIST_HEAD(&bo->ctx_link);
	bo->base.map_wc = false;
	bo->base.base.funcs = &vnpu_gem_funcs;
	return &bo->base.base;
}

/**
 * vnpu_bo_sync_for_device() - make the CPU's writes visible to the device
 * @bo: the BO, before a job that uses it starts
 *
 * The DMA model: BOs are cached, streaming DMA mappings, made at BO_CREATE
 * and synced at job boundaries (docs/kernel.md, "DMA"). A no-op where the
 * mapping neither bounces nor needs cache maintenance.
 */
void vnpu_bo_sync_for_device(struct vnpu_bo *bo)
{
	struct sg_table *sgt = vnpu_bo_dma_sgt(bo);

	if (bo->needs_sync && sgt)
		dma_sync_sgtable_for_device(bo->base.base.dev->dev, sgt, DMA_BIDIRECTIONAL);
}

/**
 * vnpu_bo_sync_for_cpu() - make the device's writes visible to the CPU
 * @bo: the BO, after a job that wrote it ended, before its fence signals
 */
void vnpu_bo_sync_for_cpu(struct vnpu_bo *bo)
{
	struct sg_table *sgt = vnpu_bo_dma_sgt(bo);

	if (bo->needs_sync && sgt)
		dma_sync_sgtable_for_cpu(bo->base.base.dev->dev, sgt, DMA_BIDIRECTIONAL);
}

/*
 * An import's DMA mapping is its attachment's, and an exporter may keep
 * that mapping until the attachment goes (DRM's PRIME helpers cache it):
 * at unbind the attachment is unmapped and detached. The BO keeps the
 * dma-buf, and so the exporter's pages and any CPU mapping, until it is
 * freed; it is no longer an import to the GEM helpers, which have nothing
 * left to undo.
 */
static void vnpu_bo_detach(struct vnpu_bo *bo)
{
	struct drm_gem_object *obj = &bo->base.base;
	struct dma_buf_attachment *attach = obj->import_attach;

	dma_buf_unmap_attachment_unlocked(attach, bo->base.sgt, DMA_BIDIRECTIONAL);
	bo->detached = attach->dmabuf;
	dma_buf_detach(attach->dmabuf, attach);
	obj->import_attach = NULL;
	bo->base.sgt = NULL;
}

/**
 * vnpu_gem_release_dma() - unmap a context's BOs for DMA
 * @ctx: the context, with its VM lock held
 *
 * On unbind, for the contexts of files still open: the BOs keep their
 * pages (and any CPU mapping) until the file lets them go.
 */
void vnpu_gem_release_dma(struct vnpu_ctx *ctx)
{
	struct vnpu_bo *bo;

	list_for_each_entry(bo, &ctx->bos, ctx_link) {
		if (vnpu_bo_imported(bo))
			vnpu_bo_detach(bo);
		vnpu_bo_dma_unmap(bo);
	}
}

/**
 * vnpu_bo_lookup() - find a BO of this file by handle
 * @file: the DRM file
 * @handle: GEM handle
 *
 * Return: the BO with a reference held, or NULL if @handle names no object
 * or an object this file did not create.
 */
struct vnpu_bo *vnpu_bo_lookup(struct drm_file *file, u32 handle)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	struct drm_gem_object *obj = drm_gem_object_lookup(file, handle);

	if (!obj)
		return NULL;
	if (obj->funcs != &vnpu_gem_funcs || to_vnpu_bo(obj)->ctx != fpriv->ctx) {
		drm_gem_object_put(obj);
		return NULL;
	}
	return to_vnpu_bo(obj);
}

/**
 * vnpu_bo_set_status() - record the outcome of a job that wrote the BO
 * @bo: the BO
 * @status: 0 or the job's negative errno
 * @fault_va: faulting VA when @status is -EFAULT
 *
 * Called before the job's fence signals, so BO_WAIT sees the status once
 * its wait returns.
 */
void vnpu_bo_set_status(struct vnpu_bo *bo, int status, u64 fault_va)
{
	unsigned long flags;

	spin_lock_irqsave(&bo->status_lock, flags);
	bo->job_status = status;
	bo->fault_va = status == -EFAULT ? fault_va : 0;
	spin_unlock_irqrestore(&bo->status_lock, flags);
}

static int vnpu_bo_create(struct drm_device *drm, struct drm_vnpu_bo_create *args,
			  struct drm_file *file)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	struct vnpu_ctx *ctx = fpriv->ctx;
	struct drm_gem_shmem_object *shmem;
	struct sg_table *sgt;
	struct vnpu_bo *bo;
	size_t size;
	int ret;

	if (!args->size || args->flags & ~DRM_VNPU_BO_FLAGS_MASK) {
		drm_dbg_driver(drm, "bo_create size %llu flags %#x: size 0 or unknown flags\n",
			       args->size, args->flags);
		return -EINVAL;
	}
	if (args->handle || args->mmap_offset || args->va) {
		drm_dbg_driver(drm, "bo_create: output fields handle, mmap_offset, va must be 0\n");
		return -EINVAL;
	}
	if (args->size > VNPU_MAX_BO_SIZE) {
		drm_dbg_driver(drm, "bo_create size %llu above %u\n", args->size,
			       VNPU_MAX_BO_SIZE);
		return -E2BIG;
	}
	size = PAGE_ALIGN(args->size);

	shmem = drm_gem_shmem_create(drm, size);
	/*
	 * shmem answers a failed inode allocation with -ENOSPC, which BO_CREATE
	 * documents for a full device address space: a memory shortage is -ENOMEM.
	 */
	if (IS_ERR(shmem))
		return PTR_ERR(shmem) == -ENOSPC ? -ENOMEM : PTR_ERR(shmem);
	bo = container_of(shmem, struct vnpu_bo, base);
	bo->flags = args->flags;
	vnpu_bo_account(bo, ctx);

	/*
	 * Pins the (zero-filled) pages. The driver owns their DMA mapping, not
	 * the shmem helper, so that an unbind can take it down while the file
	 * still holds the BO (vnpu_release_dma()).
	 */
	ret = drm_gem_shmem_pin(shmem);
	if (ret)
		goto out_put;
	bo->pinned = true;
	sgt = drm_gem_shmem_get_sg_table(shmem);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto out_put;
	}
	bo->sgt = sgt;

	/* One unmapped guard page after each BO turns overruns into faults. */
	mutex_lock(&ctx->vm.lock);
	list_add(&bo->ctx_link, &ctx->bos);
	ret = ctx->vm.released ? -ENODEV : dma_map_sgtable(drm->dev, sgt, DMA_BIDIRECTIONAL, 0);
	if (!ret) {
		bo->dma_mapped = true;
		bo->needs_sync = vnpu_sgt_needs_sync(drm->dev, sgt);
		ret = drm_mm_insert_node_generic(&ctx->vm.mm, &bo->node, size + PAGE_SIZE,
						 PAGE_SIZE, 0, DRM_MM_INSERT_BEST);
	}
	mutex_unlock(&ctx->vm.lock);
	if (ret)
		goto out_put;

	ret = vnpu_vm_map_sgt(&ctx->vm, vnpu_bo_va(bo), sgt, size,
			      !(bo->flags & DRM_VNPU_BO_DEVICE_READ_ONLY));
	if (ret)
		goto out_put;
	bo->mapped = true;

	ret = drm_gem_create_mmap_offset(&shmem->base);
	if (ret)
		goto out_put;

	ret = drm_gem_handle_create(file, &shmem->base, &args->handle);
	if (ret)
		goto out_put;

	args->mmap_offset = drm_vma_node_offset_addr(&shmem->base.vma_node);
	args->va = vnpu_bo_va(bo);
	args->size = size;
out_put:
	/* On success the handle holds the reference. */
	drm_gem_object_put(&shmem->base);
	return ret;
}

/**
 * vnpu_ioctl_bo_create() - DRM_IOCTL_VNPU_BO_CREATE
 * @drm: the DRM device
 * @data: struct drm_vnpu_bo_create
 * @file: the calling file
 *
 * Return: 0 or a negative errno as documented in vnpu_accel.h.
 */
int vnpu_ioctl_bo_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	int ret, idx;

	/* The BO's DMA mapping goes with an unbind (vnpu_release_dma()): not while one runs. */
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	ret = vnpu_bo_create(drm, data, file);
	drm_dev_exit(idx);
	return ret;
}

/**
 * vnpu_ioctl_bo_info() - DRM_IOCTL_VNPU_BO_INFO
 * @drm: the DRM device
 * @data: struct drm_vnpu_bo_info
 * @file: the calling file
 *
 * Return: 0 or a negative errno as documented in vnpu_accel.h.
 */
int vnpu_ioctl_bo_info(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_vnpu_bo_info *args = data;
	struct vnpu_bo *bo;

	if (args->pad)
		return -EINVAL;
	bo = vnpu_bo_lookup(file, args->handle);
	if (!bo)
		return -ENOENT;
	args->size = vnpu_bo_size(bo);
	args->flags = bo->flags;
	args->pad2 = 0;
	args->mmap_offset = drm_vma_node_offset_addr(&bo->base.base.vma_node);
	args->va = vnpu_bo_va(bo);
	drm_gem_object_put(&bo->base.base);
	return 0;
}

/**
 * vnpu_ioctl_bo_wait() - DRM_IOCTL_VNPU_BO_WAIT
 * @drm: the DRM device
 * @data: struct drm_vnpu_bo_wait
 * @file: the calling file
 *
 * Waits for every fence on the BO's reservation (readers and writers), then
 * reports the status of its last writer.
 *
 * Return: 0 or a negative errno as documented in vnpu_accel.h.
 */
int vnpu_ioctl_bo_wait(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_vnpu_bo_wait *args = data;
	unsigned long flags;
	struct vnpu_bo *bo;
	long ret;

	if (args->pad || args->pad2 || args->job_status || args->fault_va)
		return -EINVAL;
	bo = vnpu_bo_lookup(file, args->handle);
	if (!bo)
		return -ENOENT;

	ret = dma_resv_wait_timeout(bo->base.base.resv, DMA_RESV_USAGE_READ, true,
				    drm_timeout_abs_to_jiffies(args->timeout_ns));
	if (ret == 0) {
		ret = -ETIME;
	} else if (ret > 0) {
		spin_lock_irqsave(&bo->status_lock, flags);
		args->job_status = bo->job_status;
		args->fault_va = bo->fault_va;
		spin_unlock_irqrestore(&bo->status_lock, flags);
		ret = 0;
	}
	drm_gem_object_put(&bo->base.base);
	return ret;
}

/* Sync bytes @offset .. @offset + @size of a BO's DMA mapping, the DMA segments in BO order. */
static void vnpu_bo_sync_range(struct vnpu_bo *bo, u64 offset, u64 size, bool for_cpu)
{
	struct device *dev = bo->base.base.dev->dev;
	struct sg_table *sgt = vnpu_bo_dma_sgt(bo);
	u64 pos = 0, end = offset + size;
	struct scatterlist *sg;
	unsigned int i;

	if (!bo->needs_sync || !sgt)
		return;
	for_each_sgtable_dma_sg(sgt, sg, i) {
		u64 from = max(offset, pos), to = min(end, pos + sg_dma_len(sg));
		dma_addr_t addr = sg_dma_address(sg);

		if (from < to && for_cpu)
			dma_sync_single_range_for_cpu(dev, addr, from - pos, to - from,
						      DMA_BIDIRECTIONAL);
		else if (from < to)
			dma_sync_single_range_for_device(dev, addr, from - pos, to - from,
							 DMA_BIDIRECTIONAL);
		pos += sg_dma_len(sg);
		if (pos >= end)
			break;
	}
}

/*
 * An import's CPU view is its exporter's to keep coherent: the begin and
 * end of CPU access (DMA_BUF_IOCTL_SYNC) are of the whole buffer.
 */
static int vnpu_bo_sync_exporter(struct vnpu_bo *bo, u32 flags)
{
	struct dma_buf *dma_buf = bo->base.base.import_attach->dmabuf;
	int ret = 0;

	if (flags & DRM_VNPU_BO_SYNC_FOR_CPU)
		ret = dma_buf_begin_cpu_access(dma_buf, DMA_BIDIRECTIONAL);
	if (!ret && flags & DRM_VNPU_BO_SYNC_FOR_DEVICE)
		ret = dma_buf_end_cpu_access(dma_buf, DMA_BIDIRECTIONAL);
	return ret;
}

/**
 * vnpu_ioctl_bo_sync() - DRM_IOCTL_VNPU_BO_SYNC
 * @drm: the DRM device
 * @data: struct drm_vnpu_bo_sync
 * @file: the calling file
 *
 * For memory shared with a running job (the job boundaries are synced by
 * the driver itself): a no-op unless the BO's mapping bounces or the device
 * is not coherent, or it is an import (its exporter's begin or end of CPU
 * access). Syncs the requested range only.
 *
 * Return: 0 or a negative errno as documented in vnpu_accel.h.
 */
int vnpu_ioctl_bo_sync(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_vnpu_bo_sync *args = data;
	struct vnpu_bo *bo;
	u64 size;
	int idx, ret = 0;

	if (!args->flags || args->flags & ~DRM_VNPU_BO_SYNC_FLAGS_MASK) {
		drm_dbg_driver(drm, "bo_sync flags %#x: not 1..%#x\n", args->flags,
			       DRM_VNPU_BO_SYNC_FLAGS_MASK);
		return -EINVAL;
	}
	bo = vnpu_bo_lookup(file, args->handle);
	if (!bo)
		return -ENOENT;
	size = args->size ?: vnpu_bo_size(bo) - min_t(u64, args->offset, vnpu_bo_size(bo));
	if (args->offset >= vnpu_bo_size(bo) || size > vnpu_bo_size(bo) - args->offset) {
		drm_dbg_driver(drm, "bo_sync range %llu+%llu is not inside the BO's %zu bytes\n",
			       args->offset, args->size, vnpu_bo_size(bo));
		ret = -EINVAL;
		goto out_put;
	}
	/* The DMA mapping goes with the device (vnpu_release_dma()). */
	if (!drm_dev_enter(drm, &idx)) {
		ret = -ENODEV;
		goto out_put;
	}
	if (vnpu_bo_imported(bo))
		ret = vnpu_bo_sync_exporter(bo, args->flags);
	if (!ret && args->flags & DRM_VNPU_BO_SYNC_FOR_CPU)
		vnpu_bo_sync_range(bo, args->offset, size, true);
	if (!ret && args->flags & DRM_VNPU_BO_SYNC_FOR_DEVICE)
		vnpu_bo_sync_range(bo, args->offset, size, false);
	drm_dev_exit(idx);
out_put:
	drm_gem_object_put(&bo->base.base);
	return ret;
}
