// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * PCI probe and remove, the DRM driver, GET_PARAM and
 * per-file state.
 *
 * The NPU is QEMU's ivshmem-doorbell PCI device (1af4:1110) served by the
 * vnpu device model: BAR0 holds the doorbell, BAR2 the NPU's registers and
 * rings (vnpu_hw.h), MSI-X vector IRQ_COMPLETION signals completed jobs and
 * IRQ_CONTROL acknowledged control commands.
 */
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include <drm/drm_accel.h>
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_ioctl.h>
#include <drm/drm_managed.h>
#include <drm/drm_print.h>

#include "vnpu_cmdbuf.h"
#include "vnpu_drv.h"
#include "vnpu_gem.h"
#include "vnpu_io.h"
#include "vnpu_job.h"
#include "vnpu_pm.h"

unsigned int vnpu_job_timeout_ms = VNPU_JOB_TIMEOUT_MS;
module_param_named(timeout_ms, vnpu_job_timeout_ms, uint, 0444);
MODULE_PARM_DESC(timeout_ms, "Time in ms after which a running job is failed and its core reset (default 5000; 100..600000)");

static void vnpu_ctx_release(struct kref *ref)
{
	struct vnpu_ctx *ctx = container_of(ref, struct vnpu_ctx, ref);
	struct vnpu_device *vdev = ctx->vdev;

	/* First: vnpu_release_dma() may be walking the list, this context included. */
	mutex_lock(&vdev->contexts_lock);
	list_del(&ctx->link);
	mutex_unlock(&vdev->contexts_lock);
	vnpu_cmdbuf_pool_fini(ctx);
	vnpu_vm_fini(&ctx->vm);
	ida_free(&vdev->ctx_ids, ctx->id);
	atomic_dec(&vdev->stats.contexts);
	kfree(ctx);
	drm_dev_put(&vdev->drm);
}

/**
 * vnpu_ctx_get() - take a reference on a context
 * @ctx: the context
 *
 * Return: @ctx.
 */
struct vnpu_ctx *vnpu_ctx_get(struct vnpu_ctx *ctx)
{
	kref_get(&ctx->ref);
	return ctx;
}

/**
 * vnpu_ctx_put() - drop a reference on a context
 * @ctx: the context; freed with its page tables on the last reference
 */
void vnpu_ctx_put(struct vnpu_ctx *ctx)
{
	kref_put(&ctx->ref, vnpu_ctx_release);
}

static int vnpu_open(struct drm_device *drm, struct drm_file *file)
{
	struct vnpu_device *vdev = to_vnpu_device(drm);
	struct vnpu_file_priv *fpriv;
	struct vnpu_ctx *ctx;
	int ret, idx;

	/* The scheduler reference below must not race with remove() dropping the device's. */
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	fpriv = kzalloc_obj(*fpriv, GFP_KERNEL);
	ctx = kzalloc_obj(*ctx, GFP_KERNEL);
	if (!fpriv || !ctx) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = ida_alloc_min(&vdev->ctx_ids, 1, GFP_KERNEL);
	if (ret < 0)
		goto err_free;
	ctx->id = ret;
	ret = vnpu_vm_init(vdev, &ctx->vm);
	if (ret)
		goto err_ida;
	fpriv->queue = vnpu_queue_create(vdev);
	if (IS_ERR(fpriv->queue)) {
		ret = PTR_ERR(fpriv->queue);
		goto err_vm;
	}

	kref_init(&ctx->ref);
	ctx->vdev = vdev;
	spin_lock_init(&ctx->cmdbuf_lock);
	INIT_LIST_HEAD(&ctx->cmdbuf_pool);
	INIT_LIST_HEAD(&ctx->bos);
	INIT_LIST_HEAD(&ctx->cmdbufs);
	ctx->pid = task_tgid_nr(current);
	mutex_lock(&vdev->contexts_lock);
	list_add(&ctx->link, &vdev->contexts);
	mutex_unlock(&vdev->contexts_lock);
	drm_dev_get(drm);
	fpriv->vdev = vdev;
	fpriv->ctx = ctx;
	file->driver_priv = fpriv;
	atomic_inc(&vdev->stats.files);
	atomic_inc(&vdev->stats.contexts);
	drm_dev_exit(idx);
	return 0;

err_vm:
	vnpu_vm_fini(&ctx->vm);
err_ida:
	ida_free(&vdev->ctx_ids, ctx->id);
err_free:
	kfree(ctx);
	kfree(fpriv);
	drm_dev_exit(idx);
	return ret;
}

static void vnpu_postclose(struct drm_device *drm, struct drm_file *file)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	struct vnpu_device *vdev = fpriv->vdev;

	/*
	 * Nobody can see the results of the file's jobs any more: cancel
	 * them, without waiting for any. Marked closed first, the jobs the
	 * queue still holds end as soon as the scheduler hands them over
	 * (after their dependencies, which may be another file's or another
	 * driver's fences); a job on the device is stopped by a reset. Jobs
	 * keep the context and the queue alive until they are freed.
	 */
	WRITE_ONCE(fpriv->ctx->closed, true);
	vnpu_job_file_closed(vdev);
	vnpu_queue_close(fpriv->queue);
	vnpu_ctx_put(fpriv->ctx);
	kfree(fpriv);
	atomic_dec(&vdev->stats.files);
}

static int vnpu_ioctl_get_param(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct vnpu_device *vdev = to_vnpu_device(drm);
	struct drm_vnpu_get_param *args = data;
	int idx, ret = 0;

	if (args->pad)
		return -EINVAL;
	/* Some values are read from BAR2, which goes with the device. */
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	switch (args->param) {
	case DRM_VNPU_PARAM_DEVICE_ID:
		args->value = vnpu_rd32(vdev, VNPU_REG_DEVICE_ID);
		break;
	case DRM_VNPU_PARAM_DEVICE_REVISION:
		args->value = vnpu_rd32(vdev, VNPU_REG_REVISION);
		break;
	case DRM_VNPU_PARAM_ISA_VERSION:
		args->value = vnpu_rd32(vdev, VNPU_REG_ISA_VERSION);
		break;
	case DRM_VNPU_PARAM_FW_VERSION:
		args->value = READ_ONCE(vdev->fw_version);
		break;
	case DRM_VNPU_PARAM_FW_BUILD_ID:
		args->value = READ_ONCE(vdev->fw_build_id);
		break;
	case DRM_VNPU_PARAM_VA_SIZE:
		args->value = 1ULL << vdev->va_bits;
		break;
	case DRM_VNPU_PARAM_MAX_JOB_SIZE:
		args->value = VNPU_MAX_JOB_SIZE;
		break;
	case DRM_VNPU_PARAM_MAX_JOB_BOS:
		args->value = VNPU_MAX_JOB_BOS;
		break;
	case DRM_VNPU_PARAM_MAX_BO_SIZE:
		args->value = VNPU_MAX_BO_SIZE;
		break;
	case DRM_VNPU_PARAM_CAPABILITIES:
		args->value = vdev->caps;
		break;
	case DRM_VNPU_PARAM_JOB_TIMEOUT_MS:
		args->value = READ_ONCE(vdev->job_timeout_ms);
		break;
	case DRM_VNPU_PARAM_MAX_IN_SYNCOBJS:
		args->value = VNPU_MAX_IN_SYNCOBJS;
		break;
	case DRM_VNPU_PARAM_NUM_CORES:
		args->value = vdev->num_cores;
		break;
	case DRM_VNPU_PARAM_POWER_UPS:
		args->value = vnpu_rd32(vdev, VNPU_REG_POWER_UPS);
		break;
	case DRM_VNPU_PARAM_POWERED_US:
		args->value = vnpu_rd64(vdev, VNPU_REG_POWERED_US);
		break;
	default:
		ret = -EINVAL;
	}
	drm_dev_exit(idx);
	return ret;
}

/*
 * DRM usage stats (Documentation/gpu/drm-usage-stats.rst), after the
 * drm-driver, drm-client-id and drm-pdev keys DRM core prints: the NPU is
 * one engine, "npu"; memory is the file's GEM objects (all resident: BOs
 * are pinned for their lifetime).
 */
static void vnpu_show_fdinfo(struct drm_printer *p, struct drm_file *file)
{
	struct vnpu_file_priv *fpriv = file->driver_priv;
	u32 i;

	drm_printf(p, "drm-engine-npu:\t%llu ns\n", vnpu_job_busy_ns(fpriv->ctx));
	/* The NPU's cores are identical engines: busy time may reach capacity x wall time. */
	drm_printf(p, "drm-engine-capacity-npu:\t%u\n", fpriv->vdev->num_cores);
	drm_show_memory_stats(p, file);
	/* Driver-specific keys (as amdgpu's amd-*): jobs of this file that ended, and by core. */
	drm_printf(p, "vnpu-jobs:\t%llu\n", (u64)atomic64_read(&fpriv->ctx->jobs_ended));
	for (i = 0; i < fpriv->vdev->num_cores; i++)
		drm_printf(p, "vnpu-jobs-core%u:\t%llu\n", i,
			   (u64)atomic64_read(&fpriv->ctx->jobs_ended_on[i]));
}

static const struct drm_ioctl_desc vnpu_ioctls[] = {
	DRM_IOCTL_DEF_DRV(VNPU_GET_PARAM, vnpu_ioctl_get_param, 0),
	DRM_IOCTL_DEF_DRV(VNPU_BO_CREATE, vnpu_ioctl_bo_create, 0),
	DRM_IOCTL_DEF_DRV(VNPU_BO_INFO, vnpu_ioctl_bo_info, 0),
	DRM_IOCTL_DEF_DRV(VNPU_BO_WAIT, vnpu_ioctl_bo_wait, 0),
	DRM_IOCTL_DEF_DRV(VNPU_SUBMIT, vnpu_ioctl_submit, 0),
	DRM_IOCTL_DEF_DRV(VNPU_BO_SYNC, vnpu_ioctl_bo_sync, 0),
};

/* DEFINE_DRM_ACCEL_FOPS() plus fdinfo, which 6.12's accel fops leave out. */
static const struct file_operations vnpu_fops = {
	.owner = THIS_MODULE,
	DRM_ACCEL_FOPS,
	.show_fdinfo = drm_show_fdinfo,
};

static const struct drm_driver vnpu_drm_driver = {
	.driver_features = DRIVER_COMPUTE_ACCEL | DRIVER_GEM | DRIVER_SYNCOBJ,
	.open = vnpu_open,
	.postclose = vnpu_postclose,
	.show_fdinfo = vnpu_show_fdinfo,
	.gem_create_object = vnpu_gem_create_object,
	.gem_prime_import = vnpu_gem_prime_import,
	.ioctls = vnpu_ioctls,
	.num_ioctls = ARRAY_SIZE(vnpu_ioctls),
	.fops = &vnpu_fops,
	.name = VNPU_DRIVER_NAME,
	.desc = VNPU_DRIVER_DESC,
	.major = VNPU_DRIVER_MAJOR,
	.minor = VNPU_DRIVER_MINOR,
	.patchlevel = VNPU_DRIVER_PATCHLEVEL,
};

/*
 * Map the BARs and check that the NPU is behind them. Every ivshmem-doorbell
 * function matches the PCI id table; BAR2's size, REG_MAGIC and
 * REG_DEVICE_ID tell the NPU's from another server's. Until they have,
 * nothing is written to the device: a refused device gets -ENODEV (which
 * the driver core does not log) and this function's one line.
 */
static int vnpu_hw_init(struct vnpu_device *vdev)
{
	struct pci_dev *pdev = vdev->pdev;
	u32 magic, id;

	if (pci_resource_len(pdev, 2) < VNPU_BAR2_SIZE) {
		drm_info(&vdev->drm, "not a vnpu NPU: BAR2 is %llu bytes, need %u\n",
			 (u64)pci_resource_len(pdev, 2), VNPU_BAR2_SIZE);
		return -ENODEV;
	}
	vdev->bar0 = pcim_iomap_region(pdev, 0, VNPU_DRIVER_NAME);
	if (IS_ERR(vdev->bar0))
		return PTR_ERR(vdev->bar0);
	vdev->bar2 = pcim_iomap_region(pdev, 2, VNPU_DRIVER_NAME);
	if (IS_ERR(vdev->bar2))
		return PTR_ERR(vdev->bar2);

	/* The device model writes it before QEMU can start: nothing to wait for. */
	magic = vnpu_rd32(vdev, VNPU_REG_MAGIC);
	if (magic != VNPU_MAGIC) {
		drm_info(&vdev->drm, "not a vnpu NPU: BAR2 magic %#x\n", magic);
		return -ENODEV;
	}
	id = vnpu_rd32(vdev, VNPU_REG_DEVICE_ID);
	if (id != VNPU_DEVICE_ID) {
		drm_info(&vdev->drm, "not a vnpu NPU: device id %#x\n", id);
		return -ENODEV;
	}
	vdev->peer = vnpu_rd32(vdev, VNPU_REG_DEVICE_PEER);
	vdev->va_bits = vnpu_rd32(vdev, VNPU_REG_VA_BITS);
	/* Two levels of 512 entries of 4 KiB pages cover at most VA_BITS bits. */
	if (vdev->va_bits > VNPU_VA_BITS || (1ULL << vdev->va_bits) <= DRM_VNPU_VA_START) {
		drm_err(&vdev->drm, "unsupported VA width %u\n", vdev->va_bits);
		return -ENODEV;
	}
	vdev->caps = (vnpu_rd32(vdev, VNPU_REG_CAPS) & DRM_VNPU_CAP_PER_CHANNEL_QUANT) |
		     VNPU_DRIVER_CAPS;
	return 0;
}

static int vnpu_irq_init(struct vnpu_device *vdev)
{
	struct pci_dev *pdev = vdev->pdev;
	int ret;

	ret = pci_alloc_irq_vectors(pdev, VNPU_NUM_IRQS, VNPU_NUM_IRQS, PCI_IRQ_MSIX);
	if (ret < 0) {
		drm_err(&vdev->drm, "cannot enable %u MSI-X vectors: %d\n", VNPU_NUM_IRQS, ret);
		return ret;
	}
	vdev->irq_completion = pci_irq_vector(pdev, VNPU_IRQ_COMPLETION);
	vdev->irq_control = pci_irq_vector(pdev, VNPU_IRQ_CONTROL);
	/*
	 * The thread drains the queue only when completions must copy back bounce buffers.
	 * Off until the cores and their lock exist (vnpu_job_init()), which it uses.
	 */
	ret = devm_request_threaded_irq(&pdev->dev, vdev->irq_completion, vnpu_job_irq,
					vnpu_job_irq_thread, IRQF_NO_AUTOEN, "vnpu-completion",
					vdev);
	if (ret)
		return ret;
	return devm_request_irq(&pdev->dev, vdev->irq_control, vnpu_io_control_irq, 0,
				"vnpu-control", vdev);
}

static void vnpu_ida_release(struct drm_device *drm, void *ida)
{
	ida_destroy(ida);
}

static int vnpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vnpu_device *vdev;
	int ret;

	vdev = devm_drm_dev_alloc(&pdev->dev, &vnpu_drm_driver, struct vnpu_device, drm);
	if (IS_ERR(vdev))
		return PTR_ERR(vdev);
	vdev->pdev = pdev;
	pci_set_drvdata(pdev, vdev);
	ret = drmm_mutex_init(&vdev->drm, &vdev->ctrl_lock);
	if (ret)
		return ret;
	init_waitqueue_head(&vdev->ctrl_wq);
	ret = drmm_mutex_init(&vdev->drm, &vdev->contexts_lock);
	if (ret)
		return ret;
	INIT_LIST_HEAD(&vdev->contexts);
	ida_init(&vdev->ctx_ids);
	/* Contexts outlive the device's unbind; their ids go with the last reference. */
	ret = drmm_add_action_or_reset(&vdev->drm, vnpu_ida_release, &vdev->ctx_ids);
	if (ret)
		return ret;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = vnpu_hw_init(vdev);
	if (ret)
		return ret;

	/* Ours: it may master the bus now. Without bus mastering QEMU delivers no MSI-X. */
	pci_set_master(pdev);
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(52));
	if (ret)
		return ret;
	/*
	 * The NPU reaches memory through its page tables, so a scatterlist segment may be any
	 * length; PCI's default limit (64 KiB) is below the runs of contiguous pages shmem gives.
	 */
	dma_set_max_seg_size(&pdev->dev, UINT_MAX);
	ret = vnpu_irq_init(vdev);
	if (ret)
		return ret;
	/* An earlier driver may have left the NPU powered off. */
	ret = vnpu_pm_power_on(vdev);
	if (ret) {
		drm_err(&vdev->drm, "cannot power the NPU on: %d\n", ret);
		return ret;
	}
	ret = vnpu_fw_boot(vdev);
	if (ret)
		return ret;
	ret = vnpu_job_init(vdev);
	if (ret)
		goto err_fw;
	enable_irq(vdev->irq_completion);
	ret = drm_dev_register(&vdev->drm, 0);
	if (ret)
		goto err_job;
	vnpu_debugfs_init(vdev);
	vnpu_pm_init(vdev);
	drm_info(&vdev->drm, "vnpu NPU rev %u, ISA %#x, %u cores, device peer %u, %u-bit VA\n",
		 vnpu_rd32(vdev, VNPU_REG_REVISION), vnpu_rd32(vdev, VNPU_REG_ISA_VERSION),
		 vdev->num_cores, vdev->peer, vdev->va_bits);
	return 0;

err_job:
	disable_irq(vdev->irq_completion);
	vnpu_job_fini(vdev);
err_fw:
	/* The device runs from the firmware copy: it stops reading it first. */
	pci_clear_master(pdev);
	vnpu_fw_fini(vdev);
	return ret;
}

/*
 * Files still open at unbind keep their contexts, BOs and command buffers
 * until they close, but no DMA mapping may outlive the driver's binding
 * (DMA_API_DEBUG reports any that do). The jobs have been stopped, so the
 * device reads none of it any more: unmap it all and free the page tables.
 */
static void vnpu_release_dma(struct vnpu_device *vdev)
{
	struct vnpu_ctx *ctx;

	mutex_lock(&vdev->contexts_lock);
	list_for_each_entry(ctx, &vdev->contexts, link) {
		mutex_lock(&ctx->vm.lock);
		vnpu_gem_release_dma(ctx);
		vnpu_cmdbuf_release_dma(ctx);
		vnpu_vm_release(&ctx->vm);
		mutex_unlock(&ctx->vm.lock);
	}
	mutex_unlock(&vdev->contexts_lock);
}

/*
 * Stop the device touching memory: no more ioctls or scheduler work reach
 * it, its cores are reset (cancelling any job), and bus mastering is off,
 * so it neither reads the firmware copy nor writes a BO any more.
 */
static void vnpu_quiesce(struct vnpu_device *vdev)
{
	if (!drm_dev_is_unplugged(&vdev->drm))
		drm_dev_unplug(&vdev->drm);
	vnpu_job_stop_device(vdev);
	pci_clear_master(vdev->pdev);
}

static void vnpu_remove(struct pci_dev *pdev)
{
	struct vnpu_device *vdev = pci_get_drvdata(pdev);

	vnpu_pm_fini(vdev);
	vnpu_quiesce(vdev);
	vnpu_job_fini(vdev);
	vnpu_fw_fini(vdev);
	vnpu_release_dma(vdev);
	/* Interrupts are still requested (devres); keep them quiet. */
	disable_irq(vdev->irq_completion);
	disable_irq(vdev->irq_control);
}

/* Reboot, kexec: the device must not write into memory the next kernel owns. */
static void vnpu_shutdown(struct pci_dev *pdev)
{
	vnpu_quiesce(pci_get_drvdata(pdev));
}

static const struct dev_pm_ops vnpu_pm_ops = {
	SYSTEM_SLEEP_PM_OPS(vnpu_pm_suspend, vnpu_pm_resume)
	RUNTIME_PM_OPS(vnpu_pm_runtime_suspend, vnpu_pm_runtime_resume, NULL)
};

static const struct pci_device_id vnpu_pci_ids[] = {
	{ PCI_DEVICE(VNPU_PCI_VENDOR_ID, VNPU_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, vnpu_pci_ids);

static struct pci_driver vnpu_pci_driver = {
	.name = VNPU_DRIVER_NAME,
	.id_table = vnpu_pci_ids,
	.probe = vnpu_probe,
	.remove = vnpu_remove,
	.shutdown = vnpu_shutdown,
	.driver.pm = pm_ptr(&vnpu_pm_ops),
};
module_pci_driver(vnpu_pci_driver);

MODULE_AUTHOR("The vnpu authors");
MODULE_DESCRIPTION("DRM accel driver for the QEMU-emulated vnpu NPU");
MODULE_LICENSE("GPL");
