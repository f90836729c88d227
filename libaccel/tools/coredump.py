"""``accel coredump``: decode a vnpu device coredump (docs/tools.md).

vnpu.ko writes one through the kernel's devcoredump framework when a job faults in the
MMU or times out: ``/sys/class/devcoredump/devcdN/data``. The format is the uapi's
(``struct drm_vnpu_coredump_*`` in ``uapi/drm/vnpu_accel.h``, read here through cffi):
a header, then sections (the job, the device registers, the command stream, the job's
BOs). The stream is disassembled with the job's BOs as symbols (``bo1+0x40``), and the
instruction that failed (the ``cycles``-th the device started) is marked ``>>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import errno
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firmware_tools.asm import disassemble_prefix
from libaccel.errors import AccelError
from libaccel.tools import decode
from libaccel.tools.session import BadFile, write_file
from uapi import hw_layout as hw
from uapi.bindings import CONSTANTS, ffi
from vnpu_common.cli import os_error_words, output_path_problem

DEVCOREDUMP = Path("/sys/class/devcoredump")
MAGIC = CONSTANTS["DRM_VNPU_COREDUMP_MAGIC"]
VERSION = CONSTANTS["DRM_VNPU_COREDUMP_VERSION"]
SECTION_JOB = CONSTANTS["DRM_VNPU_COREDUMP_JOB"]
SECTION_REGS = CONSTANTS["DRM_VNPU_COREDUMP_REGS"]
SECTION_STREAM = CONSTANTS["DRM_VNPU_COREDUMP_STREAM"]
SECTION_BOS = CONSTANTS["DRM_VNPU_COREDUMP_BOS"]
_STATUS_TEXT = {-errno.EFAULT: "MMU fault", -errno.ETIMEDOUT: "hang"}


class CoredumpError(BadFile):
    """A file that is not a well-formed vnpu coredump (ExitCode.BAD_FILE)."""


@dataclass(frozen=True)
class CoredumpJob:
    seqno: int
    fault_va: int
    cmd_va: int
    cycles: int  # instructions started; the failing one is instruction cycles - 1
    status: int
    context: int
    pid: int
    cmd_size: int
    bo_count: int


@dataclass(frozen=True)
class CoredumpBo:
    va: int
    size: int
    job_flags: int  # DRM_VNPU_JOB_BO_*
    bo_flags: int  # DRM_VNPU_BO_*


@dataclass(frozen=True)
class Coredump:
    version: int
    timestamp_ns: int
    job: CoredumpJob
    registers: dict[int, int]  # BAR2 offset -> value, in dump order
    stream: bytes
    bos: list[CoredumpBo]
    unknown_sections: list[int]  # types this reader skipped


def _struct(data: bytes, offset: int, ctype: str, what: str) -> Any:
    size = ffi.sizeof(ctype)
    if offset + size > len(data):
        raise CoredumpError(
            f"truncated: {what} at byte {offset} needs {size} bytes, {len(data) - offset} left"
        )
    buf = ffi.new(f"{ctype} *")
    ffi.memmove(buf, data[offset : offset + size], size)
    return buf


def _fields(obj: Any, ctype: str) -> dict[str, int]:
    return {name: getattr(obj, name) for name, _ in ffi.typeof(ctype).fields if name != "pad"}


def parse(data: bytes) -> Coredump:
    """Decode a dump; :class:`CoredumpError` names the first problem."""
    h = _struct(data, 0, "struct drm_vnpu_coredump_header", "the header")
    if h.magic != MAGIC:
        raise CoredumpError(f"not a vnpu coredump: magic {h.magic:#010x}, expected {MAGIC:#010x} ('VNCD')")
    if h.version != VERSION:
        raise CoredumpError(f"coredump version {h.version}; this accel reads version {VERSION}")
    pos = h.header_size
    job: CoredumpJob | None = None
    regs: dict[int, int] = {}
    stream = b""
    bos: list[CoredumpBo] = []
    unknown: list[int] = []
    sec_size = ffi.sizeof("struct drm_vnpu_coredump_section")
    for i in range(h.section_count):
        s = _struct(data, pos, "struct drm_vnpu_coredump_section", f"section {i}")
        start = pos + sec_size
        end = start + s.size
        if end > len(data):
            raise CoredumpError(
                f"truncated: section {i} (type {s.type}) ends at byte {end}, the file at {len(data)}"
            )
        body = data[start:end]
        if s.type == SECTION_JOB:
            job = CoredumpJob(
                **_fields(
                    _struct(body, 0, "struct drm_vnpu_coredump_job", "the job"),
                    "struct drm_vnpu_coredump_job",
                )
            )
        elif s.type == SECTION_REGS:
            n = ffi.sizeof("struct drm_vnpu_coredump_reg")
            for off in range(0, len(body) - n + 1, n):
                r = _struct(body, off, "struct drm_vnpu_coredump_reg", "a register")
                regs[r.offset] = r.value
        elif s.type == SECTION_STREAM:
            stream = bytes(body)
        elif s.type == SECTION_BOS:
            n = ffi.sizeof("struct drm_vnpu_coredump_bo")
            for off in range(0, len(body) - n + 1, n):
                b = _struct(body, off, "struct drm_vnpu_coredump_bo", "a BO")
                bos.append(CoredumpBo(b.va, b.size, b.job_flags, b.bo_flags))
        else:
            unknown.append(s.type)
        pos = end + (-s.size % 8)
    if job is None:
        raise CoredumpError("no job section")
    return Coredump(h.version, h.timestamp_ns, job, regs, stream, bos, unknown)


def register_names() -> dict[int, str]:
    """BAR2 offset -> the register's name in uapi/hw_layout.py (docs/hardware.md)."""
    names: dict[int, str] = {}
    for name, value in vars(hw).items():
        if name.startswith("REG_") or name in ("SQ_HEAD", "SQ_TAIL", "CQ_HEAD", "CQ_TAIL"):
            names.setdefault(value, name)
    names[hw.REG_FW_BUILD_ID + 4] = "REG_FW_BUILD_ID+4"
    return names


def status_text(status: int) -> str:
    return f"-{decode.errno_name(status)}" + (f" ({_STATUS_TEXT[status]})" if status in _STATUS_TEXT else "")


def _flags(bo: CoredumpBo) -> str:
    mode = ("r" if bo.job_flags & CONSTANTS["DRM_VNPU_JOB_BO_READ"] else "") + (
        "w" if bo.job_flags & CONSTANTS["DRM_VNPU_JOB_BO_WRITE"] else ""
    )
    return mode + (" read-only" if bo.bo_flags & CONSTANTS["DRM_VNPU_BO_DEVICE_READ_ONLY"] else "")


def stream_lines(dump: Coredump) -> tuple[list[str], int | None, str | None]:
    """The stream disassembled (one line per instruction), the failing line's index, a decode error."""
    regions = {f"bo{i}": (bo.va, bo.size) for i, bo in enumerate(dump.bos)}
    text, error = disassemble_prefix(dump.stream, regions)
    lines = text.splitlines()
    failing = dump.job.cycles - 1 if 0 < dump.job.cycles <= len(lines) else None
    return lines, failing, str(error) if error else None


def to_json(dump: Coredump) -> dict[str, Any]:
    lines, failing, error = stream_lines(dump)
    names = register_names()
    return {
        "version": dump.version,
        "timestamp_ns": dump.timestamp_ns,
        "job": dataclasses.asdict(dump.job) | {"status_name": status_text(dump.job.status)},
        "registers": [
            {"offset": off, "name": names.get(off, f"{off:#05x}"), "value": v}
            for off, v in dump.registers.items()
        ],
        "bos": [dataclasses.asdict(b) | {"name": f"bo{i}"} for i, b in enumerate(dump.bos)],
        "stream": dump.stream.hex(),
        "disassembly": lines,
        "failing_instruction": failing,
        "decode_error": error,
        "unknown_sections": dump.unknown_sections,
    }


def render(dump: Coredump) -> str:
    j = dump.job
    # A u64 of ns ends in 2554: any value is a date datetime can print.
    stamp = datetime.datetime.fromtimestamp(dump.timestamp_ns / 1e9, datetime.UTC)
    out = [f"vnpu coredump v{dump.version}, captured {stamp:%Y-%m-%d %H:%M:%S} UTC"]
    where = f" at VA {j.fault_va:#x}" if j.status == -errno.EFAULT else ""
    out.append(f"job {j.seqno} of context {j.context} (pid {j.pid}): {status_text(j.status)}{where}")
    out.append(f"instructions started: {j.cycles}; stream {j.cmd_size} bytes at device VA {j.cmd_va:#x}")
    out.append("")
    out.append("BOs:")
    rows = [["NAME", "VA", "SIZE", "ACCESS"]] + [
        [f"bo{i}", f"{b.va:#x}", str(b.size), _flags(b)] for i, b in enumerate(dump.bos)
    ]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.append("")
    out.append("registers:")
    names = register_names()
    width = max((len(names.get(o, "")) for o in dump.registers), default=0)
    out += [f"  {names.get(o, '?').ljust(width)}  {o:#05x}  {v:#010x}" for o, v in dump.registers.items()]
    out.append("")
    lines, failing, error = stream_lines(dump)
    out.append("stream:" + ("" if failing is not None else "  (no instruction marked: none had started)"))
    out += [(">> " if i == failing else "   ") + line for i, line in enumerate(lines)]
    if error:
        out.append(f"   (the stream does not decode past here: {error})")
    if dump.unknown_sections:
        out.append(f"(skipped sections of unknown types {dump.unknown_sections})")
    return "\n".join(out)


def vnpu_dumps(root: Path = DEVCOREDUMP) -> list[Path]:
    """The ``data`` files of devcoredumps whose failing device is bound to vnpu."""
    found = []
    for d in sorted(root.glob("devcd*")):
        try:
            driver = os.readlink(d / "failing_device" / "driver")
        except OSError:
            # No driver, or the dump was freed (read to the end, written to, or
            # timed out) between the listing and this look.
            continue
        if os.path.basename(driver) == "vnpu":
            found.append(d / "data")
    return found


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except PermissionError:
        raise AccelError(errno.EACCES, "coredump", f"{path}: permission denied (run as root)") from None
    except OSError as e:
        raise BadFile(f"cannot read {path}: {os_error_words(e)}") from None


def main(args: argparse.Namespace) -> int:
    if args.save and (problem := output_path_problem(args.save)):
        raise BadFile(f"--save: {problem}")  # before the dump is read: --discard would lose it
    if args.file is not None:
        paths = [Path(args.file)]
    else:
        paths = vnpu_dumps()
        if not paths:
            raise AccelError(
                errno.ENOENT,
                "coredump",
                f"no vnpu device coredump under {DEVCOREDUMP} (vnpu.ko writes one when a job faults or "
                "times out, and the kernel drops it after 5 minutes)",
            )
    dumps = []
    for path in paths:
        data = _read(path)
        try:
            dumps.append(parse(data))
        except CoredumpError as e:
            raise CoredumpError(f"{path}: {e}") from None
        if args.save:
            write_file(args.save, data)
        if args.discard and args.file is None:
            path.write_text("1")  # devcoredump frees the dump on any write
    if args.json:
        records = [to_json(d) for d in dumps]
        print(json.dumps(records[0] if len(records) == 1 else records, indent=2))
    else:
        print("\n\n".join(render(d) for d in dumps))
    return 0


if __name__ == "__main__":
    from libaccel.tools.cli import main as cli_main

    sys.exit(cli_main(["coredump", *sys.argv[1:]]))
