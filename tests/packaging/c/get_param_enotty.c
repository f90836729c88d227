/* A uapi program for accel trace to trace: one GET_PARAM on /dev/null, which fails with ENOTTY
 * (exit status 7). Compiled against the wheel's headers (python -m uapi cflags). */
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <drm/vnpu_accel.h>

int main(void)
{
    int fd = open("/dev/null", O_RDWR);
    struct drm_vnpu_get_param p = { .param = DRM_VNPU_PARAM_MAX_JOB_BOS };

    return ioctl(fd, DRM_IOCTL_VNPU_GET_PARAM, &p) == -1 && errno == ENOTTY ? 7 : 1;
}
