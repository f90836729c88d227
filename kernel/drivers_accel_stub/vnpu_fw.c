// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Firmware loading, boot and reload.
 *
 * The image (a 64-byte header, the payload and an Ed25519 signature;
 * docs/firmware.md) is read with request_firmware(), copied into
 * DMA-coherent memory and handed to the device with CMD_BOOT (ARG0: its bus
 * address, ARG1: its size). The device's boot ROM is the one judge of the
 * image: it checks the header, the SHA-256 digest and the signature against
 * the key it holds, then reports STATUS_READY, the firmware version and the
 * build id; or STATUS_FW_ERROR with the reason in REG_FW_REJECT, which the
 * driver names in one line. The driver checks only the size, to bound the
 * copy. The copy stays allocated while the firmware runs.
 *
 * Reload (debugfs fw_reload): the image is requested again and copied;
 * then the schedulers are paused, the jobs on the device finish (a hung
 * one fails with its own timeout, vnpu_job_pause()), the image is booted,
 * and the schedulers resume; jobs still queued run on the new firmware, or
 * fail with -EIO if the device rejected it.
 */
#include <linux/debugfs.h>
#include <linux/dma-mapping.h>
#include <linux/firmware.h>
#include <linux/seq_file.h>

#include <drm/drm_debugfs.h>
#include <drm/drm_drv.h>
#include <drm/drm_print.h>

#include "vnpu_io.h"
#include "vnpu_job.h"
#include "vnpu_pm.h"

#define VNPU_FW_NAME		"vnpu/vnpu_fw.bin"
#define VNPU_BOOT_TIMEOUT_MS	5000

MODULE_FIRMWARE(VNPU_FW_NAME);

/**
 * struct vnpu_fw_image - a firmware image in DMA-coherent memory
 * @cpu: kernel address, NULL for none
 * @dma: bus address
 * @size: bytes
 */
struct vnpu_fw_image {
	void *cpu;
	dma_addr_t dma;
	size_t size;
};

static void vnpu_fw_image_free(struct vnpu_device *vdev, struct vnpu_fw_image *img)
{
	if (img->cpu)
		dma_free_coherent(&vdev->pdev->dev, img->size, img->cpu, img->dma);
	img->cpu = NULL;
}

/*
 * Read the image and copy it into DMA-coherent memory. This allocates and
 * may sleep for a long time, so a reload does it before pausing the jobs:
 * nothing the job timeout's recovery waits for may allocate memory.
 */
static int vnpu_fw_load(struct vnpu_device *vdev, struct vnpu_fw_image *img)
{
	struct device *dev = &vdev->pdev->dev;
	const struct firmware *fw;
	int ret;

	ret = request_firmware(&fw, VNPU_FW_NAME, dev);
	if (ret) {
		drm_err(&vdev->drm, "cannot load %s: %d\n", VNPU_FW_NAME, ret);
		return ret;
	}
	if (!fw->size || fw->size > VNPU_FW_MAX_SIZE) {
		drm_err(&vdev->drm, "firmware %s rejected: %zu bytes, not 1..%u\n", VNPU_FW_NAME,
			fw->size, VNPU_FW_MAX_SIZE);
		ret = -EINVAL;
		goto out_release;
	}
	img->size = fw->size;
	img->cpu = dma_alloc_coherent(dev, fw->size, &img->dma, GFP_KERNEL);
	if (!img->cpu) {
		ret = -ENOMEM;
		goto out_release;
	}
	memcpy(img->cpu, fw->data, fw->size);
out_release:
	release_firmware(fw);
	return ret;
}

/*
 * Boot the device from @img. The boot ROM drops the running firmware
 * whatever it decides: its copy is handed back in @retired for the caller
 * to free. On success the device runs @img, which the driver keeps; on
 * failure the caller frees @img too. Allocates nothing.
 */
static int vnpu_fw_start(struct vnpu_device *vdev, const struct vnpu_fw_image *img,
			 struct vnpu_fw_image *retired)
{
	u32 status, reason;
	int ret;

	ret = vnpu_io_command(vdev, VNPU_CMD_BOOT, img->dma, img->size, VNPU_BOOT_TIMEOUT_MS);
	status = vnpu_rd32(vdev, VNPU_REG_STATUS);
	retired->cpu = vdev->fw_cpu;
	retired->dma = vdev->fw_dma;
	retired->size = vdev->fw_size;
	vdev->fw_cpu = NULL;
	WRITE_ONCE(vdev->fw_version, 0);
	WRITE_ONCE(vdev->fw_build_id, 0);
	if (ret == -ETIMEDOUT)
		return ret;
	if (ret || !(status & VNPU_STATUS_READY)) {
		reason = vnpu_rd32(vdev, VNPU_REG_FW_REJECT);
		drm_err(&vdev->drm, "firmware %s rejected by the device: %s (reason %u, status %d)\n",
			VNPU_FW_NAME, vnpu_fw_reject_name(reason), reason, ret);
		return ret ?: -EIO;
	}
	vdev->fw_cpu = img->cpu;
	vdev->fw_dma = img->dma;
	vdev->fw_size = img->size;
	WRITE_ONCE(vdev->fw_version, vnpu_rd32(vdev, VNPU_REG_FW_VERSION));
	WRITE_ONCE(vdev->fw_build_id, vnpu_rd64(vdev, VNPU_REG_FW_BUILD_ID));
	drm_info(&vdev->drm, "firmware %u.%u.%u booted, build id %016llx\n",
		 vdev->fw_version >> 16, (vdev->fw_version >> 8) & 0xff, vdev->fw_version & 0xff,
		 vdev->fw_build_id);
	return 0;
}

/**
 * vnpu_fw_boot() - load the firmware and boot the device
 * @vdev: the device, with BAR2 mapped and interrupts set up, no job on it
 *
 * On success the new image's copy replaces the running firmware's. Whatever
 * the outcome, the device's state is what its registers report afterwards.
 *
 * Return: 0 once the device reports STATUS_READY; -ENOEXEC if its boot ROM
 * rejected the image (the reason is logged), else another negative errno.
 */
int vnpu_fw_boot(struct vnpu_device *vdev)
{
	struct vnpu_fw_image img = {}, retired = {};
	int ret;

	ret = vnpu_fw_load(vdev, &img);
	if (ret)
		return ret;
	ret = vnpu_fw_start(vdev, &img, &retired);
	vnpu_fw_image_free(vdev, &retired);
	if (ret)
		vnpu_fw_image_free(vdev, &img);
	return ret;
}

/**
 * vnpu_fw_reload() - boot the firmware file again, the device running
 * @vdev: the device, registered
 *
 * The image is read first; then jobs on the device finish (a hung one
 * fails with -ETIMEDOUT as ever), the device boots it, and queued jobs run
 * on the new firmware.
 *
 * Return: 0; the negative errno of reading the image, when the running
 * firmware stays; or that of booting it: then no firmware runs and jobs
 * fail with -EIO until a reload succeeds.
 */
int vnpu_fw_reload(struct vnpu_device *vdev)
{
	struct vnpu_fw_image img = {}, retired = {};
	int ret;

	atomic_inc(&vdev->fw_reloads);
	ret = vnpu_fw_load(vdev, &img);
	if (ret)
		return ret;
	vnpu_job_pause(vdev);
	ret = vnpu_fw_start(vdev, &img, &retired);
	vnpu_job_resume(vdev);
	vnpu_fw_image_free(vdev, &retired);
	if (ret)
		vnpu_fw_image_free(vdev, &img);
	return ret;
}

/**
 * vnpu_fw_resume() - boot the kept firmware copy again after a power-up
 * @vdev: the device, powered on, no job on it
 *
 * Powered off, the device lost its firmware; the copy it ran stays
 * allocated for this. Allocates nothing. If the device refuses the image
 * now, or no firmware ran, jobs fail with -EIO until a reload succeeds.
 */
void vnpu_fw_resume(struct vnpu_device *vdev)
{
	u32 status;
	int ret;

	if (!vdev->fw_cpu)
		return;
	ret = vnpu_io_command(vdev, VNPU_CMD_BOOT, vdev->fw_dma, vdev->fw_size,
			      VNPU_BOOT_TIMEOUT_MS);
	status = vnpu_rd32(vdev, VNPU_REG_STATUS);
	if (!ret && (status & VNPU_STATUS_READY))
		return;
	drm_err(&vdev->drm, "firmware did not boot again after power-up: %d, reason %u\n", ret,
		vnpu_rd32(vdev, VNPU_REG_FW_REJECT));
	WRITE_ONCE(vdev->fw_version, 0);
	WRITE_ONCE(vdev->fw_build_id, 0);
}

/**
 * vnpu_fw_fini() - free the firmware copy
 * @vdev: the device, quiesced
 */
void vnpu_fw_fini(struct vnpu_device *vdev)
{
	struct vnpu_fw_image img = { vdev->fw_cpu, vdev->fw_dma, vdev->fw_size };

	vnpu_fw_image_free(vdev, &img);
	vdev->fw_cpu = NULL;
}

static int vnpu_fw_debugfs_show(struct seq_file *m, void *data)
{
	struct drm_debugfs_entry *entry = m->private;
	struct vnpu_device *vdev = to_vnpu_device(entry->dev);
	u32 reason;
	int idx;

	/* The registers live in BAR2, which goes with the device. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return -ENODEV;
	reason = vnpu_rd32(vdev, VNPU_REG_FW_REJECT);
	drm_dev_exit(idx);

	/*
	 * The driver's view, whatever the power state: a powered-off device
	 * reports no firmware, but boots the kept copy when it powers on.
	 */
	seq_printf(m, "state: %s\n", READ_ONCE(vdev->fw_version) ? "running" :
		   reason ? "rejected" : "none");
	seq_printf(m, "version: %#x\n", READ_ONCE(vdev->fw_version));
	seq_printf(m, "build_id: %016llx\n", READ_ONCE(vdev->fw_build_id));
	seq_printf(m, "reject_reason: %u (%s)\n", reason, vnpu_fw_reject_name(reason));
	seq_printf(m, "size: %zu\n", vdev->fw_cpu ? vdev->fw_size : 0);
	seq_printf(m, "reloads: %d\n", atomic_read(&vdev->fw_reloads));
	return 0;
}

static ssize_t vnpu_fw_reload_write(struct file *file, const char __user *buf, size_t len,
				    loff_t *pos)
{
	struct vnpu_device *vdev = file->private_data;
	bool reload;
	int ret, idx;

	ret = kstrtobool_from_user(buf, len, &reload);
	if (ret)
		return ret;
	if (!reload)
		return len;
	if (!drm_dev_enter(&vdev->drm, &idx))
		return -ENODEV;
	ret = vnpu_pm_get(vdev);
	if (!ret) {
		ret = vnpu_fw_reload(vdev);
		vnpu_pm_put(vdev);
	}
	drm_dev_exit(idx);
	return ret ?: len;
}

static const struct file_operations vnpu_fw_reload_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = vnpu_fw_reload_write,
	.llseek = noop_llseek,
};

/**
 * vnpu_fw_debugfs_init() - create debugfs "firmware" (state) and "fw_reload"
 * @vdev: the device
 *
 * Writing 1 to fw_reload reloads the firmware; the write fails with the
 * errno of vnpu_fw_reload().
 */
void vnpu_fw_debugfs_init(struct vnpu_device *vdev)
{
	drm_debugfs_add_file(&vdev->drm, "firmware", vnpu_fw_debugfs_show, NULL);
	debugfs_create_file("fw_reload", 0200, vdev->drm.debugfs_root, vdev,
			    &vnpu_fw_reload_fops);
}
