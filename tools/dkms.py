"""vnpu.ko as a DKMS module: write its DKMS source tree, and boot the QEMU guest with the module DKMS built.

    python3 -m tools.dkms tree [--out DIR]
        write DIR/vnpu-VERSION/ (DIR default: build/dkms): kernel/dkms.conf as dkms.conf, the
        module's sources in kernel/drivers_accel_stub/ and its headers in uapi/drm/ (the
        repository's layout: the module's Kbuild finds the uapi header at $(src)/../../uapi/drm).
        Then, as root: dkms add DIR/vnpu-VERSION (copies it to /usr/src/vnpu-VERSION) and
        dkms install vnpu/VERSION [-k RELEASE] (builds, installs, runs depmod).

    .venv/bin/python -m tools.dkms test [--kernel RELEASE] [--out RESULTS] [--suites PATH ...]
        dkms add, build and install into trees of its own under build/dkms-test/RELEASE/ (nothing
        in /usr/src, /var/lib/dkms or /lib/modules: a vnpu.ko installed there would be loaded by
        udev in every later guest of that kernel, ahead of the harness's own build), then boot the
        guest with the installed module (python -m qemu_tests --module) and run the conformance
        suite there. Exit status: the harness's; 3 when dkms is missing, 2 when dkms fails.

``tree`` needs the standard library only (``sudo python3 -m tools.dkms tree`` works without the venv).
docs/install.md and docs/qemu_tests.md describe both.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from vnpu_common.cli import OneLineArgumentParser, cli_main

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "kernel" / "dkms.conf"
MODULE_DIR = Path("kernel") / "drivers_accel_stub"
HEADER_DIR = Path("uapi") / "drm"
DEFAULT_OUT = ROOT / "build" / "dkms"
TEST_DIR = ROOT / "build" / "dkms-test"
DEFAULT_SUITES = ("tests/conformance",)
EXIT_MISSING = 3  # as the harness's preflight: something the host lacks, with its fix


def conf_value(name: str, text: str | None = None) -> str:
    """A plain ``NAME="value"`` of dkms.conf."""
    text = CONF.read_text() if text is None else text
    m = re.search(rf'^{re.escape(name)}="([^"]*)"$', text, re.M)
    if m is None:
        raise ValueError(f"{CONF}: no {name}")
    return m.group(1)


def module_sources() -> list[Path]:
    """The module's sources, relative to the repository: its build files, .c and .h (not the objects
    and the modpost output a build in place leaves beside them)."""
    src = ROOT / MODULE_DIR
    files = [src / name for name in ("Kbuild", "Kconfig", "Makefile")]
    files += sorted(p for pat in ("*.c", "*.h") for p in src.glob(pat) if not p.name.endswith(".mod.c"))
    return [p.relative_to(ROOT) for p in files]


def header_sources() -> list[Path]:
    """The headers the module includes: vnpu_accel.h and the headers beside it."""
    return sorted(p.relative_to(ROOT) for p in (ROOT / HEADER_DIR).glob("*.h"))


def write_tree(out: Path) -> Path:
    """Write the DKMS source tree ``out/vnpu-VERSION`` (replacing one there) and return it."""
    tree = out / f"{conf_value('PACKAGE_NAME')}-{conf_value('PACKAGE_VERSION')}"
    if tree.exists():
        shutil.rmtree(tree)
    for rel in (*module_sources(), *header_sources()):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tree / rel)
    shutil.copy2(CONF, tree / "dkms.conf")
    return tree


# --- test: DKMS in trees of its own, then the guest -------------------------------------------------


class DkmsError(RuntimeError):
    pass


def _say(t0: float, phase: str, msg: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f}s] {phase}: {msg}", flush=True)


def dkms_argv(action: str, trees: Path, *args: str) -> list[str]:
    """``dkms ACTION`` with its source, build and install trees under ``trees``."""
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    return [
        *sudo,
        "dkms",
        action,
        f"--sourcetree={trees / 'source'}",
        f"--dkmstree={trees / 'dkms'}",
        f"--installtree={trees / 'modules'}",
        *args,
    ]


def dkms_install(release: str, trees: Path, t0: float) -> Path:
    """dkms add, build and install vnpu.ko for ``release`` into ``trees``; the installed module."""
    if trees.exists():
        shutil.rmtree(trees)
    for sub in ("source", "dkms", f"modules/{release}"):  # dkms wants them there (the kernel's too)
        (trees / sub).mkdir(parents=True)
    tree = write_tree(trees / "staging")
    module = f"{conf_value('PACKAGE_NAME')}/{conf_value('PACKAGE_VERSION')}"
    steps = [
        ("add", [str(tree)]),
        ("build", [module, "-k", release]),
        # No depmod: it would index /lib/modules/RELEASE, not this tree; the guest insmods the file.
        ("install", [module, "-k", release, "--no-depmod"]),
    ]
    for action, args in steps:
        argv = dkms_argv(action, trees, *args)
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            for log in sorted((trees / "dkms").rglob("make.log")):
                sys.stdout.write(log.read_text()[-4000:])
            sys.stdout.write(r.stdout[-4000:] + r.stderr[-4000:])
            raise DkmsError(f"dkms {action} failed (exit {r.returncode}): {' '.join(argv)}")
        _say(t0, "dkms", f"{action} ok")
    installed = sorted(
        (trees / "modules" / release).glob(f"updates/dkms/{conf_value('BUILT_MODULE_NAME[0]')}.ko*")
    )
    if len(installed) != 1:
        raise DkmsError(f"dkms install left {len(installed)} modules in {trees / 'modules' / release}")
    return installed[0]


def cmd_test(args: argparse.Namespace) -> int:
    from qemu_tests import preflight

    t0 = time.monotonic()
    if shutil.which("dkms") is None:
        print(
            "tools.dkms: dkms is missing; fix: apt-get install --no-install-recommends dkms", file=sys.stderr
        )
        return EXIT_MISSING
    kernel = preflight.select_kernel(override=args.kernel)
    if kernel is None or not kernel.debian or not kernel.build.exists():
        print("tools.dkms: no installed Debian 6.12 kernel with headers (python -m qemu_tests --check)")
        return EXIT_MISSING
    trees = TEST_DIR / kernel.release
    try:
        ko = dkms_install(kernel.release, trees, t0)
    except DkmsError as e:
        print(f"tools.dkms: {e}", file=sys.stderr)
        return 2
    _say(t0, "dkms", f"{ko.relative_to(ROOT)} (for {kernel.release})")
    harness = [sys.executable, "-m", "qemu_tests", "--kernel", kernel.release, "--module", str(ko)]
    harness += ["--suites", *args.suites]
    if args.out is not None:
        harness += ["--out", str(args.out)]
    _say(t0, "guest", " ".join(harness[1:]))
    rc = subprocess.run([*harness, *args.harness_args], cwd=ROOT, check=False).returncode
    _say(t0, "done", f"exit {rc}")
    return rc


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineArgumentParser(prog="python -m tools.dkms", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tree", help="write the DKMS source tree vnpu-VERSION/")
    t.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"directory (default: {DEFAULT_OUT})")
    c = sub.add_parser("test", help="dkms add/build/install in trees of its own, then the guest's suite")
    c.add_argument("--kernel", metavar="RELEASE", help="a Debian 6.12 kernel (default: the harness's)")
    c.add_argument("--out", type=Path, help="the harness's results directory")
    c.add_argument(
        "--suites", nargs="+", default=list(DEFAULT_SUITES), help="in-guest test paths (default: %(default)s)"
    )
    c.add_argument(
        "harness_args", nargs=argparse.REMAINDER, help="after --: more python -m qemu_tests arguments"
    )
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if getattr(args, "harness_args", [])[:1] == ["--"]:
        args.harness_args = args.harness_args[1:]
    return args


@cli_main("python -m tools.dkms")
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "tree":
        print(write_tree(args.out))
        return 0
    return cmd_test(args)


if __name__ == "__main__":
    sys.exit(main())
