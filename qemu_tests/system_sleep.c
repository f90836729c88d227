// SPDX-License-Identifier: MIT
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * The client of the system-sleep guest (qemu_tests/system_sleep.py): jobs in
 * flight across a system sleep that the PM core runs.
 *
 *	system_sleep STATE LEVEL	e.g. "mem core", "freeze devices"
 *
 * Written against the uapi headers alone, as a third-party client would be
 * (BO_CREATE, mmap, SUBMIT, BO_WAIT; the command streams built with
 * vnpu_isa.h's instruction structs). It runs as root in an initramfs guest,
 * the only program besides busybox:
 *
 *  1. a second process submits small FILL jobs in a loop (each checked), so
 *     SUBMITs race the freezing of processes;
 *  2. one long job (LONG_COPIES COPYs of LONG_SIZE bytes) and QUEUED short
 *     COPY jobs behind it are submitted and not waited for;
 *  3. LEVEL goes to /sys/power/pm_test and STATE to /sys/power/state: the PM
 *     core freezes processes, suspends every device (vnpu.ko's suspend waits
 *     for the job on the device, then powers the NPU off), waits
 *     pm_test_delay, resumes and thaws;
 *  4. a SUBMIT right after resume must run (userspace is frozen while the
 *     device sleeps, so no SUBMIT can reach it then: -EBUSY is out of
 *     reach); every job must have succeeded with exact output, the driver's
 *     power_offs (debugfs "power") must have risen, no job may be left, and
 *     the kernel log must show the test level reached and no WARNING, BUG,
 *     Call Trace, "cancelled" or "timed out".
 *
 * The last line is the verdict, VERDICT "PASS: ..." or VERDICT "FAIL: why",
 * and the exit code 0 or 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <drm/vnpu_accel.h>
#include <drm/vnpu_isa.h>

#define VERDICT "VNPU-SLEEP:"
#define NODE "/dev/accel/accel0"
#define SYSFS_DEVICE "/sys/class/accel/accel0/device"
#define DEBUGFS_ACCEL "/sys/kernel/debug/accel"
#define PM_TEST_DELAY "/sys/module/suspend/parameters/pm_test_delay"

/*
 * The long job: still on the device when the PM core suspends it (a second or two: the device
 * model walks the MMU page by page), well inside the job timeout the guest loads vnpu.ko with.
 */
#define LONG_SIZE (8u << 20)
#define LONG_COPIES 40
#define QUEUED 40
#define SHORT_SIZE (64u << 10)
#define FILL_SIZE 4096u
/* Seconds the PM core holds the devices suspended at the test level. */
#define SLEEP_DELAY_S 1
#define WAIT_S 120

struct bo {
	__u32 handle;
	__u64 va;
	__u64 size;
	unsigned char *map;
};

struct job {
	struct bo src, dst, cmd;
	__u32 cmd_size;
	__u32 seed;
};

/* What the racing process reports, in memory it shares with its parent. */
struct racer {
	volatile int stop;
	volatile int started;
	int jobs;
	int failed;
	char why[200];
};

static int fail(const char *fmt, ...)
{
	va_list ap;

	printf("%s FAIL: ", VERDICT);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return 1;
}

/* Seconds on CLOCK_BOOTTIME, which goes on counting while the system sleeps. */
static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int bo_create(int fd, __u64 size, __u32 flags, struct bo *bo)
{
	struct drm_vnpu_bo_create args = { .size = size, .flags = flags };
	void *map;

	if (ioctl(fd, DRM_IOCTL_VNPU_BO_CREATE, &args))
		return -errno;
	map = mmap(NULL, args.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, args.mmap_offset);
	if (map == MAP_FAILED)
		return -errno;
	bo->handle = args.handle;
	bo->va = args.va;
	bo->size = args.size;
	bo->map = map;
	return 0;
}

static unsigned char *put_tensor(unsigned char *p, __u32 slot, __u64 va, __u32 count)
{
	struct vnpu_isa_tensor t = {
		.header = VNPU_ISA_HEADER(VNPU_OP_TENSOR, VNPU_ISA_SIZE_TENSOR),
		.slot = slot,
		.dtype = VNPU_DTYPE_INT8,
		.va = va,
		.n = 1, .h = 1, .w = 1, .c = count,
		.stride_c = VNPU_DTYPE_INT8_SIZE,
	};

	memcpy(p, &t, sizeof(t));
	return p + sizeof(t);
}

static unsigned char *put_end(unsigned char *p)
{
	struct vnpu_isa_end e = { .header = VNPU_ISA_HEADER(VNPU_OP_END, VNPU_ISA_SIZE_END) };

	memcpy(p, &e, sizeof(e));
	return p + sizeof(e);
}

/* A stream that copies @count bytes from @src to @dst @copies times; its size in bytes. */
static __u32 copy_stream(unsigned char *out, __u64 src, __u64 dst, __u32 count, int copies)
{
	struct vnpu_isa_copy c = {
		.header = VNPU_ISA_HEADER(VNPU_OP_COPY, VNPU_ISA_SIZE_COPY),
		.src = 0,
		.dst = 1,
	};
	unsigned char *p = put_tensor(out, 0, src, count);
	int i;

	p = put_tensor(p, 1, dst, count);
	for (i = 0; i < copies; i++) {
		memcpy(p, &c, sizeof(c));
		p += sizeof(c);
	}
	return put_end(p) - out;
}

static __u32 fill_stream(unsigned char *out, __u64 dst, __u32 count, __s32 value)
{
	struct vnpu_isa_fill f = {
		.header = VNPU_ISA_HEADER(VNPU_OP_FILL, VNPU_ISA_SIZE_FILL),
		.dst = 0,
		.value = value,
	};
	unsigned char *p = put_tensor(out, 0, dst, count);

	memcpy(p, &f, sizeof(f));
	return put_end(p + sizeof(f)) - out;
}

static int submit(int fd, const struct bo *cmd, __u32 cmd_size, const struct drm_vnpu_job_bo *bos,
		  __u32 bo_count)
{
	struct drm_vnpu_job job = {
		.cmd_bo_handle = cmd->handle,
		.cmd_size = cmd_size,
		.bo_count = bo_count,
		.bos = (__u64)(uintptr_t)bos,
	};
	struct drm_vnpu_submit args = {
		.jobs = (__u64)(uintptr_t)&job,
		.job_count = 1,
		.job_struct_size = sizeof(job),
	};

	return ioctl(fd, DRM_IOCTL_VNPU_SUBMIT, &args) ? -errno : 0;
}

/* The job status of @bo's last writer (0 or its negative errno), or the ioctl's -errno; 0 s polls. */
static int bo_wait(int fd, const struct bo *bo, double seconds)
{
	struct timespec ts;
	struct drm_vnpu_bo_wait args = { .handle = bo->handle };

	clock_gettime(CLOCK_MONOTONIC, &ts);
	args.timeout_ns = seconds > 0 ? ts.tv_sec * 1000000000LL + ts.tv_nsec + (__s64)(seconds * 1e9) : 0;
	if (ioctl(fd, DRM_IOCTL_VNPU_BO_WAIT, &args))
		return -errno;
	return args.job_status;
}

static void pattern(unsigned char *out, size_t size, __u32 seed)
{
	__u32 x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < size; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		out[i] = x >> 24;
	}
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;
	int err;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	err = n < 0 ? -errno : 0;
	close(fd);
	return err;
}

/* The number after "@key: " in the file at @path, or -1. */
static long long read_field(const char *path, const char *key)
{
	char line[256];
	size_t len = strlen(key);
	long long value = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, len) && line[len] == ':')
			value = strtoll(line + len + 1, NULL, 0);
	fclose(f);
	return value;
}

/* The racing process: FILL jobs on a file of its own, each checked, until told to stop. */
static int race(struct racer *r)
{
	struct drm_vnpu_job_bo jb;
	struct bo out, cmd;
	__u32 size;
	int fd, ret, i;

	fd = open(NODE, O_RDWR | O_CLOEXEC);
	if (fd < 0 || bo_create(fd, FILL_SIZE, 0, &out) || bo_create(fd, 4096, 0, &cmd)) {
		snprintf(r->why, sizeof(r->why), "racer: cannot open %s or create its BOs: %s", NODE,
			 strerror(errno));
		return 1;
	}
	jb = (struct drm_vnpu_job_bo){ .handle = out.handle, .flags = DRM_VNPU_JOB_BO_WRITE };
	while (!r->stop) {
		__s32 value = 1 + r->jobs % 120;

		size = fill_stream(cmd.map, out.va, FILL_SIZE, value);
		ret = submit(fd, &cmd, size, &jb, 1);
		if (!ret)
			ret = bo_wait(fd, &out, WAIT_S);
		if (ret) {
			snprintf(r->why, sizeof(r->why), "racer: job %d: %s", r->jobs, strerror(-ret));
			return 1;
		}
		for (i = 0; i < (int)FILL_SIZE; i++) {
			if (out.map[i] != (unsigned char)value) {
				snprintf(r->why, sizeof(r->why), "racer: job %d: byte %d is %d, not %d",
					 r->jobs, i, out.map[i], value);
				return 1;
			}
		}
		r->jobs++;
		r->started = 1;
	}
	return 0;
}

static int make_copy_job(int fd, struct job *j, __u32 size, int copies, __u32 seed)
{
	__u64 cmd_size = 2 * VNPU_ISA_SIZE_TENSOR + copies * VNPU_ISA_SIZE_COPY + VNPU_ISA_SIZE_END;
	int ret;

	ret = bo_create(fd, size, 0, &j->src);
	ret = ret ?: bo_create(fd, size, 0, &j->dst);
	ret = ret ?: bo_create(fd, cmd_size, DRM_VNPU_BO_DEVICE_READ_ONLY, &j->cmd);
	if (ret)
		return ret;
	j->seed = seed;
	pattern(j->src.map, size, seed);
	j->cmd_size = copy_stream(j->cmd.map, j->src.va, j->dst.va, size, copies);
	return 0;
}

static int submit_copy_job(int fd, const struct job *j)
{
	struct drm_vnpu_job_bo bos[2] = {
		{ .handle = j->src.handle, .flags = DRM_VNPU_JOB_BO_READ },
		{ .handle = j->dst.handle, .flags = DRM_VNPU_JOB_BO_WRITE },
	};

	return submit(fd, &j->cmd, j->cmd_size, bos, 2);
}

/*
 * Prints the kernel log from line @from on (the sleep, for the console's record) and checks it:
 * 0 if the test level was reached and no line names a problem.
 */
static int check_log(size_t from, const char *level, char *why, size_t why_size)
{
	static const char *const bad[] = { "WARNING", "BUG", "Call Trace", "cancelled", "timed out" };
	static char log[1 << 20];
	int n, reached = 0, found = 0;
	char *line, *save;
	size_t i, k;

	n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, log, sizeof(log) - 1);
	if (n < 0) {
		snprintf(why, why_size, "cannot read the kernel log: %s", strerror(errno));
		return 1;
	}
	log[n] = '\0';
	for (line = strtok_r(log, "\n", &save), i = 0; line; line = strtok_r(NULL, "\n", &save), i++) {
		if (i < from)
			continue;
		printf("kernel: %s\n", line);
		/* suspend_test() logs this at every level but freezer: the devices were suspended. */
		if (strstr(line, "suspend debug: Waiting for"))
			reached = 1;
		for (k = 0; k < sizeof(bad) / sizeof(bad[0]) && !found; k++) {
			if (strstr(line, bad[k])) {
				snprintf(why, why_size, "the kernel log has \"%s\": %s", bad[k], line);
				found = 1;
			}
		}
	}
	if (found)
		return 1;
	if (!reached) {
		snprintf(why, why_size,
			 "the kernel log lacks \"suspend debug: Waiting for\": pm_test %s was not reached",
			 level);
		return 1;
	}
	return 0;
}

static size_t log_lines(void)
{
	static char log[1 << 20];
	int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, log, sizeof(log) - 1);
	size_t lines = 0;

	for (int i = 0; i < n; i++)
		lines += log[i] == '\n';
	return lines;
}

int main(int argc, char **argv)
{
	static struct job jobs[1 + QUEUED];
	char pci[64], path[256], target[256], why[512];
	const char *state, *level;
	struct racer *racer;
	long long offs_before, offs_after, live, on_device;
	int fd, ret, i, pending_before = 0, pending_after = 0, status;
	double t0, slept;
	size_t log_from;
	ssize_t n;
	pid_t child;

	if (argc != 3)
		return fail("usage: %s STATE LEVEL (e.g. mem core)", argv[0]);
	state = argv[1];
	level = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);

	fd = open(NODE, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail("open %s: %s (vnpu.ko not bound?)", NODE, strerror(errno));
	n = readlink(SYSFS_DEVICE, target, sizeof(target) - 1);
	if (n < 0)
		return fail("readlink %s: %s", SYSFS_DEVICE, strerror(errno));
	target[n] = '\0';
	snprintf(pci, sizeof(pci), "%s", basename(target));
	/* Only the sleep may power the device off during the test, not runtime PM's autosuspend. */
	ret = write_file(SYSFS_DEVICE "/power/autosuspend_delay_ms", "600000");
	if (ret)
		return fail("autosuspend_delay_ms: %s", strerror(-ret));

	snprintf(path, sizeof(path), "%s/%s/power", DEBUGFS_ACCEL, pci);
	offs_before = read_field(path, "power_offs");
	if (offs_before < 0)
		return fail("no power_offs in %s (debugfs not mounted?)", path);

	racer = mmap(NULL, sizeof(*racer), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (racer == MAP_FAILED)
		return fail("mmap: %s", strerror(errno));
	memset(racer, 0, sizeof(*racer));
	child = fork();
	if (child < 0)
		return fail("fork: %s", strerror(errno));
	if (child == 0)
		_exit(race(racer));

	ret = make_copy_job(fd, &jobs[0], LONG_SIZE, LONG_COPIES, 1);
	for (i = 1; !ret && i <= QUEUED; i++)
		ret = make_copy_job(fd, &jobs[i], SHORT_SIZE, 1, 1 + i);
	if (ret)
		return fail("BO_CREATE or mmap: %s", strerror(-ret));
	for (t0 = now_s(); !racer->started && now_s() - t0 < WAIT_S;)
		usleep(10000);
	if (!racer->started)
		return fail("the racing process ran no job in %d s: %s", WAIT_S, racer->why);

	for (i = 0; i <= QUEUED; i++) {
		ret = submit_copy_job(fd, &jobs[i]);
		if (ret)
			return fail("SUBMIT of job %d before the sleep: %s", i, strerror(-ret));
	}
	for (i = 0; i <= QUEUED; i++)
		pending_before += bo_wait(fd, &jobs[i].dst, 0) == -ETIME;
	snprintf(path, sizeof(path), "%s/%s/counters", DEBUGFS_ACCEL, pci);
	on_device = read_field(path, "jobs_on_device");
	if (bo_wait(fd, &jobs[0].dst, 0) != -ETIME)
		return fail("the long job ended before the sleep began: nothing was in flight");
	printf("before the sleep: %d of %d jobs pending, %lld on the device\n", pending_before,
	       1 + QUEUED, on_device);

	ret = write_file("/sys/power/pm_test", level);
	if (ret)
		return fail("echo %s > /sys/power/pm_test: %s", level, strerror(-ret));
	snprintf(path, sizeof(path), "%d", SLEEP_DELAY_S);
	ret = write_file(PM_TEST_DELAY, path);
	if (ret)
		return fail("echo %d > %s: %s", SLEEP_DELAY_S, PM_TEST_DELAY, strerror(-ret));
	if (!strcmp(state, "mem")) {
		ret = write_file("/sys/power/mem_sleep", "deep");
		if (ret)
			return fail("echo deep > /sys/power/mem_sleep: %s", strerror(-ret));
	}
	log_from = log_lines();
	printf("sleeping: echo %s > /sys/power/pm_test; echo %s > /sys/power/state\n", level, state);
	t0 = now_s();
	ret = write_file("/sys/power/state", state);
	slept = now_s() - t0;
	if (ret)
		return fail("echo %s > /sys/power/state: %s after %.1f s (see the kernel log above)", state,
			    strerror(-ret), slept);
	for (i = 0; i <= QUEUED; i++)
		pending_after += bo_wait(fd, &jobs[i].dst, 0) == -ETIME;
	printf("resumed after %.1f s: %d jobs still pending\n", slept, pending_after);

	/* A SUBMIT right after resume runs (the device powers up for it if it is off). */
	{
		struct bo out, cmd;
		struct drm_vnpu_job_bo jb;
		__u32 size;

		if (bo_create(fd, FILL_SIZE, 0, &out) || bo_create(fd, 4096, 0, &cmd))
			return fail("BO_CREATE after resume: %s", strerror(errno));
		jb = (struct drm_vnpu_job_bo){ .handle = out.handle, .flags = DRM_VNPU_JOB_BO_WRITE };
		size = fill_stream(cmd.map, out.va, FILL_SIZE, 0x5a);
		ret = submit(fd, &cmd, size, &jb, 1);
		if (ret)
			return fail("SUBMIT right after resume: %s", strerror(-ret));
		ret = bo_wait(fd, &out, WAIT_S);
		if (ret)
			return fail("the job submitted after resume: %s", strerror(-ret));
		for (i = 0; i < (int)FILL_SIZE; i++)
			if (out.map[i] != 0x5a)
				return fail("the job submitted after resume: byte %d is %d", i, out.map[i]);
	}

	racer->stop = 1;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status))
		return fail("%s", racer->why[0] ? racer->why : "the racing process died");

	for (i = 0; i <= QUEUED; i++) {
		unsigned char *want;

		ret = bo_wait(fd, &jobs[i].dst, WAIT_S);
		if (ret)
			return fail("job %d: %s", i, strerror(-ret));
		want = malloc(jobs[i].src.size);
		if (!want)
			return fail("out of memory");
		pattern(want, jobs[i].src.size, jobs[i].seed);
		if (memcmp(jobs[i].dst.map, want, jobs[i].src.size))
			return fail("job %d: the output differs from its input", i);
		free(want);
	}

	snprintf(path, sizeof(path), "%s/%s/power", DEBUGFS_ACCEL, pci);
	offs_after = read_field(path, "power_offs");
	if (offs_after <= offs_before)
		return fail("power_offs %lld -> %lld: the sleep did not power the device off", offs_before,
			    offs_after);
	/* Every job has ended; the scheduler frees them shortly after. */
	snprintf(path, sizeof(path), "%s/%s/counters", DEBUGFS_ACCEL, pci);
	for (t0 = now_s(); (live = read_field(path, "jobs")) > 0 && now_s() - t0 < 10;)
		usleep(10000);
	if (live != 0)
		return fail("%lld jobs left in the driver after every job ended", live);
	if (check_log(log_from, level, why, sizeof(why)))
		return fail("%s", why);

	printf("%s PASS: %s at pm_test %s: %d jobs in flight (%lld on the device), %d racing jobs, "
	       "slept %.1f s, power_offs %lld -> %lld, every output exact, kernel log clean\n",
	       VERDICT, state, level, pending_before, on_device, racer->jobs, slept, offs_before,
	       offs_after);
	return 0;
}
