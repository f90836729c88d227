"""A run as KCIDB I/O JSON, the data KernelCI's common database takes (``python -m qemu_tests --kcidb FILE``).

KCIDB (https://docs.kernelci.org/kcidb/) links three kinds of objects by id,
each id starting with the submitting CI system's origin (``vnpu:``):

- one **checkout**: this repository at its commit (``git describe``, branch,
  https URL, and whether the tree had uncommitted changes);
- one **build** per kernel: vnpu.ko built out of tree against that kernel
  (its release as ``config_name``, the kernel's compiler, the make command,
  status and duration); the kernel itself (spec, release, image, extra
  arguments, the guest's /proc/cmdline) is in its ``misc``;
- the **tests** of that build: ``boot`` (the guest reached its command, as
  KernelCI names a boot), one test per KTAP test case at
  ``vnpu.<KTAP suite>.<KTAP case>`` (the KTAP names split at their dots, a
  parametrized case's parameters one level below it, other characters as
  ``_``), ``vnpu.dmesg`` (FAIL with the quoted report when the guest's kernel
  log has a splat), and for ``--exec`` ``vnpu.exec``. Each test's
  ``environment`` names the machine: QEMU, KVM or TCG, vCPUs, memory, and the
  device (the vnpu NPU behind ivshmem-doorbell 1af4:1110, its cores).

The data is schema v5.0 (every field it uses exists there, so any v5 KCIDB
takes it); tests/qemu_tests/test_kcidb.py validates it with the ``kcidb-io``
package's schema. Standard library only: the harness writes it without
kcidb-io installed.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from qemu_tests import ktap, matrix

ORIGIN = "vnpu"
VERSION = {"major": 5, "minor": 0}
TEST_ROOT = "vnpu"
BOOT_PATH = "boot"
DMESG_PATH = f"{TEST_ROOT}.dmesg"
EXEC_PATH = f"{TEST_ROOT}.exec"
DEVICE = "vnpu NPU (QEMU ivshmem-doorbell 1af4:1110, device model vnpu-device-model)"
LOG_EXCERPT_MAX = 16384  # the schema's maxLength
_STATUS = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skip": "SKIP"}
_BUILD_STATUS = {matrix.BUILD_OK: "PASS", matrix.BUILD_FAILED: "FAIL", matrix.BUILD_MISSING: "MISS"}
_SEGMENT_BAD = re.compile(r"[^A-Za-z0-9_-]")
_GUEST_CLOCK = re.compile(rb"^\[guest\s+(\d+(?:\.\d+)?)s\]", re.MULTILINE)


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Run:
    """What the harness learns about one kernel's run as it goes; ``tests`` reads the rest from ``outdir``."""

    outdir: Path
    run_id: str = field(default_factory=lambda: f"{now():%Y%m%d%H%M%S}-{uuid.uuid4().hex[:12]}")
    start: datetime = field(default_factory=now)
    spec: str | None = None
    release: str = ""
    image: str = ""
    kernel_build: str = ""
    compiler: str = ""
    build_status: str = ""  # matrix.BUILD_*
    build_command: str = ""
    build_start: datetime | None = None
    build_seconds: float | None = None
    module: str = ""
    accel: str = ""
    accel_reason: str = ""
    qemu: str = ""
    cpus: int = 0
    memory: str = ""
    npu_cores: int | None = None
    kernel_args: list[str] = field(default_factory=list)
    boot_start: datetime | None = None
    guest_seconds: float | None = None
    guest_rc: int | None = None  # None: the guest never started
    exec_cmd: str | None = None

    @property
    def build_id(self) -> str:
        release = _SEGMENT_BAD.sub("_", self.release or "unknown")
        return f"{ORIGIN}:{self.run_id}-{release}"


# --- checkout ----------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    try:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def https_url(remote: str) -> str | None:
    """``remote`` as the https URL KCIDB wants (``git@host:path`` becomes ``https://host/path``), or None."""
    if remote.startswith("https://"):
        return remote
    m = re.match(r"^(?:ssh://)?git@([^:/]+)[:/](.+)$", remote)
    return f"https://{m[1]}/{m[2]}" if m else None


def checkout(repo: Path, start: datetime) -> dict:
    """The checkout object: the repository at HEAD, marked when the work tree had changes."""
    commit = _git(repo, "rev-parse", "HEAD")
    obj: dict = {"origin": ORIGIN, "tree_name": "vnpu", "start_time": start.isoformat(), "valid": True}
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        obj["id"] = f"{ORIGIN}:unversioned-{start:%Y%m%d%H%M%S}"
        obj["comment"] = "not a git checkout"
        return obj
    diff = _git(repo, "diff", "HEAD")
    dirty = bool(diff)
    obj["id"] = f"{ORIGIN}:{commit}" + (
        f"+dirty-{uuid.uuid5(uuid.NAMESPACE_OID, diff).hex[:12]}" if dirty else ""
    )
    obj["git_commit_hash"] = commit
    if name := _git(repo, "describe", "--always", "--tags", "--dirty"):
        obj["git_commit_name"] = name
    if (branch := _git(repo, "rev-parse", "--abbrev-ref", "HEAD")) and branch != "HEAD":
        obj["git_repository_branch"] = branch
    if url := https_url(_git(repo, "remote", "get-url", "origin")):
        obj["git_repository_url"] = url
    if subject := _git(repo, "show", "-s", "--format=%s", "HEAD"):
        obj["comment"] = subject
    if not dirty:
        obj["patchset_hash"] = ""  # nothing applied on top of the commit
    obj["misc"] = {"dirty": dirty}
    return obj


# --- build -------------------------------------------------------------------------------------


def _boot_info(outdir: Path) -> dict:
    try:
        return json.loads((outdir / "boot.json").read_text())
    except (OSError, ValueError):
        return {}


def build(run: Run, checkout_id: str) -> dict:
    """vnpu.ko's build against the run's kernel; the kernel in ``misc``."""
    info = _boot_info(run.outdir)
    obj: dict = {
        "id": run.build_id,
        "checkout_id": checkout_id,
        "origin": ORIGIN,
        "architecture": "x86_64",
        "comment": f"vnpu.ko for {run.release or run.spec or 'the default kernel'}",
        "misc": {
            "kernel": {
                "spec": run.spec or "",
                "release": run.release,
                "image": run.image,
                "build_tree": run.kernel_build,
                "args": list(run.kernel_args),
                "cmdline": info.get("cmdline") or "",
            },
            "module": run.module,
        },
    }
    if run.release:
        obj["config_name"] = run.release
    if run.compiler:
        obj["compiler"] = run.compiler
    if run.build_command:
        obj["command"] = run.build_command
    if run.build_start is not None:
        obj["start_time"] = run.build_start.isoformat()
    if run.build_seconds is not None:
        obj["duration"] = round(run.build_seconds, 3)
    if run.build_status in _BUILD_STATUS:
        obj["status"] = _BUILD_STATUS[run.build_status]
    else:
        obj["misc"]["prebuilt"] = True  # --no-build, --module, --no-module: nothing was built
    return obj


# --- tests -------------------------------------------------------------------------------------


def _segments(name: str) -> list[str]:
    """A KTAP name's path segments: split at dots, a ``[parameters]`` part one segment of its own."""
    base, bracket, params = name.partition("[")
    parts = [p for p in base.split(".") if p]
    if bracket:
        parts.append(params.removesuffix("]"))
    return [_SEGMENT_BAD.sub("_", p) or "_" for p in parts] or ["_"]


def test_path(suite: str, case: str) -> str:
    """The KCIDB path of KTAP case ``case`` of suite ``suite``: ``vnpu.<suite>.<case>``."""
    return ".".join([TEST_ROOT, *_segments(suite), *_segments(case)])


def environment(run: Run) -> dict:
    accel = run.accel.upper() or "?"
    cores = f", {run.npu_cores} NPU cores" if run.npu_cores else ""
    return {
        "comment": f"QEMU x86_64 ({accel}), {run.cpus} vCPUs, {run.memory} RAM; {DEVICE}{cores}",
        "misc": {
            "platform": "qemu-x86_64",
            "qemu": run.qemu,
            "accel": run.accel,
            "accel_reason": run.accel_reason,
            "vcpus": run.cpus,
            "memory": run.memory,
            "host_machine": platform.machine(),
            "device": {
                "name": "vnpu",
                "pci_id": "1af4:1110",
                "transport": "ivshmem-doorbell",
                "npu_cores": run.npu_cores,
            },
        },
    }


def _excerpt(text: str) -> str:
    text = text.replace("\0", "")
    return text if len(text) <= LOG_EXCERPT_MAX else text[-LOG_EXCERPT_MAX:]


def _boot_seconds(outdir: Path) -> float | None:
    """The guest clock at its first harness line (the kernel booted and userspace ran), from console.log."""
    try:
        m = _GUEST_CLOCK.search((outdir / "console.log").read_bytes())
    except OSError:
        return None
    return float(m[1]) if m else None


def tests(run: Run) -> list[dict]:
    """The run's tests: the boot, every KTAP case of the JUnit files, the kernel log, the --exec command."""
    env = environment(run)
    out: list[dict] = []
    seen: set[str] = set()

    def add(path: str, status: str, **extra: object) -> None:
        unique, n = path, 1
        while unique in seen:
            n += 1
            unique = f"{path}-{n}"
        seen.add(unique)
        obj = {
            "id": f"{run.build_id}:{unique}",
            "build_id": run.build_id,
            "origin": ORIGIN,
            "path": unique,
            "status": status,
            "environment": env,
        }
        obj.update({k: v for k, v in extra.items() if v not in (None, "")})
        out.append(obj)

    if run.guest_rc is None:
        return out
    reached = (run.outdir / "cmdline.txt").exists()  # guest_run saves it first thing
    add(
        BOOT_PATH,
        "PASS" if reached else "FAIL",
        start_time=run.boot_start.isoformat() if run.boot_start else None,
        duration=_boot_seconds(run.outdir) if reached else None,
        comment="the guest booted and ran the harness's command"
        if reached
        else "the guest never ran its command",
    )
    # The main pass first, then the isolated one (junit-isolated.xml), as the guest ran them.
    for junit in sorted(run.outdir.glob("junit*.xml"), key=lambda p: (p.name != "junit.xml", p.name)):
        try:
            suites = ktap.parse_junit(junit.read_text())
        except (OSError, ValueError):
            continue
        for suite in suites:
            for number, case in enumerate(suite.cases, 1):
                add(
                    test_path(suite.name, case.name),
                    _STATUS.get(case.outcome, "ERROR"),
                    duration=round(case.seconds, 3),
                    log_excerpt=_excerpt(case.message) if case.outcome != "pass" else None,
                    misc={
                        "ktap_suite": suite.name,
                        "ktap_case": case.name,
                        "number": number,
                        "junit": junit.name,
                    },
                )
    dmesg = run.outdir / "dmesg.txt"
    if dmesg.exists():
        log = dmesg.read_text(errors="replace")
        splats = matrix.count_splats(log)
        leaks = run.outdir / "kmemleak.txt"
        quoted = matrix.quote_splats(log, leaks.read_text(errors="replace") if leaks.exists() else "")
        add(
            DMESG_PATH,
            "FAIL" if splats else "PASS",
            comment="kernel reports in the guest's log: "
            + (", ".join(f"{k} {n}" for k, n in splats.items()) or "none"),
            log_excerpt=_excerpt(quoted) if splats else None,
            misc={"reports": splats},
        )
    if run.exec_cmd is not None:
        add(
            EXEC_PATH,
            "PASS" if run.guest_rc == 0 else "FAIL",
            comment=run.exec_cmd,
            misc={"exit": run.guest_rc},
        )
    return out


# --- the document ------------------------------------------------------------------------------


def document(repo: Path, runs: list[Run]) -> dict:
    """The KCIDB I/O data for ``runs`` (one per kernel) of one checkout of ``repo``."""
    co = checkout(repo, min((r.start for r in runs), default=now()))
    return {
        "version": dict(VERSION),
        "checkouts": [co],
        "builds": [build(r, co["id"]) for r in runs],
        "tests": [t for r in runs for t in tests(r)],
    }


def write(path: Path, repo: Path, runs: list[Run]) -> dict:
    data = document(repo, runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data
