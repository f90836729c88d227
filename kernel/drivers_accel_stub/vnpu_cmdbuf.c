// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Command buffers: the kernel's copy of a job's command stream, which is
 * what the device executes.
 *
 * SUBMIT copies the stream out of the user's command BO into a command
 * buffer, validates the copy and queues the copy's device VA. Userspace has
 * no mapping of a command buffer (it is not a GEM object, so it has no
 * handle and no mmap offset) and the device maps it read-only, so the
 * device runs exactly the stream that was validated, whatever userspace
 * writes to its command BO after SUBMIT.
 *
 * A command buffer is one page (most streams fit) or vmalloc() memory,
 * mapped at a VA of the submitting file's address space, followed by an
 * unmapped guard page like every BO; the device reaches it through the
 * job's page tables as it reaches BOs.
 * When its job is freed the buffer goes to a small per-file pool, so a file
 * that submits jobs of similar size again (a model's partitions on every
 * invoke) reuses mappings instead of allocating and mapping pages on every
 * SUBMIT.
 */
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "vnpu_cmdbuf.h"

/* Bytes of idle command buffers a file keeps for reuse. */
#define VNPU_CMDBUF_POOL_BYTES	VNPU_MAX_JOB_SIZE

static void vnpu_cmdbuf_dma_unmap(struct vnpu_ctx *ctx, struct vnpu_cmdbuf *cb)
{
	lockdep_assert_held(&ctx->vm.lock);
	if (cb->dma_mapped)
		dma_unmap_sgtable(ctx->vdev->drm.dev, &cb->sgt, DMA_TO_DEVICE, 0);
	cb->dma_mapped = false;
}

static void vnpu_cmdbuf_free(struct vnpu_ctx *ctx, struct vnpu_cmdbuf *cb)
{
	if (cb->mapped)
		vnpu_vm_unmap(&ctx->vm, cb->node.start, cb->size);
	mutex_lock(&ctx->vm.lock);
	if (drm_mm_node_allocated(&cb->node))
		drm_mm_remove_node(&cb->node);
	list_del(&cb->ctx_link);
	vnpu_cmdbuf_dma_unmap(ctx, cb);
	mutex_unlock(&ctx->vm.lock);
	sg_free_table(&cb->sgt);
	if (cb->size == PAGE_SIZE)
		free_page((unsigned long)cb->vaddr);
	else
		vfree(cb->vaddr);
	kfree(cb);
	atomic_dec(&ctx->vdev->stats.cmdbufs);
}

static struct vnpu_cmdbuf *vnpu_cmdbuf_alloc(struct vnpu_ctx *ctx, size_t size)
{
	struct device *dev = ctx->vdev->drm.dev;
	unsigned int npages = size >> PAGE_SHIFT;
	struct vnpu_cmdbuf *cb;
	struct page **pages;
	unsigned int i;
	int ret;

	cb = kzalloc_obj(*cb, GFP_KERNEL);
	if (!cb)
		return ERR_PTR(-ENOMEM);
	atomic_inc(&ctx->vdev->stats.cmdbufs);
	atomic64_inc(&ctx->vdev->stats.cmdbuf_allocs);
	INIT_LIST_HEAD(&cb->link);
	INIT_LIST_HEAD(&cb->ctx_link);
	cb->size = size;
	/* A page of the direct map costs no vmap area and no TLB flush when freed. */
	if (npages == 1)
		cb->vaddr = (void *)__get_free_page(GFP_KERNEL);
	else
		cb->vaddr = vmalloc(size);
	pages = kvmalloc_array(npages, sizeof(*pages), GFP_KERNEL);
	if (!cb->vaddr || !pages) {
		ret = -ENOMEM;
		goto err;
	}
	for (i = 0; i < npages; i++)
		pages[i] = npages == 1 ? virt_to_page(cb->vaddr) :
			   vmalloc_to_page(cb->vaddr + i * PAGE_SIZE);
	ret = sg_alloc_table_from_pages(&cb->sgt, pages, npages, 0, size, GFP_KERNEL);
	if (ret)
		goto err;

	/* Under the VM lock: an unbind releases DMA mappings (vnpu_release_dma()). */
	mutex_lock(&ctx->vm.lock);
	list_add(&cb->ctx_link, &ctx->cmdbufs);
	ret = ctx->vm.released ? -ENODEV : dma_map_sgtable(dev, &cb->sgt, DMA_TO_DEVICE, 0);
	if (!ret) {
		cb->dma_mapped = true;
		ret = drm_mm_insert_node_generic(&ctx->vm.mm, &cb->node, size + PAGE_SIZE,
						 PAGE_SIZE, 0, DRM_MM_INSERT_BEST);
	}
	mutex_unlock(&ctx->vm.lock);
	if (ret)
		goto err;
	/* Read-only: not even a stream run unchecked can rewrite itself. */
	ret = vnpu_vm_map_sgt(&ctx->vm, cb->node.start, &cb->sgt, size, false);
	if (ret)
		goto err;
	cb->mapped = true;
	kvfree(pages);
	return cb;

err:
	kvfree(pages);
	vnpu_cmdbuf_free(ctx, cb);
	return ERR_PTR(ret);
}

/**
 * vnpu_cmdbuf_get() - a command buffer of at least @size bytes
 * @ctx: the submitting file's context
 * @size: stream size in bytes, 1..VNPU_MAX_JOB_SIZE
 *
 * Takes the smallest fitting buffer from the file's pool, or makes one.
 *
 * Return: the buffer, or ERR_PTR(-ENOMEM/-ENOSPC).
 */
struct vnpu_cmdbuf *vnpu_cmdbuf_get(struct vnpu_ctx *ctx, u32 size)
{
	size_t need = PAGE_ALIGN(size);
	struct vnpu_cmdbuf *cb = NULL, *it;

	spin_lock(&ctx->cmdbuf_lock);
	list_for_each_entry(it, &ctx->cmdbuf_pool, link)
		if (it->size >= need && (!cb || it->size < cb->size))
			cb = it;
	if (cb) {
		list_del_init(&cb->link);
		ctx->cmdbuf_pool_bytes -= cb->size;
	}
	spin_unlock(&ctx->cmdbuf_lock);
	return cb ?: vnpu_cmdbuf_alloc(ctx, need);
}

/**
 * vnpu_cmdbuf_fill() - copy a stream from a command BO into a buffer
 * @cb: the buffer
 * @pages: the command BO's pages (pinned for the BO's life)
 * @offset: byte offset of the stream in the BO
 * @size: stream size in bytes, at most @cb's size
 *
 * The copy is what SUBMIT validates and the device executes.
 */
void vnpu_cmdbuf_fill(struct vnpu_cmdbuf *cb, struct page **pages, u64 offset, u32 size)
{
	u8 *buf = cb->vaddr;
	u32 done = 0;

	while (done < size) {
		u64 pos = offset + done;
		u32 len = min_t(u32, size - done, PAGE_SIZE - offset_in_page(pos));

		memcpy_from_page(buf + done, pages[pos >> PAGE_SHIFT], offset_in_page(pos), len);
		done += len;
	}
}

/**
 * vnpu_cmdbuf_sync() - hand a filled buffer to the device
 * @vdev: the device
 * @cb: the buffer, validated
 *
 * Writes back the vmalloc alias and syncs the DMA mapping (both no-ops on
 * cache-coherent machines).
 */
void vnpu_cmdbuf_sync(struct vnpu_device *vdev, struct vnpu_cmdbuf *cb)
{
	if (is_vmalloc_addr(cb->vaddr))
		flush_kernel_vmap_range(cb->vaddr, cb->size);
	dma_sync_sgtable_for_device(vdev->drm.dev, &cb->sgt, DMA_TO_DEVICE);
}

/**
 * vnpu_cmdbuf_put() - give back a buffer the device no longer reads
 * @ctx: the file's context
 * @cb: the buffer
 *
 * Keeps it in the file's pool while the file is open and the pool has
 * room, else frees it.
 */
void vnpu_cmdbuf_put(struct vnpu_ctx *ctx, struct vnpu_cmdbuf *cb)
{
	spin_lock(&ctx->cmdbuf_lock);
	if (!READ_ONCE(ctx->closed) &&
	    ctx->cmdbuf_pool_bytes + cb->size <= VNPU_CMDBUF_POOL_BYTES) {
		list_add(&cb->link, &ctx->cmdbuf_pool);
		ctx->cmdbuf_pool_bytes += cb->size;
		cb = NULL;
	}
	spin_unlock(&ctx->cmdbuf_lock);
	if (cb)
		vnpu_cmdbuf_free(ctx, cb);
}

/**
 * vnpu_cmdbuf_release_dma() - unmap a context's command buffers for DMA
 * @ctx: the context, with its VM lock held
 *
 * On unbind, for the contexts of files still open: the buffers stay
 * allocated until their jobs and the pool let them go.
 */
void vnpu_cmdbuf_release_dma(struct vnpu_ctx *ctx)
{
	struct vnpu_cmdbuf *cb;

	list_for_each_entry(cb, &ctx->cmdbufs, ctx_link)
		vnpu_cmdbuf_dma_unmap(ctx, cb);
}

/**
 * vnpu_cmdbuf_pool_fini() - free a context's idle command buffers
 * @ctx: the context, on its last reference (before its VM goes)
 */
void vnpu_cmdbuf_pool_fini(struct vnpu_ctx *ctx)
{
	struct vnpu_cmdbuf *cb, *tmp;

	list_for_each_entry_safe(cb, tmp, &ctx->cmdbuf_pool, link) {
		list_del(&cb->link);
		vnpu_cmdbuf_free(ctx, cb);
	}
	ctx->cmdbuf_pool_bytes = 0;
}
