// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Firmware loading and boot.
 *
 * The image (a 64-byte header, then the payload; docs/firmware.md) is read
 * with request_firmware(), copied into DMA-coherent memory and handed to the
 * device with CMD_BOOT (ARG0: its bus address, ARG1: its size). The device
 * checks magic, versions, sizes and CRC-32, then reports STATUS_READY and
 * the firmware version. The driver checks the header too, so a bad file is
 * refused with a clear message before the device sees it. The copy stays
 * allocated while the driver is bound.
 */
#include <linux/dma-mapping.h>
#include <linux/firmware.h>
#include <linux/unaligned.h>

#include <drm/drm_print.h>

#include "vnpu_io.h"

#define VNPU_FW_NAME		"vnpu/vnpu_fw.bin"
#define VNPU_BOOT_TIMEOUT_MS	5000

MODULE_FIRMWARE(VNPU_FW_NAME);

static int vnpu_fw_check(struct vnpu_device *vdev, const u8 *data, size_t size)
{
	u32 payload;
	u32 off;

	if (size < VNPU_FW_HEADER_SIZE || size > VNPU_FW_MAX_SIZE) {
		drm_err(&vdev->drm, "%s: size %zu out of range\n", VNPU_FW_NAME, size);
		return -EINVAL;
	}
	if (get_unaligned_le32(data + VNPU_FWH_MAGIC) != VNPU_FW_MAGIC ||
	    get_unaligned_le32(data + VNPU_FWH_FORMAT_VERSION) != VNPU_FW_FORMAT_VERSION ||
	    get_unaligned_le32(data + VNPU_FWH_HEADER_SIZE) != VNPU_FW_HEADER_SIZE) {
		drm_err(&vdev->drm, "%s: bad magic, format or header size\n", VNPU_FW_NAME);
		return -EINVAL;
	}
	payload = get_unaligned_le32(data + VNPU_FWH_PAYLOAD_SIZE);
	if (payload != size - VNPU_FW_HEADER_SIZE) {
		drm_err(&vdev->drm, "%s: payload size %u, file has %zu\n", VNPU_FW_NAME,
			payload, size - VNPU_FW_HEADER_SIZE);
		return -EINVAL;
	}
	for (off = VNPU_FWH_PAYLOAD_CRC32 + 4; off < VNPU_FW_HEADER_SIZE; off++) {
		if (data[off]) {
			drm_err(&vdev->drm, "%s: reserved header byte %u is not zero\n",
				VNPU_FW_NAME, off);
			return -EINVAL;
		}
	}
	return 0;
}

/**
 * vnpu_fw_boot() - load the firmware and boot the device
 * @vdev: the device, with BAR2 mapped and interrupts set up
 *
 * Return: 0 once the device reports STATUS_READY, else a negative errno.
 */
int vnpu_fw_boot(struct vnpu_device *vdev)
{
	struct device *dev = &vdev->pdev->dev;
	const struct firmware *fw;
	u32 status;
	int ret;

	ret = request_firmware(&fw, VNPU_FW_NAME, dev);
	if (ret) {
		drm_err(&vdev->drm, "cannot load %s: %d\n", VNPU_FW_NAME, ret);
		return ret;
	}
	ret = vnpu_fw_check(vdev, fw->data, fw->size);
	if (ret)
		goto out_release;

	vdev->fw_size = fw->size;
	vdev->fw_cpu = dma_alloc_coherent(dev, fw->size, &vdev->fw_dma, GFP_KERNEL);
	if (!vdev->fw_cpu) {
		ret = -ENOMEM;
		goto out_release;
	}
	memcpy(vdev->fw_cpu, fw->data, fw->size);

	ret = vnpu_io_command(vdev, VNPU_CMD_BOOT, vdev->fw_dma, fw->size, VNPU_BOOT_TIMEOUT_MS);
	status = vnpu_rd32(vdev, VNPU_REG_STATUS);
	if (!ret && !(status & VNPU_STATUS_READY))
		ret = -EIO;
	if (ret) {
		drm_err(&vdev->drm, "firmware boot failed: %d (status %#x)\n", ret, status);
		vnpu_fw_fini(vdev);
		goto out_release;
	}
	vdev->fw_version = vnpu_rd32(vdev, VNPU_REG_FW_VERSION);
	drm_info(&vdev->drm, "firmware %u.%u.%u booted\n", vdev->fw_version >> 16,
		 (vdev->fw_version >> 8) & 0xff, vdev->fw_version & 0xff);
out_release:
	release_firmware(fw);
	return ret;
}

/**
 * vnpu_fw_fini() - free the firmware copy
 * @vdev: the device, quiesced
 */
void vnpu_fw_fini(struct vnpu_device *vdev)
{
	if (vdev->fw_cpu)
		dma_free_coherent(&vdev->pdev->dev, vdev->fw_size, vdev->fw_cpu, vdev->fw_dma);
	vdev->fw_cpu = NULL;
}
