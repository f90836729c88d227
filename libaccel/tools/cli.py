"""``accel``: the vnpu device at the ioctl level, from the shell (docs/tools.md).

    accel list [--device NODE|shim]             vnpu devices: node, PCI slot, driver, firmware, ISA
    accel info [--device NODE|shim]             every GET_PARAM value decoded, the driver's version
    accel session [SCRIPT|-] [-e CMD]...        bo/submit/wait commands in one open device
    accel submit STREAM --bo NAME=FILE[:rw]...  assemble, fill BOs, submit, wait, write BOs out
    accel trace [--json] -- CMD...              every DRM ioctl CMD makes, decoded
    accel state [--json]                        vnpu.ko's debugfs, pretty-printed
    accel coredump [FILE] [--json]              the device coredump of a failed job, decoded
    accel top [--once] [--json] [--interval S]  NPU busy share, jobs/s and memory per client and device
    accel run MODEL [--compare] [--runs N]      a .tflite or .onnx model on the NPU (placement, times)
    accel cache [--clear [NAME...]] [--json]    what the stack keeps in ~/.cache/vnpu; clear it

``--device`` takes a node path, ``kernel`` (the first vnpu node) or ``shim`` (the in-process
device model); the default is $VNPU_DEVICE, else the first kernel device. ``--json`` prints
machine-readable output instead of tables.

Exit codes are :class:`vnpu_common.cli.ExitCode`'s (docs/tools.md has the table): 2 a bad command
line, 3 the job ran and failed or a wait timed out, 4 a file that cannot be read, written or used,
5 no device, or the device or an ioctl failed. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from libaccel.device import Device
from libaccel.discovery import DEVICE_HELP, SHIM, list_devices
from libaccel.errors import AccelError
from libaccel.tools import decode
from libaccel.tools.session import (
    ArgumentParser,
    Session,
    UsageError,
    add_bo_commands,
    add_submit_command,
    add_wait_command,
    command_error,
    run_session,
)
from vnpu_common.cli import ExitCode, add_version, cli_main


def table(headers: list[str], rows: list[list[str]]) -> str:
    all_rows = [headers, *rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in all_rows)


def read_params(dev: Device) -> list[dict[str, Any]]:
    """Every parameter of the header's enum, read with GET_PARAM; one the driver lacks says so."""
    out = []
    for p in decode.params():
        entry: dict[str, Any] = {"name": p.name, "param": p.number}
        try:
            value = dev.get_param(p.number)
        except AccelError as e:
            entry.update(value=None, text=f"unsupported ({decode.errno_name(e.errno)})")
        else:
            entry.update(value=value, text=decode.format_param(p, value))
            if p.enumerator == "DRM_VNPU_PARAM_CAPABILITIES":
                entry["names"] = decode.capability_names(value)
        out.append(entry)
    return out


def device_summary(dev: Device) -> dict[str, Any]:
    name, version = dev.version()
    params = read_params(dev)
    return {
        "device": dev.path,
        "kind": dev.kind,
        "driver": name,
        "driver_version": ".".join(map(str, version)),
        "params": params,
    }


def _param_text(summary: dict[str, Any], name: str) -> str:
    return next((p["text"] for p in summary["params"] if p["name"] == name), "-")


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    records = []
    if args.device is not None:
        targets = [(args.device, "-", "")]
    else:
        targets = [(d.node, d.pci_slot, d.sys_path) for d in list_devices()]
    if not targets:
        print(
            "accel: no vnpu devices under /sys/class/accel (load vnpu.ko in the QEMU guest; "
            "without one: accel list --device shim)",
            file=sys.stderr,
        )
        if args.json:  # a list of nothing, for scripts; the hint stays on stderr
            print("[]")
            return ExitCode.OK
        return ExitCode.DEVICE
    for node, slot, sys_path in targets:
        with Device.open(node) as dev:
            s = device_summary(dev)
        driver = f"{s['driver']} {s['driver_version']}" + (" (in-process shim)" if s["kind"] == SHIM else "")
        fw, isa_v = _param_text(s, "fw_version"), _param_text(s, "isa_version")
        cores = _param_text(s, "num_cores")
        rows.append([s["device"], slot, driver, fw, _param_text(s, "fw_build_id"), isa_v, cores])
        records.append({**s, "pci_slot": None if slot == "-" else slot, "sys_path": sys_path or None})
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print(table(["DEVICE", "PCI", "DRIVER", "FIRMWARE", "BUILD ID", "ISA", "CORES"], rows))
    return ExitCode.OK


def cmd_info(args: argparse.Namespace) -> int:
    with Device.open(args.device) as dev:
        s = device_summary(dev)
    if args.json:
        print(json.dumps(s, indent=2))
        return ExitCode.OK
    print(f"device: {s['device']} ({s['kind']})")
    print(f"driver: {s['driver']} {s['driver_version']}")
    for p in s["params"]:
        print(f"{p['name']}: {p['text']}")
    return ExitCode.OK


def cmd_session(args: argparse.Namespace) -> int:
    return run_session(Device.open(args.device), args.script, args.command_list, args.json, args.keep_going)


def cmd_submit(args: argparse.Namespace) -> int:
    session = Session(Device.open(args.device), json=args.json)
    try:
        return args.run(session, args)
    finally:
        session.close()


def cmd_needs_session(args: argparse.Namespace) -> int:
    words = " ".join(args.argv)
    words = words.replace("'", "")
    raise UsageError(
        f"'{words}' needs a device file that stays open: a BO or syncobj lives as long as its file, "
        f"and this process would close it at once; run it in a session: accel session -e '{words}' ..."
    )


def cmd_trace(args: argparse.Namespace) -> int:
    from libaccel.tools import trace, trace_attach

    return trace.main(args, trace_attach.attach)


def cmd_state(args: argparse.Namespace) -> int:
    from libaccel.tools import debugfs

    return debugfs.main(args)


def cmd_coredump(args: argparse.Namespace) -> int:
    from libaccel.tools import coredump

    return coredump.main(args)


def cmd_top(args: argparse.Namespace) -> int:
    from libaccel.tools import top

    return top.main(args)


# What each command does and how to call it: its --help (argparse's description and epilog) and the
# man page tools/generate_manpage.py writes from these parsers.
COMMAND_HELP: dict[str, tuple[str, str]] = {
    "list": (
        "List the vnpu devices: node, PCI slot, driver, firmware version and build id, ISA, cores.",
        "accel list\naccel list --device shim --json",
    ),
    "info": (
        "Read every GET_PARAM of one device, decoded from the uapi header, and the driver's version.",
        "accel info\naccel info --device /dev/accel/accel0 --json",
    ),
    "session": (
        "Open one device and run bo, submit and wait commands in it: from a prompt (with help, line "
        "editing and history), a script file, stdin, or -e. BOs and syncobjs live as long as the session.",
        "accel session --device shim\n"
        "accel session -e 'bo create in in.bin' -e 'submit copy.s --bo in --bo out=64:w --out out=out.bin'",
    ),
    "submit": (
        "Assemble a command stream (vnpu-asm text, where BO names are symbols: va=NAME+0x40) or read "
        "a binary .bin, create and fill the BOs it names, submit it as one job, wait, and write BOs out.",
        "accel submit copy.s --bo src=in.bin --bo dst=64:w --out dst=out.bin\n"
        "accel submit job.bin --bo a=4096 --disasm",
    ),
    "bo": (
        "Buffer objects by name: create, list, info, write, dump, close. A BO lives as long as its "
        "device file, so these run inside accel session.",
        "accel session -e 'bo create a 4K' -e 'bo dump a --length 16'",
    ),
    "wait": (
        "BO_WAIT on a BO or SYNCOBJ_WAIT on a syncobj of the session (after submit --no-wait).",
        "accel session -e 'bo create a 64' -e 'submit fill.s --bo a:w --no-wait' -e 'wait bo a'",
    ),
    "trace": (
        "The strace of the device: run a program (C or Python) under an LD_PRELOAD interposer, or "
        "attach to a running one with ptrace (-p), and print every DRM ioctl it makes, decoded: the "
        "argument struct before and after, errno, the time, and each SUBMIT's command stream "
        "disassembled. -c prints strace -c's summary instead, -C both; -e keeps only some ioctls. "
        "A program on the shim makes no ioctls.",
        "accel trace -- python app.py\n"
        "accel trace -c -e SUBMIT,BO_WAIT -- ./prog /dev/accel/accel0\n"
        "accel trace -p 1234 --json -o trace.jsonl",
    ),
    "state": (
        "vnpu.ko's debugfs (state, counters, open files), pretty-printed; root only, kernel devices only.",
        "sudo accel state\nsudo accel state --json",
    ),
    "coredump": (
        "Decode the device coredump of a failed job: the job, its stream disassembled, the faulting "
        "instruction and the BOs; from the kernel's devcoredump or a saved file.",
        "sudo accel coredump --save job.dump --discard\naccel coredump job.dump --json",
    ),
    "top": (
        "Live NPU use per client and device from fdinfo and debugfs: busy share, jobs/s, memory.",
        "accel top\naccel top --once --json",
    ),
    "run": (
        "Run a .tflite or .onnx int8 model on the NPU: which nodes ran where and why, load and invoke "
        "times, and with --compare whether the outputs equal the CPU reference.",
        "accel run model.tflite --device shim --compare\naccel run model.onnx --runs 10 --json",
    ),
    "cache": (
        "List what the stack keeps in its cache directory (the MAC array and libteflon.so builds, "
        "compiled models, kernels), or remove entries.",
        "accel cache\naccel cache --clear",
    ),
}

DESCRIPTION = (
    "The vnpu NPU at the ioctl level: devices, parameters, BOs and jobs, traces, debugfs state, "
    "coredumps, live use, models and the cache."
)
MAN_PAGE_HINT = (
    "Each command has its own help: accel COMMAND --help. The manual: man accel (the package installs "
    "accel.1 under share/man/man1 of its prefix); in a source tree, docs/tools.md."
)
TOP_EXAMPLES = (
    "accel list\naccel info --device shim\naccel run model.tflite --compare\naccel trace -c -- python app.py"
)


def _describe(sub: argparse._SubParsersAction) -> None:
    """Give every command its description and examples (COMMAND_HELP)."""
    for name, (what, examples) in COMMAND_HELP.items():
        p = sub.choices[name]
        p.description = textwrap.fill(what, 79)
        p.epilog = "examples:\n" + textwrap.indent(examples, "  ")
        p.formatter_class = argparse.RawDescriptionHelpFormatter


def _pid(text: str) -> int:
    try:
        pid = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if pid <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return pid


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(
        prog="accel",
        description=textwrap.fill(DESCRIPTION, 79),
        epilog="examples:\n"
        + textwrap.indent(TOP_EXAMPLES, "  ")
        + "\n\n"
        + textwrap.fill(MAN_PAGE_HINT, 79),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(ap)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    def device_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", help=DEVICE_HELP)
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("list", help="list vnpu devices")
    device_opts(p)
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("info", help="a device's parameters, decoded")
    device_opts(p)
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("session", help="run bo/submit/wait commands in one open device")
    device_opts(p)
    p.add_argument("script", nargs="?", help="file of commands, or - for stdin (default: a prompt)")
    p.add_argument("-e", dest="command_list", action="append", default=[], metavar="CMD", help="a command")
    p.add_argument("--keep-going", action="store_true", help="run every command even after a failure")
    p.set_defaults(func=cmd_session)
    p = add_submit_command(sub)
    device_opts(p)
    p.set_defaults(func=cmd_submit)
    # bo and wait parse here as in a session, then say why they need one.
    for p in (add_bo_commands(sub), add_wait_command(sub)):
        p.set_defaults(func=cmd_needs_session)
    p = sub.add_parser("trace", help="run a program (or attach to one) and print every DRM ioctl it makes")
    p.add_argument("--json", action="store_true", help="one JSON object per ioctl (and for the summary)")
    p.add_argument(
        "-c", dest="summary_only", action="store_true", help="only a summary at the end, as strace -c"
    )
    p.add_argument("-C", dest="summary", action="store_true", help="every ioctl and the summary at the end")
    p.add_argument(
        "-e",
        "--ioctl",
        type=lambda v: v.removeprefix("trace="),
        metavar="NAME[,NAME]",
        help="only these ioctls, named as in the uapi headers (SUBMIT, BO_WAIT, DRM_IOCTL_GEM_CLOSE)",
    )
    p.add_argument(
        "-p",
        "--pid",
        type=_pid,
        metavar="PID",
        help="attach to a running process (ptrace) instead of running one",
    )
    p.add_argument("--no-stream", action="store_true", help="do not disassemble SUBMIT command streams")
    p.add_argument("-o", "--output", metavar="FILE", help="write the trace here (default: stderr)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    p.set_defaults(func=cmd_trace)
    p = sub.add_parser("state", help="vnpu.ko's debugfs state, counters and open files")
    device_opts(p)
    p.set_defaults(func=cmd_state)
    p = sub.add_parser("coredump", help="decode a device coredump (/sys/class/devcoredump/devcd*/data)")
    p.add_argument("file", nargs="?", help="a saved dump (default: every vnpu dump the kernel holds)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--save", metavar="FILE", help="also write the raw dump here")
    p.add_argument("--discard", action="store_true", help="free the kernel's dump once read")
    p.set_defaults(func=cmd_coredump)
    p = sub.add_parser("top", help="live NPU use per client and device (fdinfo, debugfs)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds per sample (default 1)")
    p.add_argument("--once", action="store_true", help="one sample, then exit")
    p.add_argument("--count", type=int, metavar="N", help="N samples, then exit (default: until Ctrl-C)")
    p.add_argument("--json", action="store_true", help="one JSON object per sample")
    p.set_defaults(func=cmd_top)
    from libaccel.tools.cache_cli import add_cache_command, cmd_cache
    from libaccel.tools.run_cli import add_run_command, cmd_run

    add_run_command(sub).set_defaults(func=cmd_run)
    add_cache_command(sub).set_defaults(func=cmd_cache)
    _describe(sub)
    return ap


@cli_main("accel", command_error)
def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
