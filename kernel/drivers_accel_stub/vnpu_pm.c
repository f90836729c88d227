// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Power management: runtime PM with autosuspend, and system sleep.
 *
 * The NPU has a power domain of its own (CMD_POWER, docs/hardware.md):
 * powered off it keeps its identification and control blocks but loses its
 * firmware, its cores' caches and its queue positions.
 *
 * Runtime PM: every job holds a runtime PM reference from SUBMIT until it
 * is freed, so the device is powered while any job is queued, waiting for
 * its dependencies or running, and SUBMIT is where it wakes up (in process
 * context, before the job can reach run_job()). When the last job has gone
 * and the autosuspend delay (power/autosuspend_delay_ms, default
 * VNPU_AUTOSUSPEND_DELAY_MS from vnpu_hw.h) has passed with no new one, the device is
 * powered off. Resuming powers it on, starts the queues from the device's
 * positions and boots the firmware copy the driver keeps; reading a
 * parameter, a BO or debugfs never wakes it.
 *
 * System sleep: the schedulers stop handing jobs to the device, the jobs
 * already on it finish (a hung one is failed by its job timeout, as ever,
 * and the jobs behind it run), then the device is powered off like a
 * runtime suspend. Jobs not yet on the device wait in their queues and run
 * after resume. So no job is aborted or run twice by a suspend.
 */
#include <linux/pci.h>
#include <linux/pm_runtime.h>
#include <linux/seq_file.h>

#include <drm/drm_debugfs.h>
#include <drm/drm_drv.h>
#include <drm/drm_print.h>

#include "vnpu_io.h"
#include "vnpu_job.h"
#include "vnpu_pm.h"

/* As long as a BOOT may take: a loaded host's device model may stall for seconds. */
#define VNPU_POWER_TIMEOUT_MS		5000

static struct vnpu_device *vnpu_pm_dev(struct device *dev)
{
	return pci_get_drvdata(to_pci_dev(dev));
}

/**
 * vnpu_pm_get() - power the device for a job
 * @vdev: the device
 *
 * May sleep: it resumes the device when it is suspended.
 *
 * Return: 0, or the negative errno of the resume.
 */
int vnpu_pm_get(struct vnpu_device *vdev)
{
	return pm_runtime_resume_and_get(vdev->drm.dev);
}

/**
 * vnpu_pm_put() - drop a reference taken by vnpu_pm_get()
 * @vdev: the device; suspends after the autosuspend delay when it was the
 *	last reference. Any context.
 */
void vnpu_pm_put(struct vnpu_device *vdev)
{
	pm_runtime_mark_last_busy(vdev->drm.dev);
	pm_runtime_put_autosuspend(vdev->drm.dev);
}

/**
 * vnpu_pm_power_on() - power the NPU on
 * @vdev: the device
 *
 * Powering on what is already on changes nothing (probe calls it in case
 * an earlier driver left the device off).
 *
 * Return: 0 or a negative errno.
 */
int vnpu_pm_power_on(struct vnpu_device *vdev)
{
	return vnpu_io_command(vdev, VNPU_CMD_POWER, VNPU_POWER_ON, 0, VNPU_POWER_TIMEOUT_MS);
}

int vnpu_pm_runtime_suspend(struct device *dev)
{
	struct vnpu_device *vdev = vnpu_pm_dev(dev);
	int ret;

	/* No job holds a reference; the device checks again that its queues are empty. */
	ret = vnpu_io_command(vdev, VNPU_CMD_POWER, VNPU_POWER_OFF, 0, VNPU_POWER_TIMEOUT_MS);
	if (ret == -EBUSY) {
		drm_dbg_driver(&vdev->drm, "power off refused: busy, trying again later\n");
		/* A new last-busy time makes the PM core retry after another delay. */
		pm_runtime_mark_last_busy(dev);
		return -EBUSY;
	}
	if (ret) {
		/* No answer (logged): stay on, and try again only after the next job. */
		return -EAGAIN;
	}
	atomic_inc(&vdev->stats.power_offs);
	return 0;
}

int vnpu_pm_runtime_resume(struct device *dev)
{
	struct vnpu_device *vdev = vnpu_pm_dev(dev);
	int ret;

	ret = vnpu_pm_power_on(vdev);
	if (ret) {
		drm_err(&vdev->drm, "cannot power the NPU on: %d\n", ret);
		return ret;
	}
	vnpu_job_rings_init(vdev);
	/* A firmware the device refuses now leaves jobs failing with -EIO, as after a reload. */
	vnpu_fw_resume(vdev);
	return 0;
}

int vnpu_pm_suspend(struct device *dev)
{
	struct vnpu_device *vdev = vnpu_pm_dev(dev);
	int ret;

	vnpu_job_quiesce(vdev);
	ret = pm_runtime_force_suspend(dev);
	/* The PM core resumes only the devices that suspended. */
	if (ret)
		vnpu_job_unquiesce(vdev);
	return ret;
}

int vnpu_pm_resume(struct device *dev)
{
	struct vnpu_device *vdev = vnpu_pm_dev(dev);
	int ret;

	/* Powers the device on only if a job is waiting for it. */
	ret = pm_runtime_force_resume(dev);
	vnpu_job_unquiesce(vdev);
	return ret;
}

static int vnpu_pm_debugfs_show(struct seq_file *m, void *data)
{
	struct drm_debugfs_entry *entry = m->private;
	struct vnpu_device *vdev = to_vnpu_device(entry->dev);
	struct device *dev = vdev->drm.dev;
	int idx;

	/* The power registers are always on: reading them wakes nothing. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return -ENODEV;
	seq_printf(m, "state: %s\n",
		   vnpu_rd32(vdev, VNPU_REG_POWER_STATE) == VNPU_POWER_ON ? "on" : "off");
	seq_printf(m, "power_ups: %u\n", vnpu_rd32(vdev, VNPU_REG_POWER_UPS));
	seq_printf(m, "powered_us: %llu\n", vnpu_rd64(vdev, VNPU_REG_POWERED_US));
	seq_printf(m, "power_offs: %d\n", atomic_read(&vdev->stats.power_offs));
	seq_printf(m, "runtime_status: %s\n", pm_runtime_suspended(dev) ? "suspended" :
		   pm_runtime_active(dev) ? "active" : "changing");
	seq_printf(m, "usage_count: %d\n", atomic_read(&dev->power.usage_count));
	drm_dev_exit(idx);
	return 0;
}

/**
 * vnpu_pm_init() - enable runtime PM, once the device is up
 * @vdev: the device, booted and registered
 *
 * The PCI core holds a runtime PM reference during probe and forbids
 * runtime PM by default; the driver allows it and drops the reference, so
 * the device suspends after the autosuspend delay unless a job comes.
 */
void vnpu_pm_init(struct vnpu_device *vdev)
{
	struct device *dev = vdev->drm.dev;

	drm_debugfs_add_file(&vdev->drm, "power", vnpu_pm_debugfs_show, NULL);
	pm_runtime_set_autosuspend_delay(dev, VNPU_AUTOSUSPEND_DELAY_MS);
	pm_runtime_use_autosuspend(dev);
	pm_runtime_allow(dev);
	pm_runtime_mark_last_busy(dev);
	pm_runtime_put_autosuspend(dev);
}

/**
 * vnpu_pm_fini() - keep the device powered from here on
 * @vdev: the device, being removed; the PCI core has resumed it
 *
 * Takes back the reference vnpu_pm_init() dropped, which the PCI core
 * drops after remove().
 */
void vnpu_pm_fini(struct vnpu_device *vdev)
{
	struct device *dev = vdev->drm.dev;

	pm_runtime_get_noresume(dev);
	pm_runtime_dont_use_autosuspend(dev);
	pm_runtime_forbid(dev);
}
