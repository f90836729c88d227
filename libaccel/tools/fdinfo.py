"""DRM usage stats of one open device file: ``/proc/<pid>/fdinfo/<fd>``, parsed.

The kernel's format (Documentation/gpu/drm-usage-stats.rst) is one ``key:<tab>value`` line
per statistic after the generic ``pos``/``flags``/``mnt_id``/``ino`` lines. vnpu.ko prints
(docs/kernel.md, "fdinfo"):

- ``drm-driver: vnpu``, ``drm-client-id: N`` (unique per open file), ``drm-pdev: 0000:00:03.0``;
- ``drm-engine-npu: N ns``: time the NPU spent on this file's jobs;
- ``drm-total-memory``, ``drm-shared-memory``, ``drm-active-memory``, ``drm-resident-memory``,
  ``drm-purgeable-memory``: bytes, printed with an optional ``KiB``/``MiB`` unit.
- ``vnpu-jobs: N``: the driver's own key (as amdgpu's ``amd-*``): this file's jobs that ended,
  whatever their status (a per-client jobs/s for ``accel top``);
- ``vnpu-jobs-core<i>: N``, one per NPU core: those of them that ran, by the core they ran on.

:func:`parse` turns the text into a :class:`FdInfo`; :func:`read` reads one file
descriptor's. Keys this module does not know are kept in :attr:`FdInfo.other`, so a key the
driver adds is not lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(r"(?P<key>[^:\s]+):\s*(?P<value>.*?)\s*")
_SIZE_UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_TIME_UNITS = {"ns": 1}
_JOBS_CORE = re.compile(r"vnpu-jobs-core(\d+)")
# drm-<stat>-<region> memory keys (drm_print_memory_stats()); drm-memory-<region> is the older form.
MEMORY_STATS = ("total", "shared", "active", "resident", "purgeable", "memory")


class FdInfoError(ValueError):
    """The fdinfo text is not DRM usage stats, or a value is malformed."""


@dataclass(frozen=True)
class FdInfo:
    """The DRM usage stats of one open DRM file.

    ``engines`` maps an engine name (``npu``) to its busy time in ns; ``memory`` maps a
    region (``memory``: system RAM) to its stats (``total``, ``resident``, ...) in bytes.
    """

    driver: str
    client_id: int | None = None
    pdev: str | None = None
    engines: dict[str, int] = field(default_factory=dict)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)
    jobs: int | None = None  # vnpu-jobs; None for a kernel that does not print it
    jobs_by_core: dict[int, int] = field(default_factory=dict)  # vnpu-jobs-core<i>: core -> jobs

    def engine_ns(self, name: str = "npu") -> int:
        """Busy time of engine ``name`` in ns (0 when the driver does not report it)."""
        return self.engines.get(name, 0)

    def memory_bytes(self, stat: str = "total", region: str = "memory") -> int:
        """``drm-<stat>-<region>`` in bytes (0 when absent)."""
        return self.memory.get(region, {}).get(stat, 0)


def _number(key: str, value: str, units: dict[str, int]) -> int:
    parts = value.split()
    unit = parts[1] if len(parts) == 2 else ""
    if len(parts) not in (1, 2) or not parts[0].isdigit() or unit not in units:
        raise FdInfoError(f"fdinfo {key}: {value!r} is not a number with one of the units {sorted(units)}")
    return int(parts[0]) * units[unit]


def parse(text: str) -> FdInfo:
    """Parse the text of one fdinfo file; :class:`FdInfoError` if it has no ``drm-driver`` key."""
    driver: str | None = None
    client_id: int | None = None
    pdev: str | None = None
    engines: dict[str, int] = {}
    memory: dict[str, dict[str, int]] = {}
    other: dict[str, str] = {}
    jobs: int | None = None
    jobs_by_core: dict[int, int] = {}
    for line in text.splitlines():
        m = _LINE.fullmatch(line)
        if not m:
            continue
        key, value = m["key"], m["value"]
        if key == "vnpu-jobs":
            jobs = _number(key, value, {"": 1})
            continue
        if (core := _JOBS_CORE.fullmatch(key)) is not None:
            jobs_by_core[int(core[1])] = _number(key, value, {"": 1})
            continue
        if not key.startswith("drm-"):
            continue  # pos, flags, mnt_id, ino: the VFS's, not DRM's
        if key == "drm-driver":
            driver = value
        elif key == "drm-client-id":
            client_id = _number(key, value, {"": 1})
        elif key == "drm-pdev":
            pdev = value
        elif key.startswith("drm-engine-") and not key.startswith("drm-engine-capacity-"):
            engines[key.removeprefix("drm-engine-")] = _number(key, value, _TIME_UNITS)
        elif (stat := key.split("-")[1]) in MEMORY_STATS and key.count("-") >= 2:
            region = key.split("-", 2)[2]
            memory.setdefault(region, {})[stat] = _number(key, value, _SIZE_UNITS)
        else:
            other[key] = value
    if driver is None:
        raise FdInfoError("no drm-driver key: not an open DRM device file, or a kernel without fdinfo stats")
    return FdInfo(driver, client_id, pdev, engines, memory, other, jobs, jobs_by_core)


def read(fd: int, pid: int | str = "self") -> FdInfo:
    """The usage stats of file descriptor ``fd`` of process ``pid`` (default: this process).

    ``OSError`` if there is no such descriptor; :class:`FdInfoError` if it is not a DRM file.
    """
    with open(f"/proc/{pid}/fdinfo/{fd}") as f:
        return parse(f.read())
