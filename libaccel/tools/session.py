"""``accel session``: BO, submit and wait commands run in one open device file.

A BO lives as long as the file it was created in: when ``accel`` exits, its file closes
and every BO and syncobj of it is gone. So the commands that work on BOs by name run
inside one session, which keeps one device open while it reads commands from a script,
``-e`` arguments or an interactive prompt::

    bo create NAME SIZE|FILE [--read-only]        a BO, zero-filled or holding FILE
    bo list | bo info NAME | bo close NAME
    bo write NAME FILE [--offset N]
    bo dump NAME [--dtype T --shape S] [--offset N] [--length N] [--out FILE]
    submit STREAM --bo NAME[=SIZE|FILE][:r|w|rw] ... [--out NAME=FILE] [--timeout S]
           [--no-wait] [--syncobj NAME] [--disasm]
    wait bo NAME | wait syncobj NAME [--timeout S]
    help | exit

``accel submit`` on the command line is the same ``submit`` in a session of its own.
The parser of each command is built once here and used by both.
"""

from __future__ import annotations

import argparse
import errno
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from firmware_tools.asm import AsmError, assemble, disassemble_prefix
from libaccel.bo import BufferObject, JobStatus
from libaccel.device import Device
from libaccel.errors import AccelError, JobFault, Timeout
from libaccel.job import Job, JobBo, deadline_after, monotonic_ns
from uapi.bindings import DRM_VNPU_BO_DEVICE_READ_ONLY
from vnpu_common.cli import CliError, ExitCode, OneLineArgumentParser, os_error_words, positive_float

_SIZE = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)([kKmM]?)")
_MODES = {"r": (True, False), "w": (False, True), "rw": (True, True)}


class UsageError(CliError):
    """A bad command line or command (exit code ExitCode.USAGE)."""


class BadFile(UsageError):
    """A file named in a command that cannot be read, written or used (ExitCode.BAD_FILE)."""

    code = ExitCode.BAD_FILE


class JobFailed(Exception):
    """The job ran and failed, or the wait timed out (ExitCode.JOB_FAILED); the result is printed already."""


class ParseError(UsageError):
    """A command line argparse refused; the message starts with the command's name."""


class ArgumentParser(OneLineArgumentParser):
    """argparse that raises :class:`ParseError` (one line, the command's name first)."""

    usage_error = ParseError
    prefix_prog = True


def parse_size(text: str) -> int | None:
    """``4096``, ``0x1000``, ``4K``, ``1M`` -> bytes; None if ``text`` is not a size."""
    m = _SIZE.fullmatch(text)
    if m is None:
        return None
    return int(m.group(1), 0) << {"": 0, "k": 10, "m": 20}[m.group(2).lower()]


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in re.split(r"[,x]", text.strip("()[] ")) if d)
    except ValueError:
        raise UsageError(f"--shape {text!r}: expected dimensions like 1,8,8,3") from None
    if not shape or min(shape) < 1:
        raise UsageError(f"--shape {text!r}: every dimension must be >= 1")
    return shape


def parse_dtype(text: str) -> np.dtype:
    try:
        return np.dtype(text.lower())
    except TypeError:
        raise UsageError(f"--dtype {text!r}: not a dtype (int8, uint8, int32, float32, ...)") from None


def read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise BadFile(f"cannot read {path}: {os_error_words(e)}") from None


def write_file(path: str, data: bytes) -> None:
    try:
        Path(path).write_bytes(data)
    except OSError as e:
        raise BadFile(f"cannot write {path}: {os_error_words(e)}") from None


def hexdump(data: bytes, base: int = 0) -> str:
    """``hexdump -C`` format: offset, 16 bytes in hex, ASCII; repeated lines collapse to ``*``."""
    lines = []
    previous = None
    starred = False
    for off in range(0, len(data), 16):
        chunk = data[off : off + 16]
        if chunk == previous and off + 16 < len(data):
            if not starred:
                lines.append("*")
                starred = True
            continue
        previous, starred = chunk, False
        hexes = " ".join(f"{b:02x}" for b in chunk[:8]) + "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{base + off:08x}  {hexes:<48}  |{text}|")
    lines.append(f"{base + len(data):08x}")
    return "\n".join(lines) + "\n"


def status_text(status: int | None, fault_va: int = 0) -> str:
    if status is None:
        return "unknown (the job lists no BO for writing; BO_WAIT reports writers only)"
    if status == 0:
        return "ok"
    err = JobFault(status, fault_va)
    return f"failed: {errno.errorcode.get(-status, str(-status))} ({err.hint})"


@dataclass
class NamedBo:
    """A BO of the session and what it was made from."""

    name: str
    bo: BufferObject
    length: int  # the bytes asked for (the file's size, or SIZE); the BO itself is page-rounded
    source: str

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "handle": self.bo.handle,
            "size": self.bo.size,
            "length": self.length,
            "va": self.bo.va,
            "flags": self.bo.flags,
            "read_only": self.bo.read_only,
            "source": self.source,
        }


@dataclass
class BoSpec:
    """One ``--bo NAME[=SIZE|FILE][:MODE]`` of a submit."""

    name: str
    source: str | None
    mode: str | None

    @classmethod
    def parse(cls, text: str) -> BoSpec:
        mode = None
        head, colon, tail = text.rpartition(":")
        if colon and tail in _MODES:
            text, mode = head, tail
        elif colon and "=" in head and not Path(text.partition("=")[2]).exists():
            raise UsageError(f"--bo {text!r}: the mode {tail!r} is not r, w or rw")
        name, eq, source = text.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
            raise UsageError(f"--bo {text!r}: NAME must be an identifier (letters, digits, _ and .)")
        if eq and not source:
            raise UsageError(f"--bo {text!r}: expected NAME=SIZE or NAME=FILE after '='")
        return cls(name, source or None, mode)


@dataclass
class Session:
    """One open device and the BOs and syncobjs created in it, by name."""

    device: Device
    out: TextIO = field(default_factory=lambda: sys.stdout)
    json: bool = False
    bos: dict[str, NamedBo] = field(default_factory=dict)
    syncobjs: dict[str, int] = field(default_factory=dict)
    _keep: list[BufferObject] = field(default_factory=list)  # command streams of jobs not waited for

    # --- output ---------------------------------------------------------------------------------
    def emit(self, record: dict[str, Any], text: str) -> None:
        """One JSON line in --json mode, else the human text."""
        if self.json:
            print(json.dumps(record), file=self.out)
        else:
            self.out.write(text if text.endswith("\n") else text + "\n")

    def table(self, headers: list[str], rows: Iterable[list[str]]) -> str:
        rows = [headers, *rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(headers))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)

    # --- BOs ------------------------------------------------------------------------------------
    def bo(self, name: str) -> NamedBo:
        try:
            return self.bos[name]
        except KeyError:
            known = ", ".join(self.bos) or "none yet"
            raise UsageError(f"no BO named {name!r} in this session (BOs: {known})") from None

    def create(self, name: str, source: str, read_only: bool = False) -> NamedBo:
        if name in self.bos:
            raise UsageError(f"a BO named {name!r} exists already")
        size = parse_size(source)
        data = None if size is not None else read_file(source)
        length = size if size is not None else len(data or b"")
        bo = self.device.create_bo(max(length, 1), read_only=read_only)
        if data:
            bo.write(data)
        named = NamedBo(name, bo, length, "zeros" if size is not None else source)
        self.bos[name] = named
        return named

    def regions(self) -> dict[str, tuple[int, int]]:
        return {n.name: (n.bo.va, n.bo.size) for n in self.bos.values()}

    def symbols(self) -> dict[str, int]:
        return {n.name: n.bo.va for n in self.bos.values()}

    # --- commands -------------------------------------------------------------------------------
    def cmd_bo_create(self, a: argparse.Namespace) -> int:
        n = self.create(a.name, a.source, a.read_only)
        d = n.describe()
        self.emit(
            {"command": "bo create", **d},
            f"{n.name}: handle {n.bo.handle}, {n.bo.size} bytes at va {n.bo.va:#x}"
            + (", device read-only" if n.bo.read_only else "")
            + (f", from {n.source}" if n.source != "zeros" else ""),
        )
        return ExitCode.OK

    def cmd_bo_list(self, a: argparse.Namespace) -> int:
        rows = [
            [
                n.name,
                str(n.bo.handle),
                f"{n.bo.size:#x}",
                str(n.length),
                f"{n.bo.va:#x}",
                "ro" if n.bo.read_only else "rw",
                n.source,
            ]
            for n in self.bos.values()
        ]
        self.emit(
            {"command": "bo list", "bos": [n.describe() for n in self.bos.values()]},
            self.table(["NAME", "HANDLE", "SIZE", "LENGTH", "VA", "DEVICE", "SOURCE"], rows)
            if rows
            else "no BOs",
        )
        return ExitCode.OK

    def cmd_bo_info(self, a: argparse.Namespace) -> int:
        n = self.bo(a.name)
        info = self.device.bo_info(n.bo.handle)  # what the driver says, not what we remember
        fields = {
            "handle": n.bo.handle,
            "size": int(info.size),
            "flags": int(info.flags),
            "mmap_offset": int(info.mmap_offset),
            "va": int(info.va),
        }
        flag_names = "DEVICE_READ_ONLY" if info.flags & DRM_VNPU_BO_DEVICE_READ_ONLY else "0"
        text = "\n".join(
            [
                f"name:        {n.name}",
                f"handle:      {n.bo.handle}",
                f"size:        {info.size:#x} ({info.size} bytes; {n.length} asked)",
                f"flags:       {flag_names}",
                f"va:          {info.va:#x}..{info.va + info.size:#x}",
                f"mmap_offset: {info.mmap_offset:#x}",
                f"source:      {n.source}",
            ]
        )
        self.emit({"command": "bo info", "name": n.name, "length": n.length, **fields}, text)
        return ExitCode.OK

    def cmd_bo_write(self, a: argparse.Namespace) -> int:
        n = self.bo(a.name)
        data = read_file(a.file)
        try:
            n.bo.write(data, a.offset)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.emit(
            {"command": "bo write", "name": n.name, "bytes": len(data), "offset": a.offset},
            f"{n.name}: wrote {len(data)} bytes at offset {a.offset}",
        )
        return ExitCode.OK

    def cmd_bo_close(self, a: argparse.Namespace) -> int:
        n = self.bo(a.name)
        n.bo.close()
        del self.bos[a.name]
        self.emit({"command": "bo close", "name": a.name}, f"{a.name}: closed")
        return ExitCode.OK

    def cmd_bo_dump(self, a: argparse.Namespace) -> int:
        n = self.bo(a.name)
        length = a.length if a.length is not None else n.length - a.offset
        if a.offset < 0 or length < 0 or a.offset + length > n.bo.size:
            raise UsageError(f"{length} bytes at offset {a.offset} exceed BO {n.name} of {n.bo.size} bytes")
        data = n.bo.read(length, a.offset)
        array = None
        if a.dtype is not None or a.shape is not None:
            dt = parse_dtype(a.dtype or "uint8")
            shape = parse_shape(a.shape) if a.shape else (length // dt.itemsize,)
            count = int(np.prod(shape))
            if count * dt.itemsize > len(data):
                raise UsageError(
                    f"{dt.name}{list(shape)} needs {count * dt.itemsize} bytes; {n.name} has {len(data)} "
                    f"from offset {a.offset}"
                )
            array = np.frombuffer(data, dtype=dt, count=count).reshape(shape)
        record: dict[str, Any] = {"command": "bo dump", "name": n.name, "offset": a.offset, "length": length}
        if a.out:
            if array is not None and a.out.endswith(".npy"):
                try:
                    np.save(a.out, array)
                except OSError as e:
                    raise BadFile(f"cannot write {a.out}: {os_error_words(e)}") from None
                what = f"{array.dtype}{list(array.shape)} as .npy"
            else:
                write_file(a.out, data if array is None else array.tobytes())
                what = f"{len(data) if array is None else array.nbytes} bytes"
            self.emit({**record, "out": a.out}, f"wrote {a.out} ({what} of {n.name})")
            return ExitCode.OK
        if array is not None:
            record.update(dtype=str(array.dtype), shape=list(array.shape), values=array.tolist())
            self.emit(record, f"{n.name}: {array.dtype}{list(array.shape)}\n{np.array2string(array)}")
        else:
            self.emit({**record, "hex": data.hex()}, hexdump(data, a.offset))
        return ExitCode.OK

    def _stream(self, path: str) -> bytes:
        raw = read_file(path)
        if path.endswith(".bin"):
            return raw
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return raw  # not text: a binary stream
        if "\0" in text:
            return raw
        try:
            return assemble(text, symbols=self.symbols())
        except AsmError as e:
            where = f"{path}:{e.line}:{e.column or 1}" if e.line is not None else path
            raise BadFile(f"{where}: {e.message}") from None

    def cmd_submit(self, a: argparse.Namespace) -> int:
        specs = [BoSpec.parse(t) for t in a.bo]
        outs: list[tuple[str, str]] = []
        for item in a.out:
            name, eq, path = item.partition("=")
            if not eq or not name or not path:
                raise UsageError(f"--out {item!r}: expected NAME=FILE")
            outs.append((name, path))
        out_names = {name for name, _ in outs}
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise UsageError("a BO is named twice in --bo")
        for name in sorted(out_names - set(names) - set(self.bos)):
            raise UsageError(f"--out {name}=...: no BO named {name!r} (add --bo {name}=SIZE:w)")
        for s in specs:  # check every name before creating anything, so a bad command changes nothing
            if s.source is not None and s.name in self.bos:
                raise UsageError(f"--bo {s.name}={s.source}: a BO named {s.name!r} exists already")
            if s.source is None:
                self.bo(s.name)
            elif parse_size(s.source) is None and not Path(s.source).is_file():
                raise BadFile(f"--bo {s.name}={s.source}: no such file (a size is 4096, 0x1000 or 4K)")
        listed: list[tuple[NamedBo, bool, bool]] = []
        for s in specs:
            if s.source is not None:
                n = self.create(s.name, s.source)
                default = ("w" if parse_size(s.source) is not None else "rw") if s.name in out_names else "r"
            else:
                n = self.bo(s.name)
                default = "rw" if s.name in out_names else "r"
            read, write = _MODES[s.mode or default]
            listed.append((n, read, write))
        stream = self._stream(a.stream)
        if a.disasm:
            text, error = disassemble_prefix(stream, self.regions())
            self.out.write(text)
            if error is not None:
                self.out.write(f"# stream error: {error}\n")
        cmd = self.device.create_bo_with(stream, read_only=True)
        syncobj = self._syncobj(a.syncobj) if a.syncobj else self.device.create_syncobj()
        job = Job(cmd, len(stream), [JobBo(n.bo, read=r, write=w) for n, r, w in listed], out_syncobj=syncobj)
        t0 = monotonic_ns()
        try:
            self.device.submit(job)
        except AccelError:
            cmd.close()
            raise
        if a.no_wait:
            self._keep.append(cmd)
            self.emit(
                {"command": "submit", "queued": True, "syncobj": a.syncobj},
                "job queued" + (f"; wait syncobj {a.syncobj}" if a.syncobj else ""),
            )
            return ExitCode.OK
        result: dict[str, Any] = {
            "command": "submit",
            "stream_bytes": len(stream),
            "bos": [{**n.describe(), "mode": ("r" if r else "") + ("w" if w else "")} for n, r, w in listed],
        }
        try:
            self.device.wait_syncobjs([syncobj], deadline_ns=t0 + int(a.timeout * 1e9))
            elapsed = monotonic_ns() - t0
            writers = [n for n, _, w in listed if w]
            status = writers[0].bo.wait(timeout=0) if writers else None
        except Timeout:
            result.update(status=None, timed_out=True, timeout_s=a.timeout)
            self.emit(result, f"job: did not finish within {a.timeout:g} s (still queued or running)")
            self._keep.append(cmd)
            raise JobFailed() from None
        finally:
            if not a.syncobj:
                self.device.destroy_syncobj(syncobj)
        cmd.close()
        written = []
        for name, path in outs:
            n = self.bo(name)
            write_file(path, n.bo.read(n.length))
            written.append({"name": name, "file": path, "bytes": n.length})
        self._report(result, status, elapsed, written)
        if status is not None and not status.ok:
            raise JobFailed()
        return ExitCode.OK

    def _report(
        self, record: dict[str, Any], status: JobStatus | None, elapsed_ns: int, written: list[dict[str, Any]]
    ) -> None:
        value = status.status if status else None
        fault = status.fault_va if status and status.status else None
        record.update(status=value, fault_va=fault, time_ms=elapsed_ns / 1e6, outputs=written)
        lines = []
        if "bos" in record:
            used = ", ".join(f"{b['name']}:{b['mode']}@{b['va']:#x}" for b in record["bos"])
            lines.append(f"bos:      {used}")
        lines += [
            f"job:      {status_text(value, fault or 0)}",
            f"status:   {value if value is not None else '-'}",
            f"fault_va: {fault:#x}" if fault else "fault_va: -",
            f"time:     {elapsed_ns / 1e6:.3f} ms",
        ]
        lines += [f"wrote {w['file']} ({w['bytes']} bytes of {w['name']})" for w in written]
        self.emit(record, "\n".join(lines))

    def _syncobj(self, name: str) -> int:
        if name not in self.syncobjs:
            self.syncobjs[name] = self.device.create_syncobj()
        return self.syncobjs[name]

    def cmd_wait(self, a: argparse.Namespace) -> int:
        t0 = monotonic_ns()
        deadline = deadline_after(a.timeout)
        record: dict[str, Any] = {"command": f"wait {a.what}", "name": a.name}
        try:
            if a.what == "bo":
                status = self.bo(a.name).bo.wait(deadline_ns=deadline)
            else:
                if a.name not in self.syncobjs:
                    raise UsageError(f"no syncobj named {a.name!r} (submit --syncobj {a.name} makes it)")
                self.device.wait_syncobjs([self.syncobjs[a.name]], deadline_ns=deadline)
                status = None
        except Timeout:
            self.emit({**record, "timed_out": True}, f"{a.name}: not done within {a.timeout:g} s")
            raise JobFailed() from None
        elapsed = monotonic_ns() - t0
        if status is None:
            self.emit({**record, "signaled": True, "time_ms": elapsed / 1e6}, f"{a.name}: signaled")
            return ExitCode.OK
        self._report(record, status, elapsed, [])
        if not status.ok:
            raise JobFailed()
        return ExitCode.OK

    def close(self) -> None:
        for n in self.bos.values():
            n.bo.close()
        self.bos.clear()
        self.device.close()


# --- the command parsers, shared by `accel session` and the top-level `accel` --------------------


def add_bo_commands(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    bo = sub.add_parser("bo", help="buffer objects, by name (in a session)")
    bsub = bo.add_subparsers(dest="bo_command", required=True)
    p = bsub.add_parser("create", help="create a BO: SIZE zero bytes (4096, 0x1000, 4K) or a FILE's bytes")
    p.add_argument("name")
    p.add_argument("source", metavar="SIZE|FILE")
    p.add_argument("--read-only", action="store_true", help="DRM_VNPU_BO_DEVICE_READ_ONLY")
    p.set_defaults(run=Session.cmd_bo_create)
    bsub.add_parser("list", help="the session's BOs").set_defaults(run=Session.cmd_bo_list)
    p = bsub.add_parser("info", help="DRM_IOCTL_VNPU_BO_INFO of a BO")
    p.add_argument("name")
    p.set_defaults(run=Session.cmd_bo_info)
    p = bsub.add_parser("write", help="copy a file into a BO")
    p.add_argument("name")
    p.add_argument("file")
    p.add_argument("--offset", type=lambda t: int(t, 0), default=0)
    p.set_defaults(run=Session.cmd_bo_write)
    p = bsub.add_parser("dump", help="a BO's bytes: a hexdump, or a typed tensor with --dtype/--shape")
    p.add_argument("name")
    p.add_argument("--dtype", help="element type: int8, uint8, int32, float32, ...")
    p.add_argument("--shape", help="dimensions, e.g. 1,8,8,3 (default: 1-D)")
    p.add_argument("--offset", type=lambda t: int(t, 0), default=0, help="first byte (default 0)")
    p.add_argument("--length", type=lambda t: int(t, 0), help="bytes (default: the length created)")
    p.add_argument("--out", metavar="FILE", help="write the bytes (or .npy with --dtype) instead")
    p.set_defaults(run=Session.cmd_bo_dump)
    p = bsub.add_parser("close", help="GEM_CLOSE a BO")
    p.add_argument("name")
    p.set_defaults(run=Session.cmd_bo_close)
    return bo


def add_submit_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "submit",
        help="assemble (or read) a stream, fill BOs, submit, wait, write BOs out",
        description="The stream is vnpu-asm text (BO names are symbols: va=NAME+0x40) or a binary .bin.",
    )
    p.add_argument("stream", metavar="STREAM.{s,bin}")
    p.add_argument(
        "--bo",
        action="append",
        default=[],
        metavar="NAME[=SIZE|FILE][:r|w|rw]",
        help="a BO the job uses: created from SIZE zero bytes or FILE, or (in a session) an existing one",
    )
    p.add_argument(
        "--out", action="append", default=[], metavar="NAME=FILE", help="write a BO to FILE afterwards"
    )
    p.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds to wait for the job (default 10)"
    )
    p.add_argument("--no-wait", action="store_true", help="queue and return (then: wait bo|syncobj NAME)")
    p.add_argument("--syncobj", metavar="NAME", help="the job's out-syncobj, by name (created if new)")
    p.add_argument("--disasm", action="store_true", help="print the stream's disassembly first")
    p.set_defaults(run=Session.cmd_submit)
    return p


def add_wait_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("wait", help="BO_WAIT on a BO, or SYNCOBJ_WAIT on a syncobj (in a session)")
    p.add_argument("what", choices=["bo", "syncobj"])
    p.add_argument("name")
    p.add_argument("--timeout", type=positive_float, default=10.0, help="seconds (default 10)")
    p.set_defaults(run=Session.cmd_wait)
    return p


def command_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="session", add_help=False)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    add_bo_commands(sub)
    add_submit_command(sub)
    add_wait_command(sub)
    return ap


def run_command(session: Session, argv: list[str], parser: ArgumentParser | None = None) -> int:
    """Run one command in ``session``; raises UsageError, JobFailed or AccelError on failure."""
    args = (parser or command_parser()).parse_args(argv)
    run: Callable[[Session, argparse.Namespace], int] = args.run
    return run(session, args)


def error_code(e: BaseException) -> tuple[int, str | None]:
    """The exit code of an exception from a command, and the one-line message to print (if any)."""
    if isinstance(e, JobFailed):
        return ExitCode.JOB_FAILED, None
    if isinstance(e, CliError):
        return e.code, str(e)
    if isinstance(e, AccelError):
        return ExitCode.DEVICE, str(e)
    raise e


def command_error(e: Exception) -> tuple[int, str | None] | None:
    """:func:`error_code` for the errors of a command, else None (a :data:`vnpu_common.cli.Translate`)."""
    return error_code(e) if isinstance(e, (UsageError, JobFailed, AccelError)) else None


def run_script(
    session: Session,
    lines: Iterable[tuple[str, int, str]],
    keep_going: bool = False,
    interactive: bool = False,
    prompt: Callable[[], None] | None = None,
) -> int:
    """Run (where, line number, text) commands in order; stop at the first failure unless asked not to."""
    parser = command_parser()
    worst = ExitCode.OK
    for where, number, text in lines:
        try:
            argv = shlex.split(text, comments=True)
        except ValueError as e:
            argv = None
            code, message = ExitCode.USAGE, f"{e}"
        if argv == []:
            if prompt:
                prompt()
            continue
        if argv is not None:
            if argv[0] in ("exit", "quit"):
                break
            if argv[0] in ("help", "?"):
                print(session_help(), file=session.out)
                if prompt:
                    prompt()
                continue
            try:
                code, message = run_command(session, argv, parser), None
            except (UsageError, JobFailed, AccelError) as e:
                code, message = error_code(e)
        session.out.flush()
        if message:
            print(f"accel: {where}:{number}: {message}", file=sys.stderr)
        worst = max(worst, code)
        if code and not (keep_going or interactive):
            return code
        if prompt:
            prompt()
    return worst


def session_help() -> str:
    """The session's commands, as this module's docstring lists them (``help`` prints it)."""
    doc = __doc__ or ""
    block = doc[doc.index("::\n") + 3 : doc.index("``accel submit``")].strip("\n")
    lines = [line[4:] if line.startswith("    ") else line for line in block.splitlines()]
    return "\n".join([*lines, "(a command's own options: COMMAND --help; exit or Ctrl-D ends a prompt)"])


def interactive_lines() -> Iterable[tuple[str, int, str]]:
    """Lines typed at the ``accel>`` prompt, with line editing and history (readline) where Python
    has it; Ctrl-D ends them, Ctrl-C drops the line being typed."""
    try:
        import readline  # noqa: F401 - importing it gives input() line editing and history
    except ImportError:
        pass
    number = 0
    while True:
        try:
            text = input("accel> ")
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print()
            continue
        number += 1
        yield "stdin", number, text


def script_lines(path: str | None, commands: list[str]) -> Iterable[tuple[str, int, str]]:
    for i, c in enumerate(commands, start=1):
        yield "-e", i, c
    if path is None:
        return
    if path == "-":
        for i, line in enumerate(sys.stdin, start=1):
            yield "stdin", i, line
        return
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        words = os_error_words(e) if isinstance(e, OSError) else "not a text file"
        raise BadFile(f"cannot read {path}: {words}") from None
    for i, line in enumerate(text.splitlines(), start=1):
        yield path, i, line


def run_session(
    device: Device, path: str | None, commands: list[str], json_mode: bool, keep_going: bool
) -> int:
    """``accel session``: a script, -e commands, or (stdin a terminal, no script) a prompt."""
    session = Session(device, json=json_mode)
    interactive = path is None and not commands and sys.stdin.isatty()
    try:
        if interactive:
            return run_script(session, interactive_lines(), interactive=True)
        if path is None and not commands:
            path = "-"  # a pipe: read the commands from it
        return run_script(session, script_lines(path, commands), keep_going)
    finally:
        session.close()
