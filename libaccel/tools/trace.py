"""``accel trace -- CMD ...``: the strace of the vnpu device.

Runs CMD with ``libvnpu_trace.so`` (``libaccel/tools/trace_preload.c``) in ``LD_PRELOAD``. The
library interposes libc's ``ioctl()``: every ioctl of type ``'d'`` (DRM and vnpu) is
passed on and reported, with its argument struct before and after, the arrays it points
at (for a SUBMIT: the jobs, their BO lists and the command stream, read through the BO's
mapping), the return value, errno and the time, as one message on a Unix
``SOCK_SEQPACKET`` socket. This module builds the library (gcc, cached like the MAC
array's build), listens on the socket, and decodes each message with the uapi header
(:mod:`libaccel.tools.decode`) and the ISA (:mod:`firmware_tools.asm`).

Why an interposer, not ptrace: it sees the same calls for C programs and for CPython
(``fcntl.ioctl`` calls libc's ``ioctl``), costs a function call instead of two context
switches per system call, needs no ptrace permission, and runs inside the process, so it
can read the command stream through the process's own device file the moment SUBMIT is
called. What it cannot see: statically linked programs and raw ``syscall(SYS_ioctl)``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from firmware_tools.asm import disassemble_prefix
from libaccel.tools import decode
from libaccel.tools.session import BadFile, UsageError
from uapi import bindings
from vnpu_common.cache import cache_root, content_hash
from vnpu_common.cbuild import prebuilt
from vnpu_common.cli import os_error_words

SOURCE = Path(__file__).with_name("trace_preload.c")
LIBRARY_NAME = "libvnpu_trace.so"
COMPILE_ARGS = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-D__user="]
LINK_ARGS = ["-ldl", "-lpthread"]
ENV_SOCKET = "VNPU_TRACE_SOCKET"
MAX_BLOB = 64 * 1024  # trace_preload.c's MAX_BLOB: longer arrays and streams are cut

# The wire format of trace_preload.c: struct trace_record, then struct trace_blob + data.
_RECORD = struct.Struct("<IIiiiiiIQQQ")
_BLOB = struct.Struct("<HHIII")
_MAGIC = 0x43525456
_TAGS = {
    1: "arg_in",
    2: "arg_out",
    3: "fd_path",
    4: "comm",
    10: "jobs",
    11: "job_bos",
    12: "job_in_syncobjs",
    13: "job_stream",
    20: "syncobj_handles",
    30: "version_name",
    31: "version_date",
    32: "version_desc",
    40: "error",
}
# Fields shown in hex: addresses, user pointers and mmap offsets.
_HEX = {"va", "mmap_offset", "fault_va", "jobs", "bos", "in_syncobjs", "handles", "name", "date", "desc"}


# --- building the interposer ---------------------------------------------------------------------


def _source_hash() -> str:
    return content_hash(
        (
            SOURCE.read_bytes(),
            bindings.VNPU_HEADER.read_bytes(),
            bindings.DRM_HEADER.read_bytes(),
            " ".join(COMPILE_ARGS + LINK_ARGS),
        )
    )


def _cache_dirs() -> list[Path]:
    return [
        cache_root() / f"trace-{_source_hash()}",
        Path(tempfile.gettempdir()) / f"vnpu-trace-{_source_hash()}",
    ]


def library() -> Path:
    """The interposer's path: the wheel's (``libaccel/tools/libvnpu_trace.so``, built with the wheel),
    else the cache's, built now with gcc if this source has no build in the cache yet.

    The cache may be read-only (the QEMU guest sees the host's): then a temporary directory.
    """
    if (path := prebuilt(SOURCE.with_name(LIBRARY_NAME))) is not None:
        return path
    dirs = _cache_dirs()
    for d in dirs:
        if (d / LIBRARY_NAME).exists():
            return d / LIBRARY_NAME
    last = ""
    for d in dirs:
        try:
            return build(d)
        except OSError as e:
            last = f"{d}: {e.strerror or e}"
    raise UsageError(f"cannot build {LIBRARY_NAME}: {last}")


def build(out_dir: Path) -> Path:
    """Compile the interposer into ``out_dir`` with gcc (atomically replaced) and return its path;
    ``setup.py`` builds the wheel's copy with it."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise UsageError("accel trace builds its interposer with gcc: apt-get install gcc")
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = out_dir / f".{LIBRARY_NAME}.{os.getpid()}"
    cmd = [gcc, *COMPILE_ARGS, "-I", str(bindings.HEADER_DIR.parent), str(SOURCE), "-o", str(staged)]
    r = subprocess.run([*cmd, *LINK_ARGS], capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"building {LIBRARY_NAME} failed: {r.stderr.strip().splitlines()[-1:]}")
    os.replace(staged, out_dir / LIBRARY_NAME)  # a concurrent tracer never loads a half-written file
    return out_dir / LIBRARY_NAME


# --- decoding ----------------------------------------------------------------------------------------


@dataclass
class Record:
    """One ioctl as the interposer saw it."""

    pid: int
    tid: int
    fd: int
    ret: int
    err: int
    request: int
    t_start_ns: int
    t_end_ns: int
    blobs: list[tuple[str, int, bytes, int]] = field(default_factory=list)  # tag, index, data, full length

    def blob(self, tag: str, index: int = 0) -> bytes | None:
        for t, i, data, _ in self.blobs:
            if t == tag and i == index:
                return data
        return None


def parse_message(data: bytes) -> Record:
    fields = _RECORD.unpack_from(data)
    magic, version, pid, tid, fd, ret, err, nblobs, request, t0, t1 = fields
    if magic != _MAGIC or version != 1:
        raise ValueError(f"not a trace record (magic {magic:#x}, version {version})")
    rec = Record(pid, tid, fd, ret, err, request, t0, t1)
    off = _RECORD.size
    for _ in range(nblobs):
        tag, index, length, full, _pad = _BLOB.unpack_from(data, off)
        off += _BLOB.size
        rec.blobs.append((_TAGS.get(tag, str(tag)), index, data[off : off + length], full or length))
        off += (length + 7) & ~7
    return rec


def _fmt(name: str, value: Any) -> str:
    if isinstance(value, int) and (name in _HEX or name.endswith("_va")) and value:
        return f"{value:#x}"
    return str(value)


def _fields_text(values: dict[str, Any], struct_name: str | None = None) -> str:
    parts = []
    for k, v in values.items():
        text = _fmt(k, v)
        if struct_name == "drm_vnpu_get_param" and k == "param" and (p := _PARAM_NAMES.get(v)):
            text += f" ({p})"  # the enum's name, as strace prints symbolic constants
        parts.append(f"{k}={text}")
    return "{" + ", ".join(parts) + "}"


_PARAM_NAMES = {p.number: p.enumerator for p in decode.params()}


class Decoder:
    """Turns records into dicts; remembers each file's BOs (from BO_CREATE) to name stream addresses."""

    def __init__(self, t0_ns: int, streams: bool = True) -> None:
        self.t0_ns = t0_ns
        self.streams = streams
        self.bos: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}  # (pid, fd) -> handle -> (va, size)

    def decode(self, rec: Record) -> dict[str, Any]:
        d = decode.lookup_ioctl(rec.request)
        name = decode.ioctl_name(rec.request)
        struct_name = d.struct if d and d.size == decode.split_request(rec.request)[3] else None
        event: dict[str, Any] = {
            "t": round((rec.t_start_ns - self.t0_ns) / 1e9, 6),
            "pid": rec.pid,
            "tid": rec.tid,
            "comm": (rec.blob("comm") or b"").decode(errors="replace"),
            "fd": rec.fd,
            "path": (rec.blob("fd_path") or b"").decode(errors="replace"),
            "request": f"{rec.request:#010x}",
            "ioctl": name,
            "struct": struct_name,
            "ret": rec.ret,
            "errno": decode.errno_name(rec.err) if rec.ret < 0 else None,
            "time_us": round((rec.t_end_ns - rec.t_start_ns) / 1e3, 1),
        }
        arg_in, arg_out = rec.blob("arg_in"), rec.blob("arg_out")
        if struct_name and arg_in is not None:
            before = decode.decode_struct(struct_name, arg_in)
            event["in"] = before
            if arg_out is not None:
                after = decode.decode_struct(struct_name, arg_out) or {}
                event["out"] = {
                    k: v
                    for k, v in after.items()
                    if (before or {}).get(k) != v or decode.field_is_output(struct_name, k)
                }
        elif arg_in is not None:
            event["in_hex"] = arg_in.hex()
            if arg_out is not None:
                event["out_hex"] = arg_out.hex()
        notes = [data.decode(errors="replace") for tag, _, data, _ in rec.blobs if tag == "error"]
        if notes:
            event["notes"] = notes
        if name == "DRM_IOCTL_VNPU_BO_CREATE" and rec.ret == 0 and "out" in event:
            out = {**event["in"], **event["out"]}
            self.bos.setdefault((rec.pid, rec.fd), {})[out["handle"]] = (out["va"], out["size"])
        elif name == "DRM_IOCTL_GEM_CLOSE" and rec.ret == 0 and event.get("in"):
            self.bos.get((rec.pid, rec.fd), {}).pop(event["in"]["handle"], None)
        elif name == "DRM_IOCTL_VNPU_SUBMIT":
            event["jobs"] = self._jobs(rec, event.get("in") or {})
        elif name == "DRM_IOCTL_SYNCOBJ_WAIT" and (h := rec.blob("syncobj_handles")) is not None:
            event["handles"] = list(struct.unpack(f"<{len(h) // 4}I", h))
        elif name == "DRM_IOCTL_VERSION" and rec.ret == 0:
            event["strings"] = {
                k: (rec.blob(f"version_{k}") or b"").decode(errors="replace")
                for k in ("name", "date", "desc")
            }
        return event

    def _jobs(self, rec: Record, submit: dict[str, Any]) -> list[dict[str, Any]]:
        raw = rec.blob("jobs")
        if raw is None:
            return []
        stride = submit.get("job_struct_size") or bindings.ffi.sizeof("struct drm_vnpu_job")
        regions = {
            f"bo{h}": (va, size) for h, (va, size) in sorted(self.bos.get((rec.pid, rec.fd), {}).items())
        }
        jobs = []
        for i, job in enumerate(decode.decode_array("drm_vnpu_job", raw, stride)):
            if (bos := rec.blob("job_bos", i)) is not None:
                job["bo_list"] = [
                    {"handle": b["handle"], "flags": _bo_flags(b["flags"])}
                    for b in decode.decode_array("drm_vnpu_job_bo", bos)
                ]
            if (ins := rec.blob("job_in_syncobjs", i)) is not None:
                job["in_syncobj_list"] = list(struct.unpack(f"<{len(ins) // 4}I", ins))
            stream = rec.blob("job_stream", i)
            if stream is not None and self.streams:
                text, error = disassemble_prefix(stream, regions)
                full = next(full for tag, idx, _, full in rec.blobs if tag == "job_stream" and idx == i)
                job["stream"] = {
                    "bytes": full,
                    "captured": len(stream),
                    "disasm": text.splitlines(),
                    "error": str(error) if error and len(stream) == full else None,
                }
            jobs.append(job)
        return jobs


def _bo_flags(flags: int) -> str:
    names = [n[len("DRM_VNPU_JOB_BO_") :] for n in ("DRM_VNPU_JOB_BO_READ", "DRM_VNPU_JOB_BO_WRITE")]
    bits = [bindings.CONSTANTS[f"DRM_VNPU_JOB_BO_{n}"] for n in names]
    parts = [n for n, b in zip(names, bits, strict=True) if flags & b]
    rest = flags & ~sum(bits)
    return "|".join(parts + ([f"{rest:#x}"] if rest else [])) or "0"


def render(event: dict[str, Any]) -> str:
    """strace-like text: one line per ioctl, then a SUBMIT's jobs and disassembled streams."""
    head = f"[{event['pid']} {event['comm']}] {event['t']:.6f} {event['ioctl']}(fd {event['fd']}"
    if event["path"]:
        head += f" {event['path']}"
    if "in" in event and event["in"] is not None:
        head += ", " + _fields_text(event["in"], event["struct"])
    elif "in_hex" in event:
        head += f", <{len(event['in_hex']) // 2} bytes: {event['in_hex']}>"
    head += ")"
    if event["ret"] < 0:
        err = event["errno"]
        code = getattr(errno, err, 0) if err else 0
        head += f" = {event['ret']} {err} ({os.strerror(code) if code else '?'})"
    else:
        head += f" = {event['ret']}"
        if event.get("out"):
            head += " " + _fields_text(event["out"])
        elif "out_hex" in event:
            head += f" <{event['out_hex']}>"
    head += f" <{event['time_us']:.1f} us>"
    lines = [head]
    for note in event.get("notes", []):
        lines.append(f"    note: {note}")
    if "strings" in event:
        lines.append("    " + ", ".join(f"{k}={v!r}" for k, v in event["strings"].items()))
    if "handles" in event:
        lines.append(f"    handles: {event['handles']}")
    for i, job in enumerate(event.get("jobs", [])):
        plain = {k: v for k, v in job.items() if k not in ("bo_list", "in_syncobj_list", "stream")}
        lines.append(f"    job {i}: {_fields_text(plain)}")
        if "bo_list" in job:
            lines.append("      bos: " + ", ".join(f"bo{b['handle']}:{b['flags']}" for b in job["bo_list"]))
        if "in_syncobj_list" in job:
            lines.append(f"      in_syncobjs: {job['in_syncobj_list']}")
        stream = job.get("stream")
        if stream:
            cut = f", first {stream['captured']} captured" if stream["captured"] < stream["bytes"] else ""
            lines.append(f"      stream ({stream['bytes']} bytes{cut}):")
            lines += [f"        {line}" for line in stream["disasm"]]
            if stream["error"]:
                lines.append(f"        # stream error: {stream['error']}")
    return "\n".join(lines)


# --- filtering and the -c summary --------------------------------------------------------------------


def _short(name: str) -> str:
    for prefix in ("DRM_IOCTL_VNPU_", "DRM_IOCTL_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def parse_ioctl_filter(text: str) -> frozenset[str]:
    """``SUBMIT,BO_WAIT`` (names as the uapi headers define them, with or without the
    ``DRM_IOCTL_VNPU_`` / ``DRM_IOCTL_`` prefix, any case) -> the full ``DRM_IOCTL_*`` names.

    An unknown name is a :class:`UsageError` that lists the valid ones."""
    known = {d.name for d in decode.ioctl_table().values()}
    by_short = {_short(n): n for n in known}
    out = set()
    for word in (w.strip().upper() for w in text.split(",")):
        if not word:
            raise UsageError(f"trace: an empty ioctl name in {text!r}")
        name = word if word in known else by_short.get(word)
        if name is None:
            vnpu = ", ".join(sorted(_short(n) for n in known if n.startswith("DRM_IOCTL_VNPU_")))
            near = sorted(_short(n) for n in known if word in _short(n))
            hint = f"did you mean {', '.join(near)}? " if near else ""
            raise UsageError(
                f"trace: unknown ioctl {word!r}: {hint}the vnpu ioctls are {vnpu}, and every "
                f"DRM_IOCTL_* of drm/drm.h is known too (e.g. {', '.join(_short(n) for n in _COMMON_DRM)})"
            )
        out.add(name)
    return frozenset(out)


# The core DRM ioctls a vnpu program makes (libaccel and the delegate), named in the filter's error.
_COMMON_DRM = (
    "DRM_IOCTL_VERSION",
    "DRM_IOCTL_GEM_CLOSE",
    "DRM_IOCTL_SYNCOBJ_CREATE",
    "DRM_IOCTL_SYNCOBJ_WAIT",
)


@dataclass
class IoctlStats:
    """One row of the ``-c`` summary."""

    ioctl: str
    calls: int = 0
    errors: int = 0
    total_us: float = 0.0


def summary(stats: dict[str, IoctlStats]) -> dict[str, Any]:
    """The ``-c`` summary as data: rows by total time (largest first, as strace sorts), then the total."""
    total_us = sum(s.total_us for s in stats.values())
    rows = []
    for s in sorted(stats.values(), key=lambda s: (-s.total_us, s.ioctl)):
        rows.append(
            {
                "ioctl": s.ioctl,
                "calls": s.calls,
                "errors": s.errors,
                "total_s": round(s.total_us / 1e6, 6),
                "avg_us": round(s.total_us / s.calls, 1),
                "percent": round(100 * s.total_us / total_us, 2) if total_us else 0.0,
            }
        )
    calls = sum(s.calls for s in stats.values())
    total = {
        "calls": calls,
        "errors": sum(s.errors for s in stats.values()),
        "total_s": round(total_us / 1e6, 6),
        "avg_us": round(total_us / calls, 1) if calls else 0.0,
    }
    return {"ioctls": rows, "total": total}


def render_summary(data: dict[str, Any]) -> str:
    """``strace -c``'s table: % time, seconds, usecs/call, calls, errors, ioctl, then the total."""
    rule = "------ ----------- ----------- --------- --------- " + "-" * 24
    lines = ["% time     seconds  usecs/call     calls    errors ioctl", rule]

    def row(percent: float, r: dict[str, Any], name: str) -> str:
        errors = str(r["errors"]) if r["errors"] else ""
        return f"{percent:6.2f} {r['total_s']:11.6f} {r['avg_us']:11.0f} {r['calls']:9d} {errors:>9} {name}"

    for r in data["ioctls"]:
        lines.append(row(r["percent"], r, _short(r["ioctl"])))
    lines.append(rule)
    lines.append(row(100.0 if data["ioctls"] else 0.0, data["total"], "total"))
    return "\n".join(lines)


@dataclass
class Options:
    """What ``accel trace`` prints: per-ioctl lines and/or the summary, for which ioctls, how."""

    json_mode: bool = False
    streams: bool = True
    calls: bool = True  # one line (or JSON object) per ioctl
    summary: bool = False  # the -c table at the end
    ioctls: frozenset[str] | None = None  # only these DRM_IOCTL_* names (None: all)


class Sink:
    """Decodes records from either tracer (the interposer or ptrace), filters and prints them, and
    counts them for the summary."""

    def __init__(self, out: TextIO, options: Options, t0_ns: int) -> None:
        self.out = out
        self.options = options
        self.decoder = Decoder(t0_ns, options.streams and options.calls)
        self.seen = 0  # every DRM ioctl, filtered or not: "no ioctl at all" means the shim
        self.stats: dict[str, IoctlStats] = {}

    def emit(self, rec: Record) -> None:
        self.seen += 1
        event = self.decoder.decode(rec)  # every record: BO_CREATE names the stream's BOs
        if self.options.ioctls is not None and event["ioctl"] not in self.options.ioctls:
            return
        s = self.stats.setdefault(event["ioctl"], IoctlStats(event["ioctl"]))
        s.calls += 1
        s.errors += event["ret"] < 0
        s.total_us += (rec.t_end_ns - rec.t_start_ns) / 1e3
        if self.options.calls:
            self.out.write((json.dumps(event) if self.options.json_mode else render(event)) + "\n")
            self.out.flush()

    def emit_message(self, data: bytes) -> None:
        try:
            rec = parse_message(data)
        except (ValueError, struct.error) as e:
            print(f"accel trace: a malformed record ({e})", file=sys.stderr)
            return
        self.emit(rec)

    def finish(self) -> None:
        if self.options.summary:
            data = summary(self.stats)
            text = json.dumps({"summary": data}) if self.options.json_mode else render_summary(data)
            self.out.write(text + "\n")
            self.out.flush()
        if not self.seen:
            # The shim is a device model inside the traced process: its "ioctls" are calls, not syscalls.
            print(NO_IOCTLS, file=sys.stderr)


NO_IOCTLS = (
    "accel trace: the program made no DRM ioctl. The shim (--device shim, VNPU_DEVICE=shim, "
    "or no vnpu kernel device) runs in the process and makes none: trace a program that "
    "opens /dev/accel/accelN"
)


# --- running ---------------------------------------------------------------------------------------


def run(
    program: list[str],
    out: TextIO,
    json_mode: bool = False,
    streams: bool = True,
    options: Options | None = None,
) -> int:
    """Run ``program`` under the interposer, print its DRM ioctls to ``out``; its exit status."""
    options = options or Options(json_mode=json_mode, streams=streams)
    lib = library()
    with tempfile.TemporaryDirectory(prefix="vnpu-trace-") as tmp:
        path = os.path.join(tmp, "socket")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.bind(path)
        server.listen(64)
        env = dict(os.environ)
        env["LD_PRELOAD"] = " ".join(p for p in (str(lib), env.get("LD_PRELOAD", "")) if p)
        env[ENV_SOCKET] = path
        sink = Sink(out, options, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        try:
            proc = subprocess.Popen(program, env=env)
        except OSError as e:
            raise BadFile(f"cannot run {program[0]}: {os_error_words(e)}") from None
        sel = selectors.DefaultSelector()
        sel.register(server, selectors.EVENT_READ)
        try:
            while True:
                events = sel.select(timeout=0.05)
                for key, _ in events:
                    sock = key.fileobj
                    if sock is server:
                        conn, _ = server.accept()
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    data = sock.recv(1 << 20)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(sock)
                        sock.close()  # type: ignore[union-attr]
                    else:
                        sink.emit_message(data)
                # The program is done and nothing more is pending: every record it sent is read
                # (a message is queued before its send() returns).
                if not events and proc.poll() is not None:
                    break
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            proc.wait()
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            sel.close()
    sink.finish()
    code = proc.returncode
    return code if code >= 0 else 128 - code


def options_of(args: argparse.Namespace) -> Options:
    return Options(
        json_mode=args.json,
        streams=not args.no_stream,
        calls=not args.summary_only,
        summary=args.summary_only or args.summary,
        ioctls=parse_ioctl_filter(args.ioctl) if args.ioctl is not None else None,
    )


def main(args: argparse.Namespace, attach: Callable[[int, Sink], int] | None = None) -> int:
    """``accel trace``: run the program, or with ``-p`` hand a :class:`Sink` to ``attach``
    (:func:`libaccel.tools.trace_attach.attach`, which builds on this module)."""
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    options = options_of(args)
    if args.pid is not None and program:
        raise UsageError("trace: give either -p PID or a program to run, not both")
    if args.pid is None and not program:
        raise UsageError(
            "trace: give the program to run (accel trace [--json] -- CMD [ARG...]) or a process "
            "to attach to (accel trace -p PID)"
        )

    def go(out: TextIO) -> int:
        if args.pid is not None:
            if attach is None:
                raise UsageError("trace: -p needs an attacher (libaccel.tools.trace_attach.attach)")
            return attach(args.pid, Sink(out, options, time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
        return run(program, out, options=options)

    if args.output:
        try:
            out = open(args.output, "w")
        except OSError as e:
            raise BadFile(f"cannot write {args.output}: {os_error_words(e)}") from None
        with out:
            return go(out)
    return go(sys.stderr)
