/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Device coredumps of failed jobs (vnpu_coredump.c).
 */
#ifndef __VNPU_COREDUMP_H__
#define __VNPU_COREDUMP_H__

#include <linux/types.h>

struct vnpu_coredump;
struct vnpu_device;
struct vnpu_job;

struct vnpu_coredump *vnpu_coredump_snapshot(struct vnpu_device *vdev, struct vnpu_job *job,
					     int status, u64 fault_va);
void vnpu_coredump_emit(struct vnpu_job *job);

#endif /* __VNPU_COREDUMP_H__ */
