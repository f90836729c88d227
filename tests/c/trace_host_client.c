/* The ioctls tests/libaccel/test_trace.py traces on the host: vnpu ioctls on /dev/null, which fail
 * with ENOTTY (enough to see them named, decoded and their errno), a SUBMIT with a bad jobs pointer
 * the interposer must survive, and a TCGETS that is not DRM and must not be reported. Exits 7, so
 * the test sees the program's own status come through; 10 or 11 if an ioctl did not fail as expected.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include "drm/vnpu_accel.h"

int main(void)
{
    int fd = open("/dev/null", O_RDWR);
    struct drm_vnpu_get_param p = { .param = DRM_VNPU_PARAM_MAX_JOB_BOS };
    struct drm_vnpu_submit s;
    struct termios t;

    memset(&s, 0, sizeof(s));
    s.job_count = 1;
    s.job_struct_size = sizeof(struct drm_vnpu_job);
    s.jobs = 8; /* a bad pointer: the interposer must survive it */
    if (ioctl(fd, DRM_IOCTL_VNPU_GET_PARAM, &p) == 0 || errno != ENOTTY)
        return 10;
    if (ioctl(fd, DRM_IOCTL_VNPU_SUBMIT, &s) == 0)
        return 11;
    ioctl(0, TCGETS, &t); /* not DRM: not traced */
    return 7;
}
