// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Device state under /sys/kernel/debug/accel/<pci-id>/.
 *
 * state     device registers and queue positions
 * counters  global counts: live objects ("name: value") return to their
 *           baseline when every file is closed and every job has ended;
 *           *_total, *_done, *_failed... only grow
 * files     one line per open file: context, pid, BOs, bytes, jobs
 * doorbell_rtt  times VNPU_RTT_SAMPLES NOP control commands: the bare
 *           doorbell -> device -> MSI-X -> waiter round trip, the floor of
 *           a job's round trip
 * firmware, fw_reload  firmware state and reload (vnpu_fw.c)
 * power     power state and counters (vnpu_pm.c)
 */
#include <linux/debugfs.h>
#include <linux/idr.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/seq_file.h>
#include <linux/sort.h>

#include <drm/drm_debugfs.h>
#include <drm/drm_drv.h>
#include <drm/drm_file.h>

#include "vnpu_drv.h"
#include "vnpu_io.h"
#include "vnpu_job.h"

static struct vnpu_device *vnpu_debugfs_dev(struct seq_file *m)
{
	struct drm_debugfs_entry *entry = m->private;

	return to_vnpu_device(entry->dev);
}

static int vnpu_debugfs_state(struct seq_file *m, void *data)
{
	struct vnpu_device *vdev = vnpu_debugfs_dev(m);
	u32 status;
	int idx;

	/* The registers live in BAR2, which goes with the device. */
	if (!drm_dev_enter(&vdev->drm, &idx))
		return -ENODEV;
	status = vnpu_rd32(vdev, VNPU_REG_STATUS);
	seq_printf(m, "status: %#x\n", status);
	seq_printf(m, "ready: %u\n", !!(status & VNPU_STATUS_READY));
	seq_printf(m, "powered: %u\n", vnpu_rd32(vdev, VNPU_REG_POWER_STATE) == VNPU_POWER_ON);
	seq_printf(m, "device_id: %#x\n", vnpu_rd32(vdev, VNPU_REG_DEVICE_ID));
	seq_printf(m, "revision: %u\n", vnpu_rd32(vdev, VNPU_REG_REVISION));
	seq_printf(m, "isa_version: %#x\n", vnpu_rd32(vdev, VNPU_REG_ISA_VERSION));
	seq_printf(m, "fw_version: %#x\n", vnpu_rd32(vdev, VNPU_REG_FW_VERSION));
	seq_printf(m, "device_peer: %u\n", vdev->peer);
	seq_printf(m, "va_bits: %u\n", vdev->va_bits);
	seq_printf(m, "caps: %#llx\n", vdev->caps);
	seq_printf(m, "timeout_ms: %u\n", READ_ONCE(vdev->job_timeout_ms));
	seq_printf(m, "device_reset_count: %u\n", vnpu_rd32(vdev, VNPU_REG_RESET_COUNT));
	seq_printf(m, "device_jobs_done: %u\n", vnpu_rd32(vdev, VNPU_REG_JOBS_DONE));
	seq_printf(m, "device_irq_count: %u\n", vnpu_rd32(vdev, VNPU_REG_IRQ_COUNT));
	seq_printf(m, "device_irq_value: %#x\n", vnpu_rd32(vdev, VNPU_REG_IRQ_VALUE));
	/* Several values per line: positions are neither live counts nor totals. */
	seq_printf(m, "sq head %u tail %u\n", vnpu_rd32(vdev, VNPU_SQ_HEAD),
		   vnpu_rd32(vdev, VNPU_SQ_TAIL));
	seq_printf(m, "cq head %u tail %u\n", vnpu_rd32(vdev, VNPU_CQ_HEAD),
		   vnpu_rd32(vdev, VNPU_CQ_TAIL));
	seq_printf(m, "last seqno %llu\n", vdev->next_seqno);
	drm_dev_exit(idx);
	return 0;
}

#ifndef VNPU_SYNCOBJ_XA
static int vnpu_count_one(int id, void *p, void *data)
{
	(*(unsigned int *)data)++;
	return 0;
}
#endif

/*
 * Syncobjs are DRM core objects the driver never sees created or destroyed,
 * so they are counted where they live: in the handle tables of the device's
 * open files. A closed file's syncobjs are released with it.
 */
static unsigned int vnpu_count_syncobjs(struct vnpu_device *vdev)
{
	struct drm_file *file;
	unsigned int count = 0;
#ifdef VNPU_SYNCOBJ_XA
	unsigned long handle;
	void *syncobj;
#endif

	mutex_lock(&vdev->drm.filelist_mutex);
	list_for_each_entry(file, &vdev->drm.filelist, lhead) {
#ifdef VNPU_SYNCOBJ_XA
		xa_for_each(&file->syncobj_xa, handle, syncobj)
			count++;
#else
		spin_lock(&file->syncobj_table_lock);
		idr_for_each(&file->syncobj_idr, vnpu_count_one, &count);
		spin_unlock(&file->syncobj_table_lock);
#endif
	}
	mutex_unlock(&vdev->drm.filelist_mutex);
	return count;
}

static int vnpu_debugfs_counters(struct seq_file *m, void *data)
{
	struct vnpu_device *vdev = vnpu_debugfs_dev(m);
	struct vnpu_stats *s = &vdev->stats;
	unsigned int active = vnpu_job_count_active(vdev);

	seq_printf(m, "files: %d\n", atomic_read(&s->files));
	seq_printf(m, "contexts: %d\n", atomic_read(&s->contexts));
	seq_printf(m, "bos: %d\n", atomic_read(&s->bos));
	seq_printf(m, "bos_imported: %d\n", atomic_read(&s->bos_imported));
	seq_printf(m, "bo_bytes: %lld\n", atomic64_read(&s->bo_bytes));
	seq_printf(m, "mappings: %d\n", atomic_read(&s->mappings));
	seq_printf(m, "syncobjs: %u\n", vnpu_count_syncobjs(vdev));
	seq_printf(m, "jobs: %d\n", atomic_read(&s->jobs));
	seq_printf(m, "jobs_on_device: %u\n", active);
	seq_printf(m, "jobs_submitted: %lld\n", atomic64_read(&s->jobs_submitted));
	seq_printf(m, "jobs_done: %lld\n", atomic64_read(&s->jobs_done));
	seq_printf(m, "jobs_failed: %lld\n", atomic64_read(&s->jobs_failed));
	seq_printf(m, "jobs_timedout: %lld\n", atomic64_read(&s->jobs_timedout));
	seq_printf(m, "jobs_cancelled: %lld\n", atomic64_read(&s->jobs_cancelled));
	seq_printf(m, "resets: %d\n", atomic_read(&s->resets));
	seq_printf(m, "cmdbufs: %d\n", atomic_read(&s->cmdbufs));
	seq_printf(m, "cmdbufs_allocated_total: %lld\n", atomic64_read(&s->cmdbuf_allocs));
	return 0;
}

static int vnpu_debugfs_files(struct seq_file *m, void *data)
{
	struct vnpu_device *vdev = vnpu_debugfs_dev(m);
	struct drm_file *file;

	seq_puts(m, "# ctx pid bos bo_bytes imported jobs_in_flight\n");
	mutex_lock(&vdev->drm.filelist_mutex);
	list_for_each_entry(file, &vdev->drm.filelist, lhead) {
		struct vnpu_file_priv *fpriv = file->driver_priv;
		struct vnpu_ctx *ctx;

		if (!fpriv)
			continue;
		ctx = fpriv->ctx;
		seq_printf(m, "ctx %u pid %d bos %d bo_bytes %lld imported %d jobs_in_flight %d\n",
			   ctx->id, ctx->pid, atomic_read(&ctx->bo_count),
			   atomic64_read(&ctx->bo_bytes), atomic_read(&ctx->bos_imported),
			   atomic_read(&ctx->jobs_in_flight));
	}
	mutex_unlock(&vdev->drm.filelist_mutex);
	return 0;
}

#define VNPU_RTT_SAMPLES	256
#define VNPU_RTT_TIMEOUT_MS	1000

static int vnpu_cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

static int vnpu_debugfs_doorbell_rtt(struct seq_file *m, void *data)
{
	struct vnpu_device *vdev = vnpu_debugfs_dev(m);
	unsigned int i;
	int idx, ret = 0;
	u64 *ns;

	if (!drm_dev_enter(&vdev->drm, &idx))
		return -ENODEV;
	ns = kvmalloc_array(VNPU_RTT_SAMPLES, sizeof(*ns), GFP_KERNEL);
	if (!ns) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < VNPU_RTT_SAMPLES; i++) {
		ktime_t start = ktime_get();

		ret = vnpu_io_command(vdev, VNPU_CMD_NOP, 0, 0, VNPU_RTT_TIMEOUT_MS);
		if (ret)
			goto free;
		ns[i] = ktime_to_ns(ktime_sub(ktime_get(), start));
	}
	sort(ns, VNPU_RTT_SAMPLES, sizeof(*ns), vnpu_cmp_u64, NULL);
	seq_printf(m, "samples: %u\n", VNPU_RTT_SAMPLES);
	seq_printf(m, "min_ns: %llu\n", ns[0]);
	seq_printf(m, "p50_ns: %llu\n", ns[VNPU_RTT_SAMPLES / 2]);
	seq_printf(m, "p90_ns: %llu\n", ns[VNPU_RTT_SAMPLES * 9 / 10]);
	seq_printf(m, "p99_ns: %llu\n", ns[VNPU_RTT_SAMPLES * 99 / 100]);
free:
	kvfree(ns);
out:
	drm_dev_exit(idx);
	return ret;
}

static int vnpu_job_timeout_get(void *data, u64 *val)
{
	struct vnpu_device *vdev = data;

	*val = READ_ONCE(vdev->job_timeout_ms);
	return 0;
}

static int vnpu_job_timeout_set(void *data, u64 val)
{
	struct vnpu_device *vdev = data;

	if (val < VNPU_JOB_TIMEOUT_MIN_MS || val > VNPU_JOB_TIMEOUT_MAX_MS)
		return -EINVAL;
	WRITE_ONCE(vdev->job_timeout_ms, val);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(vnpu_job_timeout_fops, vnpu_job_timeout_get, vnpu_job_timeout_set,
			 "%llu\n");

static int vnpu_core_mask_get(void *data, u64 *val)
{
	struct vnpu_device *vdev = data;

	*val = READ_ONCE(vdev->core_mask);
	return 0;
}

static int vnpu_core_mask_set(void *data, u64 val)
{
	struct vnpu_device *vdev = data;

	if (!val || val & ~(u64)GENMASK(vdev->num_cores - 1, 0))
		return -EINVAL;
	WRITE_ONCE(vdev->core_mask, val);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(vnpu_core_mask_fops, vnpu_core_mask_get, vnpu_core_mask_set, "%#llx\n");

static const struct drm_debugfs_info vnpu_debugfs_list[] = {
	{ "state", vnpu_debugfs_state, 0 },
	{ "counters", vnpu_debugfs_counters, 0 },
	{ "files", vnpu_debugfs_files, 0 },
	{ "doorbell_rtt", vnpu_debugfs_doorbell_rtt, 0 },
};

/**
 * vnpu_debugfs_init() - create the driver's debugfs files
 * @vdev: the device
 */
void vnpu_debugfs_init(struct vnpu_device *vdev)
{
	drm_debugfs_add_files(&vdev->drm, vnpu_debugfs_list, ARRAY_SIZE(vnpu_debugfs_list));
	/* The timeout of jobs that start from now on; GET_PARAM reports it. */
	debugfs_create_file_unsafe("job_timeout_ms", 0600, vdev->drm.debugfs_root, vdev,
				   &vnpu_job_timeout_fops);
	/* The cores new jobs may go to (a file keeps its core while a job of it is unfinished). */
	debugfs_create_file_unsafe("core_mask", 0600, vdev->drm.debugfs_root, vdev,
				   &vnpu_core_mask_fops);
	vnpu_fw_debugfs_init(vdev);
}
