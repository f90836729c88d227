/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Power management (vnpu_pm.c).
 */
#ifndef __VNPU_PM_H__
#define __VNPU_PM_H__

#include <linux/pm.h>

struct vnpu_device;

/* The device's dev_pm_ops callbacks (vnpu_drv.c's vnpu_pm_ops). */
int vnpu_pm_suspend(struct device *dev);
int vnpu_pm_resume(struct device *dev);
int vnpu_pm_runtime_suspend(struct device *dev);
int vnpu_pm_runtime_resume(struct device *dev);

int vnpu_pm_get(struct vnpu_device *vdev);
void vnpu_pm_put(struct vnpu_device *vdev);
int vnpu_pm_power_on(struct vnpu_device *vdev);
void vnpu_pm_init(struct vnpu_device *vdev);
void vnpu_pm_fini(struct vnpu_device *vdev);

#endif /* __VNPU_PM_H__ */
