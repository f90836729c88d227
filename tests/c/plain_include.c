/* The uapi headers as a userspace program includes them, nothing defined first: compiled as C11 and
 * as C++11, warnings as errors (tests/uapi/test_headers_install.py). */
#include <drm/vnpu_accel.h>
#include <drm/vnpu_isa.h>
static struct drm_vnpu_submit s;
int main(void) { return (int)sizeof(s) + (int)(DRM_IOCTL_VNPU_SUBMIT & 1); }
