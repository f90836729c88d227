/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Device coredumps of failed jobs (vnpu_coredump.c).
 */
#ifndef __VNPU_COREDUMP_H__
#define __VNPU_COREDUMP_H__

#include <linux/types.h>

struct vnpu_job;

void vnpu_coredump_capture(struct vnpu_job *job);

#endif /* __VNPU_COREDUMP_H__ */
