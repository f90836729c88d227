/* SPDX-License-Identifier: MIT */
/*
 * One run of a prepared job: DRM_IOCTL_VNPU_SUBMIT of a job whose structs were built once, then
 * DRM_IOCTL_VNPU_BO_WAIT on one of its BOs until a deadline. libaccel (libvnpu_run.so, through
 * cffi) and libteflon.so (compiled in) both run a prepared job with vnpu_prepared_run(); the ioctl
 * ABI is uapi/drm/vnpu_accel.h's alone.
 */
#ifndef VNPU_PREPARED_RUN_H
#define VNPU_PREPARED_RUN_H

#include <stdint.h>

#include "drm/vnpu_accel.h"

/* --- interface: begin (cffi's cdef reads this block; the uapi structs come from uapi.bindings) */

/* vnpu_prepared_run()'s result when both ioctls succeeded and the job failed: the wait struct's
   job_status (a negative errno) and fault_va say how. */
#define VNPU_RUN_JOB_FAILED 1

/* flags: make an ioctl a signal interrupted again at once (libdrm's rule). Without it the run
   returns -EINTR, and a call with the same *step resumes it where it stopped. */
#define VNPU_RUN_RESTART 1

/* *step: the ioctl the run makes next, or the one that returned its error. */
#define VNPU_RUN_SUBMIT 0
#define VNPU_RUN_WAIT 1

/*
 * vnpu_prepared_run() - SUBMIT @submit on @fd, then BO_WAIT with @wait (its handle set by the
 * caller) until @timeout_ns after the SUBMIT returned (0 or less: poll).
 *
 * Start with *@step = VNPU_RUN_SUBMIT. The wait's deadline is absolute, so a run resumed at
 * VNPU_RUN_WAIT (after -EINTR) keeps it and never waits longer than asked.
 *
 * Return: 0 when the job succeeded; VNPU_RUN_JOB_FAILED when it failed; else the negative errno
 * of the ioctl *@step names (-EINVAL for a *@step that is neither).
 */
int vnpu_prepared_run(int fd, const struct drm_vnpu_submit *submit, struct drm_vnpu_bo_wait *wait,
		      int64_t timeout_ns, unsigned int flags, int *step);

/* --- interface: end --- */

#endif /* VNPU_PREPARED_RUN_H */
