/* The C client tests/kernel/test_accel_tools.py traces in the guest against vnpu.ko:
 *
 *     accel_tools_client /dev/accel/accelN
 *
 * GET_PARAM, two BO_CREATEs, a BO_INFO of a bad handle (ENOENT), a GET_PARAM with its pad set
 * (EINVAL), then a stream built from the generated ISA structs (TENSOR, FILL 5, END) submitted and
 * waited for. Exits 0, or 10-16 naming the step that failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "drm/vnpu_accel.h"
#include "drm/vnpu_isa.h"

int main(int argc, char **argv)
{
    int fd = argc == 2 ? open(argv[1], O_RDWR) : -1;
    struct drm_vnpu_get_param p = { .param = DRM_VNPU_PARAM_FW_VERSION };
    struct drm_vnpu_bo_create bo = { .size = 4096 }, cmd = { .size = 4096 };
    struct drm_vnpu_bo_info info = { .handle = 999 };
    struct drm_vnpu_job_bo list;
    struct drm_vnpu_job job;
    struct drm_vnpu_submit submit;
    struct drm_vnpu_bo_wait wait;
    struct timespec now;
    unsigned char *s;
    struct vnpu_isa_tensor t;
    struct vnpu_isa_fill f;
    struct vnpu_isa_end e;

    if (fd < 0 || ioctl(fd, DRM_IOCTL_VNPU_GET_PARAM, &p))
        return 10;
    if (ioctl(fd, DRM_IOCTL_VNPU_BO_CREATE, &bo) || ioctl(fd, DRM_IOCTL_VNPU_BO_CREATE, &cmd))
        return 11;
    if (ioctl(fd, DRM_IOCTL_VNPU_BO_INFO, &info) == 0 || errno != ENOENT)
        return 12;
    p.pad = 1;
    if (ioctl(fd, DRM_IOCTL_VNPU_GET_PARAM, &p) == 0 || errno != EINVAL)
        return 13;
    s = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, cmd.mmap_offset);
    if (s == MAP_FAILED)
        return 14;
    /* The stream, from the generated ISA structs: slot 0 = INT8 [1,1,1,16] at the BO; FILL 5; END. */
    memset(&t, 0, sizeof(t));
    t.header = VNPU_ISA_HEADER(VNPU_OP_TENSOR, VNPU_ISA_SIZE_TENSOR);
    t.va = bo.va;
    t.n = t.h = t.w = 1;
    t.c = 16;
    t.stride_c = 1;
    memset(&f, 0, sizeof(f));
    f.header = VNPU_ISA_HEADER(VNPU_OP_FILL, VNPU_ISA_SIZE_FILL);
    f.value = 5;
    memset(&e, 0, sizeof(e));
    e.header = VNPU_ISA_HEADER(VNPU_OP_END, VNPU_ISA_SIZE_END);
    memcpy(s, &t, sizeof(t));
    memcpy(s + sizeof(t), &f, sizeof(f));
    memcpy(s + sizeof(t) + sizeof(f), &e, sizeof(e));
    list.handle = bo.handle;
    list.flags = DRM_VNPU_JOB_BO_WRITE;
    memset(&job, 0, sizeof(job));
    job.cmd_bo_handle = cmd.handle;
    job.cmd_size = sizeof(t) + sizeof(f) + sizeof(e);
    job.bo_count = 1;
    job.bos = (uintptr_t)&list;
    memset(&submit, 0, sizeof(submit));
    submit.jobs = (uintptr_t)&job;
    submit.job_count = 1;
    submit.job_struct_size = sizeof(job);
    if (ioctl(fd, DRM_IOCTL_VNPU_SUBMIT, &submit))
        return 15;
    clock_gettime(CLOCK_MONOTONIC, &now);
    memset(&wait, 0, sizeof(wait));
    wait.handle = bo.handle;
    wait.timeout_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + 10000000000LL;
    if (ioctl(fd, DRM_IOCTL_VNPU_BO_WAIT, &wait) || wait.job_status)
        return 16;
    return 0;
}
