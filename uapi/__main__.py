"""The uapi headers for C programs: ``python -m uapi cflags`` and ``python -m uapi headers-install``.

    python -m uapi cflags                 print -I<dir>: #include <drm/vnpu_accel.h> then works
    python -m uapi headers-install DIR    copy the headers to DIR/include/drm/, as the kernel's
                                          make headers_install INSTALL_HDR_PATH=DIR lays them out

The headers are in the form ``make headers_install`` gives userspace (tools/headers_install.py
checks that), and the package carries them: ``vnpu_accel.h`` (the ioctl ABI), ``vnpu_isa.h`` (the
command-stream encoding), and Linux's ``drm.h`` and ``drm_mode.h``, which ``vnpu_accel.h``
includes as ``"drm.h"``. ``headers-install`` writes the vnpu headers always, and drm.h/drm_mode.h
only where DIR has none: a system's own (linux-libc-dev's /usr/include/drm/drm.h) stays.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from uapi.bindings import HEADER_DIR
from vnpu_common.cli import CliError, ExitCode, OneLineArgumentParser, cli_main, os_error_words

OWN_HEADERS = ("vnpu_accel.h", "vnpu_isa.h")
KERNEL_HEADERS = ("drm.h", "drm_mode.h")


def include_dir() -> Path:
    """The directory to pass with -I: it holds ``drm/vnpu_accel.h``."""
    return HEADER_DIR.parent


def headers_install(prefix: Path) -> list[tuple[Path, str]]:
    """Install the headers under ``prefix/include/drm``; returns (path, "written" or "kept")."""
    dest = prefix / "include" / "drm"
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for name in (*OWN_HEADERS, *KERNEL_HEADERS):
        target = dest / name
        if name in KERNEL_HEADERS and target.exists():
            done.append((target, "kept"))
            continue
        staged = dest / f".{name}.{os.getpid()}"
        shutil.copyfile(HEADER_DIR / name, staged)
        staged.chmod(0o644)
        os.replace(staged, target)
        done.append((target, "written"))
    return done


@cli_main("python -m uapi")
def main(argv: list[str] | None = None) -> int:
    ap = OneLineArgumentParser(prog="python -m uapi", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("cflags", help="print the -I option for #include <drm/vnpu_accel.h>")
    h = sub.add_parser("headers-install", help="copy the headers to DIR/include/drm/")
    h.add_argument("prefix", type=Path, metavar="DIR", help="e.g. /usr/local, or a sysroot's /usr")
    args = ap.parse_args(argv)
    if args.command == "cflags":
        print(f"-I{include_dir()}")
        return 0
    try:
        done = headers_install(args.prefix)
    except OSError as e:
        raise CliError(f"{e.filename or args.prefix}: {os_error_words(e)}", ExitCode.BAD_FILE) from None
    for path, what in done:
        print(f"{path}: {what}" + (" (DIR has its own)" if what == "kept" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
