/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Core structures of vnpu.ko, the DRM accel driver for the
 * QEMU-emulated vnpu NPU.
 */
#ifndef __VNPU_DRV_H__
#define __VNPU_DRV_H__

#include <linux/atomic.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include <drm/drm_device.h>
#include <drm/drm_file.h>
#include <drm/drm_mm.h>
#include <drm/gpu_scheduler.h>

#include "vnpu_accel.h"
#include "vnpu_hw.h"
#include "vnpu_limits.h"

#ifndef VNPU_KZALLOC_OBJ
/* One zeroed object of obj's type, for kernels without kzalloc_obj(). */
#define kzalloc_obj(obj, gfp)	kzalloc(sizeof(obj), gfp)
#endif

#define VNPU_DRIVER_NAME	"vnpu"
#define VNPU_DRIVER_DESC	"vnpu emulated NPU"

/* Limits reported through DRM_VNPU_PARAM_* are in vnpu_limits.h; this one the uapi fixes. */
#define VNPU_MAX_IN_SYNCOBJS	DRM_VNPU_MAX_IN_SYNCOBJS

/* Capabilities the driver implements whatever the device reports. */
#define VNPU_DRIVER_CAPS	(DRM_VNPU_CAP_READ_ONLY_BO | DRM_VNPU_CAP_RESET_RECOVERY)

/* The job timeout's default and bounds are in vnpu_limits.h. */
extern unsigned int vnpu_job_timeout_ms;

/**
 * struct vnpu_stats - global counters, shown in debugfs
 * @files: open files
 * @contexts: live per-file contexts (they outlive the file while its BOs
 *	or jobs exist)
 * @bos: live buffer objects
 * @bos_imported: those of them made by dma-buf import
 * @bo_bytes: bytes of live buffer objects
 * @jobs: live job structures (queued, running or awaiting free)
 * @jobs_submitted: jobs accepted by SUBMIT since load
 * @jobs_done: jobs completed successfully
 * @jobs_failed: jobs that ended with an error
 * @jobs_timedout: jobs failed with -ETIMEDOUT
 * @jobs_cancelled: jobs failed with -ECANCELED by a reset or teardown
 * @resets: device resets performed by the driver
 * @cmdbufs: live command buffers (in use or pooled)
 * @cmdbuf_allocs: command buffers allocated since load (a SUBMIT that found
 *	none to reuse in its file's pool)
 * @mappings: VA ranges (BOs and command buffers) mapped in any context's
 *	device page tables
 * @power_offs: times runtime PM or system sleep powered the NPU off
 */
struct vnpu_stats {
	atomic_t files;
	atomic_t contexts;
	atomic_t bos;
	atomic_t bos_imported;
	atomic64_t bo_bytes;
	atomic_t jobs;
	atomic64_t jobs_submitted;
	atomic64_t jobs_done;
	atomic64_t jobs_failed;
	atomic64_t jobs_timedout;
	atomic64_t jobs_cancelled;
	atomic_t resets;
	atomic_t cmdbufs;
	atomic64_t cmdbuf_allocs;
	atomic_t mappings;
	atomic_t power_offs;
};

struct vnpu_device;

/**
 * struct vnpu_core - one NPU core and the scheduler that feeds it
 * @vdev: the device
 * @index: the core's number (SQE_CORE)
 * @sched: the scheduler of the jobs this core runs
 * @active: jobs written to the submission queue for this core, oldest
 *	first; the first one is running (under &vnpu_device.job_lock)
 * @watchdog: the job timeout: fires when the running job has run for
 *	&vnpu_device.job_timeout_ms
 * @fence_context: dma-fence context of the core's hardware fences (the
 *	core completes its jobs in order, so each core is one timeline)
 * @fence_seqno: last hardware fence seqno on the core (under
 *	&vnpu_device.hw_lock)
 */
struct vnpu_core {
	struct vnpu_device *vdev;
	u32 index;
	struct drm_gpu_scheduler sched;
	struct list_head active;
	struct delayed_work watchdog;
	u64 fence_context;
	u64 fence_seqno;
};

/**
 * struct vnpu_device - one vnpu PCI function
 * @drm: the DRM device (accel node)
 * @pdev: the PCI device
 * @bar0: ivshmem registers (doorbell)
 * @bar2: shared memory holding the NPU registers and rings
 * @peer: ivshmem peer id of the device model, from REG_DEVICE_PEER
 * @va_bits: device VA width from REG_VA_BITS
 * @caps: DRM_VNPU_CAP_* bits reported to userspace
 * @ctrl_lock: serialises control-block commands
 * @ctrl_wq: woken by the control interrupt
 * @ctrl_seq: last control sequence number written
 * @fw_cpu: kernel address of the firmware copy the device booted from
 * @fw_dma: its bus address
 * @fw_size: its size
 * @fw_version: firmware version reported after boot, 0 when none runs
 * @fw_build_id: build id reported after boot (REG_FW_BUILD_ID), 0 when none runs
 * @fw_reloads: firmware reloads requested through debugfs
 * @job_timeout_ms: the job timeout: the timeout_ms parameter at probe;
 *	debugfs job_timeout_ms changes it for jobs that start afterwards
 * @num_cores: the NPU's cores, from REG_NUM_CORES
 * @core_mask: the cores a file's next job may be given (vnpu_job_pick_core()):
 *	all of them at probe; debugfs core_mask narrows it, as amdgpu's
 *	amdgpu_gfx_sched_mask does its rings
 * @cores: the cores, each with the scheduler that feeds it
 * @scheds: the cores' schedulers, the list every file's entity may run on
 * @sched_ref: users of the schedulers: the bound device, and each file's
 *	queue (struct vnpu_queue); the last one tears them down, so an unbind
 *	with files open leaves their entities live schedulers until they close
 * @sched_wq: per-CPU workqueue of the schedulers' run_job and free_job work
 * @reset_lock: serialises recovery (watchdogs, closed files, teardown) and
 *	firmware reload
 * @hw_lock: serialises submission-queue writes against reset
 * @complete_lock: with @complete_in_thread, one path at a time ends jobs
 *	and signals them after job_lock (vnpu_job_end_begin())
 * @complete_cookie: what dma_fence_begin_signalling() gave the holder of
 *	@complete_lock, for vnpu_job_end_finish()
 * @complete_in_thread: the DMA mappings may bounce (or the device is not
 *	coherent): completions copy back, in process context, outside job_lock
 * @job_lock: protects the cores' active lists, the completion queue and the
 *	running jobs' clocks (&vnpu_job.start_ns); taken in IRQ
 * @fence_lock: lock of the hardware fences
 * @sq_tail: driver copy of SQ_TAIL
 * @cq_head: driver copy of CQ_HEAD
 * @next_seqno: sequence number of the next job written to the queue
 * @idle_wq: woken whenever a job is freed (for teardown)
 * @cancel_work: resets a core when a closed file's job is running on it
 * @ctx_ids: allocator of per-file context ids
 * @contexts_lock: protects @contexts
 * @contexts: the live contexts, so an unbind can release their DMA memory
 * @stats: global counters
 * @wedged: a reset failed: the device's bus mastering is off and it gets no
 *	job until the driver is bound again (SUBMIT: -ENODEV)
 * @irq_completion: Linux IRQ number of the completion vector
 * @irq_control: Linux IRQ number of the control vector
 */
struct vnpu_device {
	struct drm_device drm;
	struct pci_dev *pdev;
	void __iomem *bar0;
	void __iomem *bar2;
	u32 peer;
	u32 va_bits;
	u64 caps;

	struct mutex ctrl_lock; /* protects the control block: one command at a time */
	wait_queue_head_t ctrl_wq;
	u32 ctrl_seq;

	void *fw_cpu;
	dma_addr_t fw_dma;
	size_t fw_size;
	u32 fw_version;
	u64 fw_build_id;
	atomic_t fw_reloads;
	u32 job_timeout_ms;

	u32 num_cores;
	u32 core_mask;
	struct vnpu_core cores[VNPU_MAX_CORES];
	struct drm_gpu_scheduler *scheds[VNPU_MAX_CORES];
	struct kref sched_ref;
	struct workqueue_struct *sched_wq;
	struct mutex reset_lock; /* protects recovery: one reset (timeout, close, unbind) at once */
	struct mutex hw_lock; /* protects the submission queue (entries, SQ_TAIL, @sq_tail) */
	struct mutex complete_lock; /* serialises ending jobs outside job_lock, see above */
	bool complete_cookie;
	bool complete_in_thread;
	spinlock_t job_lock; /* protects the cores' active lists, @cq_head, the jobs' clocks; IRQ */
	spinlock_t fence_lock; /* protects the hardware fences (their dma_fence lock) */
	u32 sq_tail;
	u32 cq_head;
	u64 next_seqno;
	wait_queue_head_t idle_wq;
	struct work_struct cancel_work;

	struct ida ctx_ids;
	struct mutex contexts_lock; /* protects @contexts */
	struct list_head contexts;
	struct vnpu_stats stats;
	bool wedged;
	int irq_completion;
	int irq_control;
};

#define to_vnpu_device(dev) container_of(dev, struct vnpu_device, drm)

/**
 * struct vnpu_vm - one device address space (one per open file)
 * @vdev: the device
 * @lock: protects @mm, the page tables and the context's lists of DMA-mapped
 *	memory (&vnpu_ctx.bos, &vnpu_ctx.cmdbufs)
 * @mm: allocator of device VAs
 * @l1_cpu: the L1 table (kernel address)
 * @l1_dma: the L1 table (bus address, SQE_PT_ROOT)
 * @l2_cpu: the L2 tables, NULL where not yet allocated
 * @l2_dma: bus addresses of the L2 tables
 * @released: the device was unbound: the tables are freed, nothing maps
 */
struct vnpu_vm {
	struct vnpu_device *vdev;
	struct mutex lock; /* protects @mm, the page tables, the ctx's bos and cmdbufs */
	struct drm_mm mm;
	__le64 *l1_cpu;
	dma_addr_t l1_dma;
	__le64 *l2_cpu[VNPU_PT_ENTRIES];
	dma_addr_t l2_dma[VNPU_PT_ENTRIES];
	bool released;
};

/**
 * struct vnpu_ctx - per-file state that may outlive the file
 *
 * Buffer objects and jobs hold a reference, so the address space stays
 * mapped until the last job using it has finished.
 *
 * @ref: reference count
 * @vdev: the device
 * @link: entry in &vnpu_device.contexts
 * @id: context id (SQE_CONTEXT, debugfs)
 * @pid: the opening process, for debugfs
 * @vm: the address space
 * @bo_count: live BOs of this file
 * @bo_bytes: their bytes
 * @bos_imported: those of them made by dma-buf import
 * @jobs_in_flight: jobs submitted and not yet freed
 * @busy_ns: time the device spent running this file's jobs that have
 *	ended (fdinfo drm-engine-npu; the running job is added when read)
 * @jobs_ended: this file's jobs that ended, whatever their status (fdinfo
 *	vnpu-jobs, a per-client jobs/s for accel top)
 * @jobs_ended_on: those of them that ran, by the core they ran on (fdinfo
 *	vnpu-jobs-coreN)
 * @closed: the file has been closed: its jobs are cancelled
 * @cmdbuf_lock: protects @cmdbuf_pool and @cmdbuf_pool_bytes
 * @cmdbuf_pool: idle command buffers kept for reuse (vnpu_cmdbuf.c)
 * @cmdbuf_pool_bytes: their total size
 * @bos: the BOs created in this context (under @vm's lock)
 * @cmdbufs: all its command buffers, in use or pooled (under @vm's lock)
 */
struct vnpu_ctx {
	struct kref ref;
	struct vnpu_device *vdev;
	struct list_head link;
	u32 id;
	pid_t pid;
	struct vnpu_vm vm;
	atomic_t bo_count;
	atomic64_t bo_bytes;
	atomic_t bos_imported;
	atomic_t jobs_in_flight;
	atomic64_t busy_ns;
	atomic64_t jobs_ended;
	atomic64_t jobs_ended_on[VNPU_MAX_CORES];
	bool closed;
	spinlock_t cmdbuf_lock; /* protects @cmdbuf_pool and @cmdbuf_pool_bytes */
	struct list_head cmdbuf_pool;
	size_t cmdbuf_pool_bytes;
	struct list_head bos;
	struct list_head cmdbufs;
};

/**
 * struct vnpu_queue - a file's job queue: its scheduler entity
 *
 * The file and each of its jobs hold a reference, so a closed file's jobs
 * still waiting for their dependencies drain through the entity (each is
 * cancelled when it would run) while close() returns at once. The last
 * reference finishes the entity and lets the schedulers go.
 *
 * @ref: the file's reference and one per job not yet freed
 * @vdev: the device (a DRM device reference is held)
 * @entity: scheduler entity of the file's jobs
 * @push_lock: makes choosing the core, arming and pushing one step per job, so
 *             a file's jobs reach the entity in the order of their fences
 * @release_work: finishes the entity when a job's free_job dropped the last
 *	reference (the scheduler's own work may not finish an entity)
 */
struct vnpu_queue {
	struct kref ref;
	struct vnpu_device *vdev;
	struct drm_sched_entity entity;
	struct mutex push_lock; /* see above */
	struct work_struct release_work;
};

/**
 * struct vnpu_file_priv - drm_file driver_priv
 * @vdev: the device
 * @ctx: the file's context
 * @queue: the file's job queue
 */
struct vnpu_file_priv {
	struct vnpu_device *vdev;
	struct vnpu_ctx *ctx;
	struct vnpu_queue *queue;
};

/* vnpu_drv.c */
struct vnpu_ctx *vnpu_ctx_get(struct vnpu_ctx *ctx);
void vnpu_ctx_put(struct vnpu_ctx *ctx);

/* vnpu_mmu.c */
int vnpu_vm_init(struct vnpu_device *vdev, struct vnpu_vm *vm);
void vnpu_vm_fini(struct vnpu_vm *vm);
void vnpu_vm_release(struct vnpu_vm *vm);
int vnpu_vm_map_sgt(struct vnpu_vm *vm, u64 va, struct sg_table *sgt, size_t size,
		    bool writable);
void vnpu_vm_unmap(struct vnpu_vm *vm, u64 va, size_t size);
bool vnpu_sgt_whole_pages(struct sg_table *sgt);

/* vnpu_fw.c */
int vnpu_fw_boot(struct vnpu_device *vdev);
void vnpu_fw_fini(struct vnpu_device *vdev);
int vnpu_fw_reload(struct vnpu_device *vdev);
void vnpu_fw_resume(struct vnpu_device *vdev);
void vnpu_fw_debugfs_init(struct vnpu_device *vdev);

/* vnpu_debugfs.c */
void vnpu_debugfs_init(struct vnpu_device *vdev);

#endif /* __VNPU_DRV_H__ */
