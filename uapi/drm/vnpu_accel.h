/* SPDX-License-Identifier: MIT */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * vnpu_accel.h - the ioctl ABI of vnpu.ko, the DRM accel driver for the
 * QEMU-emulated vnpu NPU.
 *
 * This header is the single source of truth for the ABI: the kernel module
 * includes it, and libaccel reads it with cffi. docs/uapi.md explains it with
 * examples.
 *
 * Rules every ioctl follows (Documentation/process/botching-up-ioctls.rst):
 *
 * - every struct is padded to a multiple of 64 bits and every field is
 *   naturally aligned;
 * - user pointers are passed as __u64;
 * - every pad and reserved field, and every undefined flag bit, must be zero
 *   on input, or the ioctl fails with -EINVAL;
 * - timeouts are absolute CLOCK_MONOTONIC times in nanoseconds;
 * - errors are returned as negative errno values (errno in userspace).
 *
 * Device addresses: every open file of /dev/accel/accelN owns a private
 * device virtual address space of DRM_VNPU_PARAM_VA_SIZE bytes. BO_CREATE
 * maps each buffer object there and reports its device virtual address
 * (VA); command streams name memory by VA only. A job can touch nothing but
 * the buffers listed in its submission.
 */
#ifndef __VNPU_ACCEL_H__
#define __VNPU_ACCEL_H__

#include "drm.h"

#if defined(__cplusplus)
extern "C" {
#endif

#define DRM_VNPU_GET_PARAM	0x00
#define DRM_VNPU_BO_CREATE	0x01
#define DRM_VNPU_BO_INFO	0x02
#define DRM_VNPU_BO_WAIT	0x03
#define DRM_VNPU_SUBMIT		0x04
#define DRM_VNPU_BO_SYNC	0x05

/**
 * enum drm_vnpu_param - parameters readable with DRM_IOCTL_VNPU_GET_PARAM
 *
 * @DRM_VNPU_PARAM_DEVICE_ID: PCI-independent device identifier of the NPU.
 *	The vnpu emulated NPU reports the value 0x0001 (the parameter's own
 *	number is 0).
 * @DRM_VNPU_PARAM_DEVICE_REVISION: hardware revision of the NPU.
 * @DRM_VNPU_PARAM_ISA_VERSION: version of the command-stream ISA the device
 *	executes, as (major << 16) | minor. docs/isa.md describes it.
 * @DRM_VNPU_PARAM_FW_VERSION: version of the running firmware, as
 *	(major << 16) | (minor << 8) | patch.
 * @DRM_VNPU_PARAM_VA_SIZE: size in bytes of each file's device virtual
 *	address space. Device VAs lie in [DRM_VNPU_VA_START, VA_SIZE).
 * @DRM_VNPU_PARAM_MAX_JOB_SIZE: largest command stream of one job, in bytes.
 * @DRM_VNPU_PARAM_MAX_JOB_BOS: largest number of BOs one job may list.
 * @DRM_VNPU_PARAM_MAX_BO_SIZE: largest size of one BO, in bytes.
 * @DRM_VNPU_PARAM_CAPABILITIES: bitmask of DRM_VNPU_CAP_*.
 * @DRM_VNPU_PARAM_JOB_TIMEOUT_MS: time after which a running job is
 *	considered hung; its core is then reset and the job fails with
 *	-ETIMEDOUT. It counts from the moment the job starts to run on the
 *	device (it reaches the head of its core's queue), not from SUBMIT: time
 *	spent waiting for dependencies or behind other jobs does not count.
 * @DRM_VNPU_PARAM_MAX_IN_SYNCOBJS: largest number of in-syncobjs one job
 *	may list (DRM_VNPU_MAX_IN_SYNCOBJS).
 * @DRM_VNPU_PARAM_FW_BUILD_ID: build id of the running firmware: the first
 *	8 bytes of the image's SHA-256 digest read big-endian, so its 16 hex
 *	digits name the exact image (docs/firmware.md); 0 while no firmware
 *	runs (after the device rejected a reload).
 * @DRM_VNPU_PARAM_NUM_CORES: number of NPU cores, 1 or more. Jobs of
 *	different files may run on different cores at the same time; a file's
 *	own jobs still run one after another, in submission order.
 * @DRM_VNPU_PARAM_POWER_UPS: times the NPU has been powered up since the
 *	device started, its first power-on included. The driver powers the
 *	NPU off when it has been idle for the device's autosuspend delay and
 *	on again for the next job (docs/kernel.md, Power management). Reading
 *	it does not wake the NPU.
 * @DRM_VNPU_PARAM_POWERED_US: microseconds the NPU has spent powered on
 *	since the device started, as of its last job completion or power
 *	change. Reading it does not wake the NPU.
 */
enum drm_vnpu_param {
	DRM_VNPU_PARAM_DEVICE_ID = 0,
	DRM_VNPU_PARAM_DEVICE_REVISION = 1,
	DRM_VNPU_PARAM_ISA_VERSION = 2,
	DRM_VNPU_PARAM_FW_VERSION = 3,
	DRM_VNPU_PARAM_VA_SIZE = 4,
	DRM_VNPU_PARAM_MAX_JOB_SIZE = 5,
	DRM_VNPU_PARAM_MAX_JOB_BOS = 6,
	DRM_VNPU_PARAM_MAX_BO_SIZE = 7,
	DRM_VNPU_PARAM_CAPABILITIES = 8,
	DRM_VNPU_PARAM_JOB_TIMEOUT_MS = 9,
	DRM_VNPU_PARAM_MAX_IN_SYNCOBJS = 10,
	DRM_VNPU_PARAM_FW_BUILD_ID = 11,
	DRM_VNPU_PARAM_NUM_CORES = 12,
	DRM_VNPU_PARAM_POWER_UPS = 13,
	DRM_VNPU_PARAM_POWERED_US = 14,
};

/* First device VA handed out; VAs below it are never mapped, so VA 0 faults. */
#define DRM_VNPU_VA_START		0x100000ULL

/* Largest drm_vnpu_job.in_syncobj_count (also DRM_VNPU_PARAM_MAX_IN_SYNCOBJS). */
#define DRM_VNPU_MAX_IN_SYNCOBJS	256
/* Largest drm_vnpu_submit.job_struct_size: bounds the check of unknown bytes. */
#define DRM_VNPU_MAX_JOB_STRUCT_SIZE	4096

/* Capability bits reported by DRM_VNPU_PARAM_CAPABILITIES. */
/* DRM_VNPU_BO_DEVICE_READ_ONLY is supported. */
#define DRM_VNPU_CAP_READ_ONLY_BO	(1ULL << 0)
/* The ISA's per-channel requantization is supported. */
#define DRM_VNPU_CAP_PER_CHANNEL_QUANT	(1ULL << 1)
/* A hung job is failed and the device reset; other files keep working. */
#define DRM_VNPU_CAP_RESET_RECOVERY	(1ULL << 2)

/**
 * struct drm_vnpu_get_param - argument of DRM_IOCTL_VNPU_GET_PARAM
 *
 * Errors: -EINVAL if @param is unknown or @pad is not zero; -EFAULT if the
 * argument cannot be copied.
 */
struct drm_vnpu_get_param {
	/** @param: in, one of enum drm_vnpu_param. */
	__u32 param;
	/** @pad: must be zero. */
	__u32 pad;
	/** @value: out, the parameter's value. */
	__u64 value;
};

/*
 * BO_CREATE flags.
 * DRM_VNPU_BO_DEVICE_READ_ONLY: the device may read the BO but never write
 * it (weights, command streams); a job listing it with DRM_VNPU_JOB_BO_WRITE
 * is refused with -EACCES.
 */
#define DRM_VNPU_BO_DEVICE_READ_ONLY	(1U << 0)
#define DRM_VNPU_BO_FLAGS_MASK		(DRM_VNPU_BO_DEVICE_READ_ONLY)

/**
 * struct drm_vnpu_bo_create - argument of DRM_IOCTL_VNPU_BO_CREATE
 *
 * Creates a zero-filled GEM buffer object, maps it into the calling file's
 * device address space, and returns its handle, mmap offset and device VA.
 * The size is rounded up to the page size. The page after the BO's last
 * page is never mapped (a guard page), so a device access that runs past
 * the end of a BO faults instead of reaching the next BO.
 *
 * The CPU mapping (mmap() at @mmap_offset on the same file) and the device
 * see the same memory, with no flush or copy in between: the device sees
 * CPU writes made while a job runs (a WAIT instruction relies on it), and
 * the CPU sees device writes as they happen, complete once the job has
 * ended. mmap() fails with EACCES for an offset of another file's BO and
 * with EINVAL for an offset that starts no BO, or a length beyond the BO.
 *
 * Errors: -EINVAL if @size is zero, @flags has unknown bits, or an output
 * field is not zero on input; -E2BIG if @size exceeds
 * DRM_VNPU_PARAM_MAX_BO_SIZE; -ENOSPC if the file's device address space is
 * full; -ENOMEM if memory runs out; -EFAULT if the argument cannot be copied.
 */
struct drm_vnpu_bo_create {
	/** @size: in, requested size in bytes; out, the size rounded up to a page. */
	__u64 size;
	/** @flags: in, DRM_VNPU_BO_* flags. */
	__u32 flags;
	/** @handle: out, the GEM handle. */
	__u32 handle;
	/** @mmap_offset: out, offset to pass to mmap() on the device fd. */
	__u64 mmap_offset;
	/** @va: out, the BO's device virtual address in this file's space. */
	__u64 va;
};

/**
 * struct drm_vnpu_bo_info - argument of DRM_IOCTL_VNPU_BO_INFO
 *
 * Looks up a BO of the calling file.
 *
 * Errors: -ENOENT if @handle names no BO of this file; -EINVAL if @pad is
 * not zero; -EFAULT if the argument cannot be copied.
 */
struct drm_vnpu_bo_info {
	/** @handle: in, the GEM handle. */
	__u32 handle;
	/** @pad: must be zero. */
	__u32 pad;
	/** @size: out, size in bytes (page-rounded). */
	__u64 size;
	/**
	 * @flags: out, the DRM_VNPU_BO_* flags it was created with; for an
	 * import, DRM_VNPU_BO_DEVICE_READ_ONLY when its exporter does not let
	 * the device write it (a dma-buf fd not open for writing, or a vnpu BO
	 * created device-read-only).
	 */
	__u32 flags;
	/** @pad2: out, always zero. */
	__u32 pad2;
	/** @mmap_offset: out, offset to pass to mmap() on the device fd. */
	__u64 mmap_offset;
	/** @va: out, the BO's device virtual address. */
	__u64 va;
};

/**
 * struct drm_vnpu_bo_wait - argument of DRM_IOCTL_VNPU_BO_WAIT
 *
 * Waits until no job that uses the BO is pending, or until @timeout_ns.
 * On success, reports the outcome of the last job that listed the BO with
 * DRM_VNPU_JOB_BO_WRITE: 0 if it completed (or if no job ever wrote the BO),
 * else the job's negative errno (see "Job status" below) and, for an MMU
 * fault, the faulting device VA.
 *
 * A @timeout_ns in the past (for example 0) polls.
 *
 * Errors: -ENOENT if @handle names no BO of this file; -EINVAL if @pad or
 * an output field is not zero on input; -ETIME if the timeout expired first;
 * -EINTR/-ERESTARTSYS if a signal arrived; -EFAULT if the argument cannot be
 * copied.
 */
struct drm_vnpu_bo_wait {
	/** @handle: in, the GEM handle. */
	__u32 handle;
	/** @pad: must be zero. */
	__u32 pad;
	/** @timeout_ns: in, absolute CLOCK_MONOTONIC deadline in ns. */
	__s64 timeout_ns;
	/** @job_status: out, 0 or the last writer job's negative errno. */
	__s32 job_status;
	/** @pad2: must be zero. */
	__u32 pad2;
	/** @fault_va: out, faulting device VA if @job_status is -EFAULT, else 0. */
	__u64 fault_va;
};

/* Directions of DRM_IOCTL_VNPU_BO_SYNC. */
#define DRM_VNPU_BO_SYNC_FOR_CPU	(1U << 0)
#define DRM_VNPU_BO_SYNC_FOR_DEVICE	(1U << 1)
#define DRM_VNPU_BO_SYNC_FLAGS_MASK	(DRM_VNPU_BO_SYNC_FOR_CPU | DRM_VNPU_BO_SYNC_FOR_DEVICE)

/**
 * struct drm_vnpu_bo_sync - argument of DRM_IOCTL_VNPU_BO_SYNC
 *
 * Makes the CPU's and the device's view of a BO agree while a job that uses
 * it runs. The kernel syncs every BO of a job when the job starts (for the
 * device) and when it ends (for the CPU, before its fence signals), so a
 * program that touches a BO only between jobs never needs this. It is for
 * memory shared with a running job, such as a semaphore the job WAITs on:
 * write it, then sync it FOR_DEVICE; or a value the job writes: sync it
 * FOR_CPU, then read it. Where the device and the CPU share memory
 * coherently (no bounce buffering, a coherent device) it does nothing, and
 * costs one ioctl.
 *
 * It syncs the bytes @offset .. @offset + @size (@size 0: to the BO's end),
 * and only those: where the device's view is a copy (bounce buffering),
 * FOR_DEVICE replaces that copy's range with the CPU's bytes, so a range a
 * running job writes loses what the job wrote there; sync just what the
 * CPU wrote (the semaphore, say). For an import the exporter keeps the
 * buffer coherent (DMA_BUF_IOCTL_SYNC's begin and end of CPU access), and
 * that is of the whole buffer whatever the range. A caller that knows only
 * the first 8 bytes of this struct syncs the whole BO.
 *
 * Errors: -ENOENT if @handle names no BO of this file; -EINVAL if @flags is
 * 0 or has bits outside DRM_VNPU_BO_SYNC_FLAGS_MASK, or the range does not
 * lie inside the BO; -ENODEV after the device went away; -EFAULT if the
 * argument cannot be copied; the exporter's errno for an import.
 */
struct drm_vnpu_bo_sync {
	/** @handle: in, the GEM handle. */
	__u32 handle;
	/**
	 * @flags: in, DRM_VNPU_BO_SYNC_FOR_CPU and/or _FOR_DEVICE (with both,
	 * the CPU's view first).
	 */
	__u32 flags;
	/** @offset: in, the first byte of the range. */
	__u64 offset;
	/** @size: in, the range's bytes; 0 means up to the BO's end. */
	__u64 size;
};

/*
 * Job status, reported through BO_WAIT (DRM_IOCTL_SYNCOBJ_WAIT only says
 * that the job has ended: it returns 0 for a failed job too):
 *   -EFAULT     the device MMU faulted (access to an unmapped VA, or a write
 *               to a read-only page)
 *   -EIO        the device found a bad instruction or operand at run time
 *   -ETIMEDOUT  the job hung past DRM_VNPU_PARAM_JOB_TIMEOUT_MS; the device
 *               was reset
 *   -ECANCELED  its file was closed before the job ended (or the driver was
 *               unbound)
 * A reset is of the hung job's core only and fails only the hung job: jobs
 * on the other cores go on untouched, and every other job that was queued
 * on that core (of any file) had not started, and is queued again in its
 * order, so it runs once and ends with its own status.
 */

/* drm_vnpu_job_bo.flags: how the job's command stream uses the BO. */
#define DRM_VNPU_JOB_BO_READ	(1U << 0)
#define DRM_VNPU_JOB_BO_WRITE	(1U << 1)
#define DRM_VNPU_JOB_BO_FLAGS_MASK (DRM_VNPU_JOB_BO_READ | DRM_VNPU_JOB_BO_WRITE)

/**
 * struct drm_vnpu_job_bo - one BO a job uses
 */
struct drm_vnpu_job_bo {
	/** @handle: the GEM handle. */
	__u32 handle;
	/** @flags: DRM_VNPU_JOB_BO_READ and/or DRM_VNPU_JOB_BO_WRITE, not 0. */
	__u32 flags;
};

/**
 * struct drm_vnpu_job - one job of a DRM_IOCTL_VNPU_SUBMIT
 *
 * The command stream is @cmd_size bytes at @cmd_offset in BO
 * @cmd_bo_handle, a BO the file created with BO_CREATE (an imported
 * dma-buf cannot hold a stream: -EINVAL). SUBMIT copies it into memory of the kernel's that
 * userspace cannot map, once the jobs that write the command BO have ended
 * (SUBMIT waits for them, interruptibly), validates the copy, and the device
 * executes that copy: every instruction must be well formed, and every tensor it reads or
 * writes must lie inside a BO of @bos used in that direction. Once SUBMIT
 * has returned, the command BO may be rewritten, reused or closed; what
 * runs is the stream as it was at SUBMIT. The command BO need not be listed
 * in @bos (list it only if the stream also names it as a tensor).
 *
 * The job runs after all @in_syncobjs have signalled, after earlier jobs
 * that write a BO it uses, and after the file's own earlier jobs: a file's
 * jobs run one at a time, in submission order, while jobs of different
 * files may run at the same time on different cores
 * (DRM_VNPU_PARAM_NUM_CORES). Each in-syncobj must already hold a fence
 * (-EINVAL otherwise). When the job ends, @out_syncobj (if not 0) is given
 * a fence that signals; the job's status is read with BO_WAIT.
 *
 * The job holds a reference on every BO it lists: GEM_CLOSE of such a BO
 * while the job is queued or running is allowed, and the BO is freed when
 * the job ends.
 */
struct drm_vnpu_job {
	/** @cmd_bo_handle: BO holding the command stream. */
	__u32 cmd_bo_handle;
	/** @cmd_offset: byte offset of the stream in it, 8-byte aligned. */
	__u32 cmd_offset;
	/** @cmd_size: stream size in bytes, 8-byte aligned, not 0. */
	__u32 cmd_size;
	/** @bo_count: number of entries at @bos, 1..MAX_JOB_BOS. */
	__u32 bo_count;
	/** @bos: user pointer to an array of struct drm_vnpu_job_bo. */
	__u64 bos;
	/** @in_syncobjs: user pointer to an array of __u32 syncobj handles. */
	__u64 in_syncobjs;
	/** @in_syncobj_count: entries at @in_syncobjs, 0..DRM_VNPU_MAX_IN_SYNCOBJS. */
	__u32 in_syncobj_count;
	/** @out_syncobj: syncobj to receive the job's fence, or 0. */
	__u32 out_syncobj;
	/** @flags: must be zero. */
	__u32 flags;
	/** @pad: must be zero. */
	__u32 pad;
};

/**
 * struct drm_vnpu_submit - argument of DRM_IOCTL_VNPU_SUBMIT
 *
 * Queues @job_count jobs, in order. Either every job is validated and
 * queued, or none is.
 *
 * @job_struct_size lets struct drm_vnpu_job grow: userspace sets it to
 * sizeof(struct drm_vnpu_job) as it knows it. It must be a multiple of 8,
 * at least this header's first version of the struct and at most
 * DRM_VNPU_MAX_JOB_STRUCT_SIZE; bytes the kernel does not know must be
 * zero.
 *
 * Closing the file (its last reference: the descriptor and every mmap() of
 * the BOs it created) cancels its jobs that have not ended, and waits for
 * none of them: a running one is stopped by a reset of its core (other
 * files' jobs queued on that core are queued again, other cores go on),
 * queued ones never run; all end with -ECANCELED. A job still waiting for
 * its dependencies (another file's job, another driver's fence) ends when
 * they have signalled, without running.
 *
 * Errors: -EINVAL for a zero or too large @job_count, a bad
 * @job_struct_size, non-zero flags/pad/unknown trailing bytes, a command
 * range outside its BO or misaligned, a command BO that is an import, a
 * zero or too large @bo_count, a BO listed twice or with bad flags, more
 * than DRM_VNPU_MAX_IN_SYNCOBJS in-syncobjs, an in-syncobj without a fence;
 * -ENOENT for an unknown BO or syncobj handle; -ENOEXEC for a malformed
 * command stream; -EACCES if the stream touches memory outside the listed
 * BOs or writes a BO listed read-only, or a job lists a device-read-only
 * BO (an import included) for writing; -ENOSPC if the file's device
 * address space has no room for the stream's copy; -EBUSY while the system
 * suspends or resumes (submit again after resume; the jobs are checked
 * first); -EIO if the NPU did not power up for the job (the device does
 * not answer); -ENODEV after the device went away, or when a failed reset
 * took it off the bus (bind the driver again); -EINTR/-ERESTARTSYS if a signal
 * arrived while SUBMIT waited for the jobs that write a command BO;
 * -ENOMEM; -EFAULT if an array cannot be copied.
 */
struct drm_vnpu_submit {
	/** @jobs: user pointer to @job_count jobs of @job_struct_size bytes. */
	__u64 jobs;
	/** @job_count: number of jobs, 1..DRM_VNPU_MAX_JOBS_PER_SUBMIT. */
	__u32 job_count;
	/** @job_struct_size: sizeof(struct drm_vnpu_job) as userspace knows it. */
	__u32 job_struct_size;
	/** @flags: must be zero. */
	__u32 flags;
	/** @pad: must be zero. */
	__u32 pad;
};

#define DRM_VNPU_MAX_JOBS_PER_SUBMIT	64

/*
 * Device coredump (devcoredump): on a job timeout or an MMU fault, vnpu.ko
 * captures the device state and the guilty job with dev_coredumpv(); it
 * appears as /sys/class/devcoredump/devcdN/data (read it whole; write
 * anything to it to discard the dump; the kernel drops it after 5 minutes,
 * and keeps one per device at a time). The data is a struct
 * drm_vnpu_coredump_header, then header.section_count sections, each a
 * struct drm_vnpu_coredump_section and its data, padded with zero bytes to
 * a multiple of 8. A reader skips section types it does not know; a change
 * that a reader cannot skip bumps DRM_VNPU_COREDUMP_VERSION. `accel
 * coredump` decodes it (docs/tools.md).
 */
#define DRM_VNPU_COREDUMP_MAGIC		0x44434e56	/* "VNCD" */
#define DRM_VNPU_COREDUMP_VERSION	1

/**
 * enum drm_vnpu_coredump_type - what a coredump section holds
 *
 * @DRM_VNPU_COREDUMP_JOB: one struct drm_vnpu_coredump_job.
 * @DRM_VNPU_COREDUMP_REGS: struct drm_vnpu_coredump_reg entries: the
 *	device's BAR2 registers and queue heads and tails (offsets and names
 *	in docs/hardware.md), read when the job failed.
 * @DRM_VNPU_COREDUMP_STREAM: the job's command stream, the kernel's copy
 *	that the device ran, job.cmd_size bytes.
 * @DRM_VNPU_COREDUMP_BOS: struct drm_vnpu_coredump_bo entries, one per
 *	BO the job listed, in submission order.
 */
enum drm_vnpu_coredump_type {
	DRM_VNPU_COREDUMP_JOB = 1,
	DRM_VNPU_COREDUMP_REGS = 2,
	DRM_VNPU_COREDUMP_STREAM = 3,
	DRM_VNPU_COREDUMP_BOS = 4,
};

/**
 * struct drm_vnpu_coredump_header - start of a vnpu device coredump
 */
struct drm_vnpu_coredump_header {
	/** @magic: DRM_VNPU_COREDUMP_MAGIC. */
	__u32 magic;
	/** @version: DRM_VNPU_COREDUMP_VERSION. */
	__u32 version;
	/** @header_size: sizeof(struct drm_vnpu_coredump_header); sections follow it. */
	__u32 header_size;
	/** @section_count: number of sections. */
	__u32 section_count;
	/** @timestamp_ns: CLOCK_REALTIME when the dump was captured. */
	__u64 timestamp_ns;
};

/**
 * struct drm_vnpu_coredump_section - header of one coredump section
 */
struct drm_vnpu_coredump_section {
	/** @type: enum drm_vnpu_coredump_type. */
	__u32 type;
	/** @size: bytes of data that follow, before the padding. */
	__u32 size;
};

/**
 * struct drm_vnpu_coredump_job - the guilty job
 */
struct drm_vnpu_coredump_job {
	/** @seqno: the job's device sequence number. */
	__u64 seqno;
	/** @fault_va: the faulting device VA when @status is -EFAULT, else 0. */
	__u64 fault_va;
	/** @cmd_va: device VA of the stream's copy the device ran. */
	__u64 cmd_va;
	/**
	 * @cycles: instructions the device had started: the failing one is
	 * instruction @cycles - 1 of the stream (0: none had started).
	 */
	__u64 cycles;
	/** @status: -EFAULT (MMU fault) or -ETIMEDOUT (hang). */
	__s32 status;
	/** @context: the submitting file's context id (debugfs files). */
	__u32 context;
	/** @pid: the process that opened the file. */
	__u32 pid;
	/** @cmd_size: bytes of the stream. */
	__u32 cmd_size;
	/** @bo_count: BOs the job listed. */
	__u32 bo_count;
	/** @pad: zero. */
	__u32 pad;
};

/**
 * struct drm_vnpu_coredump_reg - one device register
 */
struct drm_vnpu_coredump_reg {
	/** @offset: offset in BAR2. */
	__u32 offset;
	/** @value: its value. */
	__u32 value;
};

/**
 * struct drm_vnpu_coredump_bo - one BO of the guilty job
 */
struct drm_vnpu_coredump_bo {
	/** @va: device VA. */
	__u64 va;
	/** @size: size in bytes. */
	__u64 size;
	/** @job_flags: DRM_VNPU_JOB_BO_* as the job listed it. */
	__u32 job_flags;
	/** @bo_flags: DRM_VNPU_BO_* it was created with. */
	__u32 bo_flags;
};

#define DRM_IOCTL_VNPU_GET_PARAM \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_VNPU_GET_PARAM, struct drm_vnpu_get_param)
#define DRM_IOCTL_VNPU_BO_CREATE \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_VNPU_BO_CREATE, struct drm_vnpu_bo_create)
#define DRM_IOCTL_VNPU_BO_INFO \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_VNPU_BO_INFO, struct drm_vnpu_bo_info)
#define DRM_IOCTL_VNPU_BO_WAIT \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_VNPU_BO_WAIT, struct drm_vnpu_bo_wait)
#define DRM_IOCTL_VNPU_SUBMIT \
	DRM_IOW(DRM_COMMAND_BASE + DRM_VNPU_SUBMIT, struct drm_vnpu_submit)
#define DRM_IOCTL_VNPU_BO_SYNC \
	DRM_IOW(DRM_COMMAND_BASE + DRM_VNPU_BO_SYNC, struct drm_vnpu_bo_sync)

#if defined(__cplusplus)
}
#endif

#endif /* __VNPU_ACCEL_H__ */
