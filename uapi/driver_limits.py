"""What a vnpu driver chooses and reports: its DRM version, the limits of GET_PARAM, the job timeout.

The uapi header (``drm/vnpu_accel.h``) fixes what every driver must accept; these are the values
vnpu.ko picks within it and reports (``DRM_IOCTL_VERSION``, ``DRM_VNPU_PARAM_MAX_*``,
``DRM_VNPU_PARAM_JOB_TIMEOUT_MS``). Userspace reads them from the driver, never from here: this
module is their one source for the drivers themselves. ``tools/generate_headers.py`` writes
vnpu.ko's ``vnpu_limits.h`` from it and libaccel's shim imports it, so the two report the same.
docs/uapi.md lists them. Every value is unsigned (the header's constants carry ``U``).
"""

# --- DRM_IOCTL_VERSION ------------------------------------------------------
DRIVER_MAJOR = 1
DRIVER_MINOR = 0
DRIVER_PATCHLEVEL = 0

# --- Limits reported through DRM_VNPU_PARAM_* -------------------------------
MAX_JOB_SIZE = 1 << 20  # bytes of one job's command stream
MAX_JOB_BOS = 64  # BOs one job may list
MAX_BO_SIZE = 256 << 20  # bytes of one BO, created or imported

# --- The job timeout (module parameter timeout_ms, debugfs job_timeout_ms) --
JOB_TIMEOUT_MS = 5000  # the default
JOB_TIMEOUT_MIN_MS = 100
JOB_TIMEOUT_MAX_MS = 600000
