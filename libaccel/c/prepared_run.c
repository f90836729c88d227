// SPDX-License-Identifier: MIT
/*
 * The run of a prepared job (prepared_run.h): the one copy of its SUBMIT, its deadline, its
 * BO_WAIT and what an interrupted ioctl does.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <time.h>

#include "prepared_run.h"

/* SUBMIT queues nothing before a signal can interrupt it, and BO_WAIT's deadline is absolute: an
   interrupted one is made again with the same argument. Returns 0 or the negative errno. */
static int vnpu_run_ioctl(int fd, unsigned long request, void *arg, unsigned int flags)
{
	while (ioctl(fd, request, arg) == -1) {
		if (errno != EINTR || !(flags & VNPU_RUN_RESTART))
			return -errno;
	}
	return 0;
}

int vnpu_prepared_run(int fd, const struct drm_vnpu_submit *submit, struct drm_vnpu_bo_wait *wait,
		      int64_t timeout_ns, unsigned int flags, int *step)
{
	struct timespec now;
	int ret;

	if (*step != VNPU_RUN_SUBMIT && *step != VNPU_RUN_WAIT)
		return -EINVAL;
	if (*step == VNPU_RUN_SUBMIT) {
		/* SUBMIT only reads its structs: the caller's stay as they were built. */
		ret = vnpu_run_ioctl(fd, DRM_IOCTL_VNPU_SUBMIT, (void *)submit, flags);
		if (ret)
			return ret;
		clock_gettime(CLOCK_MONOTONIC, &now);
		wait->timeout_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + timeout_ns;
		wait->job_status = 0;
		wait->fault_va = 0;
		*step = VNPU_RUN_WAIT;
	}
	ret = vnpu_run_ioctl(fd, DRM_IOCTL_VNPU_BO_WAIT, wait, flags);
	if (ret)
		return ret;
	return wait->job_status ? VNPU_RUN_JOB_FAILED : 0;
}
