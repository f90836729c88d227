// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Per-file device page tables.
 *
 * The device MMU walks two levels of 4 KiB tables of 512 little-endian u64
 * entries in guest RAM: VA bits [29:21] index the L1 table, bits [20:12] the
 * L2 table. An L1 entry is an L2 table's bus address | PTE_VALID; an L2 entry
 * is a page's bus address | PTE_VALID | PTE_READ, plus PTE_WRITE unless the
 * BO is device-read-only. Tables live in DMA-coherent memory, so the device
 * sees an update as soon as a later doorbell write announces a job using it.
 * L2 tables are allocated on first use and kept until the address space is
 * destroyed; the device has no TLB to invalidate.
 */
#include <linux/dma-mapping.h>
#include <linux/scatterlist.h>

#include "vnpu_drv.h"

#define VNPU_PT_BYTES	(VNPU_PT_ENTRIES * sizeof(u64))
#define VNPU_L1_INDEX(va)	(((va) >> VNPU_L1_SHIFT) & (VNPU_PT_ENTRIES - 1))
#define VNPU_L2_INDEX(va)	(((va) >> VNPU_PAGE_SHIFT) & (VNPU_PT_ENTRIES - 1))

/**
 * vnpu_vm_init() - create an empty device address space
 * @vdev: the device
 * @vm: the address space to initialise
 *
 * VAs are handed out from DRM_VNPU_VA_START up to the device's VA size, so
 * the first MiB, VA 0 included, always faults.
 *
 * Return: 0 or -ENOMEM.
 */
int vnpu_vm_init(struct vnpu_device *vdev, struct vnpu_vm *vm)
{
	u64 va_size = 1ULL << vdev->va_bits;

	vm->vdev = vdev;
	mutex_init(&vm->lock);
	vm->l1_cpu = dma_alloc_coherent(&vdev->pdev->dev, VNPU_PT_BYTES, &vm->l1_dma,
					GFP_KERNEL);
	if (!vm->l1_cpu) {
		mutex_destroy(&vm->lock);
		return -ENOMEM;
	}
	drm_mm_init(&vm->mm, DRM_VNPU_VA_START, va_size - DRM_VNPU_VA_START);
	return 0;
}

static void vnpu_vm_free_tables(struct vnpu_vm *vm)
{
	struct device *dev = &vm->vdev->pdev->dev;
	unsigned int i;

	for (i = 0; i < VNPU_PT_ENTRIES; i++) {
		if (vm->l2_cpu[i])
			dma_free_coherent(dev, VNPU_PT_BYTES, vm->l2_cpu[i], vm->l2_dma[i]);
		vm->l2_cpu[i] = NULL;
	}
	if (vm->l1_cpu)
		dma_free_coherent(dev, VNPU_PT_BYTES, vm->l1_cpu, vm->l1_dma);
	vm->l1_cpu = NULL;
}

/**
 * vnpu_vm_release() - free an address space's page tables while it lives on
 * @vm: the address space, with its lock held
 *
 * On unbind, for the contexts of files still open: no job runs any more,
 * and the tables' DMA memory must not outlive the driver's binding. Later
 * maps fail with -ENODEV and unmaps have nothing left to clear.
 */
void vnpu_vm_release(struct vnpu_vm *vm)
{
	lockdep_assert_held(&vm->lock);
	vnpu_vm_free_tables(vm);
	vm->released = true;
}

/**
 * vnpu_vm_fini() - free an address space's page tables
 * @vm: the address space; every BO must already be unmapped
 */
void vnpu_vm_fini(struct vnpu_vm *vm)
{
	vnpu_vm_free_tables(vm);
	drm_mm_takedown(&vm->mm);
	mutex_destroy(&vm->lock);
}

/* Return the L2 table covering @va, allocating it if needed. */
static __le64 *vnpu_vm_l2(struct vnpu_vm *vm, u64 va)
{
	unsigned int i = VNPU_L1_INDEX(va);

	lockdep_assert_held(&vm->lock);
	if (!vm->l2_cpu[i]) {
		vm->l2_cpu[i] = dma_alloc_coherent(&vm->vdev->pdev->dev, VNPU_PT_BYTES,
						   &vm->l2_dma[i], GFP_KERNEL);
		if (!vm->l2_cpu[i])
			return NULL;
		WRITE_ONCE(vm->l1_cpu[i],
			   cpu_to_le64((vm->l2_dma[i] & VNPU_PTE_ADDR_MASK) | VNPU_PTE_VALID));
	}
	return vm->l2_cpu[i];
}

static void vnpu_vm_clear(struct vnpu_vm *vm, u64 va, size_t size)
{
	u64 end = va + size;

	for (; va < end; va += VNPU_PAGE_SIZE) {
		__le64 *l2 = vm->l2_cpu[VNPU_L1_INDEX(va)];

		if (l2)
			WRITE_ONCE(l2[VNPU_L2_INDEX(va)], 0);
	}
}

/**
 * vnpu_sgt_whole_pages() - whether the device MMU can map a table exactly
 * @sgt: a DMA-mapped scatter-gather table
 *
 * Return: true if every segment starts and ends on a device page boundary.
 */
bool vnpu_sgt_whole_pages(struct sg_table *sgt)
{
	struct scatterlist *sg;
	unsigned int i;

	for_each_sgtable_dma_sg(sgt, sg, i)
		if (!IS_ALIGNED(sg_dma_address(sg) | sg_dma_len(sg), VNPU_PAGE_SIZE))
			return false;
	return true;
}

/**
 * vnpu_vm_map_sgt() - map a BO's pages at a device VA
 * @vm: the address space
 * @va: page-aligned device VA reserved in @vm->mm
 * @sgt: the BO's DMA-mapped scatter-gather table
 * @size: bytes to map (the BO's page-rounded size)
 * @writable: whether the device may write the pages
 *
 * Return: 0, -ENODEV once the device is gone, -EINVAL for a segment that
 * is not whole pages (vnpu_sgt_whole_pages()), or -ENOMEM; nothing is left
 * mapped on error.
 */
int vnpu_vm_map_sgt(struct vnpu_vm *vm, u64 va, struct sg_table *sgt, size_t size,
		    bool writable)
{
	u64 flags = VNPU_PTE_VALID | VNPU_PTE_READ | (writable ? VNPU_PTE_WRITE : 0);
	struct scatterlist *sg;
	u64 cur = va, end = va + size;
	unsigned int i;

	mutex_lock(&vm->lock);
	if (vm->released) {
		mutex_unlock(&vm->lock);
		return -ENODEV;
	}
	for_each_sgtable_dma_sg(sgt, sg, i) {
		dma_addr_t addr = sg_dma_address(sg);
		unsigned int len = sg_dma_len(sg);
		unsigned int off;

		/* A page entry maps whole pages: a partial one would expose its neighbours. */
		if (!IS_ALIGNED(addr | len, VNPU_PAGE_SIZE)) {
			vnpu_vm_clear(vm, va, cur - va);
			mutex_unlock(&vm->lock);
			return -EINVAL;
		}
		for (off = 0; off < len && cur < end; off += VNPU_PAGE_SIZE) {
			__le64 *l2 = vnpu_vm_l2(vm, cur);

			if (!l2) {
				vnpu_vm_clear(vm, va, cur - va);
				mutex_unlock(&vm->lock);
				return -ENOMEM;
			}
			WRITE_ONCE(l2[VNPU_L2_INDEX(cur)],
				   cpu_to_le64(((addr + off) & VNPU_PTE_ADDR_MASK) | flags));
			cur += VNPU_PAGE_SIZE;
		}
	}
	mutex_unlock(&vm->lock);
	/* Counted before the check: the unmap below takes it off again. */
	atomic_inc(&vm->vdev->stats.mappings);
	if (WARN_ON(cur != end)) {
		vnpu_vm_unmap(vm, va, cur - va);
		return -EINVAL;
	}
	return 0;
}

/**
 * vnpu_vm_unmap() - remove a BO's pages from an address space
 * @vm: the address space
 * @va: the BO's device VA
 * @size: its size
 *
 * Called when the BO is freed, which is after every job using it has ended.
 */
void vnpu_vm_unmap(struct vnpu_vm *vm, u64 va, size_t size)
{
	mutex_lock(&vm->lock);
	vnpu_vm_clear(vm, va, size);
	mutex_unlock(&vm->lock);
	atomic_dec(&vm->vdev->stats.mappings);
}
