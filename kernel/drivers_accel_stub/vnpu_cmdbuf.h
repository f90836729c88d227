/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Command buffers: the kernel's copies of command streams, which the device
 * executes (vnpu_cmdbuf.c).
 */
#ifndef __VNPU_CMDBUF_H__
#define __VNPU_CMDBUF_H__

#include <linux/scatterlist.h>

#include <drm/drm_mm.h>

#include "vnpu_drv.h"

/**
 * struct vnpu_cmdbuf - kernel memory holding one job's command stream
 * @link: entry in &vnpu_ctx.cmdbuf_pool while idle
 * @ctx_link: entry in &vnpu_ctx.cmdbufs for its whole life
 * @node: its device VA range (plus one unmapped guard page)
 * @sgt: its pages, DMA-mapped
 * @vaddr: the kernel's mapping, the only CPU mapping there is (a direct-map
 *	page when @size is one page, else vmalloc())
 * @size: page-rounded size in bytes
 * @dma_mapped: @sgt is DMA-mapped
 * @mapped: the pages are in the context's page tables (device read-only)
 */
struct vnpu_cmdbuf {
	struct list_head link;
	struct list_head ctx_link;
	struct drm_mm_node node;
	struct sg_table sgt;
	void *vaddr;
	size_t size;
	bool dma_mapped;
	bool mapped;
};

static inline u64 vnpu_cmdbuf_va(const struct vnpu_cmdbuf *cb)
{
	return cb->node.start;
}

struct vnpu_cmdbuf *vnpu_cmdbuf_get(struct vnpu_ctx *ctx, u32 size);
void vnpu_cmdbuf_fill(struct vnpu_cmdbuf *cb, struct page **pages, u64 offset, u32 size);
void vnpu_cmdbuf_sync(struct vnpu_device *vdev, struct vnpu_cmdbuf *cb);
void vnpu_cmdbuf_put(struct vnpu_ctx *ctx, struct vnpu_cmdbuf *cb);
void vnpu_cmdbuf_release_dma(struct vnpu_ctx *ctx);
void vnpu_cmdbuf_pool_fini(struct vnpu_ctx *ctx);

#endif /* __VNPU_CMDBUF_H__ */
